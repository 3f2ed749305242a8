//! xDS for Envoy: the protocol core (no I/O), the resources built from a snapshot, and the
//! tonic services (ADS and ECDS) that move messages.

pub mod grpc;
pub mod protocol;
pub mod resources;
