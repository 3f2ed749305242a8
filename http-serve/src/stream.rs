//! An accepted connection, plain or TLS, with what is known of its peer; the handshake with
//! its time bound; and [`incoming`], the same accept path for a server that drives connections
//! itself (tonic's `serve_with_incoming`, the xDS server).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

use crate::tls::{Peer, Tls};

/// Time a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes [`incoming`] runs at once; more connections wait in the accept queue.
const MAX_HANDSHAKES: usize = 256;

/// A connection as accepted: plain TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
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
        return Ok((Stream::Plain(tcp), peer));
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
    Ok((Stream::Tls(Box::new(stream)), peer))
}

/// Accepts on `listener` and hands over each connection once its handshake is done, until the
/// receiver is dropped. A failed handshake (no client certificate, one from another CA, not
/// TLS) is logged at debug and dropped.
pub fn incoming(listener: TcpListener, tls: Option<Tls>) -> mpsc::Receiver<(Stream, Peer)> {
    let (tx, rx) = mpsc::channel(64);
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                permit = handshakes.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
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
                match handshake(tcp, addr, tls.as_ref()).await {
                    Ok(accepted) => {
                        drop(permit);
                        let _ = tx.send(accepted).await;
                    }
                    Err(e) => tracing::debug!(peer = %addr, error = %e, "TLS handshake failed"),
                }
            });
        }
    });
    rx
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
