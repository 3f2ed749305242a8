//! The matrix's `feast_rest` requests (Feast 0.67's `POST /get-online-features`) and the check
//! of the filter's own answer: Feast's column-major shape, the join key column echoing the ids,
//! and every feature column holding exactly the store's values and statuses.

use ferry_integration_tests::data::same;
use ferry_integration_tests::expected::{Entity, Feature, Service, Store};
use ferry_integration_tests::http::Response;
use serde_json::{json, Value as Json};

use crate::outcome::text;

pub const PATH: &str = "/get-online-features";

/// Every feature of `service` for `users`, with full (`view__feature`) names.
pub fn request(service: Service, users: &[&str]) -> String {
    json!({
        "entities": {"user_id": users},
        "feature_service": service.name(),
        "full_feature_names": true,
    })
    .to_string()
}

/// The same request with fields a client could hope the answer echoes or trusts: an answer of
/// its own, Ferry's metadata, a feature's value.
pub fn forged(service: Service, user: &str) -> String {
    json!({
        "entities": {"user_id": [user]},
        "feature_service": service.name(),
        "full_feature_names": true,
        "results": [{"values": [850], "statuses": ["PRESENT"]}],
        "metadata": {"feature_names": ["user_profile__credit_score"]},
        "ferry": {"fingerprint": "forged", "statuses": []},
        "user_profile__credit_score": 850,
    })
    .to_string()
}

/// A `feature_service` that does not exist: Feast's 404.
pub fn unknown_service(user: &str) -> String {
    unlisted_service("forged_service", user)
}

/// A `feature_service` by name, e.g. one of the snapshot the route does not list (Feast's 404
/// too: the route serves only the services it lists).
pub fn unlisted_service(name: &str, user: &str) -> String {
    json!({"entities": {"user_id": [user]}, "feature_service": name}).to_string()
}

/// The filter's answer for `entities` of `service`.
pub fn check_answer(
    service: Service,
    entities: &[Entity],
    resp: &Response,
    store: &Store,
) -> Result<(), String> {
    let body: Json = serde_json::from_slice(&resp.body)
        .map_err(|e| format!("the answer is not JSON ({e}): {}", text(&resp.body)))?;
    let names: Vec<&str> = body["metadata"]["feature_names"]
        .as_array()
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let results = body["results"].as_array().cloned().unwrap_or_default();
    let feats: Vec<Vec<Feature>> = entities
        .iter()
        .map(|e| store.features(service, e))
        .collect();
    let want = 1 + feats.first().map_or(0, Vec::len);
    if names.len() != want || results.len() != want {
        return Err(format!(
            "{} names and {} columns for the join key and {} features: {}",
            names.len(),
            results.len(),
            want - 1,
            text(&resp.body)
        ));
    }
    let ids: Vec<Json> = entities
        .iter()
        .map(|e| match e {
            Entity::User(u) => json!(u),
            Entity::Pair { .. } => Json::Null,
        })
        .collect();
    if names[0] != "user_id" || results[0]["values"] != Json::Array(ids.clone()) {
        return Err(format!(
            "the join key column: {} {}, the client sent {ids:?}",
            names[0], results[0]["values"]
        ));
    }
    for (j, f0) in feats[0].iter().enumerate() {
        let at = names
            .iter()
            .position(|n| *n == f0.name)
            .ok_or_else(|| format!("no column {} in {names:?}", f0.name))?;
        let column = &results[at];
        for (i, f) in feats.iter().map(|f| &f[j]).enumerate() {
            let value = &column["values"][i];
            let status = &column["statuses"][i];
            if !same(value, &f.value, f.kind) || status != f.status {
                return Err(format!(
                    "{}[{i}]: the answer says {value} {status}, the store holds {} {}",
                    f.name, f.value, f.status
                ));
            }
        }
    }
    Ok(())
}
