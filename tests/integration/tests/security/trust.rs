//! The matrix's cases of #35 on credentials: a token under 128 bits at start, a feature write
//! when no write credential is configured (loopback included), and identity patterns whose `*`
//! would have matched across `/` (`--grant` on the API, `--node-identity` on xDS).

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use ferry_integration_tests::control_plane::TOKEN;
use ferry_integration_tests::http::get_ok;
use ferry_integration_tests::secure::{self, block_on, control_plane, refused_start, CP_NAME};
use ferry_integration_tests::{free_port, tls, Proc};

use super::xds::ads_once;
use super::{Ctx, Fut};

/// `ferry serve` of the stack's repo on loopback, plaintext, its own state: the command.
pub fn plain_serve(c: &Ctx, name: &str, http: u16) -> Command {
    plain_serve_repo(c, &c.stack.repo, name, http)
}

/// [`plain_serve`] of another repo.
pub fn plain_serve_repo(c: &Ctx, repo: &std::path::Path, name: &str, http: u16) -> Command {
    let dir = c.stack.dir.path().join(name);
    secure::plain_serve(&dir, repo, &format!("127.0.0.1:{http}"))
}

/// A start to refuse: what the error must name, the flags, a variable to set.
type Start<'a> = (&'a str, Vec<OsString>, Option<(&'a str, &'a str)>);

pub fn short_token_at_start(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let file = c.stack.dir.path().join("short-token");
        std::fs::write(&file, "hunter2hunter2\n").map_err(|e| e.to_string())?;
        let starts: [Start; 3] = [
            ("--token", vec!["--token".into(), "s3cret".into()], None),
            (
                "short-token",
                vec!["--write-token-file".into(), file.clone().into()],
                None,
            ),
            (
                "FERRY_READ_TOKEN",
                vec!["--token".into(), TOKEN.into()],
                // 31 hex characters: 124 bits, one character short.
                Some(("FERRY_READ_TOKEN", "0123456789abcdef0123456789abcde")),
            ),
        ];
        let mut first = String::new();
        for (names, args, env) in starts {
            let mut cmd = plain_serve(c, "short-token", free_port());
            cmd.args(&args);
            if let Some((k, v)) = env {
                cmd.env(k, v);
            }
            let e = tokio::task::block_in_place(|| refused_start(&mut cmd));
            if !(e.contains(names) && e.contains("128") && e.contains("openssl rand")) {
                return Err(format!("{names}: not the short-token refusal: {e}"));
            }
            if first.is_empty() {
                first = e.lines().last().unwrap_or_default().to_owned();
            }
        }
        Ok(format!(
            "a short --token, --write-token-file and FERRY_READ_TOKEN (124 bits) each refused at \
             start, e.g. \"{}\"",
            first.chars().take(140).collect::<String>()
        ))
    })
}

/// A `POST /push` answer that must be the no-write-credential 403.
fn no_write_credential((code, body): (u16, String), whom: &str) -> Result<(), String> {
    if code != 403 || !body.contains("--write-token") || !body.contains("no write credential") {
        return Err(format!("{whom}: {code} {body}"));
    }
    Ok(())
}

pub fn write_without_a_write_credential(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let push = serde_json::json!({
            "push_source_name": "profile_push",
            "df": {"user_id": ["u000001"], "event_timestamp": [1], "age": [1]},
        })
        .to_string()
        .into_bytes();
        // The stack's control plane: TLS, a push token, no write credential; its push token
        // does not write either.
        let auth = format!("Bearer {TOKEN}");
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        let answer = c
            .stack
            .api(None, ("POST", "/push", &headers), push.clone())
            .await?;
        no_write_credential(answer, "the TLS control plane with the push token")?;
        // A control plane on loopback with no credential at all: before #35 it wrote.
        let port = free_port();
        let cmd = plain_serve(c, "open-loopback", port);
        let dir = c.stack.dir.path().join("open-loopback");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut cp = tokio::task::block_in_place(|| {
            let mut cp = Proc::start("control-plane-open", cmd, &dir);
            cp.wait_ready(|| get_ok(port, "/healthz"), "the open control plane");
            cp
        });
        let json = [("content-type", "application/json")];
        for path in ["/push", "/write-to-online-store"] {
            let answer = ferry_integration_tests::http::Conn::open(port)
                .await
                .send("POST", path, &json, push.clone())
                .await;
            let body = String::from_utf8_lossy(&answer.body).into_owned();
            no_write_credential((answer.status, body), path)?;
        }
        // Snapshot reads stay open on loopback without a push token (today's rule).
        let status = tokio::task::block_in_place(|| get_ok(port, "/status"));
        cp.kill();
        if !status {
            return Err("/status on the open loopback control plane is not 200".into());
        }
        Ok(
            "403 naming --write-token: the TLS control plane (push token held) and a loopback \
            one with no credential (/push, /write-to-online-store); its /status stays open"
                .into(),
        )
    })
}

/// The `*` patterns of the case: one service account name in any namespace.
const GRANTED: &str = "spiffe://cluster.local/ns/*/sa/dashboard";
const NODE_RULE: &str = "spiffe://cluster.local/ns/*/sa/edge=edge-*";

pub fn star_across_a_slash(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let dir = c.stack.dir.path().join("star");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let ca = &c.stack.ca;
        let issue = |name: &str, uri: &str| ca.issue(&[], &[uri]).write(&dir, name);
        let dashboard = issue("dashboard", "spiffe://cluster.local/ns/ml/sa/dashboard");
        // Matched by the old `*` (`ml/sa/x/ns/ml`): a name its holder may have chosen.
        let across = issue(
            "across",
            "spiffe://cluster.local/ns/ml/sa/x/ns/ml/sa/dashboard",
        );
        let edge = issue("edge", "spiffe://cluster.local/ns/ml/sa/edge");
        let edge_across = issue(
            "edge-across",
            "spiffe://cluster.local/ns/a/sa/b/ns/ml/sa/edge",
        );
        let (xds, http) = (free_port(), free_port());
        let extra: Vec<OsString> = vec![
            "--grant".into(),
            format!("read={GRANTED}").into(),
            "--node-identity".into(),
            NODE_RULE.into(),
            "--state-dir".into(),
            dir.join("state").into(),
        ];
        let cp_files = (c.stack.cp_tls.0.files(), c.stack.cp_tls.0.ca());
        let mut cp = tokio::task::block_in_place(|| {
            control_plane(
                &dir,
                &c.stack.repo,
                (&cp_files.0, &cp_files.1, ca),
                (xds, http),
                &extra,
            )
        });
        let get = |leaf| {
            let req = ("GET", "/status", &[][..]);
            block_on(tls::request(http, CP_NAME, (ca, Some(leaf)), req, vec![]))
        };
        let (ok, refused) = tokio::task::block_in_place(|| (get(&dashboard), get(&across)));
        let (ok, refused) = (ok?, refused?);
        if ok.0 != 200 || refused.0 != 403 {
            cp.kill();
            return Err(format!(
                "--grant read={GRANTED}: the dashboard {} ({}), across a slash {} ({})",
                ok.0, ok.1, refused.0, refused.1
            ));
        }
        // xDS: the rule's identity pattern. A refused stream ends with PERMISSION_DENIED; an
        // accepted one stays open (no status within the wait) or ends OK on the client's
        // half-close.
        let ads = |leaf| {
            let once = ads_once(xds, (ca, Some(leaf)), "edge-a", None);
            block_on(async { tokio::time::timeout(Duration::from_secs(3), once).await })
        };
        let (held, denied) = tokio::task::block_in_place(|| (ads(&edge), ads(&edge_across)));
        cp.kill();
        match (held, denied) {
            (Err(_) | Ok(Ok(0)), Ok(Ok(7))) => {}
            (held, denied) => {
                return Err(format!(
                    "--node-identity {NODE_RULE}: edge {held:?}, across a slash {denied:?}"
                ))
            }
        }
        Ok(format!(
            "--grant read={GRANTED}: ns/ml/sa/dashboard 200, ns/ml/sa/x/ns/ml/sa/dashboard 403; \
             --node-identity {NODE_RULE}: ns/ml/sa/edge held, ns/a/sa/b/ns/ml/sa/edge \
             PERMISSION_DENIED"
        ))
    })
}
