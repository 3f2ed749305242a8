//! Free loopback ports, for processes that must be told their port before they start.

use std::net::TcpListener;

/// A port that was free a moment ago (bind 127.0.0.1:0, read it, release it). A server started
/// in the test itself should bind `127.0.0.1:0` instead and read its address.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local address").port()
}
