//! The matrix's cases of #37 on feature writes: bodies over a bound of their content (a cell, a
//! list, the row count) refused 413 where the bound is crossed, and a write flood over
//! `--max-concurrent-writes` answered 429 with `Retry-After` before any body is read, and the
//! write route over mTLS (`ferry envoy-config --write-server-san`), and Envoy's bound on the
//! write route (`--write-max-requests`) against clients that ignore every refusal.

use std::time::Duration;

use std::process::Command;

use ferry_integration_tests::control_plane::WRITE_TOKEN;
use ferry_integration_tests::http::{get_ok, Conn};
use ferry_integration_tests::secure::{control_plane, CP_NAME, ENVOY, READER_NAME};
use ferry_integration_tests::{bin, free_port, run, start_envoy, tls, wasm, Proc};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::trust::{plain_serve, plain_serve_repo};
use super::{Ctx, Fut};

/// Write slots of the case's control plane.
const SLOTS: usize = 2;

/// A loopback `ferry serve` with the write token, writing the stack's Redis, `SLOTS` writes at
/// once; its HTTP port.
fn writer(c: &Ctx, name: &'static str) -> Result<(Proc, u16), String> {
    let port = free_port();
    let mut cmd = plain_serve(c, name, port);
    cmd.args(["--write-token", WRITE_TOKEN])
        .args(["--redis", &c.stack.redis.url()])
        .args(["--max-concurrent-writes", &SLOTS.to_string()]);
    let dir = c.stack.dir.path().join(name);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(tokio::task::block_in_place(|| {
        let mut cp = Proc::start(name, cmd, &dir);
        cp.wait_ready(|| get_ok(port, "/healthz"), name);
        (cp, port)
    }))
}

async fn push(port: u16, body: String) -> (u16, Option<String>, String) {
    let auth = format!("Bearer {WRITE_TOKEN}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let r = Conn::open(port)
        .await
        .send("POST", "/push", &headers, body)
        .await;
    let code = r.header("x-ferry-error").map(str::to_owned);
    (
        r.status,
        code,
        String::from_utf8_lossy(&r.body).into_owned(),
    )
}

/// A `/push` of `profile_push` whose `age` column is `cells`, then `tail` (JSON or not).
fn profile(cells: &str, tail: &str) -> String {
    format!(r#"{{"push_source_name": "profile_push", "df": {{"age": [{cells}]{tail}"#)
}

pub fn oversize_content(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let (mut cp, port) = writer(c, "bounded-writes")?;
        let long = format!("\"{}\"", "x".repeat(64 * 1024 + 1));
        let list = format!("[{}]", vec!["0.5"; 4097].join(","));
        let rows = vec!["1"; 100_001].join(",");
        // Each body is cut after the offending cell: a parser that read on would call it
        // malformed (422); the bound is found where it is crossed.
        let cases = [
            (
                "a 64 KiB + 1 string cell",
                profile(&format!("1, {long}"), ", "),
                "cell_too_large",
                "row 1, column 'age'",
            ),
            (
                "a list of 4,097 items",
                profile(&list, ", "),
                "list_too_long",
                "4096 items",
            ),
            (
                "100,001 rows",
                profile(&rows, ", "),
                "too_many_rows",
                "100000 rows",
            ),
        ];
        let mut seen = Vec::new();
        for (what, body, code, names) in cases {
            let (status, got, text) = push(port, body).await;
            if status != 413 || got.as_deref() != Some(code) || !text.contains(names) {
                cp.kill();
                return Err(format!(
                    "{what}: {status} {got:?} {}",
                    &text[..text.len().min(300)]
                ));
            }
            seen.push(format!("{what}: 413 {code}"));
        }
        // Within the bounds the same body shape is read and checked as before (422: the
        // view's other columns are missing), never refused as too large.
        let (status, got, _) = push(port, profile("1, 2", "}}")).await;
        cp.kill();
        if status != 422 || got.as_deref() != Some("invalid_rows") {
            return Err(format!("a body within the bounds: {status} {got:?}"));
        }
        seen.push(oversize_vector(c).await?);
        Ok(format!(
            "{} (each body cut right after: refused where the bound is crossed); within them: 422 invalid_rows",
            seen.join(", ")
        ))
    })
}

/// A view of five string features (every cell within its bound, a row of five long ones over
/// the vector's), added to a copy of the stack's repo with a push source.
const WIDE_VIEW: &str = "  - name: notes
    entities: [user]
    source: {path: data/notes.csv, timestamp_field: event_timestamp}
    features:
      - {name: n1, type: string}
      - {name: n2, type: string}
      - {name: n3, type: string}
      - {name: n4, type: string}
      - {name: n5, type: string}
";

/// A row whose features of one view encode over the stored vector's 256 KiB: 413
/// `vector_too_large`, from a `ferry serve` of a repo with such a view.
async fn oversize_vector(c: &Ctx) -> Result<String, String> {
    let repo = c.stack.dir.path().join("wide-repo");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(&c.stack.repo)
        .arg(&repo)
        .status()
        .map_err(|e| e.to_string())?;
    if !copy.success() {
        return Err("copying the repo failed".into());
    }
    let yaml_path = repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).map_err(|e| e.to_string())?;
    let yaml = yaml
        .replacen(
            "feature_views:\n",
            &format!("feature_views:\n{WIDE_VIEW}"),
            1,
        )
        .replacen(
            "push_sources:\n",
            "push_sources:\n  - {name: notes_push, views: [notes]}\n",
            1,
        );
    std::fs::write(&yaml_path, yaml).map_err(|e| e.to_string())?;
    std::fs::write(
        repo.join("data/notes.csv"),
        "user_id,event_timestamp,n1,n2,n3,n4,n5\nu000001,2026-01-01T00:00:00Z,a,b,c,d,e\n",
    )
    .map_err(|e| e.to_string())?;
    let port = free_port();
    let mut cmd = plain_serve_repo(c, &repo, "wide-writes", port);
    cmd.arg("--write-token")
        .arg(WRITE_TOKEN)
        .args(["--redis", &c.stack.redis.url()]);
    let dir = c.stack.dir.path().join("wide-writes");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut cp = tokio::task::block_in_place(|| {
        let mut cp = Proc::start("wide-writes", cmd, &dir);
        cp.wait_ready(|| get_ok(port, "/healthz"), "wide-writes");
        cp
    });
    let long = "x".repeat(60_000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let body = serde_json::json!({
        "push_source_name": "notes_push",
        "df": {
            "user_id": ["u000001", "u000002"], "event_timestamp": [now, now],
            "n1": ["a", long], "n2": ["b", long], "n3": ["c", long], "n4": ["d", long],
            "n5": ["e", long],
        },
    })
    .to_string();
    let (status, got, text) = push(port, body).await;
    cp.kill();
    if status != 413 || got.as_deref() != Some("vector_too_large") || !text.contains("view 'notes'")
    {
        return Err(format!(
            "a 300 kB row: {status} {got:?} {}",
            &text[..text.len().min(300)]
        ));
    }
    Ok("a row of five 60 kB strings of one view (each cell within its bound): 413 vector_too_large naming row 1 and the view".into())
}

/// Opens a write whose body never comes: it holds a slot until the server's read timeout.
async fn held_write(port: u16) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "POST /push HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {WRITE_TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// `ferry serve`'s `/metrics` (no slot needed).
async fn metrics(port: u16) -> String {
    let r = Conn::open(port)
        .await
        .send("GET", "/metrics", &[], String::new())
        .await;
    String::from_utf8_lossy(&r.body).into_owned()
}

fn metric<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

pub fn write_flood(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let (mut cp, port) = writer(c, "write-flood")?;
        let mut held = Vec::new();
        for _ in 0..SLOTS {
            held.push(held_write(port).await?);
        }
        // The held writes reach their handlers in their own time: wait until both hold a slot
        // (the gauge needs none), so that no probe below can overtake one.
        let mut holding = false;
        for _ in 0..100 {
            if metric(&metrics(port).await, "ferry_writes_in_flight") == Some(&SLOTS.to_string()) {
                holding = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !holding {
            cp.kill();
            return Err(format!("the {SLOTS} held writes never held the slots"));
        }
        let body = profile("1", "}}");
        let auth = format!("Bearer {WRITE_TOKEN}");
        for _ in 0..20 {
            let r = Conn::open(port)
                .await
                .send(
                    "POST",
                    "/push",
                    &[("authorization", auth.as_str())],
                    body.clone(),
                )
                .await;
            if r.status != 429
                || r.header("retry-after") != Some("1")
                || r.header("x-ferry-error") != Some("too_many_writes")
            {
                cp.kill();
                return Err(format!(
                    "slots held, a write answered {} {:?} {:?}",
                    r.status,
                    r.header("retry-after"),
                    r.header("x-ferry-error")
                ));
            }
        }
        // The held writes go away: their slots are released, the next write is served.
        drop(held);
        let mut freed = None;
        for _ in 0..50 {
            let (status, _, _) = push(port, body.clone()).await;
            if status != 429 {
                freed = Some(status);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = metrics(port).await;
        cp.kill();
        let counted = metric(
            &text,
            "ferry_write_refusals_total{reason=\"too_many_writes\"}",
        );
        match (freed, counted) {
            (Some(status), Some("20")) => Ok(format!(
                "{SLOTS} writes whose bodies never come hold --max-concurrent-writes {SLOTS} \
                 (ferry_writes_in_flight {SLOTS}): 20 more answered 429 Retry-After: 1 \
                 too_many_writes, their bodies dropped unparsed, counted; freed, the next write \
                 was answered {status}"
            )),
            _ => Err(format!("then {freed:?}, counted {counted:?}")),
        }
    })
}

/// Keys a second of the paced case's control plane, and the rows its write holds: 2 s of keys.
const PACE: u32 = 200;
const PACED_ROWS: usize = 400;

pub fn paced_write(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let port = free_port();
        let mut cmd = plain_serve(c, "write-paced", port);
        cmd.args(["--write-token", WRITE_TOKEN])
            .args(["--redis", &c.stack.redis.url()])
            .args(["--max-write-keys-per-second", &PACE.to_string()]);
        let dir = c.stack.dir.path().join("write-paced");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut cp = tokio::task::block_in_place(|| {
            let mut cp = Proc::start("write-paced", cmd, &dir);
            cp.wait_ready(|| get_ok(port, "/healthz"), "write-paced");
            cp
        });
        let (status, code, body) = push(port, profile_rows(PACED_ROWS)).await;
        let text = metrics(port).await;
        cp.kill();
        let written = metric(&text, "ferry_write_rows_total{result=\"written\"}");
        let waited: f64 = metric(&text, "ferry_write_paced_seconds_total")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        // 400 keys at 200 a second take 2 s: every key after the first few waits for its slot,
        // and the waits of keys waiting at once add up (the counter sums them): over 1 s however
        // the machine runs, and 0 without the pace.
        if status == 200 && written == Some(&PACED_ROWS.to_string()) && waited > 1.0 {
            Ok(format!(
                "a write of {PACED_ROWS} rows under --max-write-keys-per-second {PACE}: answered \
                 200, every row written, its keys waited {waited:.2} s for their slots \
                 (ferry_write_paced_seconds_total)"
            ))
        } else {
            Err(format!(
                "answered {status} {code:?} {body}; written {written:?}, waited {waited} s"
            ))
        }
    })
}

/// `rows` valid `profile_push` rows of distinct users (event time now), as one body.
fn profile_rows(rows: usize) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let users: Vec<String> = (0..rows).map(|i| format!("paced{i:05}")).collect();
    serde_json::json!({
        "push_source_name": "profile_push",
        "df": {
            "user_id": users, "event_timestamp": vec![now; rows], "age": vec![30; rows],
            "credit_score": vec![600.0; rows], "account_tier": vec!["t"; rows],
            "is_verified": vec![true; rows], "signup_days": vec![30; rows],
        },
    })
    .to_string()
}

/// A valid `profile_push` row for `user` (event time now), as a body.
fn profile_row(user: &str, age: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    serde_json::json!({
        "push_source_name": "profile_push",
        "df": {
            "user_id": [user], "event_timestamp": [now], "age": [age],
            "credit_score": [600.0], "account_tier": ["t"], "is_verified": [true],
            "signup_days": [age],
        },
    })
    .to_string()
}

pub fn write_route_over_mtls(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let dir = c.stack.dir.path().join("write-mtls");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let http = free_port();
        let (cp_leaf, cp_ca) = (c.stack.cp_tls.0.files(), c.stack.cp_tls.0.ca());
        let (envoy_leaf, envoy_ca) = (c.stack.envoy_tls.0.files(), c.stack.envoy_tls.0.ca());
        let grant: Vec<std::ffi::OsString> = vec![
            "--grant".into(),
            format!("write={ENVOY}").into(),
            "--redis".into(),
            c.stack.redis.url().into(),
            "--state-dir".into(),
            dir.join("state").into(),
        ];
        let config = dir.join("envoy.yaml");
        let (mut cp, mut envoy, listen) = tokio::task::block_in_place(|| {
            let cp = control_plane(
                &dir,
                &c.stack.repo,
                (&cp_leaf, &cp_ca, &c.stack.ca),
                (free_port(), http),
                &grant,
            );
            let (listen, admin) = (free_port(), free_port());
            run(envoy_config(c, listen, admin, http)
                .args([
                    "--write-server-san",
                    CP_NAME,
                    "--reader-server-san",
                    READER_NAME,
                ])
                .arg("--tls-cert")
                .arg(&envoy_leaf.cert)
                .arg("--tls-key")
                .arg(&envoy_leaf.key)
                .arg("--tls-ca")
                .arg(&envoy_ca)
                .arg("-o")
                .arg(&config));
            let mut envoy = start_envoy(&dir, &config, "envoy-write-mtls");
            envoy.wait_ready(|| get_ok(admin, "/ready"), "the write Envoy /ready");
            (cp, envoy, listen)
        });
        let close = |cp: &mut Proc, envoy: &mut Proc| {
            envoy.kill();
            cp.kill();
        };
        // Through Envoy, no token: Envoy's certificate (granted write) carries the write.
        let json = [("content-type", "application/json")];
        let r = Conn::open(listen)
            .await
            .send("POST", "/push", &json, profile_row("u000002", 41))
            .await;
        if r.status != 200 || r.header("x-ferry-rows-written") != Some("1") {
            close(&mut cp, &mut envoy);
            return Err(format!(
                "through Envoy: {} {:?}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        // At the API itself: plaintext gets no HTTP answer, TLS without a certificate no write.
        let plain = ferry_integration_tests::http::raw(
            http,
            b"POST /push HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
        );
        let anonymous = tls::request(
            http,
            CP_NAME,
            (&c.stack.ca, None),
            ("POST", "/push", &json),
            profile_row("u000002", 42).into_bytes(),
        )
        .await;
        close(&mut cp, &mut envoy);
        if plain
            .as_deref()
            .is_ok_and(|t| t.starts_with("HTTP/1.1 200"))
        {
            return Err(format!("plaintext write answered: {plain:?}"));
        }
        match anonymous {
            Ok((401, _)) => Ok(format!(
                "a push through Envoy (no token): 200, 1 row written, over mTLS (Envoy's \
                 certificate checked for {CP_NAME}'s SAN, Envoy's identity granted write); at the \
                 API plaintext gets no answer ({}), TLS without a certificate 401",
                plain.map_or_else(
                    |e| e.to_string(),
                    |t| t.lines().next().unwrap_or("").to_owned()
                )
            )),
            other => Err(format!("TLS without a certificate: {other:?}")),
        }
    })
}

/// A client that ignores every refusal: the head and all of `body`, whatever the server
/// answers meanwhile, then the answer read to its end (the connection is closed after it).
/// The answer's text and the bytes of the body written.
async fn blind_write(port: u16, body: Vec<u8>) -> Result<(String, usize), String> {
    use tokio::io::AsyncReadExt;
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "POST /push HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {WRITE_TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut written = 0;
    for chunk in body.chunks(64 * 1024) {
        if s.write_all(chunk).await.is_err() {
            break;
        }
        written += chunk.len();
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    if answer.is_empty() {
        return Err(format!("no answer ({read:?}) after {written} bytes"));
    }
    Ok((String::from_utf8_lossy(&answer).into_owned(), written))
}

/// Envoy's admin `/stats` lines (`name: value`) whose names match `filter`.
async fn envoy_stats(admin: u16, filter: &str) -> String {
    let r = Conn::open(admin)
        .await
        .send(
            "GET",
            &format!("/stats?filter={filter}"),
            &[],
            String::new(),
        )
        .await;
    String::from_utf8_lossy(&r.body).into_owned()
}

/// A counter or gauge of Envoy's admin `/stats`.
async fn envoy_stat(admin: u16, name: &str) -> Option<u64> {
    envoy_stats(admin, name).await.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(": ")?
            .trim()
            .parse()
            .ok()
    })
}

/// The write cluster's refusals: for the pending bound, or for the requests' bound (a worker
/// with no connection of its own opens one and then finds the requests at the bound).
async fn overflows(admin: u16) -> u64 {
    let mut n = 0;
    for which in ["pending", "active"] {
        let name = format!("cluster.ferry_write.upstream_rq_{which}_overflow");
        n += envoy_stat(admin, &name).await.unwrap_or(0);
    }
    n
}

/// Blind writes through Envoy while the write route is full.
const BLIND: usize = 10;

pub fn write_flood_through_envoy(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let (mut cp, port) = writer(c, "write-bound")?;
        let dir = c.stack.dir.path().join("write-bound-envoy");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let config = dir.join("envoy.yaml");
        let (listen, admin) = (free_port(), free_port());
        let mut envoy = tokio::task::block_in_place(|| {
            run(envoy_config(c, listen, admin, port)
                .args(["--write-max-requests", &SLOTS.to_string()])
                .arg("-o")
                .arg(&config));
            let mut envoy = start_envoy(&dir, &config, "envoy-write-bound");
            envoy.wait_ready(|| get_ok(admin, "/ready"), "the write-bound Envoy /ready");
            envoy
        });
        let outcome = flood_through_envoy(port, listen, admin).await;
        envoy.kill();
        cp.kill();
        outcome
    })
}

async fn flood_through_envoy(port: u16, listen: u16, admin: u16) -> Result<String, String> {
    // SLOTS writes whose bodies never come reach the API and hold its slots; SLOTS more wait
    // in Envoy for a connection to it.
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        held.push(held_write(listen).await?);
    }
    let mut at_api = None;
    for _ in 0..100 {
        at_api = metric(&metrics(port).await, "ferry_writes_in_flight").map(str::to_owned);
        if at_api.as_deref() == Some(&SLOTS.to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if at_api.as_deref() != Some(&SLOTS.to_string()) {
        return Err(format!("the held writes never reached the API: {at_api:?}"));
    }
    // Each Envoy worker has its own pool to the API: a worker with no connection opens one
    // over --write-max-requests' connections, and the write it carries is then refused for
    // the requests' bound (503, upstream_rq_active_overflow). Hold until SLOTS wait.
    let pending = "cluster.ferry_write.upstream_rq_pending_active";
    let mut waiting = None;
    for _ in 0..4 * SLOTS {
        held.push(held_write(listen).await?);
        for _ in 0..10 {
            waiting = envoy_stat(admin, pending).await;
            if waiting == Some(SLOTS as u64) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if waiting == Some(SLOTS as u64) {
            break;
        }
    }
    if waiting != Some(SLOTS as u64) {
        let all = envoy_stats(admin, "cluster.ferry_write.upstream_(rq|cx)").await;
        return Err(format!(
            "{pending}: {waiting:?}, not {SLOTS}; {}",
            all.lines()
                .filter(|l| !l.ends_with(": 0"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let sent_before = envoy_stat(admin, "cluster.ferry_write.upstream_cx_tx_bytes_total").await;
    let overflows_before = overflows(admin).await;
    // Clients that ignore every refusal push 1 MiB bodies, all at once (one after another
    // they would outlast the API's 10 s read timeout of the held writes: Envoy holds each
    // refused connection up to its delayed-close timeout, 1 s).
    let mut blind = tokio::task::JoinSet::new();
    for _ in 0..BLIND {
        blind.spawn(blind_write(listen, vec![b' '; 1 << 20]));
    }
    let mut pushed = 0;
    while let Some(joined) = blind.join_next().await {
        let (answer, written) = joined.map_err(|e| e.to_string())??;
        pushed += written;
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if !head.starts_with("http/1.1 503")
            || !head.contains("x-envoy-overloaded: true")
            || !head.contains("retry-after: 1")
            || !head.contains("content-type: application/json")
            || !answer.contains("overflow")
        {
            return Err(format!(
                "a blind write: {}",
                &answer[..answer.len().min(400)]
            ));
        }
    }
    let sent_after = envoy_stat(admin, "cluster.ferry_write.upstream_cx_tx_bytes_total").await;
    let overflowed = overflows(admin).await - overflows_before;
    let text = metrics(port).await;
    let refused_by_api = metric(
        &text,
        "ferry_write_refusals_total{reason=\"too_many_writes\"}",
    );
    let in_flight = metric(&text, "ferry_writes_in_flight").map(str::to_owned);
    let (Some(before), Some(after)) = (sent_before, sent_after) else {
        return Err("Envoy has no upstream_cx_tx_bytes_total for ferry_write".into());
    };
    // What crossed to the API while the flood lasted: nothing of the blind writes' bodies
    // (the held writes' heads were sent before).
    if after - before >= 1024
        || overflowed != BLIND as u64
        || refused_by_api.is_some_and(|n| n != "0")
        || in_flight.as_deref() != Some(&SLOTS.to_string())
    {
        return Err(format!(
            "{BLIND} blind writes ({pushed} body bytes): {} bytes more to the API, \
             overflows {overflowed}, the API refused {refused_by_api:?}, in flight \
             {in_flight:?}",
            after.saturating_sub(before)
        ));
    }
    // The held writes go away: the route serves a write again.
    drop(held);
    let mut freed = None;
    for _ in 0..50 {
        let r = Conn::open(listen)
            .await
            .send(
                "POST",
                "/push",
                &[("authorization", &format!("Bearer {WRITE_TOKEN}"))],
                profile_row("u000003", 43),
            )
            .await;
        if r.status == 200 {
            freed = Some(r.status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match freed {
        Some(_) => Ok(format!(
            "--write-max-requests {SLOTS}: {SLOTS} held writes at the API, {SLOTS} waiting in \
             Envoy; {BLIND} clients ignoring every refusal pushed {} MiB: each answered 503 by \
             Envoy at its headers (x-envoy-overloaded, Retry-After: 1, a JSON body naming the \
             overflow; counted in upstream_rq_pending_overflow and _active_overflow), {} bytes more reached the API, \
             which refused none (too_many_writes {}); freed, a write through Envoy: 200",
            pushed >> 20,
            after - before,
            refused_by_api.unwrap_or("0")
        )),
        None => Err("freed, no write through Envoy was answered 200".into()),
    }
}

/// `ferry envoy-config` for the stack's repo, reader and model with the write route to the API
/// on `write`: the arguments every write case shares (each adds its own, then `-o`).
fn envoy_config(c: &Ctx, listen: u16, admin: u16, write: u16) -> Command {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("envoy-config")
        .arg(&c.stack.repo)
        .arg("--wasm")
        .arg(wasm())
        .args(["--listen-port", &listen.to_string()])
        .args(["--admin-port", &admin.to_string()])
        .args(["--reader-port", &c.stack.reader_port.to_string()])
        .args(["--model-port", &c.stack.model_port.to_string()])
        .args(["--write-address", &format!("127.0.0.1:{write}")]);
    cmd
}
