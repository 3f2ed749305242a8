//! The benchmarks' service shape, shared by the criterion bench (`bench/benches/filter.rs`) and
//! the instruction-counting example (`core/examples/filter_work.rs`) so that both measure the
//! same work: the fixture's `scoring` service with 3 views x 10 features (int64, string,
//! float32) behind a KServe v1 route, its stored vectors and its request bodies.

use ferry_protos::v1::{self as pb, value::Kind};

use crate::snapshot::{self as fixture, feature, prefix};

/// The service's fingerprint, in the snapshot and in every stored vector.
pub const FINGERPRINT: u64 = 0x5eed_f00d_0bad_cafe;
/// The clock the enrichment runs at (the vectors were written an hour before).
pub const NOW_US: i64 = 1_795_000_000_000_000;

/// How the float32 features are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floats {
    /// Halves and integers (`i / 2 + j`): short decimals, the criterion bench's data.
    Halves,
    /// As `bench/repo/generate_data.py` draws them (uniform times a scale, 7 to 9 digits), the
    /// end-to-end benchmark's data.
    Drawn,
}

fn view(name: &str, prefix: &str, t: pb::ValueType) -> pb::ServiceView {
    let features = (0..10)
        .map(|i| feature(&format!("{prefix}_{i}"), t, None))
        .collect();
    fixture::view(name, 7 * fixture::DAY, features)
}

/// The snapshot: `scoring` (keyed by `user_id`) with the three views, and a KServe v1 route
/// `/v1/models/scoring` with room for the largest batch (1,000 entities, 1 MiB).
pub fn snapshot() -> pb::Snapshot {
    use pb::ValueType as T;
    pb::Snapshot {
        project: "bench".into(),
        version: "bench".into(),
        services: vec![pb::FeatureService {
            feast: None,
            fingerprint: FINGERPRINT,
            views: vec![
                view("user_activity", "count", T::Int64),
                view("user_attrs", "attr", T::String),
                view("user_stats", "amount", T::Float32),
            ],
            derived: vec![],
            derived_version: String::new(),
            ..fixture::scoring()
        }],
        on_demand_views: vec![],
        routes: vec![pb::Route {
            r#match: prefix("/v1/models/scoring"),
            max_body_bytes: 1 << 20,
            max_entities: 1000,
            reader_timeout_ms: 200,
            ..fixture::route("scoring", "scoring", pb::Format::KserveV1, &["user_id"])
        }],
        ..fixture::snapshot()
    }
}

/// Entity `i`'s stored vector, as `ferry materialize` writes it.
pub fn stored_vector(i: usize, floats: Floats) -> Vec<u8> {
    let values = |f: &dyn Fn(usize) -> Kind| (0..10).map(|j| Some(f(j))).collect();
    let t = NOW_US - 3_600_000_000;
    crate::vector::vector(
        FINGERPRINT,
        vec![
            (t, values(&|j| Kind::Int64Val((i * 31 + j) as i64))),
            (
                t,
                values(&|j| Kind::StringVal(["gold", "DE", "mobile_app"][j % 3].into())),
            ),
            (
                t,
                values(&|j| {
                    Kind::FloatVal(match floats {
                        Floats::Halves => i as f32 * 0.5 + j as f32,
                        Floats::Drawn => {
                            let x = ((i * 10 + j) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                            x as f32 / (1u64 << 24) as f32 * [500.0, 1.0, 900.0][j % 3]
                        }
                    })
                }),
            ),
        ],
    )
}

/// A KServe v1 body of `batch` instances (users `u000001`...), each with three client fields.
pub fn request(batch: usize) -> Vec<u8> {
    let instances: Vec<String> = (0..batch)
        .map(|i| {
            format!(
                r#"{{"user_id":"u{:06}","amount":{}.25,"merchant_id":"m{:05}","channel":"web"}}"#,
                i + 1,
                i * 7,
                i * 13
            )
        })
        .collect();
    format!(r#"{{"instances":[{}]}}"#, instances.join(",")).into_bytes()
}

/// The reader's answer to [`request`]`(batch)`: every entity's vector present.
pub fn reader_answer(batch: usize, floats: Floats) -> Vec<u8> {
    crate::reader::response((0..batch).map(|i| stored_vector(i, floats)).collect())
}
