//! A throwaway PostgreSQL (Debian's `postgresql`: `initdb` and `pg_ctl` from its versioned bin
//! folder) on a free loopback port in a temp dir, with password authentication, for the Feast
//! SQL registry tests; stopped on drop. PostgreSQL refuses to run as root: as root, the cluster
//! is made and run as the `postgres` user the package creates.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::free_port;

/// The superuser the cluster is made with, and its password.
pub const USER: &str = "ferry";
pub const PASSWORD: &str = "ferry-pw";

pub struct Postgres {
    pub dir: tempfile::TempDir,
    pub port: u16,
    data: PathBuf,
    /// Server options beyond the port and address (TLS).
    extra: String,
}

/// The folder holding `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/N/bin`, else PATH.
fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn tool(name: &str) -> PathBuf {
    bin_dir().map_or_else(|| PathBuf::from(name), |d| d.join(name))
}

fn is_root() -> bool {
    // `id -u` keeps this crate free of a libc dependency.
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(|uid| uid == 0)
}

/// `program args` as the user PostgreSQL runs as.
fn as_pg_user(program: &Path) -> Command {
    if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Postgres {
    /// A new cluster, started and accepting connections.
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// One that also accepts TLS, with `tls`'s certificate (for 127.0.0.1 and localhost).
    pub fn start_tls(tls: &ferry_test_support::redis::TlsFiles) -> Postgres {
        Postgres::start_with(Some(tls))
    }

    fn start_with(tls: Option<&ferry_test_support::redis::TlsFiles>) -> Postgres {
        let dir = tempfile::tempdir().expect("tempdir");
        if is_root() {
            run_ok(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).expect("pwfile");
        if is_root() {
            run_ok(Command::new("chown").arg("postgres:").arg(&pwfile));
        }
        let data = dir.path().join("data");
        run_ok(
            as_pg_user(&tool("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", USER, "--auth=scram-sha-256", "-E", "UTF8"])
                .arg(format!("--pwfile={}", pwfile.display())),
        );
        let extra = match tls {
            None => String::new(),
            Some(t) => {
                // The key must belong to the server's user and be private to it.
                let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
                std::fs::copy(&t.cert, &cert).expect("cert");
                std::fs::copy(&t.key, &key).expect("key");
                if is_root() {
                    run_ok(Command::new("chown").arg("postgres:").arg(&cert).arg(&key));
                }
                run_ok(Command::new("chmod").arg("600").arg(&key));
                format!(
                    " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                    cert.display(),
                    key.display()
                )
            }
        };
        let pg = Postgres {
            port: free_port(),
            dir,
            data,
            extra,
        };
        pg.pg_ctl_start();
        pg
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {}{}",
            self.port,
            self.dir.path().display(),
            self.extra
        );
        run_ok(
            as_pg_user(&tool("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-o", &options, "-l"])
                .arg(self.dir.path().join("log"))
                .args(["-w", "-t", "30", "start"]),
        );
    }

    /// Stops the server (the data stays): for a "database down" test.
    pub fn stop(&self) {
        run_ok(as_pg_user(&tool("pg_ctl")).arg("-D").arg(&self.data).args([
            "-m",
            "immediate",
            "-w",
            "stop",
        ]));
    }

    /// Starts it again after [`Postgres::stop`].
    pub fn restart(&self) {
        self.pg_ctl_start();
    }

    /// The URL Feast's `feature_store.yaml` names the database by (`sslmode=disable`: the
    /// cluster has no certificate).
    pub fn url(&self) -> String {
        self.url_with(PASSWORD)
    }

    /// As [`Postgres::url`], with another password.
    pub fn url_with(&self, password: &str) -> String {
        format!(
            "postgresql+psycopg://{USER}:{password}@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// The server log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_pg_user(&tool("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}
