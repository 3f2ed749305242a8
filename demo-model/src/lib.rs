//! Ferry's demo model: stands in for a model server behind Envoy and answers every request with
//! exactly what it received, so the enrichment Ferry did on the way is visible. It is also the
//! upstream of the benchmarks, so it streams the body straight back instead of buffering it.
//!
//! The answer: status 200, the request body bytes, the request's content type (default
//! `application/json`), and
//! - `x-echo-headers`: compact JSON object of the request headers, name → value (repeated
//!   headers joined with ", ", as HTTP allows);
//! - `x-echo-method`: the request method;
//! - `x-echo-path`: the request path, with its query if any;
//! - `inference-header-content-length`, when the request had it (KServe v2's binary tensor data
//!   extension): the echoed body keeps the request's framing, so an Open Inference Protocol
//!   client (e.g. tritonclient) can read the echo as a framed answer.
//!
//! A gRPC `ModelInfer` call (KServe v2 / Triton, h2c) gets a `ModelInferResponse` holding what
//! it received instead (`grpc`), with the same `x-echo-headers`, `x-echo-method` and
//! `x-echo-path`.

pub mod grpc;

use std::collections::BTreeMap;
use std::future::Future;

use ferry_http_serve::Options;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Request, Response};
use tokio::net::TcpListener;

const X_ECHO_HEADERS: HeaderName = HeaderName::from_static("x-echo-headers");
const X_ECHO_METHOD: HeaderName = HeaderName::from_static("x-echo-method");
const X_ECHO_PATH: HeaderName = HeaderName::from_static("x-echo-path");
const INFERENCE_HEADER_LENGTH: HeaderName =
    HeaderName::from_static("inference-header-content-length");

/// Builds the echo of one request. The body is handed back as the response body: streamed, not
/// copied, with the request's length.
pub fn echo(request: Request<Incoming>) -> Response<Incoming> {
    let (parts, body) = request.into_parts();
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_TYPE, content_type);
    if let Some(length) = parts.headers.get(INFERENCE_HEADER_LENGTH) {
        headers.insert(INFERENCE_HEADER_LENGTH, length.clone());
    }
    echo_request(&parts, headers);
    response
}

/// The `x-echo-*` headers describing a request (its headers, method and path), on any answer.
fn echo_request(parts: &hyper::http::request::Parts, headers: &mut HeaderMap) {
    // JSON escapes control characters, so the value never contains CR/LF; the fallback is
    // only there because the type system cannot know that.
    let echoed = HeaderValue::from_str(&headers_json(&parts.headers))
        .unwrap_or(HeaderValue::from_static("{}"));
    headers.insert(X_ECHO_HEADERS, echoed);
    if let Ok(method) = HeaderValue::from_str(parts.method.as_str()) {
        headers.insert(X_ECHO_METHOD, method);
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    if let Ok(path) = HeaderValue::from_str(path) {
        headers.insert(X_ECHO_PATH, path);
    }
}

/// The request headers as a compact JSON object (names sorted, repeated values joined).
fn headers_json(headers: &HeaderMap) -> String {
    let mut map: BTreeMap<&str, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        map.entry(name.as_str())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    serde_json::to_string(&map).unwrap_or_else(|_| "{}".to_string())
}

/// Serves on `listener` until `shutdown` completes: HTTP/1.1 keep-alive and h2c (the gRPC
/// `ModelInfer` path), then drains requests in flight.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) {
    ferry_http_serve::serve(listener, &Options::default(), answer, shutdown).await;
}

/// The answer to one request: the gRPC `ModelInfer` echo on its path, the HTTP echo elsewhere.
async fn answer(request: Request<Incoming>) -> Response<Either<Incoming, grpc::GrpcBody>> {
    if request.uri().path() == grpc::MODEL_INFER_PATH {
        let (parts, body) = request.into_parts();
        let mut answer = grpc::model_infer(body).await;
        echo_request(&parts, answer.headers_mut());
        answer.map(Either::Right)
    } else {
        echo(request).map(Either::Left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    async fn start() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, async {
            let _ = rx.await;
        }));
        (addr, tx)
    }

    #[tokio::test]
    async fn echoes_body_content_type_headers_method_and_path() {
        let (addr, _stop) = start().await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = r#"{"instances":[{"user_id":"u1","age":42}]}"#;
        let request = Request::post(format!("http://{addr}/v1/models/fraud:predict?x=1"))
            .header("content-type", "application/json; charset=utf-8")
            .header("x-ferry-status", "ok")
            .header("x-multi", "a")
            .header("x-multi", "b")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let h = response.headers().clone();
        assert_eq!(h["content-type"], "application/json; charset=utf-8");
        assert_eq!(h["content-length"], body.len().to_string().as_str());
        assert_eq!(h["x-echo-method"], "POST");
        assert_eq!(h["x-echo-path"], "/v1/models/fraud:predict?x=1");
        let echoed: serde_json::Value =
            serde_json::from_str(h["x-echo-headers"].to_str().unwrap()).unwrap();
        assert_eq!(echoed["x-ferry-status"], "ok");
        assert_eq!(echoed["x-multi"], "a, b");
        assert_eq!(echoed["content-length"], body.len().to_string());
        assert_eq!(echoed["host"], addr.to_string());
        let got = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(got, body.as_bytes());
        assert!(h.get("inference-header-content-length").is_none());
    }

    #[tokio::test]
    async fn a_framed_body_is_echoed_with_its_framing() {
        let (addr, _stop) = start().await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = b"{\"inputs\":[]}\x01\x02".to_vec();
        let request = Request::post(format!("http://{addr}/v2/models/m/infer"))
            .header("Inference-Header-Content-Length", "13")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.headers()["inference-header-content-length"], "13");
        let got = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(got, body);
    }

    #[tokio::test]
    async fn defaults_to_json_and_keeps_the_connection_alive() {
        let (addr, _stop) = start().await;
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        for i in 0..3 {
            sender.ready().await.unwrap();
            let body = vec![i as u8, 0, 255];
            let request = Request::put("/p")
                .header("host", "model")
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.headers()["content-type"], "application/json");
            assert_eq!(response.headers()["x-echo-method"], "PUT");
            let got = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(got, body);
        }
    }

    #[tokio::test]
    async fn model_infer_over_h2c_echoes_inputs_raw_contents_and_parameters() {
        use ferry_protos::inference::{model_infer_request::InferInputTensor, *};
        use prost::Message;
        let (addr, _stop) = start().await;
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build_http::<Full<Bytes>>();
        let mut request = ModelInferRequest {
            id: "r1".into(),
            inputs: vec![InferInputTensor {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![1],
                ..Default::default()
            }],
            raw_input_contents: vec![1.5f32.to_le_bytes().to_vec()],
            ..Default::default()
        };
        request.parameters.insert(
            "p".into(),
            InferParameter {
                parameter_choice: Some(infer_parameter::ParameterChoice::StringParam("v".into())),
            },
        );
        let message = request.encode_to_vec();
        let mut body = vec![0];
        body.extend((message.len() as u32).to_be_bytes());
        body.extend(&message);
        let call = |body: Vec<u8>| {
            Request::post(format!("http://{addr}{}", grpc::MODEL_INFER_PATH))
                .header("content-type", "application/grpc")
                .body(Full::new(Bytes::from(body)))
                .unwrap()
        };
        let response = client.request(call(body)).await.unwrap();
        assert_eq!(response.headers()["content-type"], "application/grpc");
        // The request is described as on the HTTP echo.
        assert_eq!(response.headers()["x-echo-path"], grpc::MODEL_INFER_PATH);
        let echoed: serde_json::Value =
            serde_json::from_str(response.headers()["x-echo-headers"].to_str().unwrap()).unwrap();
        assert_eq!(echoed["content-type"], "application/grpc");
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        let got = collected.to_bytes();
        let echo = ModelInferResponse::decode(&got[5..]).unwrap();
        assert_eq!(echo.id, "r1");
        assert_eq!(echo.outputs[0].name, "x");
        assert_eq!(echo.raw_output_contents, request.raw_input_contents);
        assert_eq!(echo.parameters, request.parameters);
        // Not a ModelInferRequest: INVALID_ARGUMENT in the trailers.
        let response = client
            .request(call(vec![0, 0, 0, 0, 1, 0xff]))
            .await
            .unwrap();
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "3");
    }

    #[test]
    fn header_json_is_compact_and_escaped() {
        let mut headers = HeaderMap::new();
        headers.insert("x-q", HeaderValue::from_static("say \"hi\""));
        assert_eq!(headers_json(&headers), r#"{"x-q":"say \"hi\""}"#);
    }
}
