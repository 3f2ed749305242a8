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

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to [`STARTUP`] for `ready`, failing at once (with the log) if the process exits.
    /// On a loaded 2-core machine an Envoy compiling the filter can take well over 15 s.
    pub fn wait_ready(&mut self, mut ready: impl FnMut() -> bool, what: &str) {
        let start = Instant::now();
        loop {
            if ready() {
                return;
            }
            if !self.is_running() {
                panic!("{} exited before {what}:\n{}", self.name, self.log_text());
            }
            if start.elapsed() >= STARTUP {
                panic!(
                    "timed out after {STARTUP:?} waiting for {what}; {} log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// How long a started process may take to become ready. A bound, not a measurement: waits end
/// as soon as the process answers.
pub const STARTUP: Duration = Duration::from_secs(90);

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A [`Proc`] that is asked to stop (SIGTERM) on drop and waited for, up to 30 s, before it is
/// killed: for a server whose master process forks workers (`feast serve`, gunicorn), which a
/// SIGKILL to the master would leave running.
pub struct Graceful(pub Proc);

impl std::ops::Deref for Graceful {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.0
    }
}

impl std::ops::DerefMut for Graceful {
    fn deref_mut(&mut self) -> &mut Proc {
        &mut self.0
    }
}

impl Drop for Graceful {
    fn drop(&mut self) {
        let Some(pid) = self.0.pid() else { return };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let start = Instant::now();
        while self.0.is_running() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub fn tcp_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}
