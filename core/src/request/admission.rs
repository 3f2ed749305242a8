//! Whether and how Ferry takes a request, from its headers alone: the headers Ferry owns
//! removed, the route selected (by Envoy route metadata or by path, host and headers), and a
//! body route's method, size and binary framing checked.

use std::borrow::Cow;

use crate::config::{Config, Format, Route};
use crate::error::FerryError;
use crate::format::kserve_v2::binary;
use crate::host::Host;

/// Methods that carry an inference body; others on a matched path (e.g. KServe's
/// `GET /v1/models/NAME` readiness) pass through untouched.
const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

/// What the headers decided.
pub(super) enum Admitted<'c> {
    /// Not Ferry's request: it goes on untouched (owned headers removed).
    Pass,
    /// Refused with `err`, naming `route` (the snapshot's, or the name an Envoy route gave).
    Refused {
        route: Cow<'c, str>,
        err: FerryError,
    },
    /// Header mode: the entity ids are request headers, among `names`.
    HeaderMode { route: usize, names: Vec<String> },
    /// A body route: read the body. `framing` is KServe v2's `Inference-Header-Content-Length`
    /// as the client sent it; the length headers are already removed, as the body will change.
    Body {
        route: usize,
        framing: Option<String>,
    },
}

/// The client speaks gRPC (`content-type: application/grpc...`): its errors are gRPC statuses.
pub(super) fn grpc_client(host: &impl Host) -> bool {
    host.request_header("content-type")
        .is_some_and(|t| t.starts_with("application/grpc"))
}

pub(super) fn admit<'c>(host: &impl Host, config: &'c Config, end_of_stream: bool) -> Admitted<'c> {
    // Whatever a client sent under a header Ferry writes never reaches the model, whether or
    // not a route matches. The names also tell how often each id header was sent.
    let names = host.request_header_names();
    for name in &names {
        if config.owns_header(name) {
            host.set_request_header(name, None);
        }
    }
    let index = match select_route(host, config) {
        Ok(Some(i)) => i,
        Ok(None) => return Admitted::Pass,
        Err((route, err)) => {
            return Admitted::Refused {
                route: Cow::Owned(route),
                err,
            }
        }
    };
    let route = &config.routes[index];
    let refused = |err| Admitted::Refused {
        route: Cow::Borrowed(route.name.as_str()),
        err,
    };
    if let Format::Header { .. } = &route.format {
        return Admitted::HeaderMode {
            route: index,
            names,
        };
    }
    match body_expected(host, route, end_of_stream) {
        Ok(true) => {}
        Ok(false) => return Admitted::Pass,
        Err(e) => return refused(e),
    }
    let framing = match body_framing(host, config, route, &names) {
        Ok(f) => f,
        Err(e) => return refused(e),
    };
    host.set_request_header("content-length", None);
    host.set_request_header(binary::HEADER, None);
    Admitted::Body {
        route: index,
        framing,
    }
}

/// A client's value under a name Ferry owns never goes on, in trailers either (an HTTP/2
/// upstream would receive them).
pub(super) fn strip_owned_trailers(host: &impl Host, config: &Config) {
    for name in host.request_trailer_names() {
        if config.owns_header(&name) {
            host.remove_request_trailer(&name);
        }
    }
}

/// The route this request takes, if any. An Envoy route that names a Ferry route in its
/// metadata selects it (looked at only when the snapshot has a route selected by name);
/// otherwise the routes' conditions do, on the normalised path. An unmatched path under a
/// protected prefix, or a name the snapshot lacks, is an error (with the route to name).
fn select_route(host: &impl Host, config: &Config) -> Result<Option<usize>, (String, FerryError)> {
    let named = if config.reads_route_metadata {
        host.route_metadata("route")
    } else {
        None
    };
    if let Some(name) = named {
        return match config.route_named(&name) {
            Some(i) => Ok(Some(i)),
            None => Err((name.clone(), FerryError::UnknownRoute { name })),
        };
    }
    let raw = host.request_header(":path").unwrap_or_default();
    let path = ferry_protos::path::normalize(&raw);
    if let Some(i) = config.match_route(&path, &|h| host.request_header(h)) {
        return Ok(Some(i));
    }
    match config.protected_prefix(&path) {
        Some(prefix) => Err((
            String::new(),
            FerryError::NoRoute {
                path: raw,
                prefix: prefix.to_string(),
            },
        )),
        None => Ok(None),
    }
}

/// Whether a body route reads this request's body: POST, PUT and PATCH with a body within
/// the route's limit do; other methods without a body pass (KServe's `GET
/// /v1/models/NAME`); a body they carry would reach the model unenriched, so it is refused.
fn body_expected(host: &impl Host, route: &Route, end_of_stream: bool) -> Result<bool, FerryError> {
    let method = host.request_header(":method").unwrap_or_default();
    if !BODY_METHODS.contains(&method.as_str()) {
        return if end_of_stream {
            Ok(false)
        } else {
            Err(FerryError::UnexpectedBody { method })
        };
    }
    if end_of_stream {
        return Err(FerryError::NoBody);
    }
    let declared = host
        .request_header("content-length")
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared.filter(|s| *s > u64::from(route.max_body_bytes)) {
        Some(size) => Err(FerryError::BodyTooLarge {
            limit: route.max_body_bytes,
            size,
        }),
        None => Ok(true),
    }
}

/// The binary framing header of a body route's request; only KServe v2 reads the binary
/// extension, other formats parse the whole body. Given twice, Ferry and the model could each
/// read another value: refused.
///
/// The body will change size (and its binary framing with it); the right values are set again
/// before resuming, when Envoy holds the headers. When it does not (no
/// `allow_on_headers_stop_iteration`, as under Istio and Envoy Gateway) a paused header
/// callback stops the body too, so the headers go on now, without a length (HTTP/1 upstreams
/// get the body chunked), and the body callbacks hold the body. A binary framing header cannot
/// be corrected then: such a request is refused, never forwarded with a header that no longer
/// matches its body.
fn body_framing(
    host: &impl Host,
    config: &Config,
    route: &Route,
    names: &[String],
) -> Result<Option<String>, FerryError> {
    if !matches!(route.format, Format::KserveV2 { .. }) {
        return Ok(None);
    }
    let sent = names
        .iter()
        .filter(|n| n.eq_ignore_ascii_case(binary::HEADER))
        .count();
    if sent > 1 {
        return Err(FerryError::BadFraming(
            "Inference-Header-Content-Length is given more than once; send it exactly once".into(),
        ));
    }
    let framing = host.request_header(binary::HEADER);
    if framing.is_some() && !config.headers_held {
        return Err(FerryError::BadFraming(
            "the binary tensor extension needs Envoy to hold the request headers while Ferry \
             rewrites the body (allow_on_headers_stop_iteration), which this deployment does \
             not; send the tensors as JSON (binary_data=False)"
                .into(),
        ));
    }
    Ok(framing)
}
