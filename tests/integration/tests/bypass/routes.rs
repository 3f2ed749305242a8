//! The Ferry routes of the matrix's stack: the example repo's own (examples/banking/ferry.yaml,
//! whose protected_paths are /v1/models/, /v2/models/, /score and /v1/risk) and the few the
//! matrix adds, as the checks need to know them. The matrix also protects the gRPC service's
//! prefix and Feast's path (`protect`), as a repo serving those formats would, and gains the
//! on-demand views of `derived.rs` with their routes (`od-*`).

use ferry_integration_tests::expected::Service;
use ferry_integration_tests::{feast_route, fraud_grpc_route};

use crate::derived::Derived;
use crate::outcome::{Format, Route};

/// Routes the matrix adds to the example repo, all under its protected prefix /v1/models/ and
/// none starting with an example route's prefix (routes are tried in order).
pub const EXTRA_ROUTES: &str = concat!(
    r#"
  - name: gated
    match:
      path_prefix: /v1/models/gated
      host: scoring.example
      headers: [{name: x-tenant, exact: bank}]
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
  - name: fail-open
    match: {path_prefix: /v1/models/open}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_reader_error: forward
  - name: hdr-custom
    match: {path_prefix: /v1/models/hdr-custom}
    service: realtime_scoring
    format: header
    entity: {field: x-user-id}
    features_header: x-features
  - name: pair-grpc
    match:
      path_prefix: /inference.GRPCInferenceService/ModelInfer
      headers: [{name: x-route, exact: pair}]
    service: user_merchant_scoring
    format: kserve_v2_grpc
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: "null"
"#,
    fraud_grpc_route!(),
    feast_route!(),
    r#"  - name: od-v1
    match: {path_prefix: /v1/models/od-v1}
    service: od_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: "null"
  - name: od-v2
    match: {path_prefix: /v2/models/od-v2}
    service: od_scoring
    format: kserve_v2
    entity: {field: user_id}
    on_missing_entity: "null"
  - name: od-json
    match: {path_prefix: /v1/models/od-json}
    service: od_scoring
    format: json
    entity: {field: user_id}
    entity_pointer: /batch/users
    inject_pointer: /features
    on_missing_entity: "null"
  - name: od-header
    match: {path_prefix: /v1/models/od-header}
    service: od_scoring
    format: header
    entity: {field: x-user-id}
    on_missing_entity: "null"
  - name: od-req
    match: {path_prefix: /v1/models/od-req}
    service: req_only
    format: kserve_v1
"#,
);

/// The example's protected_paths line, and the matrix's.
const PROTECTED: &str = "protected_paths: [/v1/models/, /v2/models/, /score, /v1/risk]";
const PROTECTED_TOO: &str = "protected_paths: [/v1/models/, /v2/models/, /score, /v1/risk, \
                             /inference.GRPCInferenceService/, /get-online-features]";

/// The repo's ferry.yaml with the gRPC service's prefix and Feast's path protected too: a
/// spelling of them that matches no route is refused, not forwarded.
pub fn protect(yaml: String) -> String {
    assert!(
        yaml.contains(PROTECTED),
        "the example's protected_paths changed: update bypass/routes.rs"
    );
    crate::derived::with_views(yaml.replace(PROTECTED, PROTECTED_TOO))
}

const SCORING: Service = Service::RealtimeScoring;

/// kserve_v1 at /v1/models/fraud: unknown users are refused.
pub const FRAUD: Route = Route {
    name: "fraud",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v1 at /v1/models/fraud-lenient: unknown users are forwarded with nulls.
pub const LENIENT: Route = Route {
    name: "fraud-lenient",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v2 at /v2/models/fraud.
pub const V2: Route = Route {
    name: "fraud-v2",
    format: Format::KserveV2,
    service: SCORING,
    derived: Derived::None,
};
/// json at /score: entities at /batch/users, features at /features.
pub const JSON_ROUTE: Route = Route {
    name: "score-json",
    format: Format::Json,
    service: SCORING,
    derived: Derived::None,
};
/// header at /v1/risk, id header x-user-id, features in x-ferry-features.
pub const RISK: Route = Route {
    name: "risk-header",
    format: Format::Header {
        features_header: "x-ferry-features",
    },
    service: SCORING,
    derived: Derived::None,
};
/// header at /v1/models/hdr-custom, features in its own header x-features.
pub const CUSTOM: Route = Route {
    name: "hdr-custom",
    format: Format::Header {
        features_header: "x-features",
    },
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v1 at /v1/models/gated for host scoring.example and x-tenant: bank only.
pub const GATED: Route = Route {
    name: "gated",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v1 at /v1/models/open with on_reader_error: forward.
pub const OPEN: Route = Route {
    name: "fail-open",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v1 at /v1/models/merchant-fraud, keyed by (merchant_id int64, user_id string);
/// unknown pairs are forwarded with nulls.
pub const PAIRS: Route = Route {
    name: "merchant-fraud",
    format: Format::KserveV1,
    service: Service::UserMerchantScoring,
    derived: Derived::None,
};
/// kserve_v2_grpc at the gRPC ModelInfer path: unknown users are forwarded with zeros.
pub const GRPC: Route = Route {
    name: "fraud-grpc",
    format: Format::KserveV2Grpc,
    service: SCORING,
    derived: Derived::None,
};
/// kserve_v2_grpc at the same path for gRPC metadata `x-route: pair`, keyed by
/// (merchant_id INT64, user_id BYTES) tensors; unknown pairs are forwarded with zeros.
pub const PAIR_GRPC: Route = Route {
    name: "pair-grpc",
    format: Format::KserveV2Grpc,
    service: Service::UserMerchantScoring,
    derived: Derived::None,
};
/// kserve_v1 at /v1/models/od-v1: od_scoring (stored features and the `risk` view's).
pub const OD_V1: Route = Route {
    name: "od-v1",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::Risk,
};
/// kserve_v2 at /v2/models/od-v2: od_scoring, the request field in an `amount` tensor.
pub const OD_V2: Route = Route {
    name: "od-v2",
    format: Format::KserveV2,
    service: SCORING,
    derived: Derived::Risk,
};
/// json at /v1/models/od-json: od_scoring, entities at /batch/users, features at /features.
pub const OD_JSON: Route = Route {
    name: "od-json",
    format: Format::Json,
    service: SCORING,
    derived: Derived::Risk,
};
/// header at /v1/models/od-header: od_scoring, the request field in an `amount` header.
pub const OD_HEADER: Route = Route {
    name: "od-header",
    format: Format::Header {
        features_header: "x-ferry-features",
    },
    service: SCORING,
    derived: Derived::Risk,
};
/// kserve_v1 at /v1/models/od-req: req_only, no entity, no reader call.
pub const OD_REQ: Route = Route {
    name: "od-req",
    format: Format::KserveV1,
    service: SCORING,
    derived: Derived::ReqOnly,
};
