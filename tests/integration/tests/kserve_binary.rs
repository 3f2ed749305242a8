//! KServe v2 as Triton's own HTTP client sends it (`tritonclient[http]`, installed into .venv by
//! scripts/setup.sh), through real Envoy to the echo model: BYTES ids on the example's
//! `fraud-v2` route and INT64 + BYTES ids on a composite-key v2 route, with `binary_data`
//! true (the binary tensor data extension, the client's default) and false, for 1 and 50
//! entities. What the model received is decoded (JSON header + binary part) and every feature
//! tensor compared with the source data; the client's own inputs must arrive unchanged, byte
//! for byte, and its forged tensor under a Ferry name must not.

use std::collections::BTreeMap;

use ferry_integration_tests::data::{same, tensor_zero, Kind};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::{client_script, each_runtime_blocking, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

/// A kserve_v2 route for the composite-key service, under the example's protected /v2/models/.
const ROUTES: &str = r#"
  - name: pair-v2
    match: {path_prefix: /v2/models/pair}
    service: user_merchant_scoring
    format: kserve_v2
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: "null"
"#;

/// The client's own inputs the script sends besides the ids (and the forged tensor).
const CLIENT_INPUTS: [&str; 2] = ["amount", "note"];

/// One input tensor as received: its JSON description and, if binary, its bytes.
struct Tensor {
    desc: Json,
    binary: Option<Vec<u8>>,
}

/// A body split by its header length (`None`: all JSON) into the JSON header and its inputs.
fn decode(body: &[u8], header_length: Option<usize>) -> (Json, BTreeMap<String, Tensor>) {
    let n = header_length.unwrap_or(body.len());
    let header: Json = serde_json::from_slice(&body[..n])
        .unwrap_or_else(|e| panic!("the JSON header is not JSON ({e})"));
    let mut rest = &body[n..];
    let mut tensors = BTreeMap::new();
    for t in header["inputs"].as_array().expect("inputs") {
        let binary = t["parameters"]["binary_data_size"].as_u64().map(|size| {
            let (this, after) = rest.split_at(size as usize);
            rest = after;
            this.to_vec()
        });
        let name = t["name"].as_str().expect("a name").to_string();
        let previous = tensors.insert(
            name.clone(),
            Tensor {
                desc: t.clone(),
                binary,
            },
        );
        assert!(previous.is_none(), "two tensors named {name}");
    }
    assert!(
        rest.is_empty(),
        "{} bytes of binary data left over",
        rest.len()
    );
    (header, tensors)
}

/// Numbers as f64, so two JSON writers' spellings of one number compare equal.
fn normalized(v: &Json) -> Json {
    match v {
        Json::Number(n) => json!(n.as_f64()),
        Json::Array(a) => Json::Array(a.iter().map(normalized).collect()),
        Json::Object(o) => {
            Json::Object(o.iter().map(|(k, v)| (k.clone(), normalized(v))).collect())
        }
        other => other.clone(),
    }
}

/// Every feature tensor of `service` for `entities` against the store: values where PRESENT,
/// the type's zero otherwise, and the status in `parameters.ferry_statuses`.
fn check_features(
    store: &Store,
    service: Service,
    header: &Json,
    tensors: &BTreeMap<String, Tensor>,
    entities: &[Entity],
) -> usize {
    let statuses: Json =
        serde_json::from_str(header["parameters"]["ferry_statuses"].as_str().unwrap()).unwrap();
    let mut checked = 0;
    for (i, e) in entities.iter().enumerate() {
        for f in store.features(service, e) {
            let t = &tensors[&f.name];
            assert!(t.binary.is_none(), "{}: Ferry writes JSON tensors", f.name);
            let data = t.desc["data"].as_array().expect("data");
            let got = if f.kind == Kind::F32List {
                let d = t.desc["shape"][1].as_u64().unwrap() as usize;
                Json::Array(data[i * d..(i + 1) * d].to_vec())
            } else {
                data[i].clone()
            };
            let status = statuses[i]
                .get(&f.name)
                .and_then(Json::as_str)
                .unwrap_or("PRESENT");
            assert_eq!(status, f.status, "{e:?} {}", f.name);
            let want = match (status, f.kind) {
                ("PRESENT", _) => f.value.clone(),
                (_, Kind::F32List) => Json::Array(vec![json!(0.0); got.as_array().unwrap().len()]),
                (_, k) => tensor_zero(k),
            };
            assert!(
                same(&got, &want, f.kind),
                "{e:?} {}: model got {got}, source says {want} ({status})",
                f.name
            );
            checked += 1;
        }
    }
    checked
}

struct Case {
    name: String,
    /// A feature name of the route, which the client sends a tensor of its own under.
    forged: String,
    model: &'static str,
    service: Service,
    binary: bool,
    entities: Vec<Entity>,
}

impl Case {
    fn spec(&self) -> Json {
        let mut ids = serde_json::Map::new();
        match self.service {
            Service::RealtimeScoring => {
                let users: Vec<&str> = self
                    .entities
                    .iter()
                    .map(|e| match e {
                        Entity::User(u) => u.as_str(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                ids.insert("user_id".into(), json!(users));
            }
            Service::UserMerchantScoring => {
                let (m, u): (Vec<i64>, Vec<&str>) = self
                    .entities
                    .iter()
                    .map(|e| match e {
                        Entity::Pair { merchant, user } => (*merchant, user.as_str()),
                        other => panic!("{other:?}"),
                    })
                    .unzip();
                ids.insert("merchant_id".into(), json!(m));
                ids.insert("user_id".into(), json!(u));
            }
        }
        json!({"name": self.name, "model": self.model, "binary_data": self.binary, "ids": ids,
               "forged": self.forged})
    }

    fn id_inputs(&self) -> &'static [&'static str] {
        match self.service {
            Service::RealtimeScoring => &["user_id"],
            Service::UserMerchantScoring => &["merchant_id", "user_id"],
        }
    }
}

fn cases(store: &Store) -> Vec<Case> {
    // fraud-v2 refuses an unknown user (on_missing_entity: reject): only users with a vector.
    let users: Vec<Entity> = (1..)
        .map(|i| Entity::User(format!("u{i:06}")))
        .filter(|e| !store.is_missing(Service::RealtimeScoring, e))
        .take(50)
        .collect();
    let pairs: Vec<Entity> = store.fresh_pairs().into_iter().take(50).collect();
    assert_eq!(pairs.len(), 50, "the example data has 50 fresh pairs");
    let forged = |s: Service, e: &Entity| store.features(s, e)[0].name.clone();
    let mut out = Vec::new();
    for binary in [true, false] {
        for n in [1, 50] {
            let form = if binary { "binary" } else { "json" };
            for (model, service, entities) in [
                ("fraud", Service::RealtimeScoring, &users),
                ("pair", Service::UserMerchantScoring, &pairs),
            ] {
                out.push(Case {
                    name: format!("{model}-{form}-{n}"),
                    forged: forged(service, &entities[0]),
                    model,
                    service,
                    binary,
                    entities: entities[..n].to_vec(),
                });
            }
        }
    }
    out
}

/// Runs the tritonclient script on `cases`; returns its per-case report.
fn run_client(stack: &Stack, cases: &[Case]) -> Vec<Json> {
    let out = stack.dir.path().join("triton");
    std::fs::create_dir_all(&out).unwrap();
    let spec = Json::Array(cases.iter().map(Case::spec).collect());
    let report = client_script::run(
        stack,
        "triton_client.py",
        &out,
        &spec,
        &out.join("cases.json"),
    );
    serde_json::from_value(report).expect("a list of answers")
}

fn tritonclient_binary_and_json_requests_are_enriched_with_the_source_values(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(300),
    });
    let store = Store::load(&stack);
    let cases = cases(&store);
    let report = run_client(&stack, &cases);
    let dir = stack.dir.path().join("triton");
    let mut checked = 0;
    for (case, r) in cases.iter().zip(&report) {
        let name = &case.name;
        assert_eq!(r["name"], name.as_str());
        let sent = std::fs::read(dir.join(format!("{name}.sent"))).unwrap();
        let got = std::fs::read(dir.join(format!("{name}.got"))).unwrap();
        assert_eq!(
            r["status"],
            200,
            "{name}: {}",
            String::from_utf8_lossy(&got)
        );
        let length = |v: &Json| {
            v.as_str()
                .map(|s| s.parse::<usize>().unwrap())
                .or(v.as_u64().map(|n| n as usize))
        };
        let sent_length = length(&r["sent_header_length"]);
        let got_length = length(&r["got_header_length"]);
        assert_eq!(
            sent_length.is_some(),
            case.binary,
            "{name}: framed iff binary"
        );
        assert_eq!(got_length.is_some(), case.binary, "{name}: stays framed");
        let echo = &r["echo_headers"];
        assert_eq!(echo["content-length"], got.len().to_string(), "{name}");
        let partial = case
            .entities
            .iter()
            .any(|e| store.is_missing(case.service, e) || store.is_stale(case.service, e));
        let status = if partial { "partial" } else { "ok" };
        assert_eq!(echo["x-ferry-status"], status, "{name}");
        assert_eq!(echo["x-ferry-entities"], case.entities.len().to_string());
        let (sent_header, sent_tensors) = decode(&sent, sent_length);
        let (header, tensors) = decode(&got, got_length);
        // The client's own inputs and ids: as sent, description and bytes.
        for input in CLIENT_INPUTS.iter().chain(case.id_inputs()) {
            let (a, b) = (&sent_tensors[*input], &tensors[*input]);
            assert_eq!(a.desc, b.desc, "{name}: {input}");
            assert_eq!(a.binary.is_some(), case.binary, "{name}: {input}");
            assert_eq!(a.binary, b.binary, "{name}: {input}'s bytes");
        }
        assert_eq!(
            sent_tensors[&case.forged].binary.is_some(),
            case.binary,
            "{name}: the forged tensor was sent in the case's form"
        );
        assert!(
            tensors[&case.forged].binary.is_none(),
            "{name}: forged bytes gone"
        );
        assert_eq!(header["id"], sent_header["id"]);
        let out = &sent_header["outputs"];
        assert_eq!(
            &header["outputs"], out,
            "{name}: requested outputs pass through"
        );
        if !case.binary {
            assert_eq!(header["parameters"]["binary_data_output"], true, "{name}");
        }
        checked += check_features(&store, case.service, &header, &tensors, &case.entities);
        // tritonclient's own infer() got the same request through and read the echo.
        let infer = &r["infer"];
        assert!(infer.get("error").is_none(), "{name}: infer(): {infer}");
        assert_eq!(
            normalized(&infer["response"]),
            normalized(&header),
            "{name}: infer() saw another JSON header"
        );
    }
    // 1 + 50 users x 10 features and 1 + 50 pairs x user_merchant's features, in both forms.
    assert!(checked > 2 * 51 * 10, "{checked} feature values checked");
    println!(
        "checked {checked} feature values over {} requests",
        2 * cases.len()
    );
}

each_runtime_blocking!(tritonclient_binary_and_json_requests_are_enriched_with_the_source_values,);
