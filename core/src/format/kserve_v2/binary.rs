//! The Open Inference Protocol's binary tensor data extension, as Triton's clients send it by
//! default: the `Inference-Header-Content-Length` request header gives the length of a JSON
//! header at the start of the body; the rest of the body holds the data of the inputs whose
//! `parameters.binary_data_size` is set, back to back in input order (BYTES elements each as a
//! 4-byte little-endian length and the bytes; numbers little-endian, row-major).
//!
//! Ferry reads ids from a binary input and must hand every other binary input to the model byte
//! for byte, so the framing has to add up exactly: what Ferry reads and what the model reads
//! must be the same bytes. Anything else is refused (`bad_binary_framing`).

use std::ops::Range;

use serde_json::Value as Json;

use crate::error::FerryError;

/// The request header (lower case, as Envoy hands header names) that frames the body.
pub const HEADER: &str = "inference-header-content-length";

/// The binary part of a request and where each input's data lies in it.
#[derive(Debug, Default)]
pub struct Part {
    /// Whether the client framed the body with [`HEADER`] (then the rewrite frames it too).
    pub framed: bool,
    pub bytes: Vec<u8>,
    /// One per input tensor, in order: the range of its data in `bytes`, if it is binary.
    pub ranges: Vec<Option<Range<usize>>>,
}

fn bad(msg: String) -> FerryError {
    FerryError::BadFraming(msg)
}

/// Splits `body` into its JSON header and binary part by the header's value (`None`: no such
/// header, the whole body is JSON).
pub fn split<'a>(body: &'a [u8], header: Option<&str>) -> Result<(&'a [u8], &'a [u8]), FerryError> {
    let Some(value) = header else {
        return Ok((body, &[]));
    };
    let text = value.trim();
    // Digits only: `+5`, `0x10` or `5 ` mean something else to another parser.
    // A u64, not a usize: a length past 2^32 is the same "longer than the body" in the 32-bit
    // Wasm build as in the 64-bit native one.
    let len = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u64>().ok()
    } else {
        None
    };
    let Some(len) = len else {
        return Err(bad(format!(
            "Inference-Header-Content-Length must be a byte count, got '{}'",
            value.escape_default()
        )));
    };
    let Some(len) = usize::try_from(len).ok().filter(|l| *l <= body.len()) else {
        return Err(bad(format!(
            "Inference-Header-Content-Length is {len}, but the body has only {} bytes",
            body.len()
        )));
    };
    Ok(body.split_at(len))
}

fn tensor_name(t: &Json) -> &str {
    t.get("name").and_then(Json::as_str).unwrap_or("")
}

/// The binary data size an input declares, if any (a u64: whether it fits the body is
/// `locate`'s question, answered alike in 32 and 64 bits).
fn declared_size(t: &Json) -> Result<Option<u64>, FerryError> {
    let Some(v) = t.get("parameters").and_then(|p| p.get("binary_data_size")) else {
        return Ok(None);
    };
    let name = tensor_name(t);
    let size = v.as_u64().ok_or_else(|| {
        bad(format!(
            "input tensor '{name}': parameters.binary_data_size must be a byte count, got {v}"
        ))
    })?;
    // Two sources of data: Ferry and the model could each read a different one.
    if t.get("data").is_some() {
        return Err(bad(format!(
            "input tensor '{name}' has both \"data\" and parameters.binary_data_size"
        )));
    }
    Ok(Some(size))
}

/// Where each input's binary data lies in `binary`; the sizes must cover it exactly, and every
/// binary BYTES tensor must be whole elements.
pub fn locate(inputs: &[Json], binary: &[u8], framed: bool) -> Result<Part, FerryError> {
    let mut ranges = Vec::with_capacity(inputs.len());
    let mut at = 0usize;
    for t in inputs {
        let Some(size) = declared_size(t)? else {
            ranges.push(None);
            continue;
        };
        let name = tensor_name(t);
        let left = binary.len() - at;
        let Some(size) = usize::try_from(size).ok().filter(|s| *s <= left) else {
            return Err(bad(if framed {
                format!(
                    "input tensor '{name}': binary_data_size {size} runs past the end of the \
                     body ({left} bytes of binary data left)"
                )
            } else {
                format!(
                    "input tensor '{name}' has parameters.binary_data_size but the request has \
                     no Inference-Header-Content-Length header"
                )
            }));
        };
        let range = at..at + size;
        if t.get("datatype").and_then(Json::as_str) == Some("BYTES") {
            bytes_elements(&binary[range.clone()])
                .map_err(|why| bad(format!("input tensor '{name}': {why}")))?;
        }
        at = range.end;
        ranges.push(Some(range));
    }
    if at != binary.len() {
        return Err(bad(format!(
            "the inputs' binary_data_size add up to {at} bytes, but {} bytes follow the JSON \
             header",
            binary.len()
        )));
    }
    Ok(Part {
        framed,
        bytes: binary.to_vec(),
        ranges,
    })
}

/// The elements of a binary BYTES tensor: each a 4-byte little-endian length and that many
/// bytes, filling the data exactly.
pub fn bytes_elements(mut data: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let i = out.len();
        let Some((len, rest)) = data.split_first_chunk::<4>() else {
            return Err(format!(
                "BYTES element {i}: its 4-byte length is cut short ({} bytes left)",
                data.len()
            ));
        };
        let len = usize::try_from(u32::from_le_bytes(*len)).unwrap_or(usize::MAX);
        if len > rest.len() {
            return Err(format!(
                "BYTES element {i} of {len} bytes runs past the end of its tensor ({} bytes left)",
                rest.len()
            ));
        }
        let (element, rest) = rest.split_at(len);
        out.push(element);
        data = rest;
    }
    Ok(out)
}

/// The ids of a binary entity tensor of `datatype` as JSON values (strings or integers), for
/// the id rules the JSON form goes through; `None` for an element that is not UTF-8.
pub fn ids(data: &[u8], datatype: &str, n: usize) -> Result<Vec<Option<Json>>, String> {
    let width = match datatype {
        "BYTES" => {
            let elements = bytes_elements(data)?;
            if elements.len() != n {
                return Err(format!("shape says {n} ids, data has {}", elements.len()));
            }
            return Ok(elements
                .into_iter()
                .map(|e| std::str::from_utf8(e).ok().map(Json::from))
                .collect());
        }
        "INT32" => 4,
        _ => 8,
    };
    if Some(data.len()) != n.checked_mul(width) {
        return Err(format!(
            "shape says {n} {datatype} ids ({} bytes), binary_data_size is {}",
            n.saturating_mul(width),
            data.len()
        ));
    }
    Ok(data
        .chunks_exact(width)
        .map(|c| {
            Some(match c {
                [a, b, c, d] => Json::from(i32::from_le_bytes([*a, *b, *c, *d])),
                _ => Json::from(i64::from_le_bytes(
                    c.try_into().unwrap_or([0; 8]), // chunks_exact(8): always 8 bytes
                )),
            })
        })
        .collect())
}

/// The new body: the JSON header, then the binary data of the inputs kept (in order).
pub fn join(header: Vec<u8>, binary: &[u8]) -> Vec<u8> {
    let mut body = header;
    body.extend_from_slice(binary);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn element(s: &[u8]) -> Vec<u8> {
        let mut v = (s.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(s);
        v
    }

    #[test]
    fn header_values_must_be_byte_counts_within_the_body() {
        let body = b"{}xyz";
        assert_eq!(split(body, None).unwrap(), (&body[..], &b""[..]));
        assert_eq!(split(body, Some("2")).unwrap(), (&b"{}"[..], &b"xyz"[..]));
        assert_eq!(split(body, Some(" 5 ")).unwrap().1, b"");
        for v in [
            "",
            "abc",
            "-1",
            "+2",
            "0x2",
            "2.0",
            "99999999999999999999999",
        ] {
            let e = split(body, Some(v)).unwrap_err();
            assert_eq!((e.status(), e.code()), (400, "bad_binary_framing"), "{v}");
            assert!(e.message().contains("must be a byte count"), "{v}: {e}");
        }
        assert_eq!(
            split(body, Some("6")).unwrap_err().message(),
            "Inference-Header-Content-Length is 6, but the body has only 5 bytes"
        );
        // Past 2^32: longer than the body, not "not a byte count", in the 32-bit build too.
        assert_eq!(
            split(body, Some("4294967296")).unwrap_err().message(),
            "Inference-Header-Content-Length is 4294967296, but the body has only 5 bytes"
        );
    }

    #[test]
    fn sizes_must_cover_the_binary_part_exactly() {
        let inputs = [
            json!({"name": "a", "datatype": "FP32", "parameters": {"binary_data_size": 4}}),
            json!({"name": "j", "datatype": "FP32", "data": [1.0]}),
            json!({"name": "b", "datatype": "BYTES", "parameters": {"binary_data_size": 6}}),
        ];
        let mut bin = vec![1, 2, 3, 4];
        bin.extend(element(b"hi"));
        let part = locate(&inputs, &bin, true).unwrap();
        assert_eq!(part.ranges, [Some(0..4), None, Some(4..10)]);
        let msg = |bin: &[u8]| locate(&inputs, bin, true).unwrap_err().message();
        assert_eq!(
            msg(&bin[..9]),
            "input tensor 'b': binary_data_size 6 runs past the end of the body (5 bytes of \
             binary data left)"
        );
        let mut longer = bin.clone();
        longer.push(0);
        assert_eq!(
            msg(&longer),
            "the inputs' binary_data_size add up to 10 bytes, but 11 bytes follow the JSON header"
        );
        let past = [json!({"name": "c", "parameters": {"binary_data_size": 1u64 << 40}})];
        assert_eq!(
            locate(&past, &bin, true).unwrap_err().message(),
            "input tensor 'c': binary_data_size 1099511627776 runs past the end of the body \
             (10 bytes of binary data left)"
        );
        let unframed = locate(&inputs, b"", false).unwrap_err().message();
        assert!(
            unframed.contains("no Inference-Header-Content-Length"),
            "{unframed}"
        );
        let both = [json!({"name": "x", "data": [1], "parameters": {"binary_data_size": 0}})];
        assert!(locate(&both, b"", true)
            .unwrap_err()
            .message()
            .contains("both \"data\" and parameters.binary_data_size"));
        let negative = [json!({"name": "x", "parameters": {"binary_data_size": -1}})];
        assert!(locate(&negative, b"", true)
            .unwrap_err()
            .message()
            .contains("must be a byte count, got -1"));
    }

    #[test]
    fn bytes_elements_must_fit_their_tensor() {
        let mut data = element(b"u1");
        data.extend(element(b""));
        assert_eq!(bytes_elements(&data).unwrap(), [&b"u1"[..], &b""[..]]);
        let past = [3, 0, 0, 0, b'a', b'b'];
        assert_eq!(
            bytes_elements(&past).unwrap_err(),
            "BYTES element 0 of 3 bytes runs past the end of its tensor (2 bytes left)"
        );
        let mut cut = element(b"u1");
        cut.extend([1, 0]);
        assert_eq!(
            bytes_elements(&cut).unwrap_err(),
            "BYTES element 1: its 4-byte length is cut short (2 bytes left)"
        );
        // In a framed body the element check applies to every binary BYTES tensor.
        let inputs =
            [json!({"name": "t", "datatype": "BYTES", "parameters": {"binary_data_size": 6}})];
        let e = locate(&inputs, &past, true).unwrap_err();
        assert_eq!(e.code(), "bad_binary_framing");
        assert!(
            e.message().starts_with("input tensor 't': BYTES element 0"),
            "{e}"
        );
    }

    #[test]
    fn binary_ids_of_every_id_type() {
        let mut data = element(b"u1");
        data.extend(element(b"\xff"));
        assert_eq!(ids(&data, "BYTES", 2).unwrap(), [Some(json!("u1")), None]);
        assert_eq!(
            ids(&data, "BYTES", 3).unwrap_err(),
            "shape says 3 ids, data has 2"
        );
        let longs: Vec<u8> = [7i64, -2].iter().flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            ids(&longs, "INT64", 2).unwrap(),
            [Some(json!(7)), Some(json!(-2))]
        );
        assert_eq!(
            ids(&longs, "INT64", 3).unwrap_err(),
            "shape says 3 INT64 ids (24 bytes), binary_data_size is 16"
        );
        let ints: Vec<u8> = [12i32, -1].iter().flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            ids(&ints, "INT32", 2).unwrap(),
            [Some(json!(12)), Some(json!(-1))]
        );
    }
}
