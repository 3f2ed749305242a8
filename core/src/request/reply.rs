//! Ferry's own answers to the client: an error as a JSON body, or to a gRPC client as a gRPC
//! status; a `feast_rest` route's features; and the `x-ferry-*` summary on the response.

use crate::error::FerryError;
use crate::host::Host;
use crate::request::enrich::Enriched;

/// Answers the request with `err`: a JSON error body naming `route`, or to a gRPC client (its
/// `content-type` said so) a gRPC status whose message starts with the error's code.
pub(super) fn error(host: &impl Host, grpc_client: bool, route: &str, err: &FerryError) {
    if grpc_client {
        let message = format!("{}: {}", err.code(), err.message());
        host.send_grpc_error(
            err.grpc_status(),
            &message,
            vec![("x-ferry-error", err.code())],
        );
    } else {
        let body = err.body(route);
        host.send_response(err.status(), err.reply_headers(), &body);
    }
}

/// A route that answers itself (`feast_rest`): the new body is the response, with
/// `x-ferry-*`; nothing reaches an upstream.
pub(super) fn features(host: &impl Host, out: Enriched) {
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    headers.extend(out.headers.iter().map(|(n, v)| (*n, v.as_str())));
    let body = out.rewritten.body.unwrap_or_default();
    host.send_response(200, headers, &body);
}

/// Tells the client, on the response, what Ferry did (status, fingerprint, counts).
pub(super) fn tell_client(host: &impl Host, summary: Vec<(&'static str, String)>) {
    for (name, value) in summary {
        host.set_response_header(name, &value);
    }
}
