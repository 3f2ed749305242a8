//! KServe v2 / Triton `ModelInfer` over gRPC as Triton's own gRPC client sends it
//! (`tritonclient[grpc]`, installed into .venv by scripts/setup.sh), through real Envoy (h2c in,
//! h2 to the model) to the demo model's gRPC echo, on `kserve_v2_grpc` routes: raw contents
//! (what `infer()` sends) and typed contents, one tensor per feature (BYTES user ids) and one
//! packed FP32 tensor (INT64 + BYTES composite ids), for 1 and 50 entities. Every feature tensor
//! the model received is compared with the source data, the statuses in the `ferry_statuses`
//! parameter with the source's; the client's own tensors and parameter must arrive unchanged
//! and its forged tensor under a Ferry name must not. Errors arrive as gRPC statuses.

use ferry_integration_tests::data::{same, tensor_zero, Kind};
use ferry_integration_tests::expected::{Entity, Feature, Service, Store};
use ferry_integration_tests::{client_script, fraud_grpc_route, Options, Stack};
use serde_json::{json, Value as Json};

/// One gRPC path, three routes told apart by the `x-route` metadata (first match wins).
const ROUTES: &str = concat!(
    r#"
  - name: pair-grpc-packed
    match:
      path_prefix: /inference.GRPCInferenceService/ModelInfer
      headers: [{name: x-route, exact: pair-packed}]
    service: user_merchant_scoring
    format: kserve_v2_grpc
    packed: true
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: "null"
  - name: fraud-grpc-strict
    match:
      path_prefix: /inference.GRPCInferenceService/ModelInfer
      headers: [{name: x-route, exact: strict}]
    service: realtime_scoring
    format: kserve_v2_grpc
    entity: {field: user_id}
    on_missing_entity: reject
    max_entities: 20
    max_body_bytes: 4096
"#,
    fraud_grpc_route!(),
);

/// The client's own inputs the script sends besides the ids (and the forged tensor).
const CLIENT_INPUTS: [&str; 2] = ["amount", "note"];

struct Case {
    name: String,
    mode: &'static str,
    route: &'static str,
    service: Service,
    entities: Vec<Entity>,
}

impl Case {
    fn new(name: &str, mode: &'static str, route: &'static str, entities: Vec<Entity>) -> Case {
        let service = match entities.first() {
            Some(Entity::Pair { .. }) => Service::UserMerchantScoring,
            _ => Service::RealtimeScoring,
        };
        Case {
            name: name.into(),
            mode,
            route,
            service,
            entities,
        }
    }

    fn spec(&self, store: &Store) -> Json {
        let mut ids = serde_json::Map::new();
        let users: Vec<&str> = self
            .entities
            .iter()
            .map(|e| match e {
                Entity::User(u) | Entity::Pair { user: u, .. } => u.as_str(),
            })
            .collect();
        if self.service == Service::UserMerchantScoring {
            let merchants: Vec<i64> = self
                .entities
                .iter()
                .map(|e| match e {
                    Entity::Pair { merchant, .. } => *merchant,
                    Entity::User(_) => unreachable!("a pair case"),
                })
                .collect();
            ids.insert("merchant_id".into(), json!(merchants));
        }
        ids.insert("user_id".into(), json!(users));
        let headers = if self.route.is_empty() {
            json!({})
        } else {
            json!({"x-route": self.route})
        };
        json!({"name": self.name, "model": "fraud", "mode": self.mode, "ids": ids,
               "forged": self.forged(store), "headers": headers})
    }

    /// A name Ferry writes on the case's route, which the client also sends a tensor under.
    fn forged(&self, store: &Store) -> String {
        if self.route == "pair-packed" {
            return "ferry_features".into();
        }
        let probe = Entity::User("u000001".into());
        store.features(Service::RealtimeScoring, &probe)[0]
            .name
            .clone()
    }

    fn id_inputs(&self) -> &'static [&'static str] {
        match self.service {
            Service::RealtimeScoring => &["user_id"],
            Service::UserMerchantScoring => &["merchant_id", "user_id"],
        }
    }
}

/// Runs the tritonclient[grpc] script on `specs`; returns its per-case report.
fn run_client(stack: &Stack, specs: Vec<Json>, out: &str) -> Vec<Json> {
    let out = stack.dir.path().join(out);
    let report = client_script::run(
        stack,
        "triton_grpc_client.py",
        &out,
        &Json::Array(specs),
        &out,
    );
    serde_json::from_value(report).expect("a list of answers")
}

/// A received value against the source's: numbers by value (FP32 at f32 precision).
fn matches(got: &Json, want: &Json, kind: Kind) -> bool {
    match kind {
        Kind::F64 | Kind::Int => got.as_f64() == want.as_f64() && got.as_f64().is_some(),
        _ => same(got, want, kind),
    }
}

/// What the model must have received for feature `f` of one entity.
fn wanted(f: &Feature, status: &str, width: usize) -> Json {
    match (status, f.kind) {
        ("PRESENT", _) => f.value.clone(),
        (_, Kind::F32List) => Json::Array(vec![json!(0.0); width]),
        (_, k) => tensor_zero(k),
    }
}

/// One tensor per feature: every entity's value where PRESENT, the type's zero otherwise, and
/// the statuses as the source says.
fn check_per_feature(store: &Store, case: &Case, r: &Json, statuses: &Json) -> usize {
    let mut checked = 0;
    for (i, e) in case.entities.iter().enumerate() {
        for f in store.features(case.service, e) {
            let t = &r["outputs"][&f.name];
            let data = t["data"]
                .as_array()
                .unwrap_or_else(|| panic!("{}: no tensor {}", case.name, f.name));
            let got = if f.kind == Kind::F32List {
                let d = t["shape"][1].as_u64().unwrap() as usize;
                Json::Array(data[i * d..(i + 1) * d].to_vec())
            } else {
                assert_eq!(
                    t["shape"],
                    json!([case.entities.len()]),
                    "{} {}",
                    case.name,
                    f.name
                );
                data[i].clone()
            };
            let status = statuses[i]
                .get(&f.name)
                .and_then(Json::as_str)
                .unwrap_or("PRESENT");
            assert_eq!(status, f.status, "{}: {e:?} {}", case.name, f.name);
            let width = got.as_array().map_or(0, Vec::len);
            let want = wanted(&f, status, width);
            assert!(
                matches(&got, &want, f.kind),
                "{}: {e:?} {}: model got {got}, source says {want} ({status})",
                case.name,
                f.name
            );
            checked += 1;
        }
    }
    checked
}

/// The packed FP32 tensor `[N, F]`: row i holds entity i's features in the route's order,
/// which is the store's order for this one-view service; nulls are 0.
fn check_packed(store: &Store, case: &Case, r: &Json, statuses: &Json) -> usize {
    let t = &r["outputs"]["ferry_features"];
    assert_eq!(t["datatype"], "FP32", "{}", case.name);
    let data = t["data"].as_array().expect("packed data");
    let f_count = t["shape"][1].as_u64().unwrap() as usize;
    assert_eq!(t["shape"][0], case.entities.len(), "{}", case.name);
    let mut checked = 0;
    for (i, e) in case.entities.iter().enumerate() {
        let features = store.features(case.service, e);
        assert_eq!(features.len(), f_count);
        for (j, f) in features.iter().enumerate() {
            let status = statuses[i]
                .get(&f.name)
                .and_then(Json::as_str)
                .unwrap_or("PRESENT");
            assert_eq!(status, f.status, "{}: {e:?} {}", case.name, f.name);
            let want = if status == "PRESENT" {
                f.value.clone()
            } else {
                json!(0)
            };
            let got = &data[i * f_count + j];
            assert!(
                same(got, &want, Kind::F32),
                "{}: {e:?} {}: {got} vs {want}",
                case.name,
                f.name
            );
            checked += 1;
        }
    }
    checked
}

fn check_enriched(store: &Store, case: &Case, r: &Json) -> usize {
    let name = &case.name;
    assert!(r.get("error").is_none(), "{name}: {r}");
    assert_eq!(r["id"], name.as_str());
    // The client's own tensors and ids: as sent, datatype, shape and data.
    for input in CLIENT_INPUTS.iter().chain(case.id_inputs()) {
        assert_eq!(r["outputs"][*input], r["sent"][*input], "{name}: {input}");
    }
    let forged = case.forged(store);
    assert_ne!(
        r["outputs"][&forged], r["sent"][&forged],
        "{name}: the forged tensor is gone"
    );
    let p = &r["parameters"];
    assert_eq!(p["client_param"], "kept", "{name}");
    assert_eq!(p["ferry_service"], case.service.name(), "{name}");
    assert_eq!(
        p["ferry_fingerprint"],
        store.fingerprint(case.service),
        "{name}"
    );
    let statuses: Json =
        serde_json::from_str(p["ferry_statuses"].as_str().expect("statuses")).unwrap();
    assert_eq!(
        statuses.as_array().map(Vec::len),
        Some(case.entities.len()),
        "{name}"
    );
    if case.route == "pair-packed" {
        check_packed(store, case, r, &statuses)
    } else {
        check_per_feature(store, case, r, &statuses)
    }
}

#[test]
fn tritonclient_grpc_model_infer_is_enriched_with_the_source_values() {
    let mut stack = Stack::start(Options {
        extra_routes: ROUTES,
        entities: Some(300),
        ..Options::default()
    });
    let store = Store::load(&stack);
    let user = |i: usize| Entity::User(format!("u{i:06}"));
    // 49 users in order (some without a vector or stale in the generated data) and one that is
    // never in it: NOT_FOUND reported, zeros sent.
    let mut users: Vec<Entity> = (1..50).map(user).collect();
    users.push(Entity::User("u999999".into()));
    assert!(users
        .iter()
        .any(|e| store.is_missing(Service::RealtimeScoring, e)));
    let pairs: Vec<Entity> = store.fresh_pairs().into_iter().take(50).collect();
    assert_eq!(pairs.len(), 50, "the example data has 50 fresh pairs");
    let cases = [
        Case::new("fraud-raw-1", "raw", "", users[..1].to_vec()),
        Case::new("fraud-raw-50", "raw", "", users.clone()),
        Case::new("fraud-typed-50", "typed", "", users.clone()),
        Case::new("pair-packed-raw-50", "raw", "pair-packed", pairs.clone()),
        Case::new(
            "pair-packed-typed-3",
            "typed",
            "pair-packed",
            pairs[..3].to_vec(),
        ),
    ];
    let report = run_client(
        &stack,
        cases.iter().map(|c| c.spec(&store)).collect(),
        "enriched.json",
    );
    let mut checked = 0;
    for (case, r) in cases.iter().zip(&report) {
        assert_eq!(r["name"], case.name.as_str());
        checked += check_enriched(&store, case, r);
    }
    assert!(checked > 2 * 50 * 10, "{checked} feature values checked");
    println!(
        "checked {checked} feature values over {} calls",
        cases.len()
    );

    // Errors: gRPC statuses with the error's code first in the message.
    let errors = [
        (
            Case::new(
                "strict-unknown",
                "raw",
                "strict",
                vec![Entity::User("u999999".into())],
            ),
            "NOT_FOUND",
            "entity_not_found: no features for 1 entity: 'u999999'",
        ),
        (
            Case::new(
                "strict-too-many",
                "raw",
                "strict",
                (1..22).map(user).collect(),
            ),
            "RESOURCE_EXHAUSTED",
            "too_many_entities: request has 21 entities, over this route's limit of 20",
        ),
        (
            Case::new(
                "strict-too-big",
                "raw",
                "strict",
                (1..300).map(user).collect(),
            ),
            "RESOURCE_EXHAUSTED",
            "body_too_large: request body is ",
        ),
        (
            Case::new("garbage", "garbage", "", users[..1].to_vec()),
            "INVALID_ARGUMENT",
            "malformed_protobuf: request body is not a valid protobuf message: ModelInferRequest",
        ),
    ];
    let report = run_client(
        &stack,
        errors.iter().map(|(c, ..)| c.spec(&store)).collect(),
        "errors.json",
    );
    for ((case, code, message), r) in errors.iter().zip(&report) {
        let e = &r["error"];
        assert_eq!(e["code"], *code, "{}: {r}", case.name);
        let got = e["message"].as_str().unwrap_or_default();
        assert!(got.starts_with(message), "{}: {got}", case.name);
    }

    // The reader away: UNAVAILABLE (the routes' on_reader_error is the default, reject).
    stack.reader.kill();
    let down = Case::new("reader-down", "raw", "", users[..1].to_vec());
    let report = run_client(&stack, vec![down.spec(&store)], "down.json");
    assert_eq!(report[0]["error"]["code"], "UNAVAILABLE", "{}", report[0]);
    let got = report[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(got.starts_with("reader_unavailable: "), "{got}");
}
