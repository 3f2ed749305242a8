//! A response as the server sends it: the `DiscoveryResponse` fields every stream shares
//! (version, resources, type URL), encoded once per snapshot and type, and this stream's
//! nonce. A protobuf message is the concatenation of its fields, so the bytes on the wire are
//! the shared encoding followed by the nonce field: no stream clones or re-encodes the
//! resources (go-control-plane's linear cache and Istio's push hand every stream the same
//! marshalled bytes in the same way).

use bytes::{BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::Any;
use prost::Message as _;

use super::resource_type::ResourceType;

/// One response to send on one stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub resource_type: ResourceType,
    pub version: String,
    pub nonce: String,
    /// The encoded `DiscoveryResponse` without its nonce (shared by every stream sent it).
    pub shared: Bytes,
}

/// The shared part of a response: version, resources and type URL, encoded.
pub fn encode_shared<'a>(
    resource_type: ResourceType,
    version: &str,
    resources: impl Iterator<Item = &'a Any>,
) -> Bytes {
    let r = DiscoveryResponse {
        version_info: version.to_owned(),
        resources: resources.cloned().collect(),
        type_url: resource_type.type_url().to_owned(),
        ..Default::default()
    };
    Bytes::from(r.encode_to_vec())
}

impl Response {
    /// The nonce field alone, encoded.
    pub fn nonce_field(&self) -> Vec<u8> {
        DiscoveryResponse {
            nonce: self.nonce.clone(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Its encoded size.
    pub fn encoded_len(&self) -> usize {
        self.shared.len() + self.nonce_field().len()
    }

    /// Writes the whole `DiscoveryResponse` (the shared fields, then the nonce).
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.shared);
        buf.put_slice(&self.nonce_field());
    }

    /// The `DiscoveryResponse` it encodes (tests, logs).
    pub fn decode(&self) -> DiscoveryResponse {
        let mut bytes = Vec::with_capacity(self.encoded_len());
        self.encode(&mut bytes);
        DiscoveryResponse::decode(bytes.as_slice()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_fields_and_the_nonce_decode_as_one_response() {
        let any = Any {
            type_url: "t".into(),
            value: vec![7; 300],
        };
        let t = ResourceType::ExtensionConfig;
        let shared = encode_shared(t, "v3", [any.clone()].iter());
        let r = Response {
            resource_type: t,
            version: "v3".into(),
            nonce: "12-4".into(),
            shared: shared.clone(),
        };
        let whole = DiscoveryResponse {
            version_info: "v3".into(),
            resources: vec![any],
            type_url: t.type_url().into(),
            nonce: "12-4".into(),
            ..Default::default()
        };
        assert_eq!(r.decode(), whole);
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        assert_eq!(
            bytes,
            whole.encode_to_vec(),
            "the canonical encoding, byte for byte"
        );
        assert_eq!(r.encoded_len(), bytes.len());
        // Another stream's response shares the same bytes.
        let other = Response {
            nonce: "13-1".into(),
            ..r.clone()
        };
        assert_eq!(other.shared.as_ptr(), shared.as_ptr());
    }
}
