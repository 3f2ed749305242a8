//! The matrix's cases on bounded work: the reader's memory bomb, a reader connection flood, a
//! fleet of idle pollers then a push, concurrent snapshot installs, and the start rule of
//! plaintext on a network address. Each runs while Envoy's enriched requests keep succeeding.

use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::control_plane::TOKEN;
use ferry_integration_tests::http::get_ok;
use ferry_integration_tests::pollers::{idle_pollers_then_push, IDLE_POLLERS};
use ferry_integration_tests::secure::{plaintext_on_a_network_address_is_refused, READER_NAME};
use ferry_integration_tests::{bin, free_port, tls, wasm, Proc};
use ferry_protos::{PROTOBUF_CONTENT_TYPE, READER_PATH};
use prost::Message;

use super::links::status;
use super::pull::{fetch, push_one_more};
use super::{Ctx, Fut};

/// The reader's `--max-connections` in the matrix.
pub const READER_MAX_CONNECTIONS: usize = 64;

/// A line of /proc/PID/status in KiB (`VmHWM:`, the peak resident set).
fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `n` enriched requests through Envoy, one after another: how many failed, and the first error.
async fn enriched_requests(c: &Ctx, n: usize) -> (usize, Option<String>) {
    let mut failed = (0, None);
    for _ in 0..n {
        if let Err(e) = c.stack.enriched().await {
            failed.0 += 1;
            failed.1.get_or_insert(e);
        }
    }
    failed
}

pub fn reader_memory_bomb(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let pid = c.stack.reader.pid().ok_or("the reader is not running")?;
        let idle = status_kib(pid, "VmHWM:");
        let bomb = ferry_test_support::reader::feast_bomb().encode_to_vec();
        let envoy = c.stack.envoy_tls.0.files();
        let headers = [("content-type", PROTOBUF_CONTENT_TYPE)];
        let bombs = async {
            let mut answers = Vec::new();
            for _ in 0..3 {
                let req = ("POST", READER_PATH, &headers[..]);
                let trust = (&c.stack.ca, Some(&envoy));
                answers.push(
                    tls::request(c.stack.reader_port, READER_NAME, trust, req, bomb.clone()).await,
                );
            }
            answers
        };
        let (answers, (failed, first)) = tokio::join!(bombs, enriched_requests(c, 20));
        for a in &answers {
            match a {
                Ok((413, body)) if body.contains("lookup_too_large") => {}
                other => return Err(format!("the bomb answered {other:?}")),
            }
        }
        if failed > 0 {
            return Err(format!(
                "{failed} of 20 enriched requests failed during: {first:?}"
            ));
        }
        let peak = status_kib(pid, "VmHWM:");
        let grew = peak.saturating_sub(idle);
        println!(
            "MEASURED: reader VmHWM {:.1} MiB before the bomb, {:.1} MiB after (+{:.1} MiB)",
            idle as f64 / 1024.0,
            peak as f64 / 1024.0,
            grew as f64 / 1024.0
        );
        if grew > 64 * 1024 {
            return Err(format!("the reader grew by {grew} KiB, over 64 MiB"));
        }
        Ok(format!(
            "413 lookup_too_large ×3 ({} byte body); reader peak RSS {:.1} → {:.1} MiB \
             (+{:.1}, bound +64); 20/20 enriched during",
            bomb.len(),
            idle as f64 / 1024.0,
            peak as f64 / 1024.0,
            grew as f64 / 1024.0
        ))
    })
}

pub fn reader_connection_flood(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        // Silent connections: the first ones take every slot (each waits for its handshake,
        // up to 10 s), the rest wait in the kernel's accept queue.
        let excess = READER_MAX_CONNECTIONS + 64;
        let mut flood = Vec::with_capacity(excess);
        for _ in 0..excess {
            let s = tokio::net::TcpStream::connect(("127.0.0.1", c.stack.reader_port))
                .await
                .map_err(|e| format!("flood connection: {e}"))?;
            flood.push(s);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let envoy = c.stack.envoy_tls.0.files();
        let fresh = || {
            let trust = (&c.stack.ca, Some(&envoy));
            tls::request(
                c.stack.reader_port,
                READER_NAME,
                trust,
                ("GET", "/healthz", &[]),
                vec![],
            )
        };
        let queued = tokio::time::timeout(Duration::from_millis(1500), fresh()).await;
        if let Ok(answer) = queued {
            return Err(format!("a connection over the cap was served: {answer:?}"));
        }
        let (failed, first) = enriched_requests(c, 20).await;
        if failed > 0 {
            return Err(format!(
                "{failed} of 20 enriched requests failed during: {first:?}"
            ));
        }
        drop(flood);
        let start = Instant::now();
        loop {
            if let Ok(Ok((200, _))) = tokio::time::timeout(Duration::from_secs(2), fresh()).await {
                break;
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err("the reader did not serve a new client after the flood".into());
            }
        }
        Ok(format!(
            "{excess} silent connections against --max-connections {READER_MAX_CONNECTIONS}: \
             a new client not served within 1.5 s; 20/20 enriched during; served again {:.1} s \
             after the flood closed",
            start.elapsed().as_secs_f64()
        ))
    })
}

pub fn idle_pollers_then_a_push(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        // Its own `ferry serve` (loopback, plaintext, unsigned: the bound is on connections,
        // and 2,000 TLS handshakes of a debug build would only time the test's client).
        let dir = c.stack.dir.path().join("pollers");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = free_port();
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("serve")
            .arg(&c.stack.repo)
            .arg("--wasm")
            .arg(wasm())
            .args(["--xds-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--http-listen", &format!("127.0.0.1:{port}")])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(["--token", TOKEN])
            .env_remove("FERRY_PUSH_TOKEN")
            .env_remove("FERRY_READ_TOKEN");
        let auth = format!("Bearer {TOKEN}");
        let push_ms = tokio::task::block_in_place(|| {
            let mut cp = Proc::start("control-plane-pollers", cmd, &dir);
            cp.wait_ready(|| get_ok(port, "/healthz"), "the pollers' control plane");
            idle_pollers_then_push(port, &auth)
        });
        println!("MEASURED: a push under {IDLE_POLLERS} idle keep-alive pollers: {push_ms:.1} ms");
        let (failed, first) = enriched_requests(c, 5).await;
        if failed > 0 {
            return Err(format!("{failed} enriched requests failed: {first:?}"));
        }
        Ok(format!(
            "{IDLE_POLLERS} idle keep-alive pollers served (304 when unchanged); the push taken \
             in {push_ms:.1} ms and seen by an idle poller"
        ))
    })
}

pub fn concurrent_installs(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let pushes = |tag: &'static str| {
            let stack = &c.stack;
            async move {
                for i in 0..100 {
                    push_one_more(stack, &format!("/v9/{tag}{i}")).await?;
                }
                Ok::<(), String>(())
            }
        };
        let (a, b, (failed, first)) =
            tokio::join!(pushes("a"), pushes("b"), enriched_requests(c, 20));
        a?;
        b?;
        if failed > 0 {
            return Err(format!(
                "{failed} of 20 enriched requests failed during: {first:?}"
            ));
        }
        let served = status(c).await?.snapshot.ok_or("no snapshot")?.version;
        let bytes = tokio::task::block_in_place(|| fetch(&c.stack)).body;
        tokio::task::block_in_place(|| c.stack.restart_control_plane());
        let restored = status(c)
            .await?
            .snapshot
            .ok_or("no snapshot after the restart")?;
        let again = tokio::task::block_in_place(|| fetch(&c.stack)).body;
        if restored.version != served || again != bytes {
            return Err(format!("served {served}, restored {}", restored.version));
        }
        c.stack.wait_enriched_async(Duration::from_secs(20)).await?;
        Ok(format!(
            "2 × 100 pushes, all 200; 20/20 enriched during; after a restart the saved state is \
             the served snapshot ({served}, the same signed bytes)"
        ))
    })
}

pub fn plaintext_on_a_network_address(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let leaf = c.stack.reader_tls.0.files();
        let refusals = tokio::task::block_in_place(|| {
            plaintext_on_a_network_address_is_refused(&c.stack.repo, &leaf)
        });
        Ok(format!(
            "the reader (no TLS; TLS without a client CA), the API and xDS on 0.0.0.0 refuse to \
             start ({} refusals, e.g. \"{}\")",
            refusals.len(),
            refusals[0].chars().take(100).collect::<String>()
        ))
    })
}
