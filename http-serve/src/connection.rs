//! One accepted connection, served until it ends, the server shuts down, or it stays idle past
//! [`Options::idle_timeout`](crate::Options::idle_timeout). Both closes are hyper's graceful
//! shutdown: a response being written is finished first (HTTP/2: a GOAWAY, then the open
//! streams end), so only a connection with nothing in flight is cut.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::watch;

use crate::idle::Activity;

/// Drives `connection` to its end. `stop` turns `true` (or its sender goes) when the server
/// shuts down; holding it is what the drain waits for.
pub(crate) async fn run<C: GracefulConnection>(
    connection: C,
    activity: Arc<Activity>,
    idle_timeout: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), C::Error> {
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        // Ends once the connection has been idle for the whole timeout: it sleeps until it
        // could have been, and again while it was not (a refuted `select!` pattern would
        // disable the branch for good, so the re-check lives here).
        let idle = async {
            match idle_timeout {
                Some(limit) if !closing => {
                    while activity.idle_for() < limit {
                        tokio::time::sleep(limit.saturating_sub(activity.idle_for())).await;
                    }
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            result = connection.as_mut() => return result,
            _ = stop.changed(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            () = idle => {
                tracing::debug!("closing an idle connection");
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}
