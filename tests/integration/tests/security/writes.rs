//! The matrix's cases of #37 on feature writes: bodies over a bound of their content (a cell, a
//! list, the row count) refused 413 where the bound is crossed, and a write flood over
//! `--max-concurrent-writes` answered 429 with `Retry-After` before any body is read.

use std::time::Duration;

use ferry_integration_tests::control_plane::WRITE_TOKEN;
use ferry_integration_tests::http::{get_ok, Conn};
use ferry_integration_tests::{free_port, Proc};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::trust::plain_serve;
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
        Ok(format!(
            "{} (each body cut right after: refused where the bound is crossed); within them: 422 invalid_rows",
            seen.join(", ")
        ))
    })
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

pub fn write_flood(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let (mut cp, port) = writer(c, "write-flood")?;
        let mut held = Vec::new();
        for _ in 0..SLOTS {
            held.push(held_write(port).await?);
        }
        // The held writes reach the server's handler in their own time: wait for the slots
        // to be taken (a bounded number of tries), then every further write is refused at once.
        let body = profile("1", "}}");
        let mut refused = 0;
        for _ in 0..50 {
            let auth = format!("Bearer {WRITE_TOKEN}");
            let r = Conn::open(port)
                .await
                .send(
                    "POST",
                    "/push",
                    &[("authorization", auth.as_str())],
                    body.clone(),
                )
                .await;
            if r.status == 429 {
                if r.header("retry-after") != Some("1")
                    || r.header("x-ferry-error") != Some("too_many_writes")
                {
                    cp.kill();
                    return Err(format!(
                        "429 without Retry-After 1 / too_many_writes: {:?}",
                        r.body
                    ));
                }
                refused += 1;
                if refused == 20 {
                    break;
                }
            } else if refused > 0 {
                cp.kill();
                return Err(format!("slots held, yet a write was answered {}", r.status));
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // The held writes go away: the slots are free again.
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
        let metrics = Conn::open(port)
            .await
            .send("GET", "/metrics", &[], String::new())
            .await;
        let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
        cp.kill();
        let counted = metrics
            .lines()
            .find(|l| l.starts_with("ferry_write_refusals_total{reason=\"too_many_writes\"}"))
            .unwrap_or("no too_many_writes refusal counter");
        match (refused, freed) {
            (20, Some(status)) => Ok(format!(
                "{SLOTS} writes holding --max-concurrent-writes {SLOTS}: 20 more answered 429 \
                 Retry-After: 1 too_many_writes before their bodies were read; freed, the next \
                 write was answered {status}; {counted}"
            )),
            _ => Err(format!("refused {refused} of 20, then {freed:?}")),
        }
    })
}
