//! A route compiled against the snapshot's services: its conditions, format, policies,
//! limits (by the shared `rules`), and its output names and labels indexed once.

use std::rc::Rc;

use ferry_protos::v1 as pb;

use super::error::{invalid, ConfigError};
use super::on_demand;
use crate::config::model::{
    Format, HeaderEncoding, HeaderMatch, HostMatch, OnMissing, OnReaderError, OnStale, PathMatch,
    Route, RouteConditions, RoutePart, Service,
};
use crate::{rules, values};

pub(in crate::config) fn conditions(
    m: pb::RouteMatch,
    ctx: &str,
) -> Result<RouteConditions, ConfigError> {
    let path = match (m.path_prefix.is_empty(), m.path_exact.is_empty()) {
        (true, true) => None,
        (false, true) => Some(PathMatch::Prefix(m.path_prefix)),
        (true, false) => Some(PathMatch::Exact(m.path_exact)),
        (false, false) => return invalid(ctx, "set at most one of path_prefix and path_exact"),
    };
    if let Some(PathMatch::Prefix(p) | PathMatch::Exact(p)) = &path {
        // Requests are matched on their normalised path: a path in another form never matches.
        if !ferry_protos::path::is_normalized(p) {
            return invalid(ctx, format!("path '{p}' is not a normalised path"));
        }
    }
    let host = if m.host.is_empty() {
        None
    } else {
        match HostMatch::parse(&m.host) {
            Ok(h) => Some(h),
            Err(e) => return invalid(ctx, e),
        }
    };
    let mut headers = Vec::with_capacity(m.headers.len());
    for h in m.headers {
        if !ferry_protos::is_valid_header_match_name(&h.name) {
            return invalid(
                ctx,
                format!(
                    "header match name '{}' must be a lowercase header name",
                    h.name
                ),
            );
        }
        headers.push(HeaderMatch {
            name: h.name,
            exact: (!h.exact.is_empty()).then_some(h.exact),
        });
    }
    Ok(RouteConditions {
        path,
        host,
        headers,
    })
}

/// The snapshot's services by name.
pub(super) type Services = std::collections::HashMap<String, Rc<Service>>;

pub(super) fn route(r: pb::Route, services: &Services) -> Result<Route, ConfigError> {
    let ctx = format!("route '{}'", r.name);
    let wrap = |reason: String| ConfigError::Invalid {
        part: ctx.clone(),
        reason,
    };
    let parts = route_parts(&r, services).map_err(wrap)?;
    let conditions = conditions(r.r#match.clone().unwrap_or_default(), &ctx)?;
    let format = route_format(&r, &parts).map_err(wrap)?;
    let short = match pb::FeatureNames::try_from(r.feature_names) {
        Ok(pb::FeatureNames::Full) => false,
        Ok(pb::FeatureNames::Short) => true,
        _ => return invalid(&ctx, "feature_names must be full or short"),
    };
    let output_names = output_names(&parts, short).map_err(wrap)?;
    let (on_missing, on_stale, on_reader_error) = policies(&r).map_err(wrap)?;
    let bounded = |b: &rules::Bound, v: u32| b.snapshot_value(v).map_err(wrap);
    let max_entities = bounded(&rules::MAX_ENTITIES, r.max_entities)?;
    rules::keys_per_call(max_entities, parts.len()).map_err(wrap)?;
    let layouts = parts.iter().filter_map(|p| p.service.feast.as_ref());
    rules::feast_work(max_entities, layouts).map_err(wrap)?;
    let output_keys = output_keys(&output_names);
    let (services_label, fingerprints_label) = labels(&parts);
    let feast_services = feast_services(&r, &format, &parts, services).map_err(wrap)?;
    let log = match &r.log {
        Some(l) => Some(crate::config::log_policy::LogPolicy::from_proto(l).map_err(wrap)?),
        None => None,
    };
    Ok(Route {
        log,
        services_label,
        fingerprints_label,
        feature_count: output_names.len(),
        stored_count: parts.iter().map(|p| p.service.feature_count).sum(),
        derived: on_demand::route_derived(&parts),
        name: r.name,
        conditions,
        format,
        parts,
        output_names,
        output_keys,
        on_missing,
        on_stale,
        on_reader_error,
        max_body_bytes: bounded(&rules::MAX_BODY_BYTES, r.max_body_bytes)?,
        max_entities,
        reader_timeout_ms: bounded(&rules::READER_TIMEOUT_MS, r.reader_timeout_ms)?,
        cache_max_age_ms: bounded(&rules::CACHE_MAX_AGE_MS, r.cache_max_age_ms)?,
        feast_services,
    })
}

/// A `feast_rest` route's readable services: its own, then those it lists, each once. Another
/// format may not list any.
fn feast_services(
    r: &pb::Route,
    format: &Format,
    parts: &[RoutePart],
    services: &Services,
) -> Result<Vec<Rc<Service>>, String> {
    if *format != Format::FeastRest {
        if !r.feast_services.is_empty() {
            return Err("feast_services is only for a feast_rest route".into());
        }
        return Ok(Vec::new());
    }
    let mut out: Vec<Rc<Service>> = parts.iter().take(1).map(|p| p.service.clone()).collect();
    for name in &r.feast_services {
        let service = services
            .get(name)
            .ok_or_else(|| format!("feast_services: unknown service '{name}'"))?;
        if out.iter().any(|s| s.name == *name) {
            return Err(format!("feast_services: service '{name}' is listed twice"));
        }
        out.push(service.clone());
    }
    Ok(out)
}

/// `"name":` of each output name, JSON-escaped once.
fn output_keys(names: &[String]) -> Vec<Vec<u8>> {
    names
        .iter()
        .map(|name| {
            let mut k = Vec::with_capacity(name.len() + 3);
            values::write_str(&mut k, name);
            k.push(b':');
            k
        })
        .collect()
}

/// The parts' service names and hex fingerprints, comma-separated.
fn labels(parts: &[RoutePart]) -> (String, String) {
    let label = |f: &dyn Fn(&Service) -> &str| {
        parts
            .iter()
            .map(|p| f(&p.service))
            .collect::<Vec<_>>()
            .join(",")
    };
    (
        label(&|s| s.name.as_str()),
        label(&|s| s.fingerprint_hex.as_str()),
    )
}

impl Route {
    /// This route over other services (`parts`), with its own name, conditions, format,
    /// policies and limits, and full feature names: the route a `feast_rest` request is served
    /// by, once its body named the services.
    pub fn over_services(&self, parts: Vec<RoutePart>) -> Result<Route, String> {
        let output_names = output_names(&parts, false)?;
        let (services_label, fingerprints_label) = labels(&parts);
        Ok(Route {
            name: self.name.clone(),
            conditions: self.conditions.clone(),
            format: self.format.clone(),
            services_label,
            fingerprints_label,
            feature_count: output_names.len(),
            stored_count: parts.iter().map(|p| p.service.feature_count).sum(),
            derived: on_demand::route_derived(&parts),
            output_keys: output_keys(&output_names),
            output_names,
            parts,
            feast_services: Vec::new(),
            ..*self
        })
    }
}

/// The main service, then the extra ones, each with the request fields of its join keys.
fn route_parts(r: &pb::Route, services: &Services) -> Result<Vec<RoutePart>, String> {
    let find = |name: &str| {
        services
            .get(name)
            .cloned()
            .ok_or_else(|| format!("unknown service '{name}'"))
    };
    let main = (&r.service, &r.entity_fields);
    let extras = r
        .extra_services
        .iter()
        .map(|e| (&e.service, &e.entity_fields));
    let mut parts: Vec<RoutePart> = Vec::with_capacity(1 + r.extra_services.len());
    for (name, fields) in std::iter::once(main).chain(extras) {
        let service = find(name)?;
        if parts.iter().any(|p| p.service.name == service.name) {
            return Err(format!("service '{name}' is used twice"));
        }
        let join_keys: Vec<&str> = service
            .entity_keys
            .iter()
            .map(|k| k.join_key.as_str())
            .collect();
        rules::entity_fields(fields.len(), name, &join_keys)?;
        parts.push(RoutePart {
            service,
            entity_fields: fields.clone(),
        });
    }
    Ok(parts)
}

/// The route's format with its options, checked against its services.
pub(in crate::config) fn route_format(
    r: &pb::Route,
    parts: &[RoutePart],
) -> Result<Format, String> {
    Ok(match pb::Format::try_from(r.format) {
        Ok(pb::Format::KserveV1) => Format::KserveV1,
        Ok(pb::Format::KserveV2) => {
            packable(r, parts)?;
            Format::KserveV2 { packed: r.packed }
        }
        Ok(pb::Format::KserveV2Grpc) => {
            packable(r, parts)?;
            Format::KserveV2Grpc { packed: r.packed }
        }
        Ok(pb::Format::Json) => {
            rules::json_pointer("entity_pointer", &r.entity_pointer)?;
            rules::json_pointer("inject_pointer", &r.inject_pointer)?;
            Format::Json {
                entity_pointer: r.entity_pointer.clone(),
                inject_pointer: r.inject_pointer.clone(),
            }
        }
        Ok(pb::Format::Header) => {
            let named = (!r.features_header.is_empty()).then_some(r.features_header.as_str());
            let max_header_bytes = match r.max_header_bytes {
                0 => rules::MAX_HEADER_BYTES.default,
                v => rules::MAX_HEADER_BYTES.snapshot_value(v)?,
            };
            let encoding = match pb::FeaturesEncoding::try_from(r.features_encoding) {
                Ok(pb::FeaturesEncoding::Unspecified | pb::FeaturesEncoding::Json) => {
                    HeaderEncoding::Json
                }
                Ok(pb::FeaturesEncoding::ProtobufBase64) => HeaderEncoding::ProtobufBase64,
                Err(_) => return Err(format!("unknown features_encoding {}", r.features_encoding)),
            };
            Format::Header {
                features_header: rules::features_header(named)?,
                max_header_bytes,
                encoding,
            }
        }
        Ok(pb::Format::FeastRest) => Format::FeastRest,
        Ok(other) => return Err(format!("format {other:?} is not supported by this filter")),
        Err(_) => return Err(format!("unknown format {}", r.format)),
    })
}

/// A packed route's features, stored and derived, must all fit its FP32 tensor.
fn packable(r: &pb::Route, parts: &[RoutePart]) -> Result<(), String> {
    if r.packed {
        for v in parts.iter().flat_map(|p| &p.service.views) {
            for f in &v.features {
                rules::packable(&v.name, &f.name, f.value_type)?;
            }
        }
        for d in parts.iter().flat_map(|p| &p.service.derived) {
            for &i in &d.features {
                let f = &d.view.features[i];
                rules::packable(&d.view.name, &f.name, f.value_type)?;
            }
        }
    }
    Ok(())
}

/// The output name of every feature over all parts, by the shared rule.
fn output_names(parts: &[RoutePart], short: bool) -> Result<Vec<String>, String> {
    let entity_fields: Vec<&str> = parts
        .iter()
        .flat_map(|p| p.entity_fields.iter().map(String::as_str))
        .collect();
    let mut names = rules::OutputNames::default();
    for v in parts.iter().flat_map(|p| &p.service.views) {
        for f in &v.features {
            names.add(&v.name, &f.name, short, &entity_fields)?;
        }
    }
    // Derived features are named by the same rule, after the stored ones of every part.
    for d in parts.iter().flat_map(|p| &p.service.derived) {
        for &i in &d.features {
            names.add(
                &d.view.name,
                &d.view.features[i].name,
                short,
                &entity_fields,
            )?;
        }
    }
    Ok(names.names)
}

fn policies(r: &pb::Route) -> Result<(OnMissing, OnStale, OnReaderError), String> {
    let on_missing = match pb::MissingEntityPolicy::try_from(r.on_missing_entity) {
        Ok(pb::MissingEntityPolicy::MissingReject) => OnMissing::Reject,
        Ok(pb::MissingEntityPolicy::MissingNull) => OnMissing::Null,
        Ok(pb::MissingEntityPolicy::MissingDefault) => OnMissing::Default,
        _ => return Err("on_missing_entity is not set".into()),
    };
    let on_stale = match pb::StalePolicy::try_from(r.on_stale) {
        Ok(pb::StalePolicy::StaleNull) => OnStale::Null,
        Ok(pb::StalePolicy::StaleReject) => OnStale::Reject,
        _ => return Err("on_stale is not set".into()),
    };
    let on_reader_error = match pb::ReaderErrorPolicy::try_from(r.on_reader_error) {
        Ok(pb::ReaderErrorPolicy::ReaderErrorReject) => OnReaderError::Reject,
        Ok(pb::ReaderErrorPolicy::ReaderErrorForward) => OnReaderError::Forward,
        _ => return Err("on_reader_error is not set".into()),
    };
    Ok((on_missing, on_stale, on_reader_error))
}
