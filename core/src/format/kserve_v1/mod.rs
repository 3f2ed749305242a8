//! KServe v1 (`{"instances": [{...}, ...]}`): find each instance's entity id, and write the
//! features into every instance. Whatever the client put under a feature's name is dropped and
//! written again by Ferry.
//!
//! No JSON value is built for the body: it is read member by member (`raw_json`), and every member
//! Ferry does not own, at the top level and in each instance, is kept as a span of the client's
//! text and copied into the new body as sent (numbers such as `1e400` or `-0`, escapes, nested
//! objects and arrays byte for byte). The features are written straight from the decoded stored
//! values. Only an instance's entity id fields are parsed as JSON values.
//!
//! Duplicate member names: an entity id field given twice in one instance is refused
//! (`duplicate_entity_id`: the model might read the other one), and so is a second
//! `"instances"`; any other duplicate is copied as sent, for the model's parser to judge, except
//! that every member under a feature's output name, and every top-level `"ferry"`, is dropped.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value as Json;

use super::document::shape;
use super::entity;
use super::metadata::METADATA_FIELD;
use super::raw_json::{self, Field};
use super::request_fields;
use crate::config::{OnMissing, Route};
use crate::error::FerryError;
use crate::values::{self, FeatureValue, ValueRef};
use crate::vector::{EntityFeatures, FeatureStatus, Sink};

#[derive(Debug)]
pub struct ParsedRequest {
    /// The client's body: every member below is a span of it.
    body: Vec<u8>,
    /// The top-level members in order, without the client's `"ferry"`.
    top: Vec<Member>,
    /// Which of `top` is `"instances"`.
    instances_at: usize,
    /// The members of every instance, one instance after the other, without those under a
    /// feature's output name; instance i's end at `ends[i]`.
    fields: Vec<Member>,
    ends: Vec<usize>,
    /// Canonical entity keys of each instance (one per route part), in order.
    pub keys: Vec<String>,
    /// The request fields of each instance (`request_fields`).
    pub request_fields: request_fields::Fields,
}

/// A member Ferry copies: its name and the span of its value's text in the body.
#[derive(Debug)]
struct Member {
    name: Name,
    value: Range<usize>,
}

#[derive(Debug)]
enum Name {
    /// The span of a name without escapes (the text between its quotes).
    Span(Range<usize>),
    /// A name with escapes, unescaped (written again escaped as serde_json escapes).
    Unescaped(String),
}

pub fn parse(body: &[u8], route: &Route) -> Result<ParsedRequest, FerryError> {
    let top = raw_json::document(body)?
        .ok_or_else(|| shape("the body must be a JSON object with an \"instances\" array"))?;
    let mut named = top.iter().filter(|f| f.name == "instances");
    let instances = match (named.next(), named.next()) {
        (Some(f), None) => f.value,
        (Some(_), Some(_)) => {
            return Err(shape(
                "the body has \"instances\" more than once; send it exactly once",
            ))
        }
        (None, _) => return Err(shape("the body has no \"instances\" array (KServe v1)")),
    };
    // An array of objects is read in one pass; anything else element by element, so that
    // the first element in error is reported, in turn with the others' errors, as before.
    let items: Vec<Result<Option<Vec<Field>>, FerryError>> = match raw_json::objects(instances) {
        Some(objects) => objects.into_iter().map(|f| Ok(Some(f))).collect(),
        None => raw_json::array(instances)?
            .ok_or_else(|| shape("\"instances\" must be an array of objects"))?
            .into_iter()
            .map(raw_json::object)
            .collect(),
    };
    entity::check_count(items.len(), route)?;
    let mut req = ParsedRequest {
        body: body.to_vec(),
        top: Vec::with_capacity(top.len()),
        instances_at: 0,
        fields: Vec::with_capacity(items.len() * 8),
        ends: Vec::with_capacity(items.len()),
        keys: Vec::with_capacity(items.len() * route.parts.len()),
        request_fields: Vec::new(),
    };
    for f in top.iter().filter(|f| f.name != METADATA_FIELD) {
        if f.name == "instances" {
            req.instances_at = req.top.len();
        }
        req.top.push(member(body, f)?);
    }
    for (index, item) in items.into_iter().enumerate() {
        let place = || format!("instances[{index}]");
        let fields = item?.ok_or_else(|| shape(&format!("{} must be a JSON object", place())))?;
        entity_keys(&fields, route, place, &mut req.keys)?;
        if request_fields::wanted(route) {
            let member = |name: &str| one_member(&fields, name, &place);
            request_fields::of_members(member, route, &place, &mut req.request_fields)?;
        }
        for f in &fields {
            if !route.output_names.iter().any(|o| *o == f.name) {
                req.fields.push(member(body, f)?);
            }
        }
        req.ends.push(req.fields.len());
    }
    Ok(req)
}

/// The entity keys of one instance: `entity::keys_of_fields` over its members, an id field
/// given twice refused.
fn entity_keys(
    fields: &[Field],
    route: &Route,
    place: impl Fn() -> String,
    keys: &mut Vec<String>,
) -> Result<(), FerryError> {
    let value = |name: &str| {
        let mut named = fields.iter().filter(|f| f.name == name);
        let Some(field) = named.next() else {
            return Ok(None);
        };
        if named.next().is_some() {
            return Err(FerryError::DuplicateEntityId {
                field: format!("{}.{name}", place()),
            });
        }
        id_value(field.value.get()).map(|v| Some(Cow::Owned(v)))
    };
    entity::keys_of_fields(value, route, &place, keys)
}

/// The value of an instance's member `name`, parsed; given twice it is refused (the model
/// might read the other one).
fn one_member(
    fields: &[Field],
    name: &str,
    place: &dyn Fn() -> String,
) -> Result<Option<Cow<'static, Json>>, FerryError> {
    let mut named = fields.iter().filter(|f| f.name == name);
    let Some(field) = named.next() else {
        return Ok(None);
    };
    if named.next().is_some() {
        return Err(FerryError::InvalidRequestField {
            place: place(),
            field: name.into(),
            reason: "given more than once; send it exactly once".into(),
        });
    }
    let v = serde_json::from_str(field.value.get())
        .map_err(|e| FerryError::MalformedJson(e.to_string()))?;
    Ok(Some(Cow::Owned(v)))
}

/// An entity id field's value: a string without escapes taken as it is, anything else parsed.
fn id_value(text: &str) -> Result<Json, FerryError> {
    let plain = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|t| !t.contains('\\'));
    match plain {
        Some(s) => Ok(Json::String(s.to_owned())),
        None => serde_json::from_str(text).map_err(|e| FerryError::MalformedJson(e.to_string())),
    }
}

fn member(body: &[u8], f: &Field) -> Result<Member, FerryError> {
    let name = match &f.name {
        Cow::Borrowed(name) => Name::Span(raw_json::span(body, name)?),
        Cow::Owned(name) => Name::Unescaped(name.clone()),
    };
    Ok(Member {
        name,
        value: raw_json::span(body, f.value.get())?,
    })
}

impl ParsedRequest {
    fn text(&self, span: &Range<usize>) -> &[u8] {
        self.body.get(span.clone()).unwrap_or_default()
    }

    /// Appends `"name":value` as the client wrote them.
    fn write_member(&self, out: &mut Vec<u8>, m: &Member) {
        self.write_name(out, &m.name);
        out.extend_from_slice(self.text(&m.value));
    }

    /// Appends `"name":`.
    fn write_name(&self, out: &mut Vec<u8>, name: &Name) {
        match name {
            Name::Span(span) => {
                out.push(b'"');
                out.extend_from_slice(self.text(span));
                out.push(b'"');
            }
            Name::Unescaped(name) => values::write_str(out, name),
        }
        out.push(b':');
    }
}

/// The body with each instance's features (`features[i]` for instance i) and the metadata
/// field: the client's members keep their order and text, the features follow them, and
/// `"ferry"` comes last.
pub fn rewrite(req: ParsedRequest, route: &Route, features: Vec<EntityFeatures>) -> Vec<u8> {
    write(&req, route, features.as_slice())
}

/// [`rewrite`] with the features already written (`Rendered`, decoding's sink): the same body.
pub fn rewrite_rendered(req: ParsedRequest, route: &Route, features: &Rendered<'_>) -> Vec<u8> {
    write(&req, route, features)
}

/// The features of every instance, as `write` takes them.
trait Instances {
    fn count(&self) -> usize;
    /// Appends instance `i`'s `"name":value` pairs, a comma first when `after` (the instance
    /// has members of its own).
    fn write(&self, out: &mut Vec<u8>, route: &Route, i: usize, after: bool);
    fn statuses(&self, i: usize) -> &[FeatureStatus];
}

impl Instances for [EntityFeatures] {
    fn count(&self) -> usize {
        self.len()
    }

    fn write(&self, out: &mut Vec<u8>, route: &Route, i: usize, after: bool) {
        let values = self.get(i).map_or(&[][..], |f| &f.values);
        for (j, (key, value)) in route.output_keys.iter().zip(values).enumerate() {
            if j > 0 || after {
                out.push(b',');
            }
            out.extend_from_slice(key);
            values::write_json(out, value);
        }
    }

    fn statuses(&self, i: usize) -> &[FeatureStatus] {
        self.get(i).map_or(&[][..], |f| &f.statuses)
    }
}

fn write(req: &ParsedRequest, route: &Route, features: &(impl Instances + ?Sized)) -> Vec<u8> {
    let per_entity: usize = route.output_keys.iter().map(|k| k.len() + 12).sum();
    let mut out = Vec::with_capacity(req.body.len() + features.count() * per_entity + 128);
    out.push(b'{');
    for (i, m) in req.top.iter().enumerate() {
        if i == req.instances_at {
            req.write_name(&mut out, &m.name);
            write_instances(&mut out, req, route, features);
        } else {
            req.write_member(&mut out, m);
        }
        out.push(b',');
    }
    values::write_str(&mut out, METADATA_FIELD);
    out.push(b':');
    write_metadata(&mut out, route, features);
    out.push(b'}');
    out
}

fn write_instances(
    out: &mut Vec<u8>,
    req: &ParsedRequest,
    route: &Route,
    features: &(impl Instances + ?Sized),
) {
    out.push(b'[');
    let mut start = 0;
    for (i, &end) in req.ends.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        let members = req.fields.get(start..end).unwrap_or_default();
        start = end;
        for (j, m) in members.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            req.write_member(out, m);
        }
        features.write(out, route, i, !members.is_empty());
        out.push(b'}');
    }
    out.push(b']');
}

/// `{"service", "fingerprint", "statuses": [per instance: {feature: status} of the features
/// that are not PRESENT]}`, the same object `format::metadata` builds for the other formats.
fn write_metadata(out: &mut Vec<u8>, route: &Route, features: &(impl Instances + ?Sized)) {
    out.extend_from_slice(b"{\"service\":");
    values::write_str(out, &route.services_label);
    out.extend_from_slice(b",\"fingerprint\":\"");
    out.extend_from_slice(route.fingerprints_label.as_bytes());
    if !route.derived.version_label.is_empty() {
        out.extend_from_slice(b"\",\"derived_version\":\"");
        out.extend_from_slice(route.derived.version_label.as_bytes());
    }
    out.extend_from_slice(b"\",\"statuses\":[");
    for i in 0..features.count() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        let mut first = true;
        for (key, status) in route.output_keys.iter().zip(features.statuses(i)) {
            if *status == FeatureStatus::Present {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            out.push(b'"');
            out.extend_from_slice(status.as_str().as_bytes());
            out.push(b'"');
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// Every instance's stored features written as the new body holds them (`"name":value` pairs,
/// in one buffer), as decoding reads them from the vectors (`vector::Sink`): no typed value is
/// built and no string copied but into the body. For a route without on-demand features
/// (they read the typed values), under the same policies: a NOT_FOUND feature is written as
/// the repo's default under `on_missing_entity: default`, as `enrich` would have set it.
#[derive(Debug)]
pub struct Rendered<'r> {
    keys: &'r [Vec<u8>],
    /// Each feature's default, under `on_missing_entity: default`.
    defaults: Option<Vec<&'r FeatureValue>>,
    json: Vec<u8>,
    /// Where each instance's pairs end in `json`, and its statuses in `statuses`.
    ends: Vec<(usize, usize)>,
    statuses: Vec<FeatureStatus>,
    /// Where the instance being decoded starts in `json` and `statuses`.
    start: (usize, usize),
}

impl<'r> Rendered<'r> {
    pub fn new(route: &'r Route, entities: usize) -> Rendered<'r> {
        let per_entity: usize = route.output_keys.iter().map(|k| k.len() + 12).sum();
        let defaults = (route.on_missing == OnMissing::Default)
            .then(|| route.features().map(|f| &f.default).collect());
        Rendered {
            keys: &route.output_keys,
            defaults,
            json: Vec::with_capacity(entities.saturating_mul(per_entity)),
            ends: Vec::with_capacity(entities),
            statuses: Vec::with_capacity(entities.saturating_mul(route.stored_count)),
            start: (0, 0),
        }
    }

    /// The instance being decoded is complete; the next begins.
    pub fn end_entity(&mut self) {
        self.start = (self.json.len(), self.statuses.len());
        self.ends.push(self.start);
    }

    /// `"name":` of the instance's next feature (a comma first but for the first), or None
    /// when the route has no such output (nothing is written for it, as `rewrite` zips them).
    #[inline]
    fn key(&mut self) -> bool {
        let at = self.statuses.len().saturating_sub(self.start.1);
        let Some(key) = self.keys.get(at) else {
            return false;
        };
        if at > 0 {
            self.json.push(b',');
        }
        self.json.extend_from_slice(key);
        true
    }
}

impl Sink for Rendered<'_> {
    fn not_found(&mut self, n: usize) {
        for _ in 0..n {
            if self.key() {
                let at = self.statuses.len().saturating_sub(self.start.1);
                let default = self.defaults.as_ref().and_then(|d| d.get(at));
                values::write_json(&mut self.json, default.copied().unwrap_or(&None));
            }
            self.statuses.push(FeatureStatus::NotFound);
        }
    }

    #[inline]
    fn push(&mut self, value: Option<ValueRef<'_>>, status: FeatureStatus) {
        if self.key() {
            match value {
                Some(v) => values::write_json_ref(&mut self.json, &v),
                None => self.json.extend_from_slice(b"null"),
            }
        }
        self.statuses.push(status);
    }

    fn statuses(&self) -> &[FeatureStatus] {
        self.statuses.get(self.start.1..).unwrap_or_default()
    }
}

impl Instances for Rendered<'_> {
    fn count(&self) -> usize {
        self.ends.len()
    }

    fn write(&self, out: &mut Vec<u8>, _: &Route, i: usize, after: bool) {
        let from = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).map_or(0, |e| e.0),
            None => 0,
        };
        let to = self.ends.get(i).map_or(from, |e| e.0);
        let pairs = self.json.get(from..to).unwrap_or_default();
        if after && !pairs.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(pairs);
    }

    fn statuses(&self, i: usize) -> &[FeatureStatus] {
        let from = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).map_or(0, |e| e.1),
            None => 0,
        };
        let to = self.ends.get(i).map_or(from, |e| e.1);
        self.statuses.get(from..to).unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "kserve_v1_tests.rs"]
mod tests;
