//! What the server asks of the application (go-control-plane's `Cache`): the snapshot an Envoy
//! should have now, and a way to wait until that may have changed. The server never learns
//! where snapshots come from.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use super::protocol::XdsSnapshot;

/// The Envoy on the other end of a stream, as its first request names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Empty until the stream's first request that carries a node.
    pub id: String,
    pub cluster: String,
    /// The verified client certificate's name (its first URI SAN, else its first DNS SAN);
    /// None without mTLS.
    pub identity: Option<String>,
}

impl Node {
    /// What the server keeps per node (what it refused) under: the node id, within its
    /// verified identity, so a peer with another certificate never touches this node's entry.
    pub fn key(&self) -> String {
        match &self.identity {
            Some(identity) => format!("{identity}\u{0}{}", self.id),
            None => self.id.clone(),
        }
    }
}

/// The application's current snapshots.
pub trait SnapshotSource: Send + Sync + 'static {
    /// What `node` should have now; None before the first snapshot (nothing is sent).
    fn snapshot(&self, node: &Node) -> Option<Arc<XdsSnapshot>>;
    /// A subscription that fires after every later change.
    fn subscribe(&self) -> Box<dyn Subscription>;
}

/// Changes of a [`SnapshotSource`], as one stream sees them.
pub trait Subscription: Send {
    /// Resolves when the source changed since the last call (or the subscription was made);
    /// false when the source is gone. Cancel safe: used in `select!`.
    fn changed(&mut self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

/// A source that keeps its snapshot in a `tokio::sync::watch` channel subscribes with it.
impl<T: Send + Sync + 'static> Subscription for watch::Receiver<T> {
    fn changed(&mut self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(async move { watch::Receiver::changed(self).await.is_ok() })
    }
}
