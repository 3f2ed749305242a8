//! The JSON document of a body format: read from the body, written back as the new body, and
//! how a body of the wrong shape is reported.
//!
//! Numbers keep the client's text: serde_json's `arbitrary_precision` keeps every digit, sign
//! and decimal, but spells an exponent as `e` with a sign (`1e400` is read as `1e+400`). The
//! client's spelling of each such number is noted when the body is read ([`Spellings`]) and put
//! back when the new body is written, so the model receives the number as the client wrote it.

use std::collections::{HashMap, VecDeque};

use serde_json::Value as Json;

use crate::error::FerryError;

/// A parsed body and how its client spelled the numbers the reader respells.
#[derive(Debug)]
pub struct Document {
    pub json: Json,
    pub spellings: Spellings,
}

/// For each number text the reader produced that differs from the client's, the client's
/// spellings in body order. Empty (no allocation) for a body without such numbers.
#[derive(Debug, Default)]
pub struct Spellings(HashMap<String, VecDeque<String>>);

pub fn parse_json(body: &[u8]) -> Result<Document, FerryError> {
    let json =
        serde_json::from_slice(body).map_err(|e| FerryError::MalformedJson(e.to_string()))?;
    Ok(Document {
        json,
        spellings: Spellings::of(body),
    })
}

/// The rewritten document as the new body. Writing a `serde_json::Value` cannot fail (its keys
/// are strings, its numbers finite); should it, the request is refused rather than sent on
/// with an empty body.
pub fn write_document(doc: &Json, spellings: Spellings) -> Result<Vec<u8>, FerryError> {
    let out = serde_json::to_vec(doc)
        .map_err(|e| FerryError::BadShape(format!("cannot write the enriched body: {e}")))?;
    Ok(spellings.restore(out))
}

pub fn shape(msg: &str) -> FerryError {
    FerryError::BadShape(msg.to_string())
}

impl Spellings {
    /// The numbers of a (valid JSON) body whose text the reader changes.
    fn of(body: &[u8]) -> Spellings {
        let mut map: HashMap<String, VecDeque<String>> = HashMap::new();
        for token in number_tokens(body) {
            if let Some(read) = as_read(token) {
                let sent = String::from_utf8_lossy(token).into_owned();
                map.entry(read).or_default().push_back(sent);
            }
        }
        Spellings(map)
    }

    /// `out` with each number the reader respelled written as the client wrote it. Only
    /// numerically equal texts are swapped: a number Ferry wrote that happens to read the same
    /// keeps its value whichever spelling it gets.
    pub fn restore(mut self, out: Vec<u8>) -> Vec<u8> {
        if self.0.is_empty() {
            return out;
        }
        let mut restored = Vec::with_capacity(out.len() + 16);
        let mut copied = 0;
        for token in number_tokens(&out) {
            let text = String::from_utf8_lossy(token);
            let Some(sent) = self.0.get_mut(text.as_ref()).and_then(VecDeque::pop_front) else {
                continue;
            };
            let start = token.as_ptr() as usize - out.as_ptr() as usize;
            restored.extend_from_slice(&out[copied..start]);
            restored.extend_from_slice(sent.as_bytes());
            copied = start + token.len();
        }
        restored.extend_from_slice(&out[copied..]);
        restored
    }
}

/// How serde_json's `arbitrary_precision` reader spells `token`, when that differs from it:
/// `E` as `e`, an exponent without a sign with `+`.
fn as_read(token: &[u8]) -> Option<String> {
    let e = token.iter().position(|b| matches!(b, b'e' | b'E'))?;
    let signed = matches!(token.get(e + 1), Some(b'+' | b'-'));
    if token[e] == b'e' && signed {
        return None;
    }
    let mut read = String::with_capacity(token.len() + 1);
    read.push_str(&String::from_utf8_lossy(&token[..e]));
    read.push('e');
    if !signed {
        read.push('+');
    }
    read.push_str(&String::from_utf8_lossy(&token[e + 1..]));
    Some(read)
}

/// The number tokens of a JSON text, in order (strings skipped, escapes honoured).
fn number_tokens(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut i = 0;
    let mut in_string = false;
    std::iter::from_fn(move || {
        while i < text.len() {
            let b = text[i];
            if in_string {
                match b {
                    b'\\' => i += 2,
                    b'"' => {
                        in_string = false;
                        i += 1;
                    }
                    _ => i += 1,
                }
                continue;
            }
            if b == b'"' {
                in_string = true;
                i += 1;
                continue;
            }
            if b == b'-' || b.is_ascii_digit() {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                return Some(&text[start..i]);
            }
            i += 1;
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_come_back_as_the_client_spelled_them() {
        let body = br#"{"a":1e400,"s":"1e400 \" 2E5","b":[2E5,-3.5E-7,1e+2,1e5],"c":1e400}"#;
        let doc = parse_json(body).unwrap();
        let out = write_document(&doc.json, doc.spellings).unwrap();
        assert_eq!(out, body.to_vec());
    }

    #[test]
    fn only_respelled_numbers_are_noted() {
        assert!(Spellings::of(br#"{"a":1.5,"b":-0,"c":1e-3,"d":"1E5"}"#)
            .0
            .is_empty());
        assert_eq!(as_read(b"1E5").as_deref(), Some("1e+5"));
        assert_eq!(as_read(b"1e5").as_deref(), Some("1e+5"));
        assert_eq!(as_read(b"2.5E-7").as_deref(), Some("2.5e-7"));
        assert_eq!(as_read(b"1e-7"), None);
        assert_eq!(as_read(b"12"), None);
    }

    #[test]
    fn a_dropped_number_leaves_the_others_right() {
        // The client's first 1e5 is dropped by the rewrite (e.g. a forged feature): the one
        // left gets a client spelling of the same number.
        let mut s = Spellings::of(br#"{"x":1E5,"y":1e5}"#);
        s.0.get_mut("1e+5").unwrap().pop_front();
        assert_eq!(
            s.restore(br#"{"y":1e+5}"#.to_vec()),
            br#"{"y":1e5}"#.to_vec()
        );
    }
}
