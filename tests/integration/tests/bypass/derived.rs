//! Derived (on-demand) features in the matrix: the repo gains an on-demand view over a stored
//! feature and a request field, a service listing it with stored views, and a service of request
//! fields only. What the model must receive under each derived name is computed here from the
//! source data and the request the row sends (never by calling the engine), so a client value
//! under a derived name, or a value Ferry did not compute from the store and the request, breaks
//! the invariant like a stored one.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

use ferry_integration_tests::data::Kind;
use ferry_integration_tests::expected::{Entity, Feature, Store};
use ferry_integration_tests::{bin, run, Stack};
use serde_json::{json, Value as Json};

use crate::outcome::Route;

/// The on-demand views and the services listing them, inserted before `feature_services:`.
pub const VIEWS: &str = r#"on_demand_views:
  - name: risk
    request: [{name: amount, type: float64}]
    sources: [transactions]
    features:
      - {name: ratio, type: float64, expr: "request.amount / transactions.txn_amount_avg_7d"}
      - {name: big, type: bool, expr: "request.amount > 100.0"}
  - name: req
    request: [{name: amount, type: float64}]
    features:
      - {name: doubled, type: float64, expr: "request.amount * 2.0"}

feature_services:
  - name: od_scoring
    features: [user_profile, transactions, user_embedding, risk]
  - name: req_only
    features: [req]
"#;

/// The on-demand services a matrix route may serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Derived {
    /// A route without derived features.
    None,
    /// `od_scoring`: realtime_scoring's stored features, then `risk__ratio`, `risk__big`.
    Risk,
    /// `req_only`: `req__doubled` over the request field alone; no entity, no reader call.
    ReqOnly,
}

/// A request field as the row sends it: absent, `null`, or a value.
pub type Amount = Option<Json>;

/// `ferry apply`'s fingerprint and derived version of each service of the matrix's repo.
static APPLIED: OnceLock<BTreeMap<String, (String, String)>> = OnceLock::new();

/// Reads `ferry apply REPO` once: `feature service NAME  fingerprint HEX ...` lines, each
/// followed by its `on-demand view ... derived version HEX` lines.
pub fn load(stack: &Stack) {
    APPLIED.get_or_init(|| {
        let out = run(Command::new(bin("ferry")).arg("apply").arg(&stack.repo));
        let mut services = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("feature service ") {
                let w: Vec<&str> = rest.split_whitespace().collect();
                if let [name, "fingerprint", hex, ..] = w.as_slice() {
                    services.insert(name.to_string(), (hex.to_string(), String::new()));
                    current = Some(name.to_string());
                }
            } else if let (Some((_, version)), Some(name)) =
                (line.split_once("derived version "), &current)
            {
                if let Some(entry) = services.get_mut(name) {
                    entry.1 = version.trim().to_string();
                }
            }
        }
        services
    });
}

fn applied(name: &str) -> &'static (String, String) {
    APPLIED
        .get()
        .and_then(|m| m.get(name))
        .unwrap_or_else(|| panic!("ferry apply printed nothing for service {name}"))
}

/// The service's name as Ferry writes it (`x-ferry-service`, the metadata).
pub fn service_name(route: &Route) -> &'static str {
    match route.derived {
        Derived::None => route.service.name(),
        Derived::Risk => "od_scoring",
        Derived::ReqOnly => "req_only",
    }
}

/// The service's fingerprint (the stored vector's, as `ferry apply` prints it).
pub fn fingerprint(route: &Route, store: &Store) -> String {
    match route.derived {
        Derived::None => store.fingerprint(route.service).to_string(),
        _ => applied(service_name(route)).0.clone(),
    }
}

/// The route's derived version, when it computes derived features.
pub fn version(route: &Route) -> Option<String> {
    match route.derived {
        Derived::None => None,
        _ => {
            let v = &applied(service_name(route)).1;
            assert!(!v.is_empty(), "ferry apply printed no derived version");
            Some(v.clone())
        }
    }
}

/// The stored features of the entity (none for a service of request fields only).
pub fn stored(route: &Route, entity: &Entity, store: &Store) -> Vec<Feature> {
    match route.derived {
        Derived::ReqOnly => Vec::new(),
        _ => store.features(route.service, entity),
    }
}

/// Every feature the model must receive for one instance: the stored ones, then the derived
/// ones computed from them and the request field the row sent.
pub fn features(route: &Route, entity: &Entity, amount: &Amount, store: &Store) -> Vec<Feature> {
    let mut out = stored(route, entity, store);
    let amount = match amount {
        None => Err("NOT_FOUND"),
        Some(Json::Null) => Err("NULL_VALUE"),
        Some(v) => Ok(v.as_f64().expect("a row's amount is a number")),
    };
    match route.derived {
        Derived::None => {}
        Derived::Risk => {
            let avg = out
                .iter()
                .find(|f| f.name == "transactions__txn_amount_avg_7d")
                .map(|f| match f.status {
                    "PRESENT" => Ok(f.value.as_f64().expect("a float64 average")),
                    s => Err(s),
                })
                .expect("od_scoring has transactions");
            // Both inputs are unguarded; no row leaves both absent (which one would name the
            // status is not this check's business).
            let ratio = amount.and_then(|a| avg.map(|d| a / d)).and_then(finite);
            out.push(feature("risk__ratio", Kind::F64, ratio.map(Json::from)));
            let big = amount.map(|a| json!(a > 100.0));
            out.push(feature("risk__big", Kind::Bool, big));
        }
        Derived::ReqOnly => {
            let doubled = amount.map(|a| a * 2.0).and_then(finite);
            out.push(feature("req__doubled", Kind::F64, doubled.map(Json::from)));
        }
    }
    out
}

fn finite(x: f64) -> Result<f64, &'static str> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err("INVALID")
    }
}

fn feature(name: &str, kind: Kind, v: Result<Json, &'static str>) -> Feature {
    let (value, status) = match v {
        Ok(v) => (v, "PRESENT"),
        Err(s) => (Json::Null, s),
    };
    Feature {
        name: name.to_string(),
        kind,
        value,
        status,
    }
}

/// The matrix's yaml edit: the views and services added to the repo.
pub fn with_views(yaml: String) -> String {
    ferry_integration_tests::with_on_demand(yaml, VIEWS)
}
