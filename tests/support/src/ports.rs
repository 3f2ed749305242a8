//! Free loopback ports, for processes that must be told their port before they start.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// Ports are handed out from 20,000..32,000: below Linux's ephemeral range (32,768..60,999), so
/// no outgoing connection (of this process, Redis clients, Feast, Envoy's upstream pools) can be
/// given one between this call and the bind of the server it is meant for. That race did happen
/// with ports from `bind 127.0.0.1:0`, which come from the ephemeral range ("cannot bind ...:
/// Address already in use" from an Envoy started moments later).
const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// The next candidate, from a process-wide counter (the tests of one binary run in parallel and
/// never get the same port) started at an offset taken from the pid (successive test binaries
/// start elsewhere in the range).
fn next() -> u32 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id().wrapping_mul(2_654_435_761)));
    next.fetch_add(1, Ordering::Relaxed) % COUNT
}

/// A port that was free a moment ago and that no other caller in this process was given. A
/// server started in the test itself should bind `127.0.0.1:0` instead and read its address.
pub fn free_port() -> u16 {
    for _ in 0..COUNT {
        let port = u16::try_from(FIRST + next()).expect("ports below 32,000 fit a u16");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + COUNT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
        for p in ports {
            assert!((20_000..32_000).contains(&p), "{p}");
            TcpListener::bind(("127.0.0.1", p)).expect("a free port binds");
        }
    }
}
