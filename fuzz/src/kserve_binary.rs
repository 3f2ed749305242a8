//! The `kserve_v2_binary` target: KServe v2 requests with the binary tensor data extension.
//! The input's first line is the `Inference-Header-Content-Length` value as the client sent
//! it, the rest is the body (so seeds stay readable: `123\n{"inputs": ...}<binary>`).
//!
//! Properties, beyond the keys every format keeps (`check_keys`):
//! - the rewrite frames the new body: a header length within it, a JSON header, and a body
//!   that parses again to the same entities;
//! - the binary part the model receives is exactly the client's binary data of the inputs
//!   not under Ferry's names, in order (worked out here from the input, not from the filter);
//! - no tensor under a Ferry name carries binary data, and each appears once.

use ferry_core::config::Route;
use ferry_core::format;
use ferry_core::format::kserve_v2::{binary::HEADER, PACKED_TENSOR};
use serde_json::Value as Json;

use super::{check_keys, features, seed};

pub fn check(data: &[u8], route: &Route) {
    let (line, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let framing = String::from_utf8_lossy(line);
    let Ok(req) = format::parse(body, route, Some(&framing)) else {
        return;
    };
    let ids = req.keys().to_vec();
    let entities = check_keys(route, &ids);
    let Some(kept) = kept_binary(body, framing.trim(), route) else {
        panic!("parsed, but the framing does not add up: {framing:?}");
    };
    let out = match format::rewrite(req, route, features(route, entities, seed(data))) {
        Ok(out) => out,
        Err(_) => return,
    };
    let new_body = out.body.unwrap_or_default();
    let length: Vec<&String> = out
        .headers
        .iter()
        .filter(|(n, _)| n == HEADER)
        .map(|(_, v)| v)
        .collect();
    let [length] = length.as_slice() else {
        panic!("one {HEADER} on a framed rewrite: {:?}", out.headers);
    };
    let n: usize = length.parse().unwrap_or(usize::MAX);
    assert!(n <= new_body.len(), "header length {n} over the body");
    let header: Json = match serde_json::from_slice(&new_body[..n]) {
        Ok(h) => h,
        Err(e) => panic!("the rewritten JSON header is not JSON ({e})"),
    };
    assert_eq!(
        &new_body[n..],
        kept.as_slice(),
        "the model's binary part is not the client's binary data of the inputs kept"
    );
    let ours = |name: &str| name == PACKED_TENSOR || route.output_names.iter().any(|o| o == name);
    let inputs = header["inputs"].as_array().cloned().unwrap_or_default();
    for name in inputs
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| ours(n))
    {
        let named: Vec<&Json> = inputs.iter().filter(|t| t["name"] == name).collect();
        assert_eq!(named.len(), 1, "{name} appears {} times", named.len());
        assert!(
            named[0].get("parameters").is_none(),
            "Ferry's tensor {name} carries parameters: {}",
            named[0]
        );
    }
    match format::parse(&new_body, route, Some(length)) {
        Ok(again) => assert_eq!(again.keys(), ids.as_slice(), "entities changed"),
        Err(e) => panic!(
            "the rewritten body is no longer a request ({})",
            e.message()
        ),
    }
}

/// The binary data of the inputs not under Ferry's names, in order, from the client's body;
/// `None` when its framing does not add up.
fn kept_binary(body: &[u8], framing: &str, route: &Route) -> Option<Vec<u8>> {
    let n: usize = framing.parse().ok()?;
    let header: Json = serde_json::from_slice(body.get(..n)?).ok()?;
    let mut rest = &body[n..];
    let mut kept = Vec::new();
    for t in header["inputs"].as_array()? {
        let Some(size) = t["parameters"]["binary_data_size"].as_u64() else {
            continue;
        };
        let size = usize::try_from(size).ok()?;
        let (this, after) = rest.split_at_checked(size)?;
        let name = t["name"].as_str().unwrap_or("");
        if name != PACKED_TENSOR && !route.output_names.iter().any(|o| o == name) {
            kept.extend_from_slice(this);
        }
        rest = after;
    }
    rest.is_empty().then_some(kept)
}
