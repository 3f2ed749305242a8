//! Raw Redis commands for tests that read what was written byte for byte (RESP over one TCP
//! connection, no client library between the test and the bytes).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One RESP command's raw reply (the connection closed with QUIT after it).
pub fn command(port: u16, args: &[&[u8]]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("redis");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"*1\r\n$4\r\nQUIT\r\n");
    s.write_all(&req).expect("send to redis");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.truncate(out.len().saturating_sub(b"+OK\r\n".len()));
    out
}

/// The first RESP line of `buf` and what follows it.
pub fn line(buf: &[u8]) -> (&[u8], &[u8]) {
    let at = buf
        .windows(2)
        .position(|w| w == b"\r\n")
        .expect("a RESP line");
    (&buf[..at], &buf[at + 2..])
}
