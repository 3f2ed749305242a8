//! What the server tells the application as streams come and go (go-control-plane's
//! `Callbacks`): for status pages, metrics and bookkeeping. Every request shows up as at least
//! one [`Event`] (subscribed, ACK, NACK with Envoy's `error_detail`, stale nonce, ...).

use std::collections::BTreeMap;

use super::protocol::{Event, TypeState};
use super::resource_type::ResourceType;
use super::response::Response;
use super::source::Node;

/// Hooks called from a stream's task, in this order per message: events, stream state, then
/// each response. They must not block: no I/O, no waiting on locks held across awaits.
pub trait Callbacks: Send + Sync + 'static {
    /// A stream opened; `stream` is unique for the server's life (it prefixes the nonces).
    fn on_stream_open(&self, _stream: u64) {}
    /// What a request (or a new snapshot) turned out to be on this stream.
    fn on_event(&self, _stream: u64, _node: &Node, _event: &Event) {}
    /// The stream's protocol state per type after each request or snapshot.
    fn on_stream_state(
        &self,
        _stream: u64,
        _node: &Node,
        _types: &BTreeMap<ResourceType, TypeState>,
    ) {
    }
    /// A response is about to be sent.
    fn on_response(&self, _stream: u64, _node: &Node, _response: &Response) {}
    /// The stream ended (Envoy left, an error, or shutdown).
    fn on_stream_closed(&self, _stream: u64) {}
}
