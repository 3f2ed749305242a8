//! KServe v2 and generic JSON requests through real Envoy, values checked against the source.

use ferry_integration_tests::data::{same, tensor_zero, Kind, VIEWS};
use ferry_integration_tests::http::{post, Conn};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

const ROUTES: &str = r#"
  - name: v2
    match: {path_prefix: /t/v2/}
    service: realtime_scoring
    format: kserve_v2
    entity: {field: user_id}
  - name: json
    match: {path_prefix: /t/json}
    service: realtime_scoring
    format: json
    entity: {field: id}
    entity_pointer: /batch/users
    inject_pointer: /features
  - name: header-pb
    match: {path_prefix: /t/hdr-pb}
    service: realtime_scoring
    format: header
    entity: {field: x-user-id}
    features_encoding: protobuf
  - name: header
    match: {path_prefix: /t/hdr}
    service: realtime_scoring
    format: header
    entity: {field: x-user-id}
    features_header: x-features
"#;

async fn kserve_v2_tensors_carry_the_source_values(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(200),
    });
    let users = ["u000001", "u000007", "u000042"]; // fresh, stale transactions, no transactions
    let body = json!({
        "id": "req-1",
        "inputs": [
            {"name": "amount", "shape": [3], "datatype": "FP32", "data": [1.0, 2.0, 3.0]},
            {"name": "user_id", "shape": [3, 1], "datatype": "BYTES", "data": [["u000001"], ["u000007"], ["u000042"]]},
            {"name": "user_profile__age", "shape": [3], "datatype": "INT64", "data": [1, 1, 1]}
        ]
    });
    let resp = post(
        stack.listen_port,
        "/t/v2/models/fraud/infer",
        body.to_string(),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    let src = stack.source();
    let inputs = v["inputs"].as_array().unwrap();
    assert_eq!(
        inputs.len(),
        2 + 10,
        "amount, user_id and one tensor per feature (forged one dropped)"
    );
    let statuses: Json =
        serde_json::from_str(v["parameters"]["ferry_statuses"].as_str().unwrap()).unwrap();
    for (view, features) in VIEWS {
        for (feature, kind) in *features {
            let name = format!("{view}__{feature}");
            let t = inputs
                .iter()
                .find(|t| t["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no tensor {name}"));
            let data = t["data"].as_array().unwrap();
            for (i, u) in users.iter().enumerate() {
                let status = statuses[i]
                    .get(&name)
                    .and_then(Json::as_str)
                    .unwrap_or("PRESENT");
                let got: Json = match kind {
                    Kind::F32List => {
                        assert_eq!(t["shape"], json!([3, 8]));
                        Json::Array(data[i * 8..(i + 1) * 8].to_vec())
                    }
                    _ => data[i].clone(),
                };
                let want = match (status, src.value(view, feature, u)) {
                    ("PRESENT", Some(v)) => v,
                    ("NULL_VALUE" | "NOT_FOUND" | "OUTSIDE_MAX_AGE", _)
                        if *kind == Kind::F32List =>
                    {
                        json!([0, 0, 0, 0, 0, 0, 0, 0])
                    }
                    ("NULL_VALUE" | "NOT_FOUND" | "OUTSIDE_MAX_AGE", _) => tensor_zero(*kind),
                    (s, v) => panic!("{u} {name}: status {s} with source {v:?}"),
                };
                assert!(
                    same(&got, &want, *kind),
                    "{u} {name}: got {got}, want {want} ({status})"
                );
            }
        }
    }
    assert_eq!(statuses[1]["transactions__txn_count_7d"], "OUTSIDE_MAX_AGE");
    assert_eq!(statuses[2]["transactions__txn_count_7d"], "NOT_FOUND");
    let age = inputs
        .iter()
        .find(|t| t["name"] == "user_profile__age")
        .unwrap();
    assert_eq!(age["datatype"], "INT64");
    assert_eq!(
        inputs
            .iter()
            .find(|t| t["name"] == "user_profile__credit_score")
            .unwrap()["datatype"],
        "FP32"
    );
    assert_eq!(
        inputs
            .iter()
            .find(|t| t["name"] == "user_profile__account_tier")
            .unwrap()["datatype"],
        "BYTES"
    );
    assert_ne!(
        age["data"],
        json!([1, 1, 1]),
        "the client's forged tensor is not what the model sees"
    );

    let missing = post(
        stack.listen_port,
        "/t/v2/x",
        json!({"inputs": []}).to_string(),
    )
    .await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json()["error"], "missing_entity_id");
}

async fn generic_json_features_land_at_the_inject_pointer(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(200),
    });
    let body = json!({"batch": {"users": [
        {"id": "u000003", "features": {"user_profile__age": 999}},
        {"id": "u000004", "note": "kept"}
    ]}});
    let resp = post(stack.listen_port, "/t/json", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    let src = stack.source();
    for (i, u) in ["u000003", "u000004"].iter().enumerate() {
        let entity = &v["batch"]["users"][i];
        assert_eq!(entity["id"], *u);
        let features = entity["features"].as_object().unwrap();
        assert_eq!(
            features.len(),
            10,
            "exactly the service's features: the client's object was replaced"
        );
        for (view, fs) in VIEWS {
            for (feature, kind) in *fs {
                let got = &features[&format!("{view}__{feature}")];
                let want = src.value(view, feature, u).unwrap();
                assert!(
                    same(got, &want, *kind),
                    "{u} {view}__{feature}: {got} vs {want}"
                );
            }
        }
    }
    assert_eq!(v["batch"]["users"][1]["note"], "kept");
    assert_eq!(v["ferry"]["service"], "realtime_scoring");

    let bad = post(
        stack.listen_port,
        "/t/json",
        json!({"batch": {}}).to_string(),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json()["message"],
        "nothing at JSON pointer '/batch/users'"
    );
}

async fn header_mode_enriches_a_get_through_a_header(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(200),
    });
    let mut conn = Conn::open(stack.listen_port).await;
    let resp = conn
        .send(
            "GET",
            "/t/hdr/models/fraud",
            &[("x-user-id", "u000007"), ("x-features", "{\"forged\":1}")],
            "",
        )
        .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.header("x-echo-method"), Some("GET"));
    assert!(resp.body.is_empty(), "the body is not touched");
    let up = resp.upstream_headers();
    let features: Json = serde_json::from_str(up["x-features"].as_str().unwrap()).unwrap();
    let statuses: Json =
        serde_json::from_str(up["x-ferry-feature-status"].as_str().unwrap()).unwrap();
    let src = stack.source();
    assert_eq!(features.as_object().unwrap().len(), 10);
    for (view, fs) in VIEWS {
        for (feature, kind) in *fs {
            let name = format!("{view}__{feature}");
            let want = if *view == "transactions" {
                assert_eq!(statuses[&name], "OUTSIDE_MAX_AGE");
                Json::Null
            } else {
                src.value(view, feature, "u000007").unwrap()
            };
            assert!(
                same(&features[&name], &want, *kind),
                "{name}: {} vs {want}",
                features[&name]
            );
        }
    }
    assert_eq!(resp.header("x-ferry-stale"), Some("1"));

    let missing = conn.send("GET", "/t/hdr/models/fraud", &[], "").await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.json()["message"],
        "the request has no entity id field 'x-user-id'"
    );
    // Envoy closes the connection after a local reply from the filter: reconnect.
    assert_eq!(missing.header("connection"), Some("close"));
    let mut conn = Conn::open(stack.listen_port).await;
    let unknown = conn
        .send("GET", "/t/hdr/models/fraud", &[("x-user-id", "nobody")], "")
        .await;
    assert_eq!(
        (unknown.status, unknown.json()["error"].as_str()),
        (404, Some("entity_not_found"))
    );
}

/// A stored value as the JSON the source data gives.
fn value_json(v: &ferry_protos::v1::Value) -> Json {
    use ferry_protos::v1::value::Kind as K;
    match &v.kind {
        None => Json::Null,
        Some(K::Int32Val(i)) => json!(i),
        Some(K::Int64Val(i)) => json!(i),
        Some(K::FloatVal(f)) => json!(f),
        Some(K::DoubleVal(d)) => json!(d),
        Some(K::BoolVal(b)) => json!(b),
        Some(K::StringVal(s)) => json!(s),
        Some(K::BytesVal(b)) => json!(b),
        Some(K::FloatListVal(l)) => json!(l.values),
    }
}

async fn header_mode_writes_a_base64_protobuf_and_leaves_a_post_body_alone(runtime: Runtime) {
    use base64::Engine;
    use prost::Message;
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(200),
    });
    // A gRPC-like POST: the body must reach the model byte for byte.
    let body: &[u8] = b"\x00\x00\x00\x00\x05hello";
    let resp = Conn::open(stack.listen_port)
        .await
        .send(
            "POST",
            "/t/hdr-pb/fraud.Scorer/Score",
            &[("x-user-id", "u000007")],
            body.to_vec(),
        )
        .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(&resp.body[..], body, "the body is not touched");
    let up = resp.upstream_headers();
    assert!(
        up.get("x-ferry-feature-status").is_none(),
        "statuses are in the message"
    );
    let raw = base64::engine::general_purpose::STANDARD
        .decode(up["x-ferry-features"].as_str().unwrap())
        .unwrap();
    let m = ferry_protos::v1::HeaderFeatures::decode(raw.as_slice()).unwrap();
    assert_eq!(m.service, "realtime_scoring");
    assert_eq!(
        Some(m.fingerprint.as_str()),
        resp.header("x-ferry-fingerprint")
    );
    assert_eq!(m.names.len(), 10);
    let src = stack.source();
    for (view, fs) in VIEWS {
        for (feature, kind) in *fs {
            let name = format!("{view}__{feature}");
            let i = m.names.iter().position(|n| *n == name).unwrap();
            let status = ferry_protos::v1::FeatureStatus::try_from(m.statuses[i]).unwrap();
            let want = if *view == "transactions" {
                assert_eq!(
                    status,
                    ferry_protos::v1::FeatureStatus::OutsideMaxAge,
                    "{name}"
                );
                Json::Null
            } else {
                src.value(view, feature, "u000007").unwrap()
            };
            let got = value_json(&m.values[i]);
            assert!(same(&got, &want, *kind), "{name}: {got} vs {want}");
        }
    }
}

each_runtime!(
    kserve_v2_tensors_carry_the_source_values,
    generic_json_features_land_at_the_inject_pointer,
    header_mode_enriches_a_get_through_a_header,
    header_mode_writes_a_base64_protobuf_and_leaves_a_post_body_alone,
);
