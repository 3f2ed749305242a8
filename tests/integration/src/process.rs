//! Child processes that die with the test, and small waits on loopback.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use ferry_test_support::ports::free_port;

/// A child process, killed on drop. Its output goes to `<dir>/<name>.log`.
pub struct Proc {
    pub name: &'static str,
    child: Option<Child>,
    pub log: std::path::PathBuf,
}

impl Proc {
    pub fn start(name: &'static str, mut cmd: Command, dir: &Path) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Proc {
            name,
            child: Some(child),
            log,
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process is still the one started (not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn tcp_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

pub fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}
