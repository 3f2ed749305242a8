//! The matrix's cases of #35 on what whoever can write Redis does to the replicas' shared state
//! (`ferry serve --shared-state`), and on sequences: one written at 2^60 into the shared record,
//! one signed at 2^60 on the pull path. Each is refused and counted; the served snapshot stays,
//! and the next install replaces the record.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry::serve::api::{Pushed, Status};
use ferry_integration_tests::control_plane::{ControlPlane, TOKEN};
use ferry_integration_tests::http::Conn;
use ferry_protos::v1::{SignedSnapshot, Snapshot};
use prost::Message;

use super::{Ctx, Fut};

/// 2^60: far over `MAX_SEQUENCE` (2^50), and where a Lua double has long stopped counting.
pub const HIGH: u64 = 1 << 60;

/// A `ferry serve --shared-state` replica of the stack's repo on the stack's Redis, signing
/// with the stack's key, under its own cluster name.
pub fn replica(c: &Ctx, cluster: &str) -> ControlPlane {
    let dir = c.stack.dir.path().join(cluster);
    let _ = std::fs::create_dir_all(&dir);
    let (url, key) = (
        c.stack.redis.url(),
        c.stack.signing_key.display().to_string(),
    );
    let args = [
        "--shared-state",
        "--redis",
        &url,
        "--cluster-name",
        cluster,
        "--shared-poll-ms",
        "100",
        "--signing-key",
        &key,
    ];
    tokio::task::block_in_place(|| ControlPlane::start_with_args(&dir, &c.stack.repo, &args))
}

/// `redis-cli` on the stack's Redis, as anyone holding its password would: its output.
pub fn redis_cli(c: &Ctx, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(["-p", &c.stack.redis.port.to_string()])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The shared record's key of `cluster`.
pub fn current_key(cluster: &str) -> String {
    format!("ferry:cp:{{{cluster}}}:current")
}

/// `ferry_shared_records_refused_total{reason}` on the replica's `/metrics`.
pub fn refused_total(cp: &ControlPlane, reason: &str) -> u64 {
    let prefix = format!("ferry_shared_records_refused_total{{reason=\"{reason}\"}} ");
    cp.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Polls the replica's `/status` until `done`, for at most 10 s.
pub async fn until(
    cp: &ControlPlane,
    what: &str,
    done: impl Fn(&Status) -> bool,
) -> Result<Status, String> {
    let start = Instant::now();
    loop {
        let status = tokio::task::block_in_place(|| cp.status());
        if done(&status) {
            return Ok(status);
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!("{what}: not within 10 s: {status:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pushes the replica's snapshot with one more protected path: what it answered.
pub async fn push_one_more(cp: &ControlPlane, path: &str) -> Result<Pushed, String> {
    let auth = format!("Bearer {TOKEN}");
    let headers = [("authorization", auth.as_str())];
    let got = Conn::open(cp.http_port)
        .await
        .send("GET", "/v1/snapshot", &headers, Bytes::new())
        .await;
    // The replica signs: the answer is an envelope, the snapshot inside it.
    let envelope = SignedSnapshot::decode(got.body.as_ref())
        .map_err(|e| format!("GET /v1/snapshot: {} {e}", got.status))?;
    let mut snap = Snapshot::decode(envelope.snapshot.as_slice()).map_err(|e| e.to_string())?;
    snap.protected_paths.push(path.to_owned());
    let answer = Conn::open(cp.http_port)
        .await
        .send("POST", "/v1/snapshot", &headers, snap.encode_to_vec())
        .await;
    let body = String::from_utf8_lossy(&answer.body).into_owned();
    match answer.status {
        200 => serde_json::from_str(&body).map_err(|e| format!("{e}: {body}")),
        code => Err(format!("push: {code} {body}")),
    }
}

pub fn shared_sequence_at_two_to_the_60(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let cluster = "matrix-sequence";
        let cp = replica(c, cluster);
        let before = until(&cp, "the replica serves", |s| s.snapshot.is_some()).await?;
        let (version, sequence) = (
            before.snapshot.map(|s| s.version).unwrap_or_default(),
            before.shared_state.map_or(0, |s| s.sequence),
        );
        let key = current_key(cluster);
        redis_cli(c, &["HSET", &key, "sequence", &HIGH.to_string()])?;
        let high = HIGH.to_string();
        let refused = until(&cp, "the refusal on /status", |s| {
            s.shared_state
                .as_ref()
                .and_then(|s| s.refused_record.as_deref())
                .is_some_and(|r| r.contains(&high))
        })
        .await?;
        let counted = tokio::task::block_in_place(|| refused_total(&cp, "sequence_out_of_range"));
        let served = refused.snapshot.map(|s| s.version).unwrap_or_default();
        let held = refused.shared_state.map_or(0, |s| s.sequence);
        if counted != 1 || served != version || held != sequence {
            return Err(format!(
                "counted {counted}, serving {served} (was {version}) at {held} (was {sequence})"
            ));
        }
        // The next push replaces the record, above the sequence the replica held.
        let pushed = push_one_more(&cp, "/v9/after-2-60").await?;
        let stored = redis_cli(c, &["HGET", &key, "sequence"])?;
        if pushed.sequence <= sequence
            || pushed.sequence > ferry_protos::signed::MAX_SEQUENCE
            || stored != pushed.sequence.to_string()
        {
            return Err(format!(
                "pushed at {} (held {sequence}), stored {stored}",
                pushed.sequence
            ));
        }
        Ok(format!(
            "not adopted: counted (sequence_out_of_range), on /status, {version} still served at \
             {sequence}; the next push stored at {}",
            pushed.sequence
        ))
    })
}

pub fn pull_sequence_over_the_bound(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        // Validly signed with the deployment's key: only the bound refuses it.
        let signer = ferry::serve::signing::Signer::from_file(&c.stack.signing_key, None)
            .map_err(|e| e.to_string())?;
        let held = c.pull.held_envelope();
        let envelope = signer.envelope(HIGH, &Bytes::from(held.snapshot));
        let refusal = format!("its sequence {HIGH} is over the highest a signer issues");
        c.pull.refused(&c.stack, envelope.to_vec(), &refusal).await
    })
}

/// Writes `text` and the binary `field` into the shared record of `cluster` with one
/// `redis-cli -x HSET` (it reads the last value from stdin), as a Redis writer without the
/// deployment's key would: one command, so a replica polling in between never reads the new
/// sequence beside the old signature.
fn hset_binary(
    c: &Ctx,
    cluster: &str,
    text: &[(&str, String)],
    field: &str,
    value: &[u8],
) -> Result<(), String> {
    let key = current_key(cluster);
    let port = c.stack.redis.port.to_string();
    let mut args: Vec<&str> = vec!["-p", &port, "-x", "HSET", &key];
    for (k, v) in text {
        args.push(k);
        args.push(v);
    }
    args.push(field);
    let mut child = Command::new("redis-cli")
        .args(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    use std::io::Write as _;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(value)
        .map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("redis-cli -x HSET {key}: {status}"));
    }
    Ok(())
}

pub fn forged_shared_record(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let cluster = "matrix-forged";
        let cp = replica(c, cluster);
        let before = until(&cp, "the replica serves", |s| s.snapshot.is_some()).await?;
        let version = before.snapshot.map(|s| s.version).unwrap_or_default();
        let sequence = before.shared_state.map_or(0, |s| s.sequence);
        // What a writer of Redis would want every Envoy to run: the served snapshot without its
        // protected paths, at a higher sequence, signed by a key of its own, then not at all.
        let auth = format!("Bearer {TOKEN}");
        let served = Conn::open(cp.http_port)
            .await
            .send(
                "GET",
                "/v1/snapshot",
                &[("authorization", auth.as_str())],
                Bytes::new(),
            )
            .await;
        let envelope = SignedSnapshot::decode(served.body.as_ref()).map_err(|e| e.to_string())?;
        let mut snap = Snapshot::decode(envelope.snapshot.as_slice()).map_err(|e| e.to_string())?;
        snap.protected_paths.clear();
        snap.version = "forged".into();
        let bytes = snap.encode_to_vec();
        let mut outcomes = Vec::new();
        for (step, (reason, says, value)) in [
            (
                "unknown_key",
                "'k-forger', which is not configured",
                ferry_test_support::signed::sign(
                    &ferry_test_support::signed::key(7),
                    "k-forger",
                    sequence + 1_000,
                    &bytes,
                )
                .encode_to_vec(),
            ),
            ("unsigned", "has no signature", Vec::new()),
        ]
        .into_iter()
        .enumerate()
        {
            let at = sequence + 1_000 * (step as u64 + 1);
            let text = [
                ("sequence", at.to_string()),
                ("version", "forged".to_owned()),
            ];
            hset_binary(c, cluster, &text, "signed", &value)?;
            let status = until(&cp, "the refusal on /status", |s| {
                s.shared_state
                    .as_ref()
                    .and_then(|s| s.refused_record.as_deref())
                    .is_some_and(|r| r.contains(says))
            })
            .await?;
            let counted = tokio::task::block_in_place(|| refused_total(&cp, reason));
            let now = status.snapshot.map(|s| s.version).unwrap_or_default();
            let held = status.shared_state.map_or(0, |s| s.sequence);
            if counted != 1 || now != version || held != sequence {
                return Err(format!(
                    "{reason}: counted {counted}, serving {now} (was {version}) at {held} (was {sequence})"
                ));
            }
            outcomes.push(reason);
        }
        // The next push replaces the forged record.
        let pushed = push_one_more(&cp, "/v9/after-forgery").await?;
        let stored = redis_cli(c, &["HGET", &current_key(cluster), "sequence"])?;
        if stored != pushed.sequence.to_string() {
            return Err(format!("pushed at {}, stored {stored}", pushed.sequence));
        }
        // Deleted, then the older record (validly signed, once served) written back: the
        // replica does not go back to it.
        redis_cli(c, &["DEL", &current_key(cluster)])?;
        // Polled (every 100 ms) while deleted, so the replica has seen no record at all.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let text = [
            ("sequence", envelope.sequence.to_string()),
            ("version", version.clone()),
        ];
        hset_binary(c, cluster, &text, "signed", &served.body)?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = tokio::task::block_in_place(|| cp.status());
        let now = after.snapshot.map(|s| s.version).unwrap_or_default();
        if now != pushed.version {
            return Err(format!(
                "after a deletion and a replay of {version}: serving {now}, not {}",
                pushed.version
            ));
        }
        Ok(format!(
            "not served: {version} stays at {sequence}; counted ({}), on /status; the next push \
             replaces the record at {}; deleted and the older signed record written back: still \
             serving the pushed one",
            outcomes.join(", "),
            pushed.sequence
        ))
    })
}
