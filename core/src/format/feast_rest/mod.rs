//! Feast's REST API at the edge: `POST /get-online-features` with a `feature_service` or a
//! `features` list, answered by the filter itself in Feast 0.67's response shape (see
//! `response`), from the FeatureServices the route lists (its `service` and `feast_services`;
//! no other). A request names its features; they are read from the services that hold them
//! (for a `features` list, for each reference the first service already chosen that holds it,
//! else the first the route lists), all in one
//! reader call. Columns come in a stable order: a service's features in the snapshot's order,
//! a `features` list in the list's order. Errors are Feast's (see `errors`); the route's body
//! and entity limits hold, with Ferry's own errors.

pub mod errors;
mod request;
pub mod response;

use std::rc::Rc;

use serde_json::{Map, Value as Json};

use super::document;
use super::entity;
use crate::config::{Config, Route, RoutePart, Service};
use crate::error::FerryError;
use request::{fields, Fields};

/// A `feast_rest` request, resolved against the snapshot.
#[derive(Debug)]
pub struct ParsedRequest {
    /// The route the request is served by: the `feast_rest` route over the services it names.
    pub route: Rc<Route>,
    /// One per part for each entity, like every format's.
    pub keys: Vec<String>,
    /// The entity columns echoed first: join key name and the values as the client sent them.
    join_keys: Vec<EntityColumn>,
    /// The requested features, in request order: output name and index in the served route's
    /// flattened vector.
    columns: Vec<(String, usize)>,
    /// Per entity, per feature of the flattened vector: its view's event time in µs, 0 when
    /// none (set by the enrichment step, which reads the stored vectors).
    pub event_times_us: Vec<Vec<i64>>,
    /// The request fields of each entity, from the extra `entities` columns of their names
    /// (Feast passes request data so).
    pub fields: super::request_fields::Fields,
}

/// A join key's name and its values as the client sent them.
type EntityColumn = (String, Vec<Json>);

pub fn parse(body: &[u8], route: &Route, config: &Config) -> Result<ParsedRequest, FerryError> {
    let doc = document::parse_json(body).map_err(|e| match e {
        FerryError::MalformedJson(msg) => errors::json_invalid(offset_of(body, &msg), &msg),
        other => other,
    })?;
    let fields = fields(&doc.json)?;
    let (services, columns) = resolve(&fields, &route.feast_services, &config.project)?;
    let (join_keys, count) = entity_columns(fields.entities, &services)?;
    entity::check_count(count, route)?;
    let keys = keys(&join_keys, &services, count)?;
    let served = route
        .over_services(parts_of(services))
        .map_err(|e| document::shape(&e))?;
    let entities = u32::try_from(count).unwrap_or(u32::MAX);
    crate::rules::keys_per_call(entities, served.parts.len()).map_err(|e| document::shape(&e))?;
    // The services are the request's choice, so the reader's Feast limits are checked here, as
    // a route's are when its snapshot is compiled: over them is the client's error, not the
    // reader's refusal.
    let layouts = served.parts.iter().filter_map(|p| p.service.feast.as_ref());
    crate::rules::feast_work(entities, layouts).map_err(|e| document::shape(&e))?;
    let names = output_names(&fields, &served, &columns)?;
    let mut values = Vec::with_capacity(count * served.derived.fields.len());
    for i in 0..count {
        for f in &served.derived.fields {
            let v = fields.entities.get(&f.field).and_then(|c| c.get(i));
            let place = || format!("entities.{}[{i}]", f.field);
            values.push(super::request_fields::typed(v, f, &place)?);
        }
    }
    Ok(ParsedRequest {
        route: Rc::new(served),
        keys,
        join_keys,
        columns: names.into_iter().zip(columns).collect(),
        event_times_us: Vec::new(),
        fields: values,
    })
}

/// The byte offset serde_json's "... at line L column C" points to (FastAPI reports one).
fn offset_of(body: &[u8], msg: &str) -> usize {
    let num = |word: &str| {
        msg.split(word)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
    };
    // At the end of the body serde points at the last byte, FastAPI past it.
    if msg.starts_with("EOF") {
        return body.len();
    }
    let (Some(line), Some(col)) = (num(" line "), num(" column ")) else {
        return 0;
    };
    let start: usize = body
        .split(|b| *b == b'\n')
        .take(line.saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum();
    (start + col.saturating_sub(1)).min(body.len())
}

/// The services to read, and per requested feature its index in the flattened vector of
/// those services.
type Resolved = (Vec<Rc<Service>>, Vec<usize>);

/// Only the route's `feast_services` are read: a service it does not list is answered as Feast
/// answers one that does not exist, so a client cannot learn which others the snapshot holds.
fn resolve(
    fields: &Fields,
    readable: &[Rc<Service>],
    project: &str,
) -> Result<Resolved, FerryError> {
    if let Some(name) = fields.feature_service.filter(|s| !s.is_empty()) {
        let service = readable
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| errors::unknown_service(name, project))?;
        let all = (0..service.feature_count + service.derived_count).collect();
        return Ok((vec![service.clone()], all));
    }
    if fields.features.is_empty() {
        return Err(errors::no_features());
    }
    let mut chosen: Resolved = (Vec::new(), Vec::new());
    let mut picks: Vec<(usize, Held)> = Vec::with_capacity(fields.features.len());
    for reference in &fields.features {
        let (view, feature) = reference
            .split_once(':')
            .ok_or_else(|| errors::bad_reference(reference))?;
        let holds = |s: &Service| position_in(s, view, feature);
        let found = chosen
            .0
            .iter()
            .enumerate()
            .find_map(|(p, s)| holds(s).map(|i| (p, i)));
        let pick = match found {
            Some(pick) => pick,
            None => {
                let service = readable
                    .iter()
                    .find(|s| holds(s).is_some())
                    .ok_or_else(|| match readable.iter().any(|s| has_view(s, view)) {
                        true => errors::unknown_feature(view, feature),
                        false => errors::unknown_view(view, project),
                    })?;
                chosen.0.push(service.clone());
                (
                    chosen.0.len() - 1,
                    holds(service).unwrap_or(Held::Stored(0)),
                )
            }
        };
        picks.push(pick);
    }
    chosen.1 = indices(&chosen.0, &picks);
    Ok(chosen)
}

/// Indices into what the served route writes per entity: the chosen services' stored
/// features one after the other, then their derived ones one after the other.
fn indices(chosen: &[Rc<Service>], picks: &[(usize, Held)]) -> Vec<usize> {
    let offsets = |count: fn(&Service) -> usize, start: usize| -> Vec<usize> {
        chosen
            .iter()
            .scan(start, |at, s| {
                let here = *at;
                *at += count(s);
                Some(here)
            })
            .collect()
    };
    let stored = offsets(|s| s.feature_count, 0);
    let total = chosen.iter().map(|s| s.feature_count).sum();
    let derived = offsets(|s| s.derived_count, total);
    picks
        .iter()
        .map(|(p, held)| match held {
            Held::Stored(i) => stored[*p] + i,
            Held::Derived(i) => derived[*p] + i,
        })
        .collect()
}

/// Where a service holds a feature: in its stored vector, or among its derived features.
#[derive(Clone, Copy)]
enum Held {
    Stored(usize),
    Derived(usize),
}

fn has_view(s: &Service, view: &str) -> bool {
    s.views.iter().any(|v| v.name == view) || s.derived.iter().any(|d| d.view.name == view)
}

/// Where the service holds `view:feature`.
fn position_in(s: &Service, view: &str, feature: &str) -> Option<Held> {
    let mut at = 0;
    for v in &s.views {
        if v.name == view {
            return v
                .features
                .iter()
                .position(|f| f.name == feature)
                .map(|i| Held::Stored(at + i));
        }
        at += v.features.len();
    }
    let mut at = 0;
    for d in &s.derived {
        if d.view.name == view {
            return d
                .features
                .iter()
                .position(|&i| d.view.features[i].name == feature)
                .map(|i| Held::Derived(at + i));
        }
        at += d.features.len();
    }
    None
}

/// The entity columns the services need (their join keys, in the request's order), checked as
/// Feast checks them, and the entity count.
fn entity_columns(
    entities: &Map<String, Json>,
    services: &[Rc<Service>],
) -> Result<(Vec<EntityColumn>, usize), FerryError> {
    if entities.is_empty() {
        return Err(errors::no_entity_columns());
    }
    let mut needed: Vec<&str> = Vec::new();
    for k in services.iter().flat_map(|s| &s.entity_keys) {
        if !needed.contains(&k.join_key.as_str()) {
            needed.push(&k.join_key);
        }
    }
    let given = |k: &&str| entities.get(*k).and_then(Json::as_array);
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|k| given(k).is_none())
        .collect();
    let empty: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|k| given(k).is_none_or(Vec::is_empty))
        .collect();
    if !empty.is_empty() {
        let provided: Vec<&str> = needed
            .iter()
            .copied()
            .filter(|k| given(k).is_some())
            .collect();
        return Err(errors::missing_join_keys(&missing, &empty, &provided));
    }
    let count = entities
        .values()
        .filter_map(Json::as_array)
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    if entities
        .values()
        .filter_map(Json::as_array)
        .any(|v| v.len() != count)
    {
        return Err(errors::uneven_entities());
    }
    let columns = entities
        .iter()
        .filter(|(k, _)| needed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.as_array().cloned().unwrap_or_default()))
        .collect();
    Ok((columns, count))
}

/// The keys of each entity, one per service, from the join key columns.
fn keys(
    columns: &[EntityColumn],
    services: &[Rc<Service>],
    count: usize,
) -> Result<Vec<String>, FerryError> {
    let mut keys = Vec::with_capacity(count * services.len());
    for i in 0..count {
        for s in services {
            let mut parts = Vec::with_capacity(s.entity_keys.len());
            for k in &s.entity_keys {
                let value = columns
                    .iter()
                    .find(|(name, _)| *name == k.join_key)
                    .and_then(|(_, v)| v.get(i))
                    .unwrap_or(&Json::Null);
                let part = entity::entity_part(value, k.kind).map_err(|reason| {
                    FerryError::InvalidEntityId {
                        place: format!("entities.{}[{i}]", k.join_key),
                        reason,
                    }
                })?;
                parts.push(part);
            }
            keys.push(ferry_protos::entity_key(&parts));
        }
    }
    Ok(keys)
}

/// Feast's output names: `view__feature` with `full_feature_names`, else `feature`; each
/// must be unique.
fn output_names(
    fields: &Fields,
    served: &Route,
    columns: &[usize],
) -> Result<Vec<String>, FerryError> {
    let stored = served
        .parts
        .iter()
        .flat_map(|p| &p.service.views)
        .flat_map(|v| v.features.iter().map(move |f| (&v.name, &f.name)));
    let derived = served.derived.bindings.iter().flat_map(|b| {
        b.features
            .iter()
            .map(move |&i| (&b.view.name, &b.view.features[i].name))
    });
    let full: Vec<String> = stored
        .chain(derived)
        .map(|(v, f)| {
            if fields.full_feature_names {
                format!("{v}__{f}")
            } else {
                f.clone()
            }
        })
        .collect();
    let mut names: Vec<String> = Vec::with_capacity(columns.len());
    for c in columns {
        let name = full.get(*c).cloned().unwrap_or_default();
        if names.contains(&name) {
            return Err(errors::name_collision(&name, fields.full_feature_names));
        }
        names.push(name);
    }
    Ok(names)
}

/// The services as route parts, each with its join keys as request fields.
fn parts_of(services: Vec<Rc<Service>>) -> Vec<RoutePart> {
    services
        .into_iter()
        .map(|service| RoutePart {
            entity_fields: service
                .entity_keys
                .iter()
                .map(|k| k.join_key.clone())
                .collect(),
            service,
        })
        .collect()
}

#[cfg(test)]
#[path = "feast_rest_tests.rs"]
mod tests;
