//! An xDS server as a library, in go-control-plane's shape: the application implements
//! [`SnapshotSource`] (what each Envoy should have, and when that changes) and [`Callbacks`]
//! (what happened on each stream); the server moves messages and keeps the protocol. Nothing
//! here knows what the resources mean.
//!
//! - [`resource_type`]: the resource types and their type URLs (the one table of them).
//! - [`protocol`]: one stream's state-of-the-world protocol, without I/O (unit tested).
//! - [`source`], [`callbacks`]: the interfaces the application implements.
//! - `refusals`: what each node NACKed, remembered across its streams.
//! - [`bounds`]: what one client may make the server keep (node ids, names, NACK details,
//!   streams per node id or identity).
//! - [`identity`]: which node ids a verified client certificate may use.
//! - [`response`]: a response as sent: the encoding every stream shares, and its nonce.
//! - [`grpc`]: admitting streams; [`service`]: the ADS and ECDS services on tonic; `stream`:
//!   one stream's task.

pub mod bounds;
pub mod callbacks;
pub mod grpc;
pub mod identity;
pub mod protocol;
mod refusals;
pub mod resource_type;
pub mod response;
pub mod service;
pub mod source;
mod stream;

pub use callbacks::Callbacks;
pub use grpc::{Xds, XdsConn};
pub use identity::{NodePolicy, NodeRule};
pub use protocol::{Event, Nack, Resource, TypeState, XdsSnapshot};
pub use resource_type::ResourceType;
pub use response::Response;
pub use source::{Node, SnapshotSource, Subscription};
