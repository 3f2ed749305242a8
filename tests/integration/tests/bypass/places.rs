//! What each place Ferry owns in a request must hold for the request's entities: the output
//! fields of each format's body (KServe v1 instances, KServe v2 tensors and `ferry_*`
//! parameters, over JSON or gRPC, the JSON route's features objects), the `ferry` metadata, a header route's
//! features object; and, outside those places, exactly what the client sent.

use ferry_integration_tests::data::{same, tensor_zero, Kind};
use ferry_integration_tests::expected::{Feature, Store};
use ferry_integration_tests::http::Response;
use serde_json::{json, Map, Value as Json};

use crate::derived;
use crate::numbers::parse_quoting;
use crate::outcome::{text, Format, Route};

/// `{name: status}` of the features that are not PRESENT.
pub fn statuses(feats: &[Feature]) -> Json {
    Json::Object(
        feats
            .iter()
            .filter(|f| f.status != "PRESENT")
            .map(|f| (f.name.clone(), json!(f.status)))
            .collect(),
    )
}

/// An object holding exactly the features, each with the store's value (null unless PRESENT).
pub fn check_feature_object(object: &Json, feats: &[Feature], place: &str) -> Result<(), String> {
    let map = object
        .as_object()
        .ok_or_else(|| format!("{place} is not an object: {object}"))?;
    if map.len() != feats.len() {
        return Err(format!(
            "{place} holds {} fields, the service has {} features: {object}",
            map.len(),
            feats.len()
        ));
    }
    check_feature_fields(map, feats, place)
}

/// Each feature's output field holds the store's value.
fn check_feature_fields(
    map: &Map<String, Json>,
    feats: &[Feature],
    place: &str,
) -> Result<(), String> {
    for f in feats {
        let got = map.get(&f.name).unwrap_or(&Json::Null);
        if !map.contains_key(&f.name) || !same(got, &f.value, f.kind) {
            return Err(format!(
                "{place}.{}: the model received {}, the store holds {} ({})",
                f.name,
                if map.contains_key(&f.name) {
                    got.to_string()
                } else {
                    "nothing".into()
                },
                f.value,
                f.status
            ));
        }
    }
    Ok(())
}

/// The `ferry` metadata a body route writes.
fn metadata(route: &Route, feats: &[Vec<Feature>], store: &Store) -> Json {
    let mut m = json!({
        "service": derived::service_name(route),
        "fingerprint": derived::fingerprint(route, store),
        "statuses": feats.iter().map(|f| statuses(f)).collect::<Vec<_>>(),
    });
    if let Some(v) = derived::version(route) {
        m["derived_version"] = json!(v);
    }
    m
}

pub fn check_body(
    route: &Route,
    feats: &[Vec<Feature>],
    sent: &[u8],
    numbers: &[(&'static str, &'static str)],
    resp: &Response,
    store: &Store,
) -> Result<(), String> {
    if let Format::Header { .. } = route.format {
        // Header mode never touches the body.
        return if resp.body == sent {
            Ok(())
        } else {
            Err(format!(
                "header route: the model received body {} for {}",
                text(&resp.body),
                text(sent)
            ))
        };
    }
    let keys: Vec<&str> = numbers.iter().map(|(k, _)| *k).collect();
    let (mut got, mut client) = match route.format {
        // gRPC: the messages as KServe v2 JSON documents, checked as those.
        Format::KserveV2Grpc => (
            crate::grpc::echo_json(&resp.body).map_err(|e| format!("model echo: {e}"))?,
            crate::grpc::request_json(sent).map_err(|e| format!("client request: {e}"))?,
        ),
        _ => (
            parse_quoting(&resp.body, &keys).map_err(|e| format!("model body: {e}"))?,
            parse_quoting(sent, &keys).map_err(|e| format!("client body: {e}"))?,
        ),
    };
    let names: Vec<&str> = feats
        .first()
        .map(|f| f.iter().map(|f| f.name.as_str()).collect())
        .unwrap_or_default();
    match route.format {
        Format::KserveV1 => {
            let instances = got["instances"]
                .as_array()
                .ok_or("the model's body has no instances array")?;
            if instances.len() != feats.len() {
                return Err(format!(
                    "{} instances reached the model for {} entities",
                    instances.len(),
                    feats.len()
                ));
            }
            for (i, (inst, f)) in instances.iter().zip(feats).enumerate() {
                let map = inst
                    .as_object()
                    .ok_or_else(|| format!("instances[{i}] is not an object"))?;
                check_feature_fields(map, f, &format!("instances[{i}]"))?;
            }
            check_metadata(&got["ferry"], route, feats, store)?;
            for doc in [&mut got, &mut client] {
                strip_top_level_metadata(doc);
                if let Some(Json::Array(items)) = doc.get_mut("instances") {
                    for item in items.iter_mut().filter_map(Json::as_object_mut) {
                        item.retain(|k, _| !names.contains(&k.as_str()));
                    }
                }
            }
        }
        Format::KserveV2 | Format::KserveV2Grpc => {
            check_tensors(&got, feats)?;
            let params = &got["parameters"];
            let listed: Json = params["ferry_statuses"]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or(Json::Null);
            let want = metadata(route, feats, store);
            let mut got_meta = json!({
                "service": params["ferry_service"],
                "fingerprint": params["ferry_fingerprint"],
                "statuses": listed,
            });
            let derived = derived::version(route).is_some();
            if derived || params.get("ferry_derived_version").is_some() {
                got_meta["derived_version"] = params["ferry_derived_version"].clone();
            }
            if got_meta != want {
                return Err(format!(
                    "parameters.ferry_*: the model received {got_meta}, the store says {want}"
                ));
            }
            for doc in [&mut got, &mut client] {
                if let Some(Json::Array(inputs)) = doc.get_mut("inputs") {
                    inputs.retain(|t| !names.contains(&t["name"].as_str().unwrap_or("")));
                }
                let mut emptied = false;
                if let Some(Json::Object(p)) = doc.get_mut("parameters") {
                    p.retain(|k, _| {
                        let owned = matches!(
                            k.as_str(),
                            "ferry_service" | "ferry_fingerprint" | "ferry_statuses"
                        ) || (derived && k == "ferry_derived_version");
                        !owned
                    });
                    emptied = p.is_empty();
                }
                // The filter adds a parameters object when the client sent none.
                if let (true, Some(o)) = (emptied, doc.as_object_mut()) {
                    o.remove("parameters");
                }
            }
        }
        Format::Json => {
            let users = got
                .pointer("/batch/users")
                .and_then(Json::as_array)
                .ok_or("the model's body has no /batch/users array")?;
            if users.len() != feats.len() {
                return Err(format!(
                    "{} entities reached the model for {} looked up",
                    users.len(),
                    feats.len()
                ));
            }
            for (i, (user, f)) in users.iter().zip(feats).enumerate() {
                check_feature_object(&user["features"], f, &format!("batch.users[{i}].features"))?;
            }
            check_metadata(&got["ferry"], route, feats, store)?;
            for doc in [&mut got, &mut client] {
                strip_top_level_metadata(doc);
                if let Some(Json::Array(users)) = doc.pointer_mut("/batch/users") {
                    for user in users.iter_mut().filter_map(Json::as_object_mut) {
                        user.remove("features");
                    }
                }
            }
        }
        Format::Header { .. } => unreachable!("handled above"),
    }
    // Outside Ferry's places, the model got what the client sent.
    if got != client {
        return Err(format!(
            "outside Ferry's fields the body changed: the model received {got}, the client \
             sent {client}"
        ));
    }
    Ok(())
}

fn strip_top_level_metadata(doc: &mut Json) {
    if let Some(o) = doc.as_object_mut() {
        o.remove("ferry");
    }
}

fn check_metadata(
    got: &Json,
    route: &Route,
    feats: &[Vec<Feature>],
    store: &Store,
) -> Result<(), String> {
    let want = metadata(route, feats, store);
    if *got != want {
        return Err(format!(
            "the \"ferry\" metadata: the model received {got}, the store says {want}"
        ));
    }
    Ok(())
}

/// One tensor per feature, named by its output name, with the store's values (nulls as zeros,
/// lists flattened to shape [n, d]).
fn check_tensors(doc: &Json, feats: &[Vec<Feature>]) -> Result<(), String> {
    let inputs = doc["inputs"]
        .as_array()
        .ok_or("the model's body has no inputs array")?;
    let n = feats.len();
    for (j, f0) in feats
        .first()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let named: Vec<&Json> = inputs
            .iter()
            .filter(|t| t["name"].as_str() == Some(f0.name.as_str()))
            .collect();
        let [tensor] = named.as_slice() else {
            return Err(format!(
                "{} tensors named {} reached the model",
                named.len(),
                f0.name
            ));
        };
        let column: Vec<&Feature> = feats.iter().map(|f| &f[j]).collect();
        let (shape, want, kind) = if f0.kind == Kind::F32List {
            let d = column
                .iter()
                .find_map(|f| f.value.as_array().map(Vec::len))
                .unwrap_or(0);
            let data: Vec<Json> = column
                .iter()
                .flat_map(|f| {
                    f.value
                        .as_array()
                        .cloned()
                        .unwrap_or_else(|| vec![tensor_zero(Kind::F32); d])
                })
                .collect();
            (json!([n, d]), data, Kind::F32)
        } else {
            let data = column
                .iter()
                .map(|f| {
                    if f.value.is_null() {
                        tensor_zero(f.kind)
                    } else {
                        f.value.clone()
                    }
                })
                .collect();
            (json!([n]), data, f0.kind)
        };
        let data = tensor["data"].as_array().cloned().unwrap_or_default();
        let equal =
            data.len() == want.len() && data.iter().zip(&want).all(|(a, b)| same(a, b, kind));
        if tensor["shape"] != shape || !equal {
            return Err(format!(
                "tensor {}: the model received shape {} data {}, the store holds shape {shape} \
                 data {}",
                f0.name,
                tensor["shape"],
                tensor["data"],
                Json::Array(want)
            ));
        }
    }
    Ok(())
}
