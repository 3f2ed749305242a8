//! A TCP proxy on a free loopback port that can play a Redis gone silent: [`FreezingProxy::freeze`]
//! keeps every socket open but stops forwarding, the way a crashed host or a network partition
//! looks to a client (no FIN, no RST, the kernel still acknowledging). The connections frozen
//! stay dead for good, as they would after a host restart; [`FreezingProxy::thaw`] only lets new
//! connections through again. Plain threads, so sync and async tests can both use it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// How often an idle pump looks at the freeze and stop flags.
const POLL: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Flags {
    /// Nothing is forwarded while set; connections accepted meanwhile are dead from the start.
    frozen: AtomicBool,
    /// Bumped by each freeze: a connection born in an earlier generation is dead.
    generation: AtomicU64,
    /// The proxy was dropped: every thread lets go of its sockets and ends.
    stopping: AtomicBool,
}

/// A proxy from `127.0.0.1:port` to `127.0.0.1:upstream`; stops its threads on drop.
pub struct FreezingProxy {
    pub port: u16,
    flags: Arc<Flags>,
}

impl FreezingProxy {
    pub fn start(upstream: u16) -> FreezingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let flags = Arc::new(Flags::default());
        let accept_flags = flags.clone();
        thread::spawn(move || accept_loop(&listener, upstream, &accept_flags));
        FreezingProxy { port, flags }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on nothing goes through, and today's connections never carry a byte again.
    pub fn freeze(&self) {
        self.flags.generation.fetch_add(1, SeqCst);
        self.flags.frozen.store(true, SeqCst);
    }

    /// New connections go through again (the frozen ones stay dead).
    pub fn thaw(&self) {
        self.flags.frozen.store(false, SeqCst);
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.flags.stopping.store(true, SeqCst);
    }
}

fn accept_loop(listener: &TcpListener, upstream: u16, flags: &Arc<Flags>) {
    while !flags.stopping.load(SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(_) => {
                thread::sleep(POLL);
                continue;
            }
        };
        // A connection accepted while frozen belongs to the frozen generation: dead for good.
        let generation = flags.generation.load(SeqCst) - u64::from(flags.frozen.load(SeqCst));
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            continue; // upstream down: the client sees its connection closed
        };
        for (from, to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let flags = flags.clone();
            thread::spawn(move || pump(from, to, generation, &flags));
        }
    }
}

/// Copies `from` to `to` while the connection's generation is alive; then holds both sockets
/// open without reading or writing until the proxy is dropped.
fn pump(mut from: TcpStream, mut to: TcpStream, generation: u64, flags: &Flags) {
    let _ = from.set_nonblocking(false);
    let _ = from.set_read_timeout(Some(POLL));
    let alive = || !flags.frozen.load(SeqCst) && flags.generation.load(SeqCst) == generation;
    let mut buf = [0u8; 16 * 1024];
    while alive() && !flags.stopping.load(SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            // Read before the freeze was seen, but not forwarded after it.
            Ok(n) if alive() => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Ok(_) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
    while !flags.stopping.load(SeqCst) {
        thread::sleep(POLL);
    }
}
