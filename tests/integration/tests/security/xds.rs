//! A hand-written xDS client for the cases Envoy cannot be made to play: one ADS request over
//! gRPC (HTTP/2 over mTLS) under a node id of our choosing, optionally a NACK with an error
//! detail, answered with the gRPC status the control plane ends the stream with. The messages
//! are the few fields of Envoy's `DiscoveryRequest` these cases send (same tags, same wire).

use ferry_integration_tests::secure::CP_NAME;
use ferry_integration_tests::tls;
use ferry_test_support::certs::{Ca, LeafFiles};
use prost::Message;

/// The ECDS type URL (the filter's configuration).
pub const ECDS: &str = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

#[derive(Clone, PartialEq, prost::Message)]
struct Node {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "2")]
    cluster: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DiscoveryRequest {
    #[prost(string, tag = "1")]
    version_info: String,
    #[prost(message, optional, tag = "2")]
    node: Option<Node>,
    #[prost(string, repeated, tag = "3")]
    resource_names: Vec<String>,
    #[prost(string, tag = "4")]
    type_url: String,
    #[prost(string, tag = "5")]
    response_nonce: String,
    #[prost(message, optional, tag = "6")]
    error_detail: Option<RpcStatus>,
}

/// One ADS request as `client` (or without a certificate) under `node`: a NACK of `nack` = (version, nonce) when given.
/// The gRPC status the stream ended with (`grpc-status`), or the error that ended the call.
pub async fn ads_once(
    port: u16,
    (ca, client): (&Ca, Option<&LeafFiles>),
    node: &str,
    nack: Option<(&str, &str)>,
) -> Result<u32, String> {
    let req = DiscoveryRequest {
        version_info: nack.map(|n| n.0.to_owned()).unwrap_or_default(),
        node: Some(Node {
            id: node.to_owned(),
            cluster: "ferry".into(),
        }),
        resource_names: vec!["ferry".into()],
        type_url: ECDS.into(),
        response_nonce: nack.map(|n| n.1.to_owned()).unwrap_or_default(),
        error_detail: nack.map(|_| RpcStatus {
            code: 3,
            message: "forged: the filter refused this snapshot".into(),
        }),
    };
    tls::grpc_status(
        port,
        (ca, client),
        CP_NAME,
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
        &req.encode_to_vec(),
    )
    .await
}
