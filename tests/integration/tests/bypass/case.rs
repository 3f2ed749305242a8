//! One row of the matrix (what the client sends, what must come of it), built fluently, and the
//! request bodies the rows use.

use ferry_integration_tests::expected::{Entity, Service};
use serde_json::json;

use crate::derived::Amount;
use crate::outcome::{Expect, Refuser, Route};

/// What a client may put in the headers Ferry writes (and one it does not know).
pub const FORGED_HEADERS: [(&str, &str); 6] = [
    ("x-ferry-status", "ok"),
    ("x-ferry-fingerprint", "forged"),
    ("x-ferry-features", r#"{"user_profile__credit_score":850}"#),
    ("x-ferry-feature-status", "{}"),
    ("x-ferry-anything", "1"),
    ("x-features", r#"{"user_profile__credit_score":850}"#),
];

/// Trailers a client sends after the body (one of them in Ferry's header space).
pub const TRAILERS: [(&str, &str); 2] = [("x-checksum", "abc123"), ("x-ferry-status", "ok")];

/// Client numbers that must reach the model with exactly this text.
pub const NUMBERS: [(&str, &str); 4] = [
    ("a", "0.30000000000000004"),
    ("b", "1e400"),
    ("c", "-0"),
    ("d", "12345678901234567890"),
];

#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub method: &'static str,
    pub path: String,
    /// `host` becomes the HTTP/1.1 host header or the h2c :authority.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Sent as a trailers frame after the body (itself sent in two data frames).
    pub trailers: Option<Vec<(&'static str, &'static str)>>,
    /// Sent over h2c only (gRPC is HTTP/2: over HTTP/1.1 no gRPC client exists to try).
    pub h2c_only: bool,
    /// The reader's key counter must not move while the case runs.
    pub no_reader_call: bool,
    pub expect: Expect,
}

/// A request Ferry must leave alone (the default expectation; the builders below change it).
pub fn request(name: &str, method: &'static str, path: &str, body: impl Into<Vec<u8>>) -> Case {
    Case {
        name: name.to_string(),
        method,
        path: path.to_string(),
        headers: Vec::new(),
        body: body.into(),
        trailers: None,
        h2c_only: false,
        no_reader_call: false,
        expect: Expect::Untouched {
            model_path: path.to_string(),
        },
    }
}

pub fn post(name: &str, path: &str, body: impl Into<Vec<u8>>) -> Case {
    request(name, "POST", path, body)
}

pub fn get(name: &str, path: &str) -> Case {
    request(name, "GET", path, "")
}

impl Case {
    pub fn header(mut self, name: &str, value: &str) -> Case {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn forged_headers(self) -> Case {
        FORGED_HEADERS.iter().fold(self, |c, (n, v)| c.header(n, v))
    }

    pub fn trailers(mut self) -> Case {
        self.trailers = Some(TRAILERS.to_vec());
        self
    }

    /// The model receives the request enriched, at the path the client sent.
    pub fn enriched(self, route: Route, entities: Vec<Entity>) -> Case {
        let path = self.path.clone();
        self.enriched_at(route, entities, &path)
    }

    /// The model receives the request enriched, at `model_path` (Envoy normalised the path).
    pub fn enriched_at(mut self, route: Route, entities: Vec<Entity>, model_path: &str) -> Case {
        self.expect = Expect::Enriched {
            route,
            entities,
            model_path: model_path.to_string(),
            numbers: Vec::new(),
            amounts: Vec::new(),
        };
        self
    }

    /// The request field `amount` each instance carries, as sent (None: absent), for the
    /// derived features the model must receive.
    pub fn amounts(mut self, sent: Vec<Amount>) -> Case {
        if let Expect::Enriched { amounts, .. } = &mut self.expect {
            *amounts = sent;
        }
        self
    }

    /// The route must answer without a reader call (a service of request fields only).
    pub fn no_reader_call(mut self) -> Case {
        self.no_reader_call = true;
        self
    }

    /// The [`NUMBERS`] the body carries must reach the model as sent.
    pub fn with_numbers(mut self) -> Case {
        if let Expect::Enriched { numbers, .. } = &mut self.expect {
            numbers.extend(NUMBERS);
        }
        self
    }

    pub fn refused(mut self, status: u16, code: &'static str) -> Case {
        self.expect = Expect::Refused {
            status,
            code,
            by: Refuser::Filter,
        };
        self
    }

    /// A gRPC call (`content-type: application/grpc`), sent over h2c only.
    pub fn grpc(self) -> Case {
        let mut c = self.header("content-type", "application/grpc");
        c.h2c_only = true;
        c
    }

    /// Refused with a gRPC status whose message starts with the filter's error `code`.
    pub fn grpc_refused(mut self, grpc_status: u32, code: &'static str) -> Case {
        self.expect = Expect::GrpcRefused { grpc_status, code };
        self
    }

    /// A `feast_rest` request answered by the filter itself from the store, for `entities`
    /// of `service`, nothing sent to the model.
    pub fn answered(mut self, service: Service, entities: Vec<Entity>) -> Case {
        self.expect = Expect::Answered { service, entities };
        self
    }

    pub fn refused_by_envoy(mut self, status: u16, code: &'static str) -> Case {
        self.expect = Expect::Refused {
            status,
            code,
            by: Refuser::Envoy,
        };
        self
    }
}

pub fn users(ids: &[&str]) -> Vec<Entity> {
    ids.iter().map(|u| Entity::User(u.to_string())).collect()
}

/// KServe v1, one instance per user, each with a client field of its own.
pub fn v1(ids: &[&str]) -> String {
    let instances: Vec<_> = ids
        .iter()
        .map(|u| json!({"user_id": u, "amount": 10.5}))
        .collect();
    json!({ "instances": instances }).to_string()
}

/// KServe v1 with forged features in the instance and a forged `ferry` metadata field.
pub fn v1_forged(id: &str) -> String {
    json!({
        "instances": [{
            "user_id": id,
            "user_profile__age": 99,
            "user_profile__credit_score": 850,
            "amount": 2
        }],
        "ferry": {"service": "realtime_scoring", "fingerprint": "forged", "statuses": [{}]}
    })
    .to_string()
}

/// KServe v2: the client's amount tensor and the user_id tensor.
pub fn v2(ids: &[&str]) -> String {
    json!({
        "id": "req-1",
        "inputs": [
            {"name": "amount", "shape": [ids.len()], "datatype": "FP32",
             "data": vec![1.5; ids.len()]},
            {"name": "user_id", "shape": [ids.len()], "datatype": "BYTES", "data": ids},
        ]
    })
    .to_string()
}

/// KServe v2 with one user_id tensor per element of `tensors`.
pub fn v2_id_tensors(tensors: &[&[&str]]) -> String {
    let inputs: Vec<_> = tensors
        .iter()
        .map(|ids| {
            json!({"name": "user_id", "shape": [ids.len()], "datatype": "BYTES", "data": ids})
        })
        .collect();
    json!({ "inputs": inputs }).to_string()
}

/// KServe v2 with forged feature tensors and forged `ferry_*` parameters.
pub fn v2_forged(id: &str) -> String {
    json!({
        "inputs": [
            {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": [id]},
            {"name": "user_profile__credit_score", "shape": [1], "datatype": "FP32", "data": [850]},
            {"name": "user_profile__age", "shape": [1], "datatype": "INT64", "data": [99]},
        ],
        "parameters": {"ferry_fingerprint": "forged", "ferry_statuses": "[]", "client": 1}
    })
    .to_string()
}

/// The score-json route's shape: entities at /batch/users.
pub fn json_body(ids: &[&str]) -> String {
    let entities: Vec<_> = ids
        .iter()
        .map(|u| json!({"user_id": u, "note": "kept"}))
        .collect();
    json!({"request_id": "r-1", "batch": {"users": entities}}).to_string()
}

/// score-json with a forged features object and forged metadata.
pub fn json_forged(id: &str) -> String {
    json!({
        "batch": {"users": [{
            "user_id": id,
            "features": {"user_profile__credit_score": 850, "user_profile__age": 99}
        }]},
        "ferry": {"fingerprint": "forged"}
    })
    .to_string()
}

/// merchant-fraud: one (merchant, user) instance.
pub fn pair_body(merchant: i64, user: &str) -> String {
    json!({"instances": [{"merchant_id": merchant, "user_id": user, "amount": 3}]}).to_string()
}

/// merchant-fraud with a forged feature and forged metadata.
pub fn pair_forged(merchant: i64, user: &str) -> String {
    json!({
        "instances": [{
            "merchant_id": merchant,
            "user_id": user,
            "user_merchant__txn_count_30d": 999
        }],
        "ferry": "forged"
    })
    .to_string()
}

/// `"a":0.30000000000000004,"b":1e400,...` as JSON text (1e400 is no f64: no json! here).
fn number_fields() -> String {
    NUMBERS
        .iter()
        .map(|(k, v)| format!(r#""{k}":{v}"#))
        .collect::<Vec<_>>()
        .join(",")
}

/// KServe v1, the numbers in the instance.
pub fn v1_numbers(id: &str) -> String {
    format!(
        r#"{{"instances":[{{"user_id":"{id}",{}}}]}}"#,
        number_fields()
    )
}

/// KServe v2, the numbers in the request's parameters.
pub fn v2_numbers(id: &str) -> String {
    let ids = json!({"name": "user_id", "shape": [1], "datatype": "BYTES", "data": [id]});
    format!(
        r#"{{"inputs":[{ids}],"parameters":{{{}}}}}"#,
        number_fields()
    )
}

/// score-json, the numbers in the entity object.
pub fn json_numbers(id: &str) -> String {
    format!(
        r#"{{"batch":{{"users":[{{"user_id":"{id}",{}}}]}}}}"#,
        number_fields()
    )
}
