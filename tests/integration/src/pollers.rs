//! `ferry serve`'s HTTP API under a fleet's pollers: [`IDLE_POLLERS`] keep-alive connections
//! that each fetched the snapshot and stay idle, then a push over one more connection, which
//! must be taken, and the pollers see the new version (issue #22's bound: at least 2,000 idle
//! pollers, the push within 100 ms; measured, never asserted on time).

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use prost::Message as _;

/// How many idle pollers.
pub const IDLE_POLLERS: usize = 2_000;

/// A keep-alive connection to the API, one request at a time (blocking).
pub struct Poller(std::net::TcpStream);

/// An answer read off a keep-alive connection.
pub struct Answer {
    pub code: u16,
    pub etag: Option<String>,
    pub body: Vec<u8>,
}

impl Poller {
    pub fn open(port: u16) -> Poller {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Poller(s)
    }

    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.0.write_all(req.as_bytes()).unwrap();
        self.0.write_all(body).unwrap();
        self.read_answer()
    }

    /// One response: its head up to the blank line, then content-length bytes.
    fn read_answer(&mut self) -> Answer {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = self.0.read(&mut byte).expect("an answer");
            assert_eq!(
                n,
                1,
                "closed mid-answer: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let header = |name: &str| {
            head.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        };
        let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0u8; len];
        self.0.read_exact(&mut body).unwrap();
        Answer {
            code: head[9..12].parse().unwrap(),
            etag: header("etag"),
            body,
        }
    }
}

/// [`IDLE_POLLERS`] idle keep-alive pollers of the plaintext API on 127.0.0.1:`port`, then a
/// push (one more protected path) with `authorization` (a push credential): taken, and an idle
/// poller sees the new version. Returns the push's time in ms.
pub fn idle_pollers_then_push(port: u16, authorization: &str) -> f64 {
    let auth = [("authorization", authorization)];

    // Every poller fetches the snapshot as it connects and then stays connected, idle. (The
    // API closes a connection that sends no request for 10 s, its header read timeout, idle
    // keep-alive ones included: on a slow machine the first pollers may be gone by the push.)
    let mut pollers = Vec::with_capacity(IDLE_POLLERS);
    let mut first = None;
    for _ in 0..IDLE_POLLERS {
        let mut p = Poller::open(port);
        let a = p.send("GET", "/v1/snapshot", &auth, b"");
        assert_eq!(a.code, 200);
        first.get_or_insert(a);
        pollers.push(p);
    }
    let first = first.unwrap();
    let etag = first.etag.clone().expect("an ETag");
    // Unchanged: 304, no body, on the same keep-alive connection.
    let a = pollers[IDLE_POLLERS - 1].send(
        "GET",
        "/v1/snapshot",
        &[auth[0], ("if-none-match", &etag)],
        b"",
    );
    assert_eq!((a.code, a.body.len()), (304, 0));

    // A push (one more protected path) over connection 2,001: taken at once.
    let mut snap = ferry_protos::v1::Snapshot::decode(first.body.as_slice()).unwrap();
    snap.protected_paths.push("/v9/extra".into());
    let started = Instant::now();
    let pushed = Poller::open(port).send("POST", "/v1/snapshot", &auth, &snap.encode_to_vec());
    let push_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        pushed.code,
        200,
        "{}",
        String::from_utf8_lossy(&pushed.body)
    );

    // An idle poller polls again with the old ETag: the new version, not a 304.
    let a = pollers[IDLE_POLLERS - 2].send(
        "GET",
        "/v1/snapshot",
        &[auth[0], ("if-none-match", &etag)],
        b"",
    );
    assert_eq!(a.code, 200);
    assert_ne!(a.etag.as_deref(), Some(etag.as_str()));
    let new = ferry_protos::v1::Snapshot::decode(a.body.as_slice()).unwrap();
    assert_eq!(new.protected_paths, snap.protected_paths);
    assert_eq!(a.etag, Some(format!("\"{}\"", new.version)));
    push_ms
}
