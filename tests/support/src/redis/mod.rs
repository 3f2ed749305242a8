//! A throwaway `redis-server` for tests: on a free loopback port, in its own temp dir, without
//! persistence, killed on drop. `FERRY_REDIS_SERVER` names another binary than `redis-server`.
//! Variants: TLS only ([`RedisServer::start_tls`], with a test CA made by the `openssl` CLI), a
//! password ([`RedisServer::start_with_password`]), and a three-master Cluster ([`RedisCluster`],
//! in `redis/cluster.rs`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::ports::free_port;

pub mod cluster;
pub use cluster::RedisCluster;

/// A running `redis-server`. Its port stays its own across [`RedisServer::stop`] and
/// [`RedisServer::restart`], so a client can watch it go away and come back.
pub struct RedisServer {
    pub port: u16,
    /// Its working dir (where it would write a dump), removed on drop.
    pub dir: PathBuf,
    child: Option<Child>,
    /// Arguments beyond port, bind and persistence; `--port` is not in them.
    extra: Vec<String>,
    /// How to tell that it is up.
    probe: Probe,
}

/// How a server shows it is ready.
#[derive(Clone)]
enum Probe {
    /// `PING` answers `+PONG`.
    Ping,
    /// `AUTH password` then `PING` answer `+OK` and `+PONG`.
    Auth(String),
    /// TLS only: it accepts TCP connections (it listens once loaded).
    Accepts,
}

/// The files of a TLS test setup: a CA, and a certificate for 127.0.0.1 signed by it.
pub struct TlsFiles {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl RedisServer {
    /// Starts one and returns once it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(Vec::new(), Probe::Ping, |_| Vec::new())
    }

    /// One whose default user needs `password`, and with an ACL user `ferry` (password
    /// `ferry-pass`) allowed to read and write Ferry's keys only.
    pub fn start_with_password(password: &str) -> RedisServer {
        let extra = [
            "--requirepass",
            password,
            // One argument per word: redis-server joins them into the `user` directive.
            "--user",
            "ferry",
            "on",
            ">ferry-pass",
            "~ferry:*",
            "~ferry-ready:*",
            "+@read",
            "+@write",
            "+@connection",
        ];
        let extra = extra.iter().map(|s| s.to_string()).collect();
        Self::start_with(extra, Probe::Auth(password.to_owned()), |_| Vec::new())
    }

    /// One that speaks TLS only (on `port`), with a certificate for 127.0.0.1 signed by a test
    /// CA made for it (`dir/tls/ca.crt`); clients are not asked for certificates.
    pub fn start_tls() -> (RedisServer, TlsFiles) {
        let mut files = None;
        let server = Self::start_with(Vec::new(), Probe::Accepts, |dir| {
            let made = make_tls_files(&dir.join("tls"));
            let extra = vec![
                "--tls-cert-file".to_owned(),
                made.cert.display().to_string(),
                "--tls-key-file".to_owned(),
                made.key.display().to_string(),
                "--tls-ca-cert-file".to_owned(),
                made.ca_cert.display().to_string(),
                "--tls-auth-clients".to_owned(),
                "no".to_owned(),
            ];
            files = Some(made);
            extra
        });
        (server, files.expect("TLS files"))
    }

    /// Starts one with `extra` arguments (plus those `more` returns given its dir).
    fn start_with(
        mut extra: Vec<String>,
        probe: Probe,
        more: impl FnOnce(&std::path::Path) -> Vec<String>,
    ) -> RedisServer {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferry-redis-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        extra.extend(more(&dir));
        let mut server = RedisServer {
            port: free_port(),
            dir,
            child: None,
            extra,
            probe,
        };
        server.restart();
        server
    }

    /// Starts one more with extra arguments, e.g. a Cluster node.
    pub fn start_args(extra: &[&str]) -> RedisServer {
        let extra = extra.iter().map(|s| s.to_string()).collect();
        Self::start_with(extra, Probe::Ping, |_| Vec::new())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// (Re)starts it on the same port and waits until it answers PING.
    pub fn restart(&mut self) {
        self.stop();
        let bin = std::env::var("FERRY_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let port = self.port.to_string();
        // TLS arguments only for TLS: a `FERRY_REDIS_SERVER` built without TLS refuses them.
        let ports: &[&str] = match self.probe {
            Probe::Accepts => &["--port", "0", "--tls-port", &port],
            _ => &["--port", &port],
        };
        let child = Command::new(&bin)
            .args(ports)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .arg("--dir")
            .arg(&self.dir)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (install redis-server): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ready() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!("redis-server on port {} exited: {status}", self.port);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ready(&self) -> bool {
        match &self.probe {
            Probe::Ping => answers(self.port, b"PING\r\n", b"+PONG\r\n"),
            Probe::Auth(password) => {
                let command = format!("AUTH {password}\r\nPING\r\n");
                answers(self.port, command.as_bytes(), b"+OK\r\n+PONG\r\n")
            }
            Probe::Accepts => TcpStream::connect(("127.0.0.1", self.port)).is_ok(),
        }
    }

    /// Kills it (a Redis outage); [`RedisServer::restart`] brings it back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether Redis on `port` answers `command` with exactly `expected`.
fn answers(port: u16, command: &[u8], expected: &[u8]) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut answer = vec![0u8; expected.len()];
    s.write_all(command).is_ok() && s.read_exact(&mut answer).is_ok() && answer == expected
}

/// A CA and a certificate for 127.0.0.1 (and localhost) signed by it, made with the `openssl`
/// CLI in `dir`. EC P-256 keys: quick to make, and what rustls verifies.
pub fn make_tls_files(dir: &std::path::Path) -> TlsFiles {
    std::fs::create_dir_all(dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (install it): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=ferry test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    TlsFiles {
        ca_cert: dir.join("ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    }
}
