//! An accepted connection, plain or TLS, with what is known of its peer; the handshake with
//! its time bound; and [`incoming`], the same accept path for a server that drives connections
//! itself (tonic's `serve_with_incoming`: the xDS server, the log sink), with
//! [`incoming_capped`] bounding the connections it serves at once.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;

use crate::tls::{Peer, Tls};

/// Time a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes [`incoming`] runs at once; more connections wait in the accept queue.
const MAX_HANDSHAKES: usize = 256;

/// A connection as accepted: plain TCP, or TLS over it; under [`incoming_capped`], holding
/// its slot until it is dropped.
pub struct Stream {
    io: Io,
    /// One of [`incoming_capped`]'s `max_connections`, given back when the connection ends.
    _slot: Option<OwnedSemaphorePermit>,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn new(io: Io) -> Stream {
        Stream { io, _slot: None }
    }
}

/// The handshake (when `tls` is given) on an accepted connection, bounded by
/// [`HANDSHAKE_TIMEOUT`], and the peer it names.
pub async fn handshake(
    tcp: TcpStream,
    addr: SocketAddr,
    tls: Option<&Tls>,
) -> io::Result<(Stream, Peer)> {
    // Responses are small and written whole: Nagle would only hold them back.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(peer = %addr, error = %e, "TCP_NODELAY not set");
    }
    let Some(tls) = tls else {
        let peer = Peer {
            addr,
            tls: false,
            identity: None,
        };
        return Ok((Stream::new(Io::Plain(tcp)), peer));
    };
    let (stream, identity) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake not finished in time",
            )
        })??;
    let peer = Peer {
        addr,
        tls: true,
        identity: identity.map(Arc::new),
    };
    Ok((Stream::new(Io::Tls(Box::new(stream))), peer))
}

/// Accepts on `listener` and hands over each connection once its handshake is done, until the
/// receiver is dropped. A failed handshake (no client certificate, one from another CA, not
/// TLS) is logged at debug and dropped.
pub fn incoming(listener: TcpListener, tls: Option<Tls>) -> mpsc::Receiver<(Stream, Peer)> {
    accept_loop(listener, tls, None)
}

/// [`incoming`], serving at most `max_connections` at once: beyond them a connection is not
/// accepted but waits in the kernel's accept queue until a served one ends (as
/// [`Options::max_connections`](crate::Options::max_connections)). So that a silent client
/// cannot hold a slot, a plaintext one must send its first bytes within
/// [`HANDSHAKE_TIMEOUT`], as a TLS one must finish its handshake.
pub fn incoming_capped(
    listener: TcpListener,
    tls: Option<Tls>,
    max_connections: usize,
) -> mpsc::Receiver<(Stream, Peer)> {
    accept_loop(
        listener,
        tls,
        Some(Arc::new(Semaphore::new(max_connections))),
    )
}

fn accept_loop(
    listener: TcpListener,
    tls: Option<Tls>,
    slots: Option<Arc<Semaphore>>,
) -> mpsc::Receiver<(Stream, Peer)> {
    let (tx, rx) = mpsc::channel(64);
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let permits = tokio::select! {
                permits = take_permits(&handshakes, slots.as_ref()) => match permits {
                    Some(p) => p,
                    None => break,
                },
                () = tx.closed() => break,
            };
            let (tcp, addr) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = tx.closed() => break,
            };
            let (tx, tls) = (tx.clone(), tls.clone());
            tokio::spawn(async move {
                let (handshaking, slot) = permits;
                if slot.is_some() && tls.is_none() && !first_bytes(&tcp).await {
                    tracing::debug!(peer = %addr, "no bytes in time: closed");
                    return;
                }
                match handshake(tcp, addr, tls.as_ref()).await {
                    Ok((mut stream, peer)) => {
                        drop(handshaking);
                        stream._slot = slot;
                        let _ = tx.send((stream, peer)).await;
                    }
                    Err(e) => tracing::debug!(peer = %addr, error = %e, "TLS handshake failed"),
                }
            });
        }
    });
    rx
}

/// A handshake place, and a connection slot when connections are capped; `None` once closed.
async fn take_permits(
    handshakes: &Arc<Semaphore>,
    slots: Option<&Arc<Semaphore>>,
) -> Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)> {
    // The slot first: a full server holds no handshake place while it waits.
    let slot = match slots {
        Some(slots) => Some(slots.clone().acquire_owned().await.ok()?),
        None => None,
    };
    let handshaking = handshakes.clone().acquire_owned().await.ok()?;
    Some((handshaking, slot))
}

/// Whether a plaintext client sends something within [`HANDSHAKE_TIMEOUT`] (left unread).
async fn first_bytes(tcp: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut byte)).await,
        Ok(Ok(n)) if n > 0
    )
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
