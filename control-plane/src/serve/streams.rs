//! The stream table: every connected Envoy stream as the xDS server's [`Callbacks`] describe
//! it (for `/status`), and the xDS counters of `/metrics`, counted where the events arrive.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use super::metrics::{inc, XdsCounters};
use super::resources::RESOURCE_TYPE;
use ferry_xds::{Callbacks, Event, Node, ResourceType, Response, TypeState};

/// One connected stream, as the xDS server's callbacks describe it.
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    pub node: Node,
    pub connected_ms: u64,
    /// Per type: the protocol state, plus when the last NACK came.
    pub types: BTreeMap<ResourceType, TypeState>,
    pub last_nack_ms: Option<u64>,
}

impl StreamInfo {
    /// The filter config version this Envoy ACKed last.
    pub fn acked(&self) -> Option<&str> {
        self.types
            .get(&RESOURCE_TYPE)
            .and_then(|t| t.acked_version.as_deref())
    }

    /// Whether it ACKed `version` (false when there is none).
    pub fn converged_on(&self, version: Option<&str>) -> bool {
        version.is_some() && self.acked() == version
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The xDS server's callbacks: the stream table and the counters of what the streams did.
pub struct Streams {
    /// stream id → what the xDS server last said about it.
    table: Mutex<HashMap<u64, StreamInfo>>,
    /// Shared with the `/metrics` registry, which reads them.
    counters: XdsCounters,
}

impl Streams {
    pub fn new(counters: XdsCounters) -> Streams {
        Streams {
            table: Mutex::new(HashMap::new()),
            counters,
        }
    }

    /// Connected streams, oldest first.
    pub fn list(&self) -> Vec<(u64, StreamInfo)> {
        let mut v: Vec<(u64, StreamInfo)> = lock(&self.table)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }
}

impl Callbacks for Streams {
    fn on_stream_open(&self, stream: u64) {
        inc(&self.counters.streams_total);
        lock(&self.table).insert(
            stream,
            StreamInfo {
                connected_ms: now_ms(),
                ..Default::default()
            },
        );
    }

    fn on_event(&self, stream: u64, _node: &Node, event: &Event) {
        let c = &self.counters;
        match event {
            Event::Ack { .. } => inc(&c.acks_total),
            Event::Nack { .. } => {
                inc(&c.nacks_total);
                if let Some(info) = lock(&self.table).get_mut(&stream) {
                    info.last_nack_ms = Some(now_ms());
                }
            }
            Event::StaleNonce { .. } => inc(&c.stale_nonces_total),
            Event::Withheld { .. } => inc(&c.withheld_total),
            Event::Refused { refusal, .. } => c.refused(refusal.label()),
            Event::Subscribed { .. } | Event::NoTypeUrl | Event::UnknownType { .. } => {}
        }
    }

    fn on_stream_state(&self, stream: u64, node: &Node, types: &BTreeMap<ResourceType, TypeState>) {
        let mut streams = lock(&self.table);
        let named_now = streams
            .get(&stream)
            .is_some_and(|i| i.node.id.is_empty() && !node.id.is_empty());
        if named_now
            && streams
                .values()
                .any(|i| i.node.id == node.id && i.node.identity == node.identity)
        {
            tracing::warn!(
                node = %node.id,
                "two connected Envoys share this node id: give each its own (ferry envoy-config \
                 --node-id, or Envoy's --service-node), or one's NACK can hold a version back \
                 from the other"
            );
        }
        if let Some(info) = streams.get_mut(&stream) {
            info.node.clone_from(node);
            info.types.clone_from(types);
        }
    }

    fn on_response(&self, _stream: u64, _node: &Node, _response: &Response) {
        inc(&self.counters.responses_total);
    }

    fn on_stream_closed(&self, stream: u64) {
        lock(&self.table).remove(&stream);
    }
}
