//! The matrix: every row names what the client sends and which of the two outcomes it must
//! end in. Grouped by the way around the filter it tries.

use ferry_integration_tests::expected::Entity;

use crate::case::{
    get, json_body, json_forged, json_numbers, pair_body, pair_forged, post, request, users, v1,
    v1_forged, v1_numbers, v2, v2_forged, v2_id_tensors, v2_numbers, Case,
};
use crate::routes::{CUSTOM, FRAUD, GATED, JSON_ROUTE, LENIENT, OPEN, PAIRS, RISK, V2};

const U1: &str = "u000001";
const PREDICT: &str = "/v1/models/fraud:predict";
const LENIENT_PREDICT: &str = "/v1/models/fraud-lenient:predict";
const OPEN_PREDICT: &str = "/v1/models/open:predict";
const V2_INFER: &str = "/v2/models/fraud/infer";
const PAIR_PREDICT: &str = "/v1/models/merchant-fraud:predict";
const CUSTOM_PATH: &str = "/v1/models/hdr-custom/x";
const GATED_PREDICT: &str = "/v1/models/gated:predict";

/// A (merchant, user) pair the store holds a fresh row for.
pub struct Pair {
    pub merchant: i64,
    pub user: String,
}

impl Pair {
    fn with_user(&self, user: &str) -> Vec<Entity> {
        vec![Entity::Pair {
            merchant: self.merchant,
            user: user.to_string(),
        }]
    }
}

pub fn all(pair: &Pair) -> Vec<Case> {
    [
        controls(pair),
        trailers(pair),
        paths(),
        conditions(),
        forged(pair),
        long_ids(pair),
        duplicates(),
        numbers(),
        crate::grpc_cases::all(pair),
        crate::derived_cases::all(),
    ]
    .concat()
}

/// Each format enriched as usual: the matrix's checks hold on plain requests.
fn controls(pair: &Pair) -> Vec<Case> {
    let stale_and_partial = [U1, "u000007", "u000042"];
    vec![
        post("v1 control", PREDICT, v1(&stale_and_partial))
            .enriched(FRAUD, users(&stale_and_partial)),
        post("v2 control", V2_INFER, v2(&[U1, "u000005"])).enriched(V2, users(&[U1, "u000005"])),
        post("json control", "/score", json_body(&["u000003", "u000007"]))
            .enriched(JSON_ROUTE, users(&["u000003", "u000007"])),
        get("header control", "/v1/risk")
            .header("x-user-id", "u000004")
            .enriched(RISK, users(&["u000004"])),
        get("custom header control", CUSTOM_PATH)
            .header("x-user-id", "u000007")
            .enriched(CUSTOM, users(&["u000007"])),
        post(
            "composite control",
            PAIR_PREDICT,
            pair_body(pair.merchant, &pair.user),
        )
        .enriched(PAIRS, pair.with_user(&pair.user)),
        post("fail-open control", OPEN_PREDICT, v1(&[U1, "u000042"]))
            .enriched(OPEN, users(&[U1, "u000042"])),
    ]
}

/// A body that ends with trailers instead of a last data frame: enriched exactly as without
/// them, or refused.
fn trailers(pair: &Pair) -> Vec<Case> {
    vec![
        post("v1 + trailers", PREDICT, v1(&[U1, "u000007"]))
            .trailers()
            .enriched(FRAUD, users(&[U1, "u000007"])),
        post("v2 + trailers", V2_INFER, v2(&[U1]))
            .trailers()
            .enriched(V2, users(&[U1])),
        post("json + trailers", "/score", json_body(&["u000003"]))
            .trailers()
            .enriched(JSON_ROUTE, users(&["u000003"])),
        post(
            "header route POST body + trailers",
            "/v1/risk",
            "opaque \x01 bytes",
        )
        .header("x-user-id", "u000004")
        .trailers()
        .enriched(RISK, users(&["u000004"])),
        post(
            "composite + trailers",
            PAIR_PREDICT,
            pair_body(pair.merchant, &pair.user),
        )
        .trailers()
        .enriched(PAIRS, pair.with_user(&pair.user)),
        post("v1 forged + trailers", PREDICT, v1_forged(U1))
            .forged_headers()
            .trailers()
            .enriched(FRAUD, users(&[U1])),
        post("v1 numbers + trailers", PREDICT, v1_numbers(U1))
            .trailers()
            .enriched(FRAUD, users(&[U1]))
            .with_numbers(),
        post(
            "malformed v1 + trailers",
            PREDICT,
            r#"{"instances": [{"user_id": "#,
        )
        .trailers()
        .refused(400, "malformed_json"),
        post("trailers and no body", PREDICT, "")
            .trailers()
            .refused(400, "no_body"),
        post("unprotected path + trailers", "/echo/other", v1(&[U1])).trailers(),
    ]
}

/// Path spellings: Envoy normalises before the filter and the router and forwards the
/// normalised path; what still matches no route under a protected prefix is refused.
fn paths() -> Vec<Case> {
    let mut c: Vec<Case> = [
        ("%61 for a", "/v1/models/fr%61ud:predict"),
        ("%76%31 for v1", "/%76%31/models/fraud:predict"),
        ("leading //", "//v1/models/fraud:predict"),
        ("inner //", "/v1//models///fraud:predict"),
        ("/./", "/v1/./models/fraud:predict"),
        ("/../", "/v1/x/../models/fraud:predict"),
        ("leading /../", "/../v1/models/fraud:predict"),
        ("%2e and %2e%2e", "/v1/%2e/models/x/%2e%2e/fraud:predict"),
    ]
    .into_iter()
    .map(|(name, path)| post(name, path, v1(&[U1])).enriched_at(FRAUD, users(&[U1]), PREDICT))
    .collect();
    c.extend(
        [
            ("mixed case /V1/Models/", "/V1/Models/fraud:predict"),
            ("upper case", "/V1/MODELS/FRAUD:PREDICT"),
            ("model name case", "/v1/models/Fraud:predict"),
            ("%25 double encoding", "/v1/models/fr%2561ud:predict"),
            ("unknown model", "/v1/models/other:predict"),
        ]
        .into_iter()
        .map(|(name, path)| post(name, path, v1(&[U1])).refused(404, "no_route")),
    );
    c.extend(
        [
            ("%2F slashes", "/v1%2Fmodels%2Ffraud:predict"),
            ("%2f slash", "/v1/models%2ffraud:predict"),
            ("%5C backslash", "/v1/models%5Cfraud:predict"),
        ]
        .into_iter()
        .map(|(name, path)| {
            post(name, path, v1(&[U1])).refused_by_envoy(400, "path_normalization_failed")
        }),
    );
    c.extend([
        post("%3A stays encoded", "/v1/models/fraud%3Apredict", v1(&[U1]))
            .enriched(FRAUD, users(&[U1])),
        post(
            "query is not the path",
            "/v1/models/fraud:predict?n=/../x%2F",
            v1(&[U1]),
        )
        .enriched(FRAUD, users(&[U1])),
        post("v2 %61", "/v2/models/fr%61ud/infer", v2(&[U1])).enriched_at(
            V2,
            users(&[U1]),
            V2_INFER,
        ),
        post("v2 upper case", "/V2/MODELS/fraud/infer", v2(&[U1])).refused(404, "no_route"),
        post("json //", "//score", json_body(&["u000003"])).enriched_at(
            JSON_ROUTE,
            users(&["u000003"]),
            "/score",
        ),
        post("json %6F", "/sc%6Fre", json_body(&["u000003"])).enriched_at(
            JSON_ROUTE,
            users(&["u000003"]),
            "/score",
        ),
        post("json upper case", "/SCORE", json_body(&["u000003"])).refused(404, "no_route"),
        get("header %69", "/v1/r%69sk")
            .header("x-user-id", "u000004")
            .enriched_at(RISK, users(&["u000004"]), "/v1/risk"),
        get("header upper case", "/v1/RISK")
            .header("x-user-id", "u000004")
            .refused(404, "no_route"),
        request("DELETE unknown model", "DELETE", "/v1/models/other", "").refused(404, "no_route"),
    ]);
    c
}

/// A route with host and header conditions under a protected prefix: met, it enriches; missed,
/// the request is refused instead of passing unenriched.
fn conditions() -> Vec<Case> {
    let gated = |name: &str, path: &str, host: &str| {
        post(name, path, v1(&[U1]))
            .header("host", host)
            .header("x-tenant", "bank")
    };
    vec![
        gated("gated: host and header", GATED_PREDICT, "scoring.example")
            .enriched(GATED, users(&[U1])),
        gated(
            "gated: host case and port",
            GATED_PREDICT,
            "Scoring.EXAMPLE:8443",
        )
        .enriched(GATED, users(&[U1])),
        gated(
            "gated: %65 in path",
            "/v1/models/gat%65d:predict",
            "scoring.example",
        )
        .enriched_at(GATED, users(&[U1]), GATED_PREDICT),
        gated("gated: other host", GATED_PREDICT, "other.example").refused(404, "no_route"),
        post("gated: header missing", GATED_PREDICT, v1(&[U1]))
            .header("host", "scoring.example")
            .refused(404, "no_route"),
        post("gated: header value differs", GATED_PREDICT, v1(&[U1]))
            .header("host", "scoring.example")
            .header("x-tenant", "BANK")
            .refused(404, "no_route"),
        post("gated: missed, forged", GATED_PREDICT, v1_forged(U1))
            .forged_headers()
            .refused(404, "no_route"),
    ]
}

/// Forged features, metadata and Ferry headers: replaced by the store's on enriched requests,
/// removed everywhere else.
fn forged(pair: &Pair) -> Vec<Case> {
    vec![
        post(
            "v1 forged fields, metadata, headers",
            PREDICT,
            v1_forged(U1),
        )
        .forged_headers()
        .enriched(FRAUD, users(&[U1])),
        post("v2 forged tensors and parameters", V2_INFER, v2_forged(U1))
            .forged_headers()
            .enriched(V2, users(&[U1])),
        post(
            "json forged features and metadata",
            "/score",
            json_forged("u000003"),
        )
        .forged_headers()
        .enriched(JSON_ROUTE, users(&["u000003"])),
        get("header route forged headers", "/v1/risk")
            .header("x-user-id", "u000004")
            .forged_headers()
            .enriched(RISK, users(&["u000004"])),
        get("custom header route forged headers", CUSTOM_PATH)
            .header("x-user-id", "u000004")
            .forged_headers()
            .enriched(CUSTOM, users(&["u000004"])),
        post(
            "composite forged",
            PAIR_PREDICT,
            pair_forged(pair.merchant, &pair.user),
        )
        .forged_headers()
        .enriched(PAIRS, pair.with_user(&pair.user)),
        // Outside the protected prefixes the model path is not a Ferry one: the body passes as
        // sent, but no Ferry header does.
        post("unprotected path, forged", "/echo/other", v1_forged(U1)).forged_headers(),
        post(
            "protected unknown model, forged",
            "/v1/models/other:predict",
            v1_forged(U1),
        )
        .forged_headers()
        .refused(404, "no_route"),
        get("readiness GET, forged headers", "/v1/models/fraud").forged_headers(),
        request("GET with a forged body", "GET", PREDICT, v1_forged(U1))
            .refused(405, "unexpected_body"),
    ]
}

/// Ids at 256 bytes are looked up (unknown to the store here), at 257 refused before any
/// reader call, whatever the route's on_reader_error; bytes count, not characters.
fn long_ids(pair: &Pair) -> Vec<Case> {
    let at_limit = format!("u{}", "x".repeat(255));
    let over = format!("{at_limit}y");
    let wide = "é".repeat(128);
    let wide_over = format!("{wide}x");
    assert_eq!(
        (at_limit.len(), over.len(), wide.len(), wide_over.len()),
        (256, 257, 256, 257)
    );
    vec![
        post("256-byte id, reject route", PREDICT, v1(&[&at_limit]))
            .refused(404, "entity_not_found"),
        post("257-byte id, reject route", PREDICT, v1(&[&over])).refused(400, "invalid_entity_id"),
        post("256-byte id, null route", LENIENT_PREDICT, v1(&[&at_limit]))
            .enriched(LENIENT, users(&[&at_limit])),
        post("257-byte id, null route", LENIENT_PREDICT, v1(&[&over]))
            .refused(400, "invalid_entity_id"),
        post(
            "256-byte id, fail-open route",
            OPEN_PREDICT,
            v1(&[&at_limit]),
        )
        .refused(404, "entity_not_found"),
        post("257-byte id, fail-open route", OPEN_PREDICT, v1(&[&over]))
            .refused(400, "invalid_entity_id"),
        post(
            "257-byte id among good ones",
            PREDICT,
            v1(&[U1, &over, "u000002"]),
        )
        .refused(400, "invalid_entity_id"),
        post(
            "256 bytes in 128 chars, null route",
            LENIENT_PREDICT,
            v1(&[&wide]),
        )
        .enriched(LENIENT, users(&[&wide])),
        post("257 bytes in 129 chars", LENIENT_PREDICT, v1(&[&wide_over]))
            .refused(400, "invalid_entity_id"),
        post("257-byte id, v2", V2_INFER, v2(&[&over])).refused(400, "invalid_entity_id"),
        post("257-byte id, json", "/score", json_body(&[&over])).refused(400, "invalid_entity_id"),
        get("256-byte id header", "/v1/risk")
            .header("x-user-id", &at_limit)
            .refused(404, "entity_not_found"),
        get("257-byte id header", "/v1/risk")
            .header("x-user-id", &over)
            .refused(400, "invalid_entity_id"),
        get("257-byte id, custom header route", CUSTOM_PATH)
            .header("x-user-id", &over)
            .refused(400, "invalid_entity_id"),
        post(
            "composite, 256-byte user",
            PAIR_PREDICT,
            pair_body(pair.merchant, &at_limit),
        )
        .enriched(PAIRS, pair.with_user(&at_limit)),
        post(
            "composite, 257-byte user",
            PAIR_PREDICT,
            pair_body(pair.merchant, &over),
        )
        .refused(400, "invalid_entity_id"),
    ]
}

/// An entity id given twice: the model might read the other one.
fn duplicates() -> Vec<Case> {
    vec![
        get("two x-user-id headers", "/v1/risk")
            .header("x-user-id", U1)
            .header("x-user-id", "u000002")
            .refused(400, "duplicate_entity_id"),
        get("two x-user-id headers, custom route", CUSTOM_PATH)
            .header("x-user-id", U1)
            .header("x-user-id", U1)
            .refused(400, "duplicate_entity_id"),
        post(
            "two user_id tensors",
            V2_INFER,
            v2_id_tensors(&[&[U1], &["u000002"]]),
        )
        .refused(400, "duplicate_entity_id"),
        post(
            "two equal user_id tensors",
            V2_INFER,
            v2_id_tensors(&[&[U1], &[U1]]),
        )
        .refused(400, "duplicate_entity_id"),
        // One JSON object naming user_id twice: a model's parser may read either one, so
        // Ferry refuses it (as for two id headers or two id tensors).
        post(
            "v1 user_id key twice",
            PREDICT,
            r#"{"instances":[{"user_id":"u000001","amount":1,"user_id":"u000002"}]}"#,
        )
        .refused(400, "duplicate_entity_id"),
    ]
}

/// Numbers the client sent outside Ferry's fields reach the model with their exact text.
fn numbers() -> Vec<Case> {
    vec![
        post("v1 numbers", PREDICT, v1_numbers(U1))
            .enriched(FRAUD, users(&[U1]))
            .with_numbers(),
        post("v2 numbers", V2_INFER, v2_numbers(U1))
            .enriched(V2, users(&[U1]))
            .with_numbers(),
        post("json numbers", "/score", json_numbers("u000003"))
            .enriched(JSON_ROUTE, users(&["u000003"]))
            .with_numbers(),
    ]
}
