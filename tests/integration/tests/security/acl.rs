//! The matrix's case of #35 on Redis credentials: the ACL users of `deploy/kubernetes/ferry.yaml`
//! (the `ferry-redis-acl` ConfigMap) created on a real redis-server whose default user is off;
//! `ferry materialize` and a `ferry serve --shared-state` replica run as the control plane's
//! user, a reader as the readers' user and enriches; the readers' user writing `ferry:cp:*` or a
//! vector is refused by Redis.

use std::process::Command;

use bytes::Bytes;
use ferry_integration_tests::control_plane::ControlPlane;
use ferry_integration_tests::http::{get_ok, Conn};
use ferry_integration_tests::{bin, free_port, root, run, Proc, RedisServer};
use ferry_protos::v1::VectorResponse;
use ferry_protos::{PROTOBUF_CONTENT_TYPE, READER_PATH};
use prost::Message;
use serde_json::Value as Json;

use super::shared::until;
use super::{Ctx, Fut};

const READER_PASSWORD: &str = "reader-password-0123456789abcdef";
const CP_PASSWORD: &str = "control-plane-password-0123456789";

/// The rules of `user` in the manifest's `ferry-redis-acl` ConfigMap.
fn manifest_rules(user: &str) -> Result<String, String> {
    let path = root().join("deploy/kubernetes/ferry.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v: Json = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        if v["kind"] == "ConfigMap" && v["metadata"]["name"] == "ferry-redis-acl" {
            return v["data"][user]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("no rules for {user}"));
        }
    }
    Err("no ferry-redis-acl ConfigMap in deploy/kubernetes/ferry.yaml".into())
}

/// `redis-cli` on `port` as `user` (None: the default user): its output, errors included.
fn cli(port: u16, user: Option<(&str, &str)>, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-p", &port.to_string()]);
    if let Some((user, password)) = user {
        // The password through the environment, not the arguments.
        cmd.args(["--user", user]).env("REDISCLI_AUTH", password);
    }
    let out = cmd.args(args).output().map_err(|e| e.to_string())?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

pub fn reader_user_writing_control_plane_keys(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let redis = RedisServer::start();
        let port = redis.port;
        for (user, password) in [
            ("ferry-reader", READER_PASSWORD),
            ("ferry-control-plane", CP_PASSWORD),
        ] {
            let rules = manifest_rules(user)?;
            let mut args = vec!["ACL", "SETUSER", user, "reset"];
            args.extend(rules.split_whitespace());
            let pass = format!(">{password}");
            args.push(&pass);
            let out = cli(port, None, &args)?;
            if out != "OK" {
                return Err(format!("ACL SETUSER {user}: {out}"));
            }
        }
        let out = cli(port, None, &["ACL", "SETUSER", "default", "off"])?;
        if out != "OK" {
            return Err(format!("default off: {out}"));
        }
        let dir = c.stack.dir.path().join("acl");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let url = redis.url();
        let as_user = |cmd: &mut Command, user: &str, password: &str| {
            cmd.env("FERRY_REDIS_USERNAME", user)
                .env("FERRY_REDIS_PASSWORD", password);
        };
        // The control plane's user: materialize, then a replica sharing its state.
        let mut materialize = Command::new(bin("ferry"));
        materialize
            .arg("materialize")
            .arg(&c.stack.repo)
            .args(["--redis", &url]);
        as_user(&mut materialize, "ferry-control-plane", CP_PASSWORD);
        tokio::task::block_in_place(|| run(&mut materialize));
        let key = c.stack.signing_key.display().to_string();
        // The user in the URL: ControlPlane takes flags only (a test's password; the manifest
        // passes it by the environment).
        let cp_url = format!("redis://ferry-control-plane:{CP_PASSWORD}@127.0.0.1:{port}");
        let args = [
            "--shared-state",
            "--redis",
            &cp_url,
            "--cluster-name",
            "acl",
            "--signing-key",
            &key,
        ];
        let cp = tokio::task::block_in_place(|| {
            ControlPlane::start_with_args(&dir, &c.stack.repo, &args)
        });
        let status = until(&cp, "the replica on the ACL Redis serves", |s| {
            s.snapshot.is_some() && s.shared_state.as_ref().is_some_and(|s| s.sequence > 0)
        })
        .await?;
        let services = status.snapshot.map(|s| s.services).unwrap_or_default();
        let first = services.first().ok_or("no service")?;
        let fingerprint = u64::from_str_radix(&first.fingerprint, 16).map_err(|e| e.to_string())?;

        // The readers' user: ready (the markers) and a lookup (the vectors).
        let reader_port = free_port();
        let mut cmd = Command::new(bin("ferry-reader"));
        cmd.args(["--listen", &format!("127.0.0.1:{reader_port}")])
            .args(["--redis", &url]);
        as_user(&mut cmd, "ferry-reader", READER_PASSWORD);
        let mut reader = Proc::start("reader-acl", cmd, &dir);
        let query = format!(
            "/readyz?project=banking&service={}&fingerprint={}",
            first.name, first.fingerprint
        );
        tokio::task::block_in_place(|| {
            reader.wait_ready(|| get_ok(reader_port, &query), "the ACL reader ready")
        });
        let lookup = ferry_test_support::reader::request(
            "banking",
            &[(first.name.as_str(), fingerprint, &["u000001"])],
        );
        let answer = Conn::open(reader_port)
            .await
            .send(
                "POST",
                READER_PATH,
                &[("content-type", PROTOBUF_CONTENT_TYPE)],
                Bytes::from(lookup.encode_to_vec()),
            )
            .await;
        let found = VectorResponse::decode(answer.body.as_ref())
            .ok()
            .and_then(|r| {
                r.results
                    .first()
                    .and_then(|l| l.vectors.first())
                    .map(|v| v.len())
            })
            .unwrap_or(0);
        if answer.status != 200 || found == 0 {
            return Err(format!(
                "the reader's lookup: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
        }

        // What the readers' user may not do; each refused by Redis itself.
        let reader_user = Some(("ferry-reader", READER_PASSWORD));
        let current = "ferry:cp:{acl}:current";
        let vector = format!("ferry:banking:{}:{}:u000001", first.name, first.fingerprint);
        let mut refused = Vec::new();
        for args in [
            vec!["HSET", current, "sequence", "1152921504606846976"],
            vec!["SET", current, "x"],
            vec!["DEL", current],
            vec!["SET", vector.as_str(), "x"],
            vec![
                "EVAL",
                "return redis.call('SET', KEYS[1], 'x')",
                "1",
                current,
            ],
            vec!["HGET", current, "signed"],
        ] {
            let out = cli(port, reader_user, &args)?;
            if !out.contains("NOPERM") {
                return Err(format!("{args:?} as ferry-reader: {out}"));
            }
            refused.push(args[0]);
        }
        // The control plane's record is intact and still served.
        let after = tokio::task::block_in_place(|| cp.status());
        let stored = cli(
            port,
            Some(("ferry-control-plane", CP_PASSWORD)),
            &["HGET", current, "sequence"],
        )?;
        if stored != after.shared_state.map_or(0, |s| s.sequence).to_string() {
            return Err(format!("the record's sequence is now {stored}"));
        }
        reader.kill();
        Ok(format!(
            "the manifest's users on a redis-server (default user off): materialize and a replica \
             as ferry-control-plane, a reader as ferry-reader (ready, u000001's vector read); as \
             ferry-reader \
             {} on ferry:cp:* or a vector: NOPERM each",
            refused.join(", ")
        ))
    })
}
