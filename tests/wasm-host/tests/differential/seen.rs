//! What one build did with one request, as Envoy and the client would see it, and where two
//! such records differ. Each normalization here is an Envoy-side detail the two builds
//! legitimately leave to their host; anything else that differs is a divergence.

use std::collections::BTreeMap;

pub type Headers = Vec<(String, String)>;

/// A reader call: cluster, headers, body, timeout in ms.
pub type Call = (String, Headers, Vec<u8>, u64);

#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Each hook's verdict, in order: (hook, continued).
    pub verdicts: Vec<(&'static str, bool)>,
    pub calls: Vec<Call>,
    /// The local reply as the client gets it (`envoy_local_reply`): status, headers, body.
    pub reply: Option<(u32, Headers, Vec<u8>)>,
    /// What went upstream: headers as they were when they went on, the body (and what is still
    /// buffered), the trailers.
    pub upstream: Option<(Headers, Vec<u8>, Headers)>,
    /// The request waits for the filter (paused, not answered).
    pub paused: bool,
    /// The stream was reset.
    pub reset: bool,
    /// The response headers the filter left (after the model's `:status: 200`).
    pub response_headers: Headers,
    /// The served-feature record the filter left for Envoy's access loggers.
    pub log_record: Option<Vec<u8>>,
    /// Counters by name (non-zero ones).
    pub counters: BTreeMap<String, u64>,
    /// What Envoy would have refused or could not do (not compared: must be empty in both).
    pub refused: Vec<String>,
}

/// Header names and values in a stable order: the order in which a host keeps a header map
/// (a replaced header stays in place in the Wasm host, goes last in the fake Envoy) is Envoy's
/// detail, not the filter's.
pub fn sorted(mut headers: Headers) -> Headers {
    headers.sort();
    headers
}

/// The client's view of a local reply, by Envoy's rules (`Http::Utility::sendLocalReply`) for
/// both builds: to a gRPC request (content-type `application/grpc` or `application/grpc+...`)
/// HTTP 200, `content-type: application/grpc`, `grpc-status` (the filter's, else the status
/// Envoy derives), and the body as the percent-encoded `grpc-message`, no body; otherwise the
/// status and body, with `text/plain` if a body came without a content-type. The Wasm build asks
/// for a gRPC reply with proxy-wasm's gRPC status argument and the message as body; the native
/// one writes the gRPC headers itself (the dynamic-module ABI has no gRPC status argument).
pub fn envoy_local_reply(
    request: &Headers,
    status: u32,
    headers: Headers,
    body: Vec<u8>,
    grpc_status: Option<u32>,
) -> (u32, Headers, Vec<u8>) {
    let content_type = request.iter().find(|(n, _)| n == "content-type");
    let grpc = content_type.is_some_and(|(_, v)| {
        v.strip_prefix("application/grpc")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('+'))
    });
    let mut headers = headers;
    if !grpc {
        if !body.is_empty() && !headers.iter().any(|(n, _)| n == "content-type") {
            headers.push(("content-type".into(), "text/plain".into()));
        }
        return (status, sorted(headers), body);
    }
    set(&mut headers, "content-type", "application/grpc".into());
    if !headers.iter().any(|(n, _)| n == "grpc-status") {
        let code = grpc_status.unwrap_or_else(|| http_to_grpc(status));
        set(&mut headers, "grpc-status", code.to_string());
    }
    if !body.is_empty() {
        let text = String::from_utf8_lossy(&body);
        let message = percent_encode(text.strip_suffix('\n').unwrap_or(&text));
        set(&mut headers, "grpc-message", message);
    }
    headers.retain(|(n, _)| n != "content-length");
    (200, sorted(headers), Vec::new())
}

/// The reply without the host's own words on a reader call it refused to start: each build
/// reports its host's refusal (proxy-wasm's status `BadArgument`, the dynamic module's "cluster
/// not found") after the same `dispatch_failed` code and the same message prefix.
pub fn without_host_refusal(
    (status, headers, body): (u32, Headers, Vec<u8>),
) -> (u32, Headers, Vec<u8>) {
    const SAID: &str = "could not call the feature reader: ";
    let cut = |text: &str, end: char| match text.split_once(SAID) {
        Some((head, tail)) => {
            let rest = tail.find(end).map_or("", |i| &tail[i..]);
            format!("{head}{SAID}(the host's refusal){rest}")
        }
        None => text.to_string(),
    };
    let headers = headers
        .into_iter()
        .map(|(n, v)| {
            let v = if n == "grpc-message" {
                cut(&v, '\0')
            } else {
                v
            };
            (n, v)
        })
        .collect();
    let body = match std::str::from_utf8(&body) {
        Ok(text) if text.contains(SAID) => cut(text, '"').into_bytes(),
        _ => body,
    };
    (status, headers, body)
}

fn set(headers: &mut Headers, name: &str, value: String) {
    headers.retain(|(n, _)| n != name);
    headers.push((name.into(), value));
}

/// Envoy's `Grpc::Utility::httpToGrpcStatus`.
fn http_to_grpc(status: u32) -> u32 {
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502..=504 => 14,
        _ => 2,
    }
}

/// Envoy's `Http::Utility::PercentEncoding::encode` (gRPC's rule for `grpc-message`): `%`
/// and bytes outside printable ASCII as `%XX`. Written here rather than taken from ferry-core
/// (`error::grpc::percent_encode`): this is Envoy's side, and the native build's own encoding
/// is what it is compared with.
fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if !(b' '..=b'~').contains(&b) || b == b'%' {
            out += &format!("%{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Where `wasm` and `native` differ, one line each.
pub fn differences(wasm: &Seen, native: &Seen) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}:\n    wasm:   {a}\n    native: {b}"));
        }
    };
    field("verdicts", fmt(&wasm.verdicts), fmt(&native.verdicts));
    field("reader calls", calls(&wasm.calls), calls(&native.calls));
    field("local reply", reply(&wasm.reply), reply(&native.reply));
    field(
        "upstream",
        upstream(&wasm.upstream),
        upstream(&native.upstream),
    );
    field("paused", fmt(&wasm.paused), fmt(&native.paused));
    field("reset", fmt(&wasm.reset), fmt(&native.reset));
    let (a, b) = (&wasm.response_headers, &native.response_headers);
    field("response headers", fmt(a), fmt(b));
    let (a, b) = (&wasm.log_record, &native.log_record);
    field("log record", fmt(a), fmt(b));
    field("counters", fmt(&wasm.counters), fmt(&native.counters));
    for (build, seen) in [("wasm", wasm), ("native", native)] {
        if !seen.refused.is_empty() {
            out.push(format!("{build}: Envoy would refuse: {:?}", seen.refused));
        }
    }
    out
}

fn fmt(v: &impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn calls(c: &[Call]) -> String {
    let c: Vec<_> = c.iter().map(|(a, h, b, t)| (a, h, text(b), t)).collect();
    fmt(&c)
}

fn reply(r: &Option<(u32, Headers, Vec<u8>)>) -> String {
    fmt(&r.as_ref().map(|(s, h, b)| (s, h, text(b))))
}

fn upstream(u: &Option<(Headers, Vec<u8>, Headers)>) -> String {
    fmt(&u.as_ref().map(|(h, b, t)| (h, text(b), t)))
}
