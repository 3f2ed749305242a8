//! `ferry materialize`: offline sources → one precomputed vector per entity per FeatureService
//! in Redis. Each view's source is read once (views in parallel, `ferry_repo::tables`) keeping
//! the latest row per entity; each service's vectors are then encoded and written in pipelined
//! batches.

mod batch;
mod connection;
mod prune;
mod writer;

use indicatif::ProgressBar;

use ferry_repo::sources::LatestRows;
use ferry_repo::tables::{service_entities, Tables};
use ferry_repo::{FeatureService, Registry};
use ferry_vector_store::encode;

pub use connection::connect;
pub use prune::Pruned;
pub use writer::WriteOptions;

#[derive(Debug, thiserror::Error)]
pub enum MaterializeError {
    #[error(transparent)]
    RedisSetup(#[from] ferry_redis::SetupError),
    /// `url` is shown without credentials.
    #[error("redis {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("feature service '{service}': writing to redis failed: {source}")]
    Write {
        service: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("feature service '{service}': pruning failed: {source}")]
    Prune {
        service: String,
        #[source]
        source: redis::RedisError,
    },
    #[error(
        "feature service '{service}': refusing to prune: its sources hold no entity at all, so \
         every vector would go (an empty or truncated source file?)"
    )]
    PruneEverything { service: String },
    #[error(
        "feature service '{service}': refusing to prune: SCAN answered in a shape other than \
         [cursor, keys] (Envoy's redis_proxy in front of several shards does that); prune \
         against the Redis servers directly"
    )]
    PruneScanReply { service: String },
}

/// What writing one service produced.
#[derive(Clone, Debug)]
pub struct ServiceSummary {
    pub service: String,
    pub fingerprint: u64,
    pub entities: u64,
    /// Value bytes written (keys not counted).
    pub bytes: u64,
    pub seconds: f64,
    /// With `--prune`: what removing the vectors of entities gone from the sources did.
    pub pruned: Option<Pruned>,
}

impl ServiceSummary {
    pub fn entities_per_second(&self) -> f64 {
        self.entities as f64 / self.seconds.max(1e-9)
    }
}

/// The vector parts of one entity, in the service's canonical view order.
pub fn parts_for<'a>(
    service: &'a FeatureService,
    tables: &'a Tables,
    entity_key: &str,
    out: &mut Vec<encode::Part<'a>>,
) {
    out.clear();
    out.extend(service.views.iter().map(|sv| {
        encode::Part {
            row: tables.tables[sv.view]
                .as_ref()
                .and_then(|t: &'a LatestRows| t.rows.get(entity_key)),
            selected: &sv.features,
        }
    }));
}

/// Materializes every service of the repo. `progress` counts entities over all services.
pub async fn run(
    reg: &Registry,
    tables: &Tables,
    opts: &WriteOptions,
    progress: &ProgressBar,
) -> Result<Vec<ServiceSummary>, MaterializeError> {
    let conn = connect(&opts.redis).await?;
    let per_service: Vec<Vec<&str>> = reg
        .services
        .iter()
        .map(|s| service_entities(s, tables))
        .collect();
    progress.set_length(per_service.iter().map(|e| e.len() as u64).sum());
    let mut out = Vec::with_capacity(reg.services.len());
    for (service, entities) in reg.services.iter().zip(&per_service) {
        progress.set_message(service.name.clone());
        let mut summary =
            writer::write_service(reg, service, tables, entities, conn.clone(), opts, progress)
                .await?;
        if opts.prune {
            let mut c = conn.clone();
            summary.pruned =
                Some(prune::prune_service(reg, service, entities, &mut c, opts.batch_size).await?);
        }
        connection::mark_ready(&conn, &reg.project, &summary, opts.key_ttl_seconds)
            .await
            .map_err(|source| MaterializeError::Write {
                service: service.name.clone(),
                source,
            })?;
        out.push(summary);
    }
    progress.finish_and_clear();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{value::Kind, FloatList, Value};
    use ferry_repo::tables::load_tables;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    fn v(kind: Kind) -> Value {
        Value { kind: Some(kind) }
    }

    /// 2026-01-01T00:00:00Z in epoch seconds.
    const JAN_1: i64 = 1_767_225_600;

    /// ORDER_FILES with alpha's integer epochs believable (an integer before 2000 is refused as
    /// a unit mistake): u1's row at JAN_1 wins over the one a day before.
    fn files() -> [(&'static str, &'static str); 2] {
        [
            ORDER_FILES[0],
            (
                "data/alpha.csv",
                "merchant_id,user_id,ts,a,b,c\n7,u1,1767225600,\"[1, 2]\",x,3\n\
                 7,u1,1767139200,\"[9]\",old,1\n9,u3,1767225600,[],y,4\n",
            ),
        ]
    }

    #[test]
    fn vectors_take_the_latest_row_and_leave_missing_views_empty() {
        let (_dir, reg) = load_repo(ORDER_YAML, &files());
        let reg = reg.unwrap();
        let tables = load_tables(&reg).unwrap();
        let service = &reg.services[0];
        // Keys are "merchant_id␟user_id" (sorted by join key).
        assert_eq!(
            service_entities(service, &tables),
            ["7\u{1f}u1", "8\u{1f}u2", "9\u{1f}u3"]
        );

        let mut parts = Vec::new();
        let mut bytes = Vec::new();
        parts_for(service, &tables, "7\u{1f}u1", &mut parts);
        encode::encode_into(service.fingerprint, &parts, &mut bytes);
        let got = encode::decode(&bytes).unwrap();
        assert_eq!(got.fingerprint, service.fingerprint);
        // alpha (a, c) then zeta (z1, z2); alpha's latest row wins.
        assert_eq!(got.views[0].event_time_us, JAN_1 * 1_000_000);
        assert_eq!(
            got.views[0].values,
            [
                v(Kind::FloatListVal(FloatList {
                    values: vec![1.0, 2.0]
                })),
                v(Kind::Int32Val(3))
            ]
        );
        assert_eq!(
            got.views[1].values,
            [v(Kind::BoolVal(true)), v(Kind::DoubleVal(1.5))]
        );

        // u2 has no alpha row, u3 no zeta row: their parts are empty, the vector still has both.
        parts_for(service, &tables, "8\u{1f}u2", &mut parts);
        encode::encode_into(service.fingerprint, &parts, &mut bytes);
        let got = encode::decode(&bytes).unwrap();
        assert_eq!(got.views.len(), 2);
        assert!(got.views[0].values.is_empty());
        assert_eq!(got.views[0].event_time_us, 0);
        assert_eq!(
            got.views[1].values,
            [v(Kind::BoolVal(false)), v(Kind::DoubleVal(2.5))]
        );
        assert_eq!(got, encode::build(service.fingerprint, &parts));

        parts_for(service, &tables, "9\u{1f}u3", &mut parts);
        let got = encode::build(service.fingerprint, &parts);
        assert_eq!(
            got.views[0].values,
            [
                v(Kind::FloatListVal(FloatList { values: vec![] })),
                v(Kind::Int32Val(4))
            ]
        );
        assert!(got.views[1].values.is_empty());

        let summary: Vec<(&str, u64, usize)> = tables
            .summaries
            .iter()
            .map(|s| (s.view.as_str(), s.rows_read, s.entities))
            .collect();
        assert_eq!(summary, [("zeta", 2, 2), ("alpha", 3, 2)]);
    }
}
