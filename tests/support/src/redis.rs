//! A throwaway `redis-server` for tests: on a free loopback port, in its own temp dir, without
//! persistence, killed on drop. `FERRY_REDIS_SERVER` names another binary than `redis-server`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::ports::free_port;

/// A running `redis-server`. Its port stays its own across [`RedisServer::stop`] and
/// [`RedisServer::restart`], so a client can watch it go away and come back.
pub struct RedisServer {
    pub port: u16,
    /// Its working dir (where it would write a dump), removed on drop.
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one and returns once it answers PING.
    pub fn start() -> RedisServer {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferry-redis-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut server = RedisServer {
            port: free_port(),
            dir,
            child: None,
        };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// (Re)starts it on the same port and waits until it answers PING.
    pub fn restart(&mut self) {
        self.stop();
        let bin = std::env::var("FERRY_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (install redis-server): {e}"));
        let child = self.child.insert(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answers_ping(self.port) {
            if let Ok(Some(status)) = child.try_wait() {
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

fn answers_ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut pong = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut pong).is_ok() && &pong == b"+PONG\r\n"
}
