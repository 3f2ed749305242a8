//! Validation of `routes`: which requests the filter enriches, with which service and
//! policies, each route checked on its own and against the earlier ones. Only what the filter
//! implements is accepted.

use std::collections::{HashMap, HashSet};

use ferry_core::config::{Format, HeaderEncoding};
use ferry_protos::policy::PolicyWords;
use ferry_protos::v1::{FeatureNames, MissingEntityPolicy, ReaderErrorPolicy, StalePolicy};

use super::ferry_yaml::{RawEntityRef, RawHeaderMatch, RawRepo, RawRoute};
use super::issues::{Issues, Seen};
use super::{
    ExtraService, FeatureService, FeatureView, HeaderMatch, HostMatch, OnDemandView, PathMatch,
    Route, RouteConditions,
};

use ferry_core::rules;

/// What routes are resolved against: the repo's services (by name and index) and the views
/// their features come from.
pub(super) struct Catalog<'a> {
    /// Service name → index (first definition).
    pub(super) service_seen: &'a HashMap<&'a str, usize>,
    pub(super) services: &'a [FeatureService],
    pub(super) views: &'a [FeatureView],
    pub(super) on_demand: &'a [OnDemandView],
}

/// The routes, each checked (`routes::route`) and against the earlier ones: a route that an
/// earlier one always matches first is never reached.
pub(super) fn routes(raw: &RawRepo, catalog: &Catalog, issues: &mut Issues) -> Vec<Route> {
    let mut routes = Vec::with_capacity(raw.routes.len());
    let mut route_seen = Seen::new("route name", "routes");
    let mut match_seen: HashMap<RouteConditions, usize> = HashMap::new();
    let names: Vec<String> = raw
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| r.name.clone().unwrap_or_else(|| format!("route-{i}")))
        .collect();
    for (i, rr) in raw.routes.iter().enumerate() {
        let path = format!("routes[{i}] '{}'", names[i]);
        issues.name(&path, "name", &names[i]);
        route_seen.add(issues, &names[i], i, &path);
        let r = route(rr, &names[i], &path, catalog, issues);
        if r.matcher.by_name_only() {
            // Selected by name from Envoy route metadata: no match to compare.
        } else if let Some(first) = match_seen.get(&r.matcher) {
            issues.add(&path, format!("same match as routes[{first}]"));
        } else {
            match_seen.insert(r.matcher.clone(), i);
            if let Some(j) = shadowed_by(&routes, &r.matcher) {
                issues.add(
                    &path,
                    format!("never matched: routes[{j}] matches its requests first (routes are tried in order)"),
                );
            }
        }
        routes.push(r);
    }
    routes
}

/// The first earlier route that matches every request `m` matches (so `m` is never reached):
/// its path covers `m`'s, its host is `m`'s or unset, and each of its header conditions is one
/// of `m`'s. Routes selected by name only shadow nothing and are never shadowed.
fn shadowed_by(earlier: &[Route], m: &RouteConditions) -> Option<usize> {
    if m.by_name_only() {
        return None;
    }
    earlier.iter().position(|r| {
        let e = &r.matcher;
        let path = match (&e.path, &m.path) {
            (None, _) => true,
            (Some(PathMatch::Prefix(q)), Some(PathMatch::Prefix(p) | PathMatch::Exact(p))) => {
                p.starts_with(q.as_str())
            }
            (Some(PathMatch::Exact(q)), Some(PathMatch::Exact(p))) => p == q,
            _ => false,
        };
        let host = e.host.is_none() || e.host == m.host;
        let headers = e.headers.iter().all(|h| {
            m.headers
                .iter()
                .any(|x| x.name == h.name && (h.exact.is_none() || h.exact == x.exact))
        });
        !e.by_name_only() && path && host && headers
    })
}

/// The request fields of a service's join keys: `entity: {field}` or `entity: {fields}`.
fn entity_fields_of(entity: &RawEntityRef, path: &str, issues: &mut Issues) -> Vec<String> {
    let fields = match (&entity.field, &entity.fields) {
        (Some(f), None) => vec![f.clone()],
        (None, Some(fs)) if !fs.is_empty() => fs.clone(),
        _ => {
            issues.add(
                path,
                "entity needs exactly one of field, fields (non-empty)",
            );
            Vec::new()
        }
    };
    let mut seen = HashSet::new();
    for f in &fields {
        issues.name(path, "entity field", f);
        if !seen.insert(f) {
            issues.add(path, format!("entity field '{f}' listed twice"));
        }
    }
    fields
}

/// A host condition: a host name or `*.domain`, without port, case-insensitive.
fn host_match(raw: &str, path: &str, issues: &mut Issues) -> Option<HostMatch> {
    HostMatch::parse(raw)
        .map_err(|e| issues.add(path, format!("match {e}")))
        .ok()
}

fn header_matches(raw: &[RawHeaderMatch], path: &str, issues: &mut Issues) -> Vec<HeaderMatch> {
    raw.iter()
        .map(|h| {
            let name = h.name.to_ascii_lowercase();
            if !ferry_protos::is_valid_header_match_name(&name) {
                issues.add(path, format!("match header name '{}' is not a header name", h.name));
            }
            if h.exact.as_deref() == Some("") {
                issues.add(
                    path,
                    format!("match header '{}': exact is empty (leave it out to only require the header)", h.name),
                );
            }
            HeaderMatch {
                name,
                exact: h.exact.clone().filter(|v| !v.is_empty()),
            }
        })
        .collect()
}

/// A policy word, or the default when absent.
fn word<T: Copy>(
    issues: &mut Issues,
    path: &str,
    field: &str,
    value: &Option<String>,
    choices: &[(&str, T)],
) -> T {
    let default = choices[0].1;
    let Some(v) = value else { return default };
    if let Some((_, t)) = choices.iter().find(|(w, _)| w == v) {
        return *t;
    }
    let words: Vec<&str> = choices.iter().map(|(w, _)| *w).collect();
    issues.add(
        path,
        format!(
            "{field}: unknown value '{v}' (expected one of {})",
            words.join(", ")
        ),
    );
    default
}

fn route(rr: &RawRoute, name: &str, path: &str, catalog: &Catalog, issues: &mut Issues) -> Route {
    let Catalog {
        service_seen,
        services,
        ..
    } = *catalog;
    let matcher = matcher(rr, name, path, issues);
    let (service, extra_services) = services_of(rr, path, service_seen, issues);
    let format = format_of(rr, path, issues);
    let feast_services = feast_services_of(rr, path, &format, service, service_seen, issues);
    let feature_names = word(
        issues,
        path,
        "feature_names",
        &rr.feature_names,
        &[("full", FeatureNames::Full), ("short", FeatureNames::Short)],
    );
    // A service of on-demand views over request fields only has no join key to name.
    let keyless = service.is_some_and(|s| services[s].keys.is_empty());
    let entity_fields = match (&rr.entity.field, &rr.entity.fields) {
        (None, None) if keyless => Vec::new(),
        _ => entity_fields_of(&rr.entity, path, issues),
    };
    let parts: Vec<(&FeatureService, &Vec<String>)> = service
        .map(|s| (&services[s], &entity_fields))
        .into_iter()
        .chain(
            extra_services
                .iter()
                .map(|e| (&services[e.service], &e.entity_fields)),
        )
        .collect();
    let packed = matches!(
        format,
        Format::KserveV2 { packed: true } | Format::KserveV2Grpc { packed: true }
    );
    check_features(&parts, catalog, packed, feature_names, path, issues);
    let (on_missing_entity, on_stale, on_reader_error) = policies(rr, path, issues);
    let route = Route {
        name: name.to_owned(),
        matcher,
        extra_services,
        service: service.unwrap_or(0),
        feast_services,
        format,
        entity_fields,
        feature_names,
        on_missing_entity,
        on_stale,
        on_reader_error,
        max_body_bytes: bounded(&rules::MAX_BODY_BYTES, rr.max_body_bytes, path, issues),
        max_entities: bounded(&rules::MAX_ENTITIES, rr.max_entities, path, issues),
        reader_timeout_ms: bounded(
            &rules::READER_TIMEOUT_MS,
            rr.reader_timeout_ms,
            path,
            issues,
        ),
        cache_max_age_ms: bounded(&rules::CACHE_MAX_AGE_MS, rr.cache_max_age_ms, path, issues),
        log: log_of(rr, path, issues),
    };
    // One reader call looks up every entity once per service: it must fit the reader's batch.
    if let Err(e) = rules::keys_per_call(route.max_entities, 1 + route.extra_services.len()) {
        issues.add(path, e);
    }
    route
}

/// `log:`, checked by the filter's own rule (`ferry_core::config::log_policy::LogPolicy`).
fn log_of(rr: &RawRoute, path: &str, issues: &mut Issues) -> Option<ferry_protos::v1::RouteLog> {
    let raw = rr.log.as_ref()?;
    let log = ferry_protos::v1::RouteLog {
        sample: raw.sample,
        statuses: raw.statuses.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    };
    match ferry_core::config::log_policy::LogPolicy::from_proto(&log) {
        Ok(_) => Some(log),
        Err(e) => {
            issues.add(path, e);
            None
        }
    }
}

/// A bounded number (body size, entities, timeouts...): the repo's value if in bounds, else the
/// default with an issue naming the bound.
fn bounded(b: &rules::Bound, value: Option<u64>, path: &str, issues: &mut Issues) -> u32 {
    b.repo_value(value).unwrap_or_else(|e| {
        issues.add(path, e);
        b.default
    })
}

/// The route's conditions: a path (normalised, as requests are matched), a host, headers.
fn matcher(rr: &RawRoute, name: &str, path: &str, issues: &mut Issues) -> RouteConditions {
    let path_match = match (&rr.matcher.path_prefix, &rr.matcher.path_exact) {
        (Some(p), None) => Some(PathMatch::Prefix(p.clone())),
        (None, Some(p)) => Some(PathMatch::Exact(p.clone())),
        (None, None) => None,
        (Some(_), Some(_)) => {
            issues.add(path, "match takes at most one of path_prefix, path_exact");
            Some(PathMatch::Prefix(format!("/invalid-{name}")))
        }
    };
    if let Some(PathMatch::Prefix(p) | PathMatch::Exact(p)) = &path_match {
        if !p.starts_with('/') {
            issues.add(path, format!("match path '{p}' must start with '/'"));
        } else if !ferry_protos::path::is_normalized(p) {
            issues.add(
                path,
                format!(
                    "match path '{p}' is not normalised (requests are matched on '{}')",
                    ferry_protos::path::normalize(p)
                ),
            );
        }
    }
    RouteConditions {
        path: path_match,
        host: rr
            .matcher
            .host
            .as_deref()
            .and_then(|h| host_match(h, path, issues)),
        headers: header_matches(&rr.matcher.headers, path, issues),
    }
}

/// The main service and the extra ones, each named once.
fn services_of(
    rr: &RawRoute,
    path: &str,
    service_seen: &HashMap<&str, usize>,
    issues: &mut Issues,
) -> (Option<usize>, Vec<ExtraService>) {
    let service = service_seen.get(rr.service.as_str()).copied();
    if service.is_none() {
        issues.add(path, format!("unknown feature service '{}'", rr.service));
    }
    let mut extra_services = Vec::with_capacity(rr.extra_services.len());
    for (i, extra) in rr.extra_services.iter().enumerate() {
        let epath = format!("{path}: extra_services[{i}]");
        let Some(&s) = service_seen.get(extra.service.as_str()) else {
            issues.add(
                &epath,
                format!("unknown feature service '{}'", extra.service),
            );
            continue;
        };
        if Some(s) == service || extra_services.iter().any(|e: &ExtraService| e.service == s) {
            issues.add(
                &epath,
                format!("feature service '{}' is used twice", extra.service),
            );
            continue;
        }
        extra_services.push(ExtraService {
            service: s,
            entity_fields: entity_fields_of(&extra.entity, &epath, issues),
        });
    }
    (service, extra_services)
}

/// A `feast_rest` route's further readable services, each once; another format lists none.
fn feast_services_of(
    rr: &RawRoute,
    path: &str,
    format: &Format,
    service: Option<usize>,
    service_seen: &HashMap<&str, usize>,
    issues: &mut Issues,
) -> Vec<usize> {
    if *format != Format::FeastRest {
        if !rr.feast_services.is_empty() {
            issues.add(path, "feast_services is only for a feast_rest route");
        }
        return Vec::new();
    }
    let mut out: Vec<usize> = Vec::with_capacity(rr.feast_services.len());
    for (i, name) in rr.feast_services.iter().enumerate() {
        let spath = format!("{path}: feast_services[{i}]");
        match service_seen.get(name.as_str()) {
            None => issues.add(&spath, format!("unknown feature service '{name}'")),
            Some(&s) if Some(s) == service || out.contains(&s) => {
                issues.add(&spath, format!("feature service '{name}' is listed twice"))
            }
            Some(&s) => out.push(s),
        }
    }
    out
}

/// The format with its own options, and that only its own options are set.
fn format_of(rr: &RawRoute, path: &str, issues: &mut Issues) -> Format {
    let format = match rr.format.as_str() {
        "kserve_v1" => Format::KserveV1,
        "kserve_v2" => Format::KserveV2 {
            packed: rr.packed.unwrap_or(false),
        },
        "kserve_v2_grpc" => Format::KserveV2Grpc {
            packed: rr.packed.unwrap_or(false),
        },
        "json" => Format::Json {
            entity_pointer: json_pointer("entity_pointer", &rr.entity_pointer, path, issues),
            inject_pointer: json_pointer("inject_pointer", &rr.inject_pointer, path, issues),
        },
        "header" => Format::Header {
            features_header: rules::features_header(rr.features_header.as_deref()).unwrap_or_else(
                |e| {
                    issues.add(path, e);
                    rules::DEFAULT_FEATURES_HEADER.to_owned()
                },
            ),
            max_header_bytes: bounded(&rules::MAX_HEADER_BYTES, rr.max_header_bytes, path, issues),
            encoding: word(
                issues,
                path,
                "features_encoding",
                &rr.features_encoding,
                &[
                    ("json", HeaderEncoding::Json),
                    ("protobuf", HeaderEncoding::ProtobufBase64),
                ],
            ),
        },
        "feast_rest" => Format::FeastRest,
        f => {
            issues.add(
                path,
                format!(
                    "unknown format '{f}' (expected one of kserve_v1, kserve_v2, kserve_v2_grpc, json, header, feast_rest)"
                ),
            );
            Format::KserveV1
        }
    };
    let word = format.word();
    if rr.packed.is_some() && !matches!(word, "kserve_v2" | "kserve_v2_grpc") {
        issues.add(
            path,
            "packed applies to formats kserve_v2 and kserve_v2_grpc only",
        );
    }
    if (rr.entity_pointer.is_some() || rr.inject_pointer.is_some()) && word != "json" {
        issues.add(
            path,
            "entity_pointer and inject_pointer apply to format json only",
        );
    }
    if (rr.features_header.is_some()
        || rr.max_header_bytes.is_some()
        || rr.features_encoding.is_some())
        && word != "header"
    {
        issues.add(
            path,
            "features_header, features_encoding and max_header_bytes apply to format header only",
        );
    }
    format
}

/// A JSON pointer option (empty when absent), checked by the filter's own rule.
fn json_pointer(what: &str, p: &Option<String>, path: &str, issues: &mut Issues) -> String {
    let p = p.clone().unwrap_or_default();
    if let Err(e) = rules::json_pointer(what, &p) {
        issues.add(path, e);
    }
    p
}

/// A policy word (`on_stale: reject`), by the one table of ferry-protos, or the default.
fn policy<P: PolicyWords>(value: &Option<String>, path: &str, issues: &mut Issues) -> P {
    word(issues, path, P::FIELD, value, P::WORDS)
}

fn policies(
    rr: &RawRoute,
    path: &str,
    issues: &mut Issues,
) -> (MissingEntityPolicy, StalePolicy, ReaderErrorPolicy) {
    (
        policy(&rr.on_missing_entity, path, issues),
        policy(&rr.on_stale, path, issues),
        policy(&rr.on_reader_error, path, issues),
    )
}

/// The features a route writes, over every service it enriches from: the entity fields must
/// name each join key, the output names must be unambiguous (`rules::OutputNames`), and a
/// packed tensor takes numbers only.
fn check_features(
    parts: &[(&FeatureService, &Vec<String>)],
    catalog: &Catalog,
    packed: bool,
    feature_names: FeatureNames,
    path: &str,
    issues: &mut Issues,
) {
    let (views, on_demand) = (catalog.views, catalog.on_demand);
    let entity_fields: Vec<&str> = parts
        .iter()
        .flat_map(|(_, f)| f.iter().map(String::as_str))
        .collect();
    let mut names = rules::OutputNames::default();
    for (s, fields) in parts {
        // A service with no resolved key was already reported; do not pile on.
        if !fields.is_empty() && !s.keys.is_empty() {
            let keys: Vec<&str> = s.keys.iter().map(|k| k.join_key.as_str()).collect();
            if let Err(e) = rules::entity_fields(fields.len(), &s.name, &keys) {
                issues.add(path, e);
            }
        }
        for sv in &s.views {
            let v = &views[sv.view];
            for &fi in &sv.features {
                let f = &v.features[fi];
                let short = feature_names == FeatureNames::Short;
                if let Err(e) = names.add(&v.name, &f.name, short, &entity_fields) {
                    issues.add(path, e);
                }
                if packed {
                    if let Err(e) = rules::packable(&v.name, &f.name, f.ty.to_proto()) {
                        issues.add(path, e);
                    }
                }
            }
        }
    }
    // Derived features are named by the same rule, after every stored one.
    let short = feature_names == FeatureNames::Short;
    for (s, _) in parts {
        for d in &s.derived {
            let v = &on_demand[d.view];
            for &fi in &d.features {
                if let Err(e) = names.add(&v.name, &v.features[fi].name, short, &entity_fields) {
                    issues.add(path, e);
                }
            }
        }
    }
}
