//! One function per fuzz target. None may panic on any input; the asserts are properties.

use std::rc::Rc;

use ferry_core::config::Config;
use ferry_core::config::Format;
use ferry_core::format::header;
use ferry_core::request::{enrich, reader};
use ferry_core::{format, vector};

use super::{config, features, format_target, routes_named, seed, NOW_US};

thread_local!(static CONFIG: Rc<Config> = Rc::new(config()));

/// A fuzz target: any bytes in, a panic on a broken property.
pub type Target = fn(&[u8]);

/// Every target by name: what fuzz/corpus/NAME/ seeds, and what the replay test runs.
pub const TARGETS: &[(&str, Target)] = &[
    ("kserve_v1", kserve_v1),
    ("kserve_v2", kserve_v2),
    ("kserve_v2_binary", kserve_v2_binary),
    ("kserve_v2_grpc", kserve_v2_grpc),
    ("feast_rest", feast_rest),
    ("json", json),
    ("header", header),
    ("vector_decode", vector_decode),
    ("snapshot", snapshot),
    ("reader_response", reader_response),
    ("bypass", bypass),
    ("config_space", config_space),
];

/// KServe v1 bodies: parsed, then rewritten with synthesized features (through the dispatcher).
pub fn kserve_v1(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "kserve_v1") {
            format_target(data, &c.routes[i], parse_unframed, |r| r.keys(), body_of);
        }
    });
}

/// KServe v2 / Open Inference Protocol bodies (typed, packed and composite-key routes).
pub fn kserve_v2(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "kserve_v2") {
            format_target(data, &c.routes[i], parse_unframed, |r| r.keys(), body_of);
        }
    });
}

/// KServe v2 bodies with the binary tensor data extension: the input's first line is the
/// `Inference-Header-Content-Length` value, the rest the body (see `kserve_binary`).
pub fn kserve_v2_binary(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "kserve_v2") {
            super::kserve_binary::check(data, &c.routes[i]);
        }
    });
}

/// Triton `ModelInfer` bodies (gRPC prefix + `ModelInferRequest`) on every `kserve_v2_grpc`
/// route (per feature, packed, composite, two services): see `grpc`.
pub fn kserve_v2_grpc(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "grpc") {
            super::grpc::check(data, &c.routes[i]);
        }
    });
}

/// Feast `/get-online-features` bodies on the `feast_rest` route: see `feast_rest`.
pub fn feast_rest(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "feast_rest") {
            super::feast_rest::check(data, &c.routes[i], c);
        }
    });
}

/// A body format's parse through the dispatcher, as the filter calls it for a request without
/// the binary framing header.
fn parse_unframed(
    body: &[u8],
    route: &ferry_core::config::Route,
) -> Result<format::ParsedRequest, ferry_core::error::FerryError> {
    format::parse(body, route, None)
}

/// A body format's rewrite through the dispatcher, as the filter calls it.
fn body_of(
    r: format::ParsedRequest,
    route: &ferry_core::config::Route,
    f: Vec<ferry_core::vector::EntityFeatures>,
) -> Result<Vec<u8>, ferry_core::error::FerryError> {
    Ok(format::rewrite(r, route, f)?.body.unwrap_or_default())
}

/// Generic JSON bodies: entities at a JSON pointer (or the root), features at another.
pub fn json(data: &[u8]) {
    CONFIG.with(|c| {
        for i in routes_named(c, "json") {
            format_target(data, &c.routes[i], parse_unframed, |r| r.keys(), body_of);
        }
    });
}

/// Header mode: entity ids from request headers (the input's lines, as the host hands header
/// values: UTF-8 strings), features rendered into one header. Whatever the features, the
/// rendered values must be ASCII without control characters (nothing can split a header) and
/// within the route's size bound.
pub fn header(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    CONFIG.with(|c| {
        for i in routes_named(c, "header") {
            let route = &c.routes[i];
            let lookup = |name: &str| {
                let at = route.parts[0]
                    .entity_fields
                    .iter()
                    .position(|f| f == name)?;
                lines.get(at).map(|l| l.to_string())
            };
            let Ok(req) = header::parse(lookup, |_| 1, route) else {
                continue;
            };
            assert_eq!(req.keys.len(), route.parts.len());
            let req = format::ParsedRequest::Header(req);
            let Ok(out) = format::rewrite(req, route, features(route, 1, seed(data))) else {
                continue;
            };
            let headers = out.headers;
            let Format::Header {
                max_header_bytes, ..
            } = route.format
            else {
                continue;
            };
            for (name, value) in headers {
                assert!(
                    value.bytes().all(|b| (0x20..0x7f).contains(&b)),
                    "header {name} is not printable ASCII: {value:?}"
                );
                assert!(
                    value.len() <= max_header_bytes as usize,
                    "{name}: {} bytes",
                    value.len()
                );
            }
        }
    });
}

/// Stored vectors as Redis hands them back: `vector::decode` against each service.
pub fn vector_decode(data: &[u8]) {
    CONFIG.with(|c| {
        for route in &c.routes {
            let service = route.service();
            if let Ok(f) = vector::decode(data, service, "u1", NOW_US) {
                assert_eq!(f.values.len(), service.feature_count);
                assert_eq!(f.statuses.len(), service.feature_count);
            }
        }
    });
}

/// Plugin configurations: `Config::from_bytes` on any bytes (what `on_configure` receives).
pub fn snapshot(data: &[u8]) {
    let Ok(c) = Config::from_bytes(data) else {
        return;
    };
    for r in &c.routes {
        // Stored features, then derived ones (on-demand views the service lists).
        assert_eq!(
            r.output_names.len(),
            r.service().feature_count + r.derived.count,
            "route '{}'",
            r.name
        );
        assert_eq!(
            r.parts[0].entity_fields.len(),
            r.service().entity_keys.len()
        );
    }
    for path in ["/", "/v1/models/x:predict?a=b", ""] {
        let _ = c.match_route(path, &|_| None);
    }
    for v in &c.on_demand_views {
        derived(v);
    }
}

/// Every feature of an on-demand view evaluated over one value of each slot's type, then with
/// every slot absent: an outcome, never a panic, and the budget never overdrawn.
fn derived(v: &ferry_core::config::OnDemandView) {
    use ferry_expr::{Budget, Input, List, Outcome, Val};
    use ferry_protos::v1::ValueType as T;
    let list = [0.5f32, -1.0, 2.0];
    let of = |t: T| match t {
        T::Int32 | T::Int64 => Val::Int(7),
        T::Float32 | T::Float64 => Val::Double(0.0),
        T::Bool => Val::Bool(true),
        T::String => Val::Str("x".into()),
        T::Bytes => Val::Bytes((&b"x"[..]).into()),
        T::Float32List | T::Unspecified => Val::List(List::F32(&list)),
    };
    let mut present: Vec<Input> = v
        .request
        .iter()
        .map(|r| Input::Present(of(r.value_type)))
        .collect();
    present.push(Input::Present(Val::Int(1_767_225_600)));
    present.extend(v.stored.iter().map(|s| Input::Present(of(s.value_type))));
    assert_eq!(present.len(), v.slot_count());
    let absent: Vec<Input> = (0..v.slot_count())
        .map(|_| Input::Absent(ferry_expr::Absence::NotFound))
        .collect();
    for inputs in [&present, &absent] {
        let mut budget = Budget::new(ferry_expr::cost::DEFAULT_REQUEST_BUDGET);
        for f in &v.features {
            let before = budget.left();
            match f.program.eval(inputs, &mut budget) {
                Outcome::Value(_) | Outcome::Invalid(_) => {}
                Outcome::Absent { slot, .. } => assert!(slot < inputs.len()),
            }
            assert!(
                before - budget.left() <= f.program.cost(),
                "the static bound holds"
            );
        }
    }
}

/// A fixed 3-entity KServe v1 request (one id twice) for the reader's answers.
const READER_BODY: &[u8] = br#"{"instances":[{"user_id":"u1"},{"user_id":"u2"},{"user_id":"u1"}]}"#;

/// The reader's answer (any bytes, any status) to a fixed request, under every missing/stale
/// policy: `check_reader_status`, `reader_vectors`, `enrich`.
pub fn reader_response(data: &[u8]) {
    CONFIG.with(|c| {
        let _ = reader::check_reader_status(None, data, 100);
        let _ = reader::check_reader_status(Some(503), data, 100);
        let _ = reader::check_reader_status(Some(200), data, 100);
        let Ok(vectors) = reader::reader_vectors(data, &[3]) else {
            return;
        };
        for i in routes_named(c, "kserve_v1")
            .into_iter()
            .chain(routes_named(c, "policy_"))
        {
            let route = &c.routes[i];
            let Ok(req) = format::parse(READER_BODY, route, None) else {
                continue;
            };
            // The outcome (enriched body or a typed error) is the formats' business; here
            // nothing may panic whatever the reader sent.
            let _ = enrich::enrich(route, req, &vectors, NOW_US);
        }
    });
}

/// The whole request state machine (`HttpFilter` on the in-memory host) through random
/// headers, data frames, trailers and reader answers: nothing a client chose reaches the model
/// under a Ferry-owned name (see `bypass`).
pub fn bypass(data: &[u8]) {
    CONFIG.with(|c| {
        super::bypass::run(data, c);
    });
}

/// The configuration drawn from the input too: any snapshot `ferry apply` could write, a
/// request and the reader's answers through the whole state machine (`config_space`). This
/// replay entry skips the inputs that reach a known open bug (`config_space::known_open`, their
/// inputs in fuzz/found/config_space/) so that the stable replay checks everything else until
/// the fixes land; the coverage-guided target (`config_space::run`) skips nothing.
pub fn config_space(data: &[u8]) {
    super::config_space::replay(data);
}
