//! Writes in Feast's layout (a Feast-backed repo): exactly what Feast 0.67's
//! `RedisOnlineStore.online_write_batch` writes for the same rows. One hash per entity, keyed by
//! entity key serialization v3 followed by the project; per view the field `_ts:VIEW` holding a
//! `google.protobuf.Timestamp` and one field per feature (murmur3 of `VIEW:FEATURE`) holding a
//! `feast.types.Value`; the key's expiry set to `key_ttl_seconds` after every write when the
//! store has one. Feast's skip rule: a row is skipped when the stored `_ts:VIEW` is set and the
//! row's event time is not after it (compared in nanoseconds; an equal time is skipped), unless
//! the store sets `skip_dedup`.
//!
//! Feast reads the timestamp, then writes, in two unguarded round trips; Ferry does both in one
//! script per (entity, view), so two writers of one view never interleave between them.

use ferry_protos::feast_proto as fp;
use ferry_protos::v1::{self, value::Kind};
use ferry_redis::Connection;
use prost::Message as _;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::pace::Admitted;
use super::rows::{Row, ViewRows};
use ferry_vector_store::merge::Outcome;

/// Writes `ARGV[6..]` (field, value pairs, `_ts:VIEW` among them) into the hash `KEYS[1]`
/// unless dedup is on (`ARGV[4]` = 1) and the stored field `ARGV[1]` (`_ts:VIEW`) holds a
/// timestamp at or after the row's (`ARGV[2]` seconds, `ARGV[3]` nanos); then sets the expiry
/// `ARGV[5]` (0: none). Returns 1 when written, 0 when skipped as older. The stored Timestamp
/// is decoded here: two varint fields (1: seconds, 2: nanos).
const WRITE: &str = r"
local function varint(s, i)
  local n, mul = 0, 1
  while i <= #s do
    local b = string.byte(s, i)
    i = i + 1
    n = n + (b % 128) * mul
    if b < 128 then return n, i end
    mul = mul * 128
  end
  return n, i
end
if ARGV[4] == '1' then
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if cur and #cur > 0 then
    local secs, nanos, i = 0, 0, 1
    while i <= #cur do
      local tag, v
      tag, i = varint(cur, i)
      v, i = varint(cur, i)
      if tag == 8 then secs = v elseif tag == 16 then nanos = v end
    end
    local new_secs, new_nanos = tonumber(ARGV[2]), tonumber(ARGV[3])
    if new_secs < secs or (new_secs == secs and new_nanos <= nanos) then return 0 end
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
if ARGV[5] ~= '0' then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
return 1
";

/// Keys one write works on at once over the multiplexed connection (each also holds one of the
/// writer's permits shared by every write, and waits for its slot of the writer's pace).
const IN_FLIGHT: usize = 64;

/// One (entity, view) row to write, with the id of the request row it comes from.
struct Item {
    key: Vec<u8>,
    args: Vec<Vec<u8>>,
    id: usize,
}

/// The items of `rows`, each with its row id (ids count rows across views in order, as
/// [`super::count_rows`] does), or the first problem (a key Feast could not serialize).
fn items(project: &str, rows: &[ViewRows]) -> Result<Vec<Item>, String> {
    let mut out = Vec::new();
    let mut id = 0;
    for vr in rows {
        let schema = &vr.view.schema;
        let opts = schema.feast.unwrap_or_default();
        let join_keys: Vec<v1::FeastJoinKey> = schema
            .entity_keys
            .iter()
            .map(|k| v1::FeastJoinKey {
                name: k.join_key.clone(),
                int64: k.r#type == v1::ValueType::Int64 as i32,
            })
            .collect();
        let fields: Vec<Vec<u8>> = schema
            .features
            .iter()
            .map(|f| ferry_protos::feast::feature_field(&schema.name, &f.name))
            .collect();
        for row in &vr.rows {
            let key = ferry_protos::feast::hash_key(project, &join_keys, &row.entity_key)?;
            out.push(Item {
                key,
                args: args(&schema.name, &fields, row, &opts),
                id,
            });
            id += 1;
        }
    }
    Ok(out)
}

fn args(view: &str, fields: &[Vec<u8>], row: &Row, opts: &v1::FeastWrite) -> Vec<Vec<u8>> {
    let (secs, nanos) = (
        row.event_time_us.div_euclid(1_000_000),
        row.event_time_us.rem_euclid(1_000_000) * 1000,
    );
    let ts_field = ferry_protos::feast::timestamp_field(view);
    let ts = fp::Timestamp {
        seconds: secs,
        nanos: i32::try_from(nanos).unwrap_or_default(),
    }
    .encode_to_vec();
    let mut args = vec![
        ts_field.clone(),
        secs.to_string().into_bytes(),
        nanos.to_string().into_bytes(),
        if opts.skip_dedup {
            b"0".to_vec()
        } else {
            b"1".to_vec()
        },
        opts.key_ttl_seconds.max(0).to_string().into_bytes(),
        ts_field,
        ts,
    ];
    for (field, value) in fields.iter().zip(&row.values) {
        args.push(field.clone());
        args.push(feast_value(value).encode_to_vec());
    }
    args
}

/// Ferry's value as Feast's `feast.types.Value` (a null is a Value with no kind, as Feast
/// writes a missing value).
pub fn feast_value(v: &v1::Value) -> fp::Value {
    use fp::value::Val;
    let val = v.kind.as_ref().map(|k| match k {
        Kind::Int32Val(x) => Val::Int32Val(*x),
        Kind::Int64Val(x) => Val::Int64Val(*x),
        Kind::FloatVal(x) => Val::FloatVal(*x),
        Kind::DoubleVal(x) => Val::DoubleVal(*x),
        Kind::BoolVal(x) => Val::BoolVal(*x),
        Kind::StringVal(x) => Val::StringVal(x.clone()),
        Kind::BytesVal(x) => Val::BytesVal(x.clone()),
        Kind::FloatListVal(l) => Val::FloatListVal(fp::FloatList {
            val: l.values.clone(),
        }),
    });
    fp::Value { val }
}

/// What writing did: (row id, outcome) per row written or skipped, and the first error.
pub async fn apply(
    conn: &Connection,
    permits: &Arc<Semaphore>,
    pace: Option<&Arc<Admitted>>,
    project: &str,
    rows: &[ViewRows],
) -> (Vec<(usize, Outcome)>, Option<String>) {
    let items = match items(project, rows) {
        Ok(items) => items,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let sha = script_sha(conn).await;
    let mut outcomes = Vec::with_capacity(items.len());
    let mut error = None;
    let mut set: JoinSet<(usize, redis::RedisResult<i64>)> = JoinSet::new();
    for item in items {
        while set.len() >= IN_FLIGHT {
            collect(set.join_next().await, &mut outcomes, &mut error);
        }
        if let Some(pace) = pace {
            pace.key().await;
        }
        let (c, sha, permits) = (conn.clone(), sha.clone(), permits.clone());
        set.spawn(async move {
            let Ok(_permit) = permits.acquire().await else {
                return (
                    item.id,
                    Err((redis::ErrorKind::Client, "the writer closed").into()),
                );
            };
            (item.id, run(c, sha.as_deref(), &item).await)
        });
    }
    while let Some(done) = set.join_next().await {
        collect(Some(done), &mut outcomes, &mut error);
    }
    (outcomes, error)
}

/// The script's hash, loaded once per request (None: EVAL with its text).
async fn script_sha(conn: &Connection) -> Option<String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(WRITE)
        .query_async(&mut conn.clone())
        .await
        .ok()
}

/// One item: EVALSHA, or EVAL with the text when the server does not know the hash (a Cluster
/// node other than the one that loaded it, or a restarted Redis).
async fn run(mut c: Connection, sha: Option<&str>, item: &Item) -> redis::RedisResult<i64> {
    if let Some(sha) = sha {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(1).arg(&item.key).arg(&item.args);
        match cmd.query_async(&mut c).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {}
            done => return done,
        }
    }
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(WRITE).arg(1).arg(&item.key).arg(&item.args);
    cmd.query_async(&mut c).await
}

type Joined = Option<Result<(usize, redis::RedisResult<i64>), tokio::task::JoinError>>;

fn collect(done: Joined, outcomes: &mut Vec<(usize, Outcome)>, error: &mut Option<String>) {
    match done {
        Some(Ok((id, Ok(1)))) => outcomes.push((id, Outcome::Written)),
        Some(Ok((id, Ok(_)))) => outcomes.push((id, Outcome::SkippedOlder)),
        Some(Ok((_, Err(e)))) => {
            error.get_or_insert_with(|| format!("redis: {e}"));
        }
        Some(Err(e)) => {
            error.get_or_insert_with(|| format!("a write task failed: {e}"));
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_timestamps_encode_as_feast_writes_them() {
        // Bytes as Feast 0.67's Python SDK serializes ValueProto(int64_val=41),
        // ValueProto(string_val="gold"), ValueProto() and Timestamp(seconds=1700000000,
        // nanos=123000).
        let int = v1::Value {
            kind: Some(Kind::Int64Val(41)),
        };
        assert_eq!(feast_value(&int).encode_to_vec(), [0x20, 41]);
        let s = v1::Value {
            kind: Some(Kind::StringVal("gold".into())),
        };
        assert_eq!(feast_value(&s).encode_to_vec(), b"\x12\x04gold");
        assert!(feast_value(&v1::Value { kind: None })
            .encode_to_vec()
            .is_empty());
        let row = Row {
            entity_key: "u1".into(),
            event_time_us: 1_700_000_000_000_123,
            values: vec![int],
        };
        let a = args("v", &[vec![1, 2, 3, 4]], &row, &v1::FeastWrite::default());
        assert_eq!(a[0], b"_ts:v");
        assert_eq!(a[1], b"1700000000");
        assert_eq!(a[2], b"123000");
        assert_eq!(a[3], b"1");
        assert_eq!(a[4], b"0");
        assert_eq!(
            a[6],
            fp::Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_000
            }
            .encode_to_vec()
        );
        assert_eq!(a[7], [1, 2, 3, 4]);
        assert_eq!(a[8], [0x20, 41]);
    }
}
