//! The request's entities, read from its headers (header mode) or its buffered body (every
//! other format), and the route the parsed request is served by.

use crate::config::{Config, Format, Route};
use crate::error::FerryError;
use crate::format::{self, header, ParsedRequest};
use crate::host::Host;

/// Header mode: the entity ids from the request headers; `names` (every header name sent)
/// tells how often each id header was sent.
pub(super) fn headers(
    host: &impl Host,
    names: &[String],
    route: &Route,
) -> Result<ParsedRequest, FerryError> {
    let count = |n: &str| names.iter().filter(|x| x.as_str() == n).count();
    header::parse(|n| host.request_header(n), count, route).map(ParsedRequest::Header)
}

/// A body route's whole buffered body, parsed by the route's format; `framing` is KServe v2's
/// binary header length as the client sent it.
pub(super) fn body(
    host: &impl Host,
    config: &Config,
    route: &Route,
    body_size: usize,
    framing: Option<&str>,
) -> Result<ParsedRequest, FerryError> {
    if body_size == 0 {
        return Err(FerryError::NoBody);
    }
    let body = host.request_body(body_size).unwrap_or_default();
    match &route.format {
        Format::FeastRest => format::feast_rest::parse(&body, route, config)
            .map(|r| ParsedRequest::FeastRest(Box::new(r))),
        _ => format::parse(&body, route, framing),
    }
}

/// The route a request is served by: its own for a `feast_rest` request (the services its
/// body names), else the snapshot's route `index`.
pub(super) enum Served<'a> {
    Snapshot(&'a Route),
    Own(std::rc::Rc<Route>),
}

impl std::ops::Deref for Served<'_> {
    type Target = Route;
    fn deref(&self) -> &Route {
        match self {
            Served::Snapshot(r) => r,
            Served::Own(r) => r,
        }
    }
}

pub(super) fn served_route<'a>(
    config: &'a Config,
    index: usize,
    request: &ParsedRequest,
) -> Served<'a> {
    match request {
        ParsedRequest::FeastRest(r) => Served::Own(r.route.clone()),
        _ => Served::Snapshot(&config.routes[index]),
    }
}
