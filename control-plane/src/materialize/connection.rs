//! How `ferry materialize` reaches Redis and sends a batch: one Redis or a Redis Cluster (see
//! `ferry-redis`), and the completion marker `/readyz` of the reader looks for.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_redis::{Connection, RedisArgs, Timeouts};

use super::{MaterializeError, ServiceSummary};

/// A bulk write may legitimately take longer than the client's default 500 ms per response.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects now, so that a wrong URL, password or CA is reported before any source is read.
pub async fn connect(redis: &RedisArgs) -> Result<Connection, MaterializeError> {
    let target = redis.target()?;
    let timeouts = Timeouts {
        connect: CONNECT_TIMEOUT,
        response: Some(RESPONSE_TIMEOUT),
    };
    target
        .connect(timeouts)
        .await
        .map_err(|source| MaterializeError::Connect {
            url: target.to_string(),
            source,
        })
}

/// Records that every vector of the service at its fingerprint is written (the reader's
/// `/readyz`), with what was written. Expires with the vectors when they expire.
pub(super) async fn mark_ready(
    conn: &Connection,
    project: &str,
    summary: &ServiceSummary,
    key_ttl_seconds: Option<u64>,
) -> redis::RedisResult<()> {
    let key = ferry_protos::ready_key(project, &summary.service, summary.fingerprint);
    let written_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let value = serde_json::json!({
        "entities": summary.entities,
        "bytes": summary.bytes,
        "written_at_unix": written_at,
    })
    .to_string();
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(value);
    if let Some(ttl) = key_ttl_seconds {
        set.arg("EX").arg(ttl);
    }
    set.exec_async(&mut conn.clone()).await
}
