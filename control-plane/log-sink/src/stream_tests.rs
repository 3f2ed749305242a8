//! The sink's bounds over real connections: streams beyond `max_streams` are refused with
//! RESOURCE_EXHAUSTED and counted, and a stream that ends frees its slot; a connection beyond
//! either listener's cap waits, unserved, until a served one closes.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{run, FileOptions, SinkOptions};

type Body = StreamBody<tokio_stream::wrappers::ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

/// A `StreamAccessLogs` call whose body stays open until the sender is dropped.
fn call() -> (
    mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
    hyper::Request<Body>,
) {
    let (tx, rx) = mpsc::channel(1);
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let req = hyper::Request::post(
        "http://sink/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(body)
    .unwrap();
    (tx, req)
}

async fn metric(http: std::net::SocketAddr, series: &str) -> i64 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut c = TcpStream::connect(http).await.unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} "))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

async fn wait_metric(http: std::net::SocketAddr, series: &str, want: i64) {
    let t = Instant::now();
    loop {
        let got = metric(http, series).await;
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{series} is {got}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_cap_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc_addr, http_addr, stop_tx, sink) = start_sink(dir.path(), (2, 16, 16)).await;
    let tcp = TcpStream::connect(grpc_addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);

    // Two streams held open: the cap.
    let mut open = Vec::new();
    for _ in 0..2 {
        let (tx, req) = call();
        let pending = tokio::spawn(send.send_request(req));
        open.push((tx, pending));
    }
    wait_metric(http_addr, "ferry_log_sink_streams", 2).await;

    // A third is refused at once, with gRPC's RESOURCE_EXHAUSTED (8), and counted.
    let (_tx, req) = call();
    let refused = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!(refused.status(), 200, "gRPC answers in the status header");
    assert_eq!(
        refused
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap()),
        Some("8"),
        "{:?}",
        refused.headers()
    );
    let message = refused.headers()["grpc-message"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("max-streams"), "{message}");
    assert_eq!(
        metric(http_addr, "ferry_log_sink_streams_refused_total").await,
        1
    );
    assert_eq!(metric(http_addr, "ferry_log_sink_streams").await, 2);

    // One stream ends (Envoy closed it): its slot is free and the next stream is taken.
    let (tx, pending) = open.remove(0);
    drop(tx);
    let done = pending.await.unwrap().unwrap();
    assert_eq!(done.status(), 200);
    wait_metric(http_addr, "ferry_log_sink_streams", 1).await;
    let (tx2, req) = call();
    let taken = tokio::spawn(send.send_request(req));
    wait_metric(http_addr, "ferry_log_sink_streams", 2).await;
    assert_eq!(
        metric(http_addr, "ferry_log_sink_streams_refused_total").await,
        1
    );

    // Streams that end let the sink stop.
    drop((open, tx2, _tx));
    assert_eq!(taken.await.unwrap().unwrap().status(), 200);
    stop_tx.send(true).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), sink).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}

/// A sink on 127.0.0.1:0 with these caps: (its gRPC and HTTP addresses, its stop, its task).
async fn start_sink(
    dir: &std::path::Path,
    (max_streams, max_connections, max_http_connections): (usize, usize, usize),
) -> (
    std::net::SocketAddr,
    std::net::SocketAddr,
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let opts = SinkOptions {
        files: FileOptions {
            dir: dir.to_path_buf(),
            window: Duration::from_secs(3600),
            max_rows: 1000,
            max_buffered_rows: 1000,
            error_log_interval: Duration::from_secs(60),
            retention: Default::default(),
        },
        grpc,
        http,
        tls: None,
        allowed: Default::default(),
        max_streams,
        max_connections,
        max_http_connections,
    };
    (grpc_addr, http_addr, stop_tx, tokio::spawn(run(opts, stop)))
}

/// An HTTP/2 connection to the sink: its sender and the task driving it (abort: it closes).
async fn h2(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Body>,
    tokio::task::JoinHandle<()>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_the_grpc_cap_waits_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let (grpc, _http, stop, sink) = start_sink(dir.path(), (8, 1, 4)).await;
    // A client that sent HTTP/2's preface and its settings, then holds its connection.
    let mut first = TcpStream::connect(grpc).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut first,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The second connection is not served: its stream (its body already ended) gets no answer.
    let (mut second, _second_conn) = h2(grpc).await;
    let (ended, req) = call();
    drop(ended);
    let answer = tokio::spawn(second.send_request(req));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!answer.is_finished(), "served over --max-connections");

    // The first closes: the second is served.
    drop(first);
    let served = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("served once a slot is free")
        .unwrap()
        .unwrap();
    assert_eq!(served.status(), 200, "{:?}", served.headers());
    assert!(served.headers().get("grpc-status").is_none(), "not refused");
    stop.send(true).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), sink).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_connection_over_the_cap_waits_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let (_grpc, http, stop, sink) = start_sink(dir.path(), (8, 4, 1)).await;
    // A silent client takes the one slot (for up to the 10 s header timeout).
    let silent = TcpStream::connect(http).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let scrape = tokio::spawn(metric(http, "ferry_log_sink_streams"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!scrape.is_finished(), "served over --max-http-connections");
    drop(silent);
    let streams = tokio::time::timeout(Duration::from_secs(10), scrape)
        .await
        .expect("served once the silent client left")
        .unwrap();
    assert_eq!(streams, 0);
    stop.send(true).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), sink).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}
