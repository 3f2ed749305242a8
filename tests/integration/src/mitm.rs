//! A man in the middle of the filter's snapshot pull: a small HTTP server that answers every
//! request with the answer a test set last (a signed envelope replayed, tampered, oversize...),
//! and [`fetch`], which takes `ferry serve`'s real answers for it to replay.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use ferry::serve::api::SNAPSHOT_PATH;
use ferry_protos::signed::CONTENT_TYPE;
use ferry_protos::v1::SignedSnapshot;
use prost::Message;

use crate::control_plane::{ControlPlane, READ_TOKEN};

/// One answer of `GET /v1/snapshot`: content type, ETag, body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub content_type: String,
    pub etag: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn sequence(&self) -> u64 {
        assert_eq!(self.content_type, CONTENT_TYPE);
        SignedSnapshot::decode(&*self.body).unwrap().sequence
    }
}

/// `GET /v1/snapshot` from `ferry serve`, as bytes.
pub fn fetch(cp: &ControlPlane) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", cp.http_port)).unwrap();
    let req = format!(
        "GET {SNAPSHOT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {READ_TOKEN}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..at]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_default()
            .to_owned()
    };
    Answer {
        content_type: header("content-type"),
        etag: header("etag"),
        body: raw[at + 4..].to_vec(),
    }
}

/// The man in the middle: answers every request with the answer set last.
pub struct Mitm {
    pub port: u16,
    answer: Arc<Mutex<Option<Answer>>>,
}

impl Mitm {
    pub fn start() -> Mitm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer: Arc<Mutex<Option<Answer>>> = Arc::default();
        let serving = answer.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let a = serving.lock().unwrap().clone();
                answer_one(conn, a);
            }
        });
        Mitm { port, answer }
    }

    pub fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = Some(answer);
    }
}

fn answer_one(mut conn: TcpStream, answer: Option<Answer>) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    let Some(a) = answer else {
        let _ = conn.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        return;
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\netag: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        a.content_type,
        a.etag,
        a.body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&a.body);
}

/// The Envoy cluster the filter reaches `ferry serve` (or the man in the middle) by.
pub const CP_CLUSTER: &str = "ferry_control_plane";

/// The bootstrap plus a cluster for the control plane's HTTP port.
pub fn with_cp_cluster(yaml: String, port: u16) -> String {
    let cluster = format!(
        "  clusters:\n  - name: {CP_CLUSTER}\n    type: STATIC\n    connect_timeout: 0.25s\n    \
         load_assignment:\n      cluster_name: {CP_CLUSTER}\n      endpoints:\n      - lb_endpoints:\n        \
         - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}\n"
    );
    assert!(yaml.contains("\n  clusters:\n"), "{yaml}");
    yaml.replacen("  clusters:\n", &cluster, 1)
}
