//! The state-of-the-world xDS protocol for one stream, without I/O: it takes a
//! `DiscoveryRequest` (or a new snapshot) and says which responses to send and what happened
//! (ACK, NACK, stale nonce). The gRPC layer only moves messages; tests drive this directly.
//!
//! Per resource type it tracks the last sent version and nonce and the last ACKed version. A NACK
//! (a request answering our latest nonce with an `error_detail`) is recorded and the rejected
//! version is never sent again on this stream: only a snapshot with another version is. A
//! request answering an older nonce is stale (Envoy will answer the newer response too) and is
//! ignored.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::Any;

use super::bounds::{self, Refusal, MAX_NACK_DETAIL_BYTES};
use super::resource_type::ResourceType;
use super::response::{encode_shared, Response};

/// One named resource of a snapshot, already packed.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub name: String,
    pub body: Any,
}

/// An immutable, versioned set of resources per type: what an Envoy should have. Each type's
/// response is encoded once, here, and shared by every stream it is sent to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct XdsSnapshot {
    pub version: String,
    pub resources: BTreeMap<ResourceType, Vec<Resource>>,
    /// Per type: the response carrying all its resources, without a nonce.
    shared: BTreeMap<ResourceType, Bytes>,
}

impl XdsSnapshot {
    pub fn new(version: String, resources: BTreeMap<ResourceType, Vec<Resource>>) -> XdsSnapshot {
        let shared = resources
            .iter()
            .map(|(t, rs)| (*t, encode_shared(*t, &version, rs.iter().map(|r| &r.body))))
            .collect();
        XdsSnapshot {
            version,
            resources,
            shared,
        }
    }

    /// The encoded response of `resource_type` holding the resources `subscribed` names (all
    /// when empty): the shared one when that is all of them; None when it names none of them.
    fn encoded(&self, resource_type: ResourceType, subscribed: &[String]) -> Option<Bytes> {
        let all = self.resources.get(&resource_type)?;
        let wanted = |r: &&Resource| subscribed.is_empty() || subscribed.contains(&r.name);
        let n = all.iter().filter(wanted).count();
        if n == 0 {
            return None;
        }
        match self.shared.get(&resource_type) {
            Some(shared) if n == all.len() => Some(shared.clone()),
            _ => Some(encode_shared(
                resource_type,
                &self.version,
                all.iter().filter(wanted).map(|r| &r.body),
            )),
        }
    }
}

/// The rejection Envoy sent for a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// The version Envoy refused (the one we sent under the NACKed nonce).
    pub version: String,
    pub error: String,
}

/// What this stream knows about one resource type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeState {
    /// Resource names Envoy asked for; empty = all (wildcard).
    pub subscribed: Vec<String>,
    pub sent_version: Option<String>,
    pub sent_nonce: Option<String>,
    pub acked_version: Option<String>,
    pub last_nack: Option<Nack>,
    /// Versions refused on this stream (or by this node before): never sent again.
    pub rejected: HashSet<String>,
    pub responses_sent: u64,
}

impl TypeState {
    /// Envoy answered our latest response: an ACK, or a NACK (its detail kept truncated).
    fn answered(&mut self, resource_type: ResourceType, req: &DiscoveryRequest) -> Event {
        match &req.error_detail {
            Some(status) => {
                let nack = Nack {
                    version: self.sent_version.clone().unwrap_or_default(),
                    error: bounds::truncate(&status.message, MAX_NACK_DETAIL_BYTES),
                };
                self.rejected.insert(nack.version.clone());
                self.last_nack = Some(nack.clone());
                Event::Nack {
                    resource_type,
                    nack,
                }
            }
            None => {
                self.acked_version = Some(req.version_info.clone());
                Event::Ack {
                    resource_type,
                    version: req.version_info.clone(),
                }
            }
        }
    }
}

/// What a request turned out to be, for status, metrics and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// First request for a type on this stream (or a re-subscription without a nonce).
    Subscribed { resource_type: ResourceType },
    Ack {
        resource_type: ResourceType,
        version: String,
    },
    /// Envoy refused what we sent; `nack.error` is its `error_detail`.
    Nack {
        resource_type: ResourceType,
        nack: Nack,
    },
    /// Answers a nonce that is not our latest: ignored.
    StaleNonce {
        resource_type: ResourceType,
        nonce: String,
    },
    /// The current snapshot was refused before by this node: not sent again.
    Withheld {
        resource_type: ResourceType,
        version: String,
    },
    /// A request without a type URL: ignored.
    NoTypeUrl,
    /// A request for a type URL this server does not know: ignored.
    UnknownType { type_url: String },
    /// A request over a bound ([`bounds`]): nothing of it is kept and the stream ends.
    Refused { refusal: Refusal, detail: String },
}

/// Responses to send (in order) and what happened.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    pub responses: Vec<Response>,
    pub events: Vec<Event>,
}

impl Outcome {
    /// A refused request: no response, the stream ends.
    pub fn refused(refusal: Refusal, detail: String) -> Outcome {
        Outcome {
            responses: Vec::new(),
            events: vec![Event::Refused { refusal, detail }],
        }
    }

    /// The refusal that ends the stream, if the request was refused.
    pub fn refusal(&self) -> Option<(Refusal, &str)> {
        self.events.iter().find_map(|e| match e {
            Event::Refused { refusal, detail } => Some((*refusal, detail.as_str())),
            _ => None,
        })
    }

    /// The refusal of a request over a bound ([`bounds::check_request`]), before anything of
    /// it is kept.
    pub fn over_bounds(req: &DiscoveryRequest) -> Option<Outcome> {
        bounds::check_request(req)
            .err()
            .map(|(refusal, detail)| Outcome::refused(refusal, detail))
    }
}

/// One xDS stream (one Envoy connection), possibly carrying several types (ADS).
#[derive(Debug)]
pub struct StreamState {
    /// Prefix of this stream's nonces, so a nonce from another stream is never "ours".
    id: u64,
    next_nonce: u64,
    /// Types this stream may serve; None = any (ADS).
    allowed: Option<Vec<ResourceType>>,
    pub types: BTreeMap<ResourceType, TypeState>,
}

impl StreamState {
    pub fn new(id: u64, allowed: Option<Vec<ResourceType>>) -> StreamState {
        StreamState {
            id,
            next_nonce: 0,
            allowed,
            types: BTreeMap::new(),
        }
    }

    /// Seeds a version this node refused on an earlier stream, so a reconnect does not resend it.
    pub fn remember_rejected(&mut self, resource_type: ResourceType, version: &str) {
        self.types
            .entry(resource_type)
            .or_default()
            .rejected
            .insert(version.to_owned());
    }

    /// Handles one request from Envoy against the current snapshot (None before the first).
    pub fn on_request(
        &mut self,
        req: &DiscoveryRequest,
        current: Option<&Arc<XdsSnapshot>>,
    ) -> Outcome {
        if let Some(refused) = Outcome::over_bounds(req) {
            return refused;
        }
        let mut out = Outcome::default();
        if req.type_url.is_empty() {
            out.events.push(Event::NoTypeUrl);
            return out;
        }
        let Some(resource_type) = ResourceType::from_type_url(&req.type_url) else {
            out.events.push(Event::UnknownType {
                type_url: req.type_url.clone(),
            });
            return out;
        };
        if !self.serves(resource_type) {
            // Nothing of that type will ever be served here: answer nothing.
            out.events.push(Event::Subscribed { resource_type });
            self.types.entry(resource_type).or_default();
            return out;
        }
        let state = self.types.entry(resource_type).or_default();
        let names_changed = state.subscribed != req.resource_names;

        if !req.response_nonce.is_empty() {
            if state.sent_nonce.as_deref() != Some(req.response_nonce.as_str()) {
                out.events.push(Event::StaleNonce {
                    resource_type,
                    nonce: req.response_nonce.clone(),
                });
                return out;
            }
            out.events.push(state.answered(resource_type, req));
            state.subscribed = req.resource_names.clone();
            // An ACK or NACK needs no answer, unless Envoy now asks for other resources.
            if names_changed {
                self.send_current(resource_type, current, true, &mut out);
            }
            return out;
        }

        // No nonce: the stream's first request for this type (also after a reconnect).
        state.subscribed = req.resource_names.clone();
        out.events.push(Event::Subscribed { resource_type });
        self.send_current(resource_type, current, true, &mut out);
        out
    }

    /// A new snapshot became current: the responses to push to this stream.
    pub fn on_snapshot(&mut self, current: &Arc<XdsSnapshot>) -> Outcome {
        let mut out = Outcome::default();
        let subscribed: Vec<ResourceType> = self.types.keys().copied().collect();
        for resource_type in subscribed {
            if self.serves(resource_type) {
                self.send_current(resource_type, Some(current), false, &mut out);
            }
        }
        out
    }

    fn serves(&self, resource_type: ResourceType) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.contains(&resource_type))
    }

    /// Sends the current snapshot's resources of `resource_type` unless Envoy refused that
    /// version, or (when not `force`) it was already sent.
    fn send_current(
        &mut self,
        resource_type: ResourceType,
        current: Option<&Arc<XdsSnapshot>>,
        force: bool,
        out: &mut Outcome,
    ) {
        let Some(snap) = current else { return };
        let Some(state) = self.types.get_mut(&resource_type) else {
            return;
        };
        if state.rejected.contains(&snap.version) {
            if state.sent_version.as_deref() != Some(snap.version.as_str()) || force {
                out.events.push(Event::Withheld {
                    resource_type,
                    version: snap.version.clone(),
                });
            }
            return;
        }
        if !force && state.sent_version.as_deref() == Some(snap.version.as_str()) {
            return;
        }
        let Some(shared) = snap.encoded(resource_type, &state.subscribed) else {
            // Nothing Envoy asked for exists: an empty answer would read as "removed".
            return;
        };
        self.next_nonce += 1;
        let nonce = format!("{}-{}", self.id, self.next_nonce);
        state.sent_version = Some(snap.version.clone());
        state.sent_nonce = Some(nonce.clone());
        state.responses_sent += 1;
        out.responses.push(Response {
            resource_type,
            version: snap.version.clone(),
            nonce,
            shared,
        });
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
