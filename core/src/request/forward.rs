//! The enriched request sent on: the new body, the features header(s) and `x-ferry-*` written
//! into it.

use crate::error::FerryError;
use crate::host::Host;
use crate::request::enrich::Enriched;

/// Writes what Ferry enriched into the request; the `x-ferry-*` pairs are returned, for the
/// client's response. When the headers already went on (`headers_sent`), only the body is
/// rewritten; the model then learns what Ferry did from the body alone (the client still gets
/// `x-ferry-*`), and a rewrite that needs request headers is refused rather than sent half
/// done.
pub(super) fn rewrite(
    host: &impl Host,
    headers_sent: bool,
    out: Enriched,
    body_size: usize,
) -> Result<Vec<(&'static str, String)>, FerryError> {
    if headers_sent && !out.rewritten.headers.is_empty() {
        let names: Vec<&str> = out
            .rewritten
            .headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(FerryError::HeadersAlreadySent {
            names: names.join(", "),
        });
    }
    if let Some(body) = &out.rewritten.body {
        host.replace_request_body(body_size, body);
        if !headers_sent {
            host.set_request_header("content-length", Some(&body.len().to_string()));
        }
    }
    if !headers_sent {
        for (name, value) in &out.rewritten.headers {
            host.set_request_header(name, Some(value));
        }
        for (name, value) in &out.headers {
            host.set_request_header(name, Some(value));
        }
    }
    Ok(out.headers)
}
