//! How Ferry reaches Redis, shared by `ferry-reader` and `ferry materialize` so that both accept
//! the same flags and connect the same way.
//!
//! - [`RedisArgs`]: the command-line flags and environment variables (URL or Cluster seeds, TLS CA
//!   file, credentials), checked into a [`Target`].
//! - [`Target`]: where Redis is and how to log it without its credentials.
//! - [`connect`]: connections with TCP keepalive, timeouts, TLS and AUTH, for one Redis or a
//!   Redis Cluster, behind one [`Connection`] type.
//! - [`redact`]: URLs with their password replaced, for logs and errors.

pub mod connect;
mod redact;
mod target;

pub use connect::{Connection, Timeouts};
pub use redact::redact;
pub use target::{RedisArgs, SetupError, Target};
