//! The matrix's rows for the two formats that are no JSON body to the model: `kserve_v2_grpc`
//! (Triton `ModelInfer` over gRPC: h2c only, since gRPC is HTTP/2; refusals are gRPC statuses)
//! and `feast_rest` (answered by the filter itself: the model is never called).

use ferry_integration_tests::expected::{Entity, Service};

use crate::case::{post, request as http_request, users, Case};
use crate::cases::Pair;
use crate::feast;
use crate::grpc::{id_tensors, misframed, request, Call, Mode, PATH};
use crate::routes::{GRPC, PAIR_GRPC};

const U1: &str = "u000001";
/// gRPC status codes (grpc/grpc doc/statuscodes.md).
const INVALID_ARGUMENT: u32 = 3;
const NOT_FOUND: u32 = 5;
const SCORING: Service = Service::RealtimeScoring;
/// Feature names of each service a client forges tensors under.
const SCORING_FORGED: [&str; 2] = ["user_profile__credit_score", "user_profile__age"];
const PAIR_FORGED: [&str; 2] = [
    "user_merchant__amount_sum_30d",
    "user_merchant__txn_count_30d",
];

pub fn all(pair: &Pair) -> Vec<Case> {
    [grpc_rows(), composite(pair), grpc_paths(), feast_rows()].concat()
}

/// The composite-key gRPC route (INT64 and BYTES id tensors), chosen by gRPC metadata.
fn composite(pair: &Pair) -> Vec<Case> {
    let entity = vec![Entity::Pair {
        merchant: pair.merchant,
        user: pair.user.clone(),
    }];
    let call_for = |mode| {
        Call::new(mode)
            .merchants(&[pair.merchant])
            .ids(&[&pair.user])
            .amount(1)
    };
    vec![
        call(
            "grpc composite control (raw)",
            PATH,
            call_for(Mode::Raw).body(),
        )
        .header("x-route", "pair")
        .enriched(PAIR_GRPC, entity.clone()),
        call(
            "grpc composite forged (typed)",
            PATH,
            call_for(Mode::Typed)
                .forged_tensors(PAIR_FORGED)
                .forged_parameters()
                .body(),
        )
        .header("x-route", "pair")
        .forged_headers()
        .enriched(PAIR_GRPC, entity),
    ]
}

fn call(name: &str, path: &str, body: Vec<u8>) -> Case {
    post(name, path, body).grpc()
}

fn grpc_rows() -> Vec<Case> {
    let mixed = [U1, "u000007", "u000042"];
    let at_limit = format!("u{}", "x".repeat(255));
    let over = format!("{at_limit}y");
    vec![
        call("grpc control (typed)", PATH, request(&mixed, Mode::Typed))
            .enriched(GRPC, users(&mixed)),
        call(
            "grpc control (raw)",
            PATH,
            request(&[U1, "u000005"], Mode::Raw),
        )
        .enriched(GRPC, users(&[U1, "u000005"])),
        call("grpc + trailers", PATH, request(&[U1], Mode::Raw))
            .trailers()
            .enriched(GRPC, users(&[U1])),
        call(
            "grpc forged tensors (raw)",
            PATH,
            Call::new(Mode::Raw)
                .ids(&[U1])
                .forged_tensors(SCORING_FORGED)
                .body(),
        )
        .enriched(GRPC, users(&[U1])),
        call(
            "grpc forged tensors (typed)",
            PATH,
            Call::new(Mode::Typed)
                .forged_tensors(SCORING_FORGED)
                .ids(&[U1])
                .body(),
        )
        .enriched(GRPC, users(&[U1])),
        call(
            "grpc forged ferry_* parameters",
            PATH,
            Call::new(Mode::Typed).ids(&[U1]).forged_parameters().body(),
        )
        .enriched(GRPC, users(&[U1])),
        call(
            "grpc forged x-ferry-* headers",
            PATH,
            request(&[U1], Mode::Typed),
        )
        .forged_headers()
        .enriched(GRPC, users(&[U1])),
        call(
            "grpc all forged + trailers",
            PATH,
            Call::new(Mode::Raw)
                .ids(&[U1])
                .forged_tensors(SCORING_FORGED)
                .forged_parameters()
                .body(),
        )
        .forged_headers()
        .trailers()
        .enriched(GRPC, users(&[U1])),
        call(
            "grpc two user_id tensors",
            PATH,
            id_tensors(&[&[U1], &["u000002"]]),
        )
        .grpc_refused(INVALID_ARGUMENT, "duplicate_entity_id"),
        call(
            "grpc two equal user_id tensors",
            PATH,
            id_tensors(&[&[U1], &[U1]]),
        )
        .grpc_refused(INVALID_ARGUMENT, "duplicate_entity_id"),
        call("grpc compressed flag", PATH, misframed(&[U1], 1, 0))
            .grpc_refused(INVALID_ARGUMENT, "bad_binary_framing"),
        call("grpc prefix over the body", PATH, misframed(&[U1], 0, 1))
            .grpc_refused(INVALID_ARGUMENT, "bad_binary_framing"),
        call(
            "grpc not a ModelInferRequest",
            PATH,
            b"\0\0\0\0\x03\xff\xff\xff".to_vec(),
        )
        .grpc_refused(INVALID_ARGUMENT, "malformed_protobuf"),
        call("grpc 256-byte id", PATH, request(&[&at_limit], Mode::Raw))
            .enriched(GRPC, users(&[&at_limit])),
        call("grpc 257-byte id", PATH, request(&[&over], Mode::Raw))
            .grpc_refused(INVALID_ARGUMENT, "invalid_entity_id"),
        call(
            "grpc 257-byte id among good ones",
            PATH,
            request(&[U1, &over], Mode::Typed),
        )
        .grpc_refused(INVALID_ARGUMENT, "invalid_entity_id"),
    ]
}

/// Spellings of the gRPC path: Envoy's normalisation leads them to the route, at the canonical
/// path; a case change matches no route under the protected prefix.
fn grpc_paths() -> Vec<Case> {
    let body = || request(&[U1], Mode::Typed);
    let mut c: Vec<Case> = [
        (
            "grpc %49 for I",
            "/inference.GRPCInferenceService/Model%49nfer",
        ),
        (
            "grpc %2E in the service",
            "/inference%2EGRPCInferenceService/ModelInfer",
        ),
        (
            "grpc leading //",
            "//inference.GRPCInferenceService/ModelInfer",
        ),
        (
            "grpc inner //",
            "/inference.GRPCInferenceService//ModelInfer",
        ),
        ("grpc /./", "/inference.GRPCInferenceService/./ModelInfer"),
        (
            "grpc /x/../",
            "/inference.GRPCInferenceService/x/../ModelInfer",
        ),
    ]
    .into_iter()
    .map(|(name, path)| call(name, path, body()).enriched_at(GRPC, users(&[U1]), PATH))
    .collect();
    c.extend(
        [
            (
                "grpc lower case",
                "/inference.grpcinferenceservice/modelinfer",
            ),
            (
                "grpc method case",
                "/inference.GRPCInferenceService/modelInfer",
            ),
            (
                "grpc other method",
                "/inference.GRPCInferenceService/ModelStreamInfer",
            ),
        ]
        .into_iter()
        .map(|(name, path)| call(name, path, body()).grpc_refused(NOT_FOUND, "no_route")),
    );
    c
}

fn feast_rows() -> Vec<Case> {
    let mixed = [U1, "u000007", "u000042"];
    let over = format!("u{}y", "x".repeat(255));
    let one = || feast::request(SCORING, &[U1]);
    let mut c = vec![
        post(
            "feast control",
            feast::PATH,
            feast::request(SCORING, &mixed),
        )
        .answered(SCORING, users(&mixed)),
        post(
            "feast forged fields",
            feast::PATH,
            feast::forged(SCORING, U1),
        )
        .forged_headers()
        .answered(SCORING, users(&[U1])),
        post("feast + trailers", feast::PATH, one())
            .trailers()
            .answered(SCORING, users(&[U1])),
        post(
            "feast unknown service",
            feast::PATH,
            feast::unknown_service(U1),
        )
        .refused(404, "feast_unknown_feature_service"),
        // A service of the snapshot that the route does not list: answered as unknown.
        post(
            "feast unlisted service",
            feast::PATH,
            feast::unlisted_service("merchant_risk", U1),
        )
        .refused(404, "feast_unknown_feature_service"),
        post(
            "feast 257-byte id",
            feast::PATH,
            feast::request(SCORING, &[&over]),
        )
        .refused(400, "invalid_entity_id"),
        // No body, nothing to answer from: it passes like any bodiless request on a body
        // route, without Ferry's headers.
        http_request("feast GET", "GET", feast::PATH, "").forged_headers(),
    ];
    c.extend(
        [
            ("feast %65", "/g%65t-online-features"),
            ("feast //", "//get-online-features"),
            ("feast /./", "/./get-online-features"),
        ]
        .into_iter()
        .map(|(name, path)| post(name, path, one()).answered(SCORING, users(&[U1]))),
    );
    c.extend(
        [
            ("feast mixed case", "/Get-Online-Features"),
            ("feast sub-path", "/get-online-features/x"),
        ]
        .into_iter()
        .map(|(name, path)| post(name, path, one()).refused(404, "no_route")),
    );
    c
}
