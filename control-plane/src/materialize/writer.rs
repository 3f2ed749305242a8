//! Pipelined bulk writes: `batch_size` entities per round trip (`SET ... NX GET` each, then the
//! merge rule for the vectors that already exist: [`super::batch`]), a few batches in flight over
//! one multiplexed connection so encoding overlaps the network.

use std::time::Instant;

use ferry_redis::{Connection, RedisArgs};
use indicatif::ProgressBar;
use tokio::task::JoinSet;

use ferry_vector_store::encode;

use super::{batch, parts_for, MaterializeError, ServiceSummary, Tables};
use ferry_repo::{FeatureService, Registry};

/// How vectors are written.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Where Redis is (one server or a Cluster) and how to connect.
    pub redis: RedisArgs,
    /// Entities per batch (one round trip each).
    pub batch_size: usize,
    /// Pipelines in flight at once; more hides latency, at the cost of memory.
    pub in_flight: usize,
    /// Expiry of written keys (SET ... EX), so vectors of an old fingerprint go away by
    /// themselves after a schema change; `None` keeps keys forever.
    pub key_ttl_seconds: Option<u64>,
    /// After writing a service, remove the vectors of its entities no longer in the sources.
    pub prune: bool,
}

impl WriteOptions {
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self::with_redis(RedisArgs::with_url(redis_url))
    }

    pub fn with_redis(redis: RedisArgs) -> Self {
        WriteOptions {
            redis,
            batch_size: 1000,
            in_flight: 4,
            key_ttl_seconds: None,
            prune: false,
        }
    }
}

type Batch = Result<u64, redis::RedisError>;

pub(super) async fn write_service(
    reg: &Registry,
    service: &FeatureService,
    tables: &Tables,
    entities: &[&str],
    conn: Connection,
    opts: &WriteOptions,
    progress: &ProgressBar,
) -> Result<ServiceSummary, MaterializeError> {
    let start = Instant::now();
    let fail = |source| MaterializeError::Write {
        service: service.name.clone(),
        source,
    };
    // The key of an entity is this prefix followed by the entity key (see ferry_protos::redis_key).
    let prefix = ferry_protos::redis_key(&reg.project, &service.name, service.fingerprint, "");
    let mut key = String::with_capacity(prefix.len() + 32);
    let mut value = Vec::with_capacity(256);
    let mut parts = Vec::with_capacity(service.views.len());
    let mut bytes = 0u64;
    let mut in_flight: JoinSet<Batch> = JoinSet::new();

    for chunk in entities.chunks(opts.batch_size.max(1)) {
        let mut batch = Vec::with_capacity(chunk.len());
        for entity in chunk {
            parts_for(service, tables, entity, &mut parts);
            encode::encode_into(service.fingerprint, &parts, &mut value);
            bytes += value.len() as u64;
            key.clear();
            key.push_str(&prefix);
            key.push_str(entity);
            batch.push((key.clone(), value.clone()));
        }
        while in_flight.len() >= opts.in_flight.max(1) {
            finish_one(&mut in_flight, progress).await.map_err(fail)?;
        }
        let c = conn.clone();
        let (n, ttl) = (chunk.len() as u64, opts.key_ttl_seconds);
        in_flight.spawn(async move { batch::write_batch(&c, batch, ttl).await.map(|_| n) });
    }
    while !in_flight.is_empty() {
        finish_one(&mut in_flight, progress).await.map_err(fail)?;
    }
    Ok(ServiceSummary {
        service: service.name.clone(),
        fingerprint: service.fingerprint,
        entities: entities.len() as u64,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
        pruned: None,
    })
}

async fn finish_one(
    set: &mut JoinSet<Batch>,
    progress: &ProgressBar,
) -> Result<(), redis::RedisError> {
    match set.join_next().await {
        Some(Ok(Ok(n))) => {
            progress.inc(n);
            Ok(())
        }
        Some(Ok(Err(e))) => Err(e),
        Some(Err(join)) => Err(redis::RedisError::from(std::io::Error::other(
            join.to_string(),
        ))),
        None => Ok(()),
    }
}
