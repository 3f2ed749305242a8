//! A panic inside one of the native module's hooks fails that stream closed, inside a real
//! Envoy, and Envoy goes on serving: a 500 with Ferry's JSON on the request path, a reset on
//! the response path. The module under test is the shipped one's build (profile `native`,
//! unwinding) with `--features fault-injection`, whose hooks panic when a request names them in
//! `x-native-fault` (target/native-faults/, built by scripts/test.sh).

use std::path::PathBuf;

use ferry_integration_tests::http::{raw, Conn};
use ferry_integration_tests::runtime::native_module;
use ferry_integration_tests::{root, Options, Runtime, Stack};

const PATH: &str = "/v1/models/fraud:predict";
const BODY: &str = r#"{"instances":[{"user_id":"u000001","amount":1.5}]}"#;

fn faulty_module() -> PathBuf {
    let p = root().join("target/native-faults/libferry_native.so");
    assert!(
        p.exists(),
        "{} is missing: run `make test` (it builds the module with --features fault-injection)",
        p.display()
    );
    p
}

/// A POST naming `fault` in `x-native-fault`, as raw HTTP/1.1 (a reset is then visible as a
/// connection closed without an answer).
fn post_with_fault(port: u16, fault: &str) -> String {
    let request = format!(
        "POST {PATH} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         x-native-fault: {fault}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    raw(port, request.as_bytes()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_hook_fails_its_stream_and_envoy_goes_on() {
    let stack = Stack::start(Options {
        runtime: Runtime::Native,
        extra_routes: "",
        entities: Some(10),
    });
    let shipped = native_module().display().to_string();
    let faulty = faulty_module().display().to_string();
    let mut envoy = stack.static_envoy_edited(|yaml| {
        assert!(
            yaml.contains(&shipped),
            "the module's path is in the bootstrap"
        );
        yaml.replace(&shipped, &faulty)
    });
    let port = envoy.listen_port;

    let answer = post_with_fault(port, "request_headers");
    assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
    assert!(answer.contains("x-ferry-error: internal"), "{answer}");
    assert!(answer.contains(r#""error":"internal""#), "{answer}");

    // Reset before the model's answer went out: the connection closes with nothing on it.
    let answer = post_with_fault(port, "response_headers");
    assert!(
        answer.is_empty(),
        "the model's answer reached the client: {answer}"
    );

    // The same Envoy, still up, enriches the next request.
    let ok = Conn::open(port).await.post(PATH, BODY).await;
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    let up = ok.upstream_headers();
    let status = up["x-ferry-status"].as_str();
    assert!(matches!(status, Some("ok" | "partial")), "{up}");
    assert!(envoy.proc.is_running(), "Envoy survived");
    let log = envoy.proc.log_text();
    assert!(log.contains("x-native-fault: request_headers"), "{log}");
    assert!(log.contains("x-native-fault: response_headers"), "{log}");
}
