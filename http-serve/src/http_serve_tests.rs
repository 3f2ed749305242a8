//! The accept loop over real sockets on 127.0.0.1.

use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Version;
use std::net::SocketAddr;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

/// Answers with the request's path; `/slow` waits for `release` first.
async fn answer(request: Request<Incoming>, release: Arc<Notify>) -> Response<Full<Bytes>> {
    if request.uri().path() == "/slow" {
        release.notified().await;
    }
    Response::new(Full::new(Bytes::from(request.uri().path().to_owned())))
}

struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    release: Arc<Notify>,
    served: JoinHandle<()>,
}

async fn start(options: Options) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let release = Arc::new(Notify::new());
    let handler = {
        let release = release.clone();
        move |request| answer(request, release.clone())
    };
    let served = tokio::spawn(async move {
        serve(listener, &options, handler, async {
            let _ = stopped.await;
        })
        .await;
    });
    Server {
        addr,
        stop,
        release,
        served,
    }
}

type H1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn http1(addr: SocketAddr) -> H1 {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h2c(addr: SocketAddr) -> Result<H2, hyper::Error> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://ferry{path}"))
        .body(Full::default())
        .unwrap()
}

async fn text(response: Response<Incoming>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A `/slow` request, sent and (by the time this returns) in its handler.
async fn slow_request(addr: SocketAddr) -> JoinHandle<Result<Response<Incoming>, hyper::Error>> {
    let mut client = http1(addr).await;
    let in_flight = tokio::spawn(async move { client.send_request(get("/slow")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    in_flight
}

/// Waits for `serve` to return, failing after 5 s.
async fn returns(served: JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn serves_http1_with_keep_alive() {
    let server = start(Options::default()).await;
    let mut client = http1(server.addr).await;
    for path in ["/a", "/b"] {
        client.ready().await.unwrap();
        let response = client.send_request(get(path)).await.unwrap();
        assert_eq!(response.version(), Version::HTTP_11);
        assert_eq!(text(response).await, path);
    }
}

#[tokio::test]
async fn serves_h2c_on_the_same_port() {
    let server = start(Options::default()).await;
    let mut client = h2c(server.addr).await.unwrap();
    let response = client.send_request(get("/grpc")).await.unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(text(response).await, "/grpc");
}

#[tokio::test]
async fn http1_only_refuses_h2c() {
    let options = Options {
        h2c: false,
        ..Options::default()
    };
    let server = start(options).await;
    let refused = match h2c(server.addr).await {
        Ok(mut client) => client.send_request(get("/grpc")).await.is_err(),
        Err(_) => true,
    };
    assert!(refused);
    let response = http1(server.addr).await.send_request(get("/x")).await;
    assert_eq!(text(response.unwrap()).await, "/x");
}

#[tokio::test]
async fn shutdown_stops_accepting_and_drains_a_request_in_flight() {
    let server = start(Options::default()).await;
    let in_flight = slow_request(server.addr).await;
    server.stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(server.addr).await.is_err());
    assert!(
        !server.served.is_finished(),
        "returned with a request in flight"
    );
    server.release.notify_one();
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(text(response).await, "/slow");
    returns(server.served).await;
}

#[tokio::test]
async fn the_grace_period_bounds_the_drain() {
    let options = Options {
        grace: Duration::from_millis(200),
        ..Options::default()
    };
    let server = start(options).await;
    let _stuck = slow_request(server.addr).await;
    server.stop.send(()).unwrap();
    returns(server.served).await;
}

#[tokio::test]
async fn max_connections_holds_the_next_connection_back() {
    let options = Options {
        max_connections: Some(1),
        ..Options::default()
    };
    let server = start(options).await;
    let mut first = http1(server.addr).await;
    assert_eq!(
        text(first.send_request(get("/1")).await.unwrap()).await,
        "/1"
    );
    let mut second = http1(server.addr).await;
    let waiting = tokio::spawn(async move { second.send_request(get("/2")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a second connection was served");
    drop(first);
    let response = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(text(response).await, "/2");
}

#[tokio::test]
async fn header_read_timeout_closes_a_silent_connection() {
    use tokio::io::AsyncReadExt;
    let options = Options {
        h2c: false,
        header_read_timeout: Some(Duration::from_millis(200)),
        ..Options::default()
    };
    let server = start(options).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let mut buf = [0u8; 256];
    // The server answers 408 or simply closes; either way the connection ends.
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while silent.read(&mut buf).await.unwrap_or(0) > 0 {}
    })
    .await;
    assert!(closed.is_ok());
}

/// Whether the server closes `stream` within `within` (it sends nothing on an idle one).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    tokio::time::timeout(within, async {
        while stream.read(&mut buf).await.unwrap_or(0) > 0 {}
    })
    .await
    .is_ok()
}

fn idle_after(ms: u64) -> Options {
    Options {
        idle_timeout: Some(Duration::from_millis(ms)),
        ..Options::default()
    }
}

#[tokio::test]
async fn idle_timeout_closes_a_silent_connection_and_a_used_one_once_idle() {
    use tokio::io::AsyncWriteExt;
    let server = start(idle_after(300)).await;
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A keep-alive connection: answered, then closed 300 ms after its last request.
    let mut used = TcpStream::connect(server.addr).await.unwrap();
    used.write_all(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answered = tokio::time::Instant::now();
    assert!(closed_within(&mut used, Duration::from_secs(5)).await);
    assert!(answered.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn idle_timeout_closes_a_connection_busy_when_its_timer_first_fires() {
    use tokio::io::AsyncWriteExt;
    let server = start(idle_after(300)).await;
    let mut used = TcpStream::connect(server.addr).await.unwrap();
    // Requests until well past the first timer, then silence: the close must still come.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        used.write_all(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
    }
    assert!(closed_within(&mut used, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn idle_timeout_closes_an_idle_h2c_connection() {
    let server = start(idle_after(300)).await;
    let mut client = h2c(server.addr).await.unwrap();
    let response = client.send_request(get("/grpc")).await.unwrap();
    assert_eq!(text(response).await, "/grpc");
    // The GOAWAY and close reach the client's connection task: the sender stops being ready.
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while client.ready().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "the idle h2c connection stayed open");
}

#[tokio::test]
async fn idle_timeout_never_cuts_a_request_being_answered() {
    let server = start(idle_after(200)).await;
    let in_flight = slow_request(server.addr).await;
    // Well past the idle timeout, the request is still waiting for its answer.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !in_flight.is_finished(),
        "the connection was closed under a request"
    );
    server.release.notify_one();
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(text(response).await, "/slow");
}

#[tokio::test]
async fn a_flood_of_silent_connections_holds_the_cap_and_is_reaped() {
    let options = Options {
        max_connections: Some(2),
        ..idle_after(200)
    };
    let server = start(options).await;
    let mut flood = Vec::new();
    for _ in 0..8 {
        flood.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // The cap holds: with two connections served and silent, a third is not answered.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut late = http1(server.addr).await;
    let waiting = tokio::spawn(async move { late.send_request(get("/late")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "served beyond the cap");
    // Idle ones are closed two at a time; the request behind them is answered in bounded time.
    let response = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(text(response).await, "/late");
    for stream in &mut flood {
        assert!(closed_within(stream, Duration::from_secs(5)).await);
    }
}

#[tokio::test]
async fn idle_timeout_keeps_a_connection_in_steady_use() {
    let server = start(idle_after(250)).await;
    let mut client = http1(server.addr).await;
    for i in 0..6 {
        client.ready().await.unwrap();
        let response = client.send_request(get(&format!("/{i}"))).await.unwrap();
        assert_eq!(text(response).await, format!("/{i}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
