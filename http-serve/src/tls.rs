//! TLS for every Ferry server (rustls, ring provider): a certificate chain and key, and a
//! client CA bundle whose certificates clients must present (mTLS), all from PEM files that are
//! reloaded when they change (Kubernetes secret rotation): a new connection gets the files as
//! they are now, at most [`RELOAD_CHECK`] late; one that does not load (half written, a key
//! that does not match) keeps the last good set and is logged once. The verified client
//! certificate's names are the connection's [`PeerIdentity`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// How often, at most, the files are checked for a change (on a new connection).
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Whether clients must present a certificate from the client CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// No certificate, no connection (the reader, xDS).
    Required,
    /// A certificate, when presented, must be from the client CA and names the peer; a client
    /// without one still connects and shows a token instead (`ferry serve`'s HTTP API, whose
    /// probes and scrapers hold neither).
    Optional,
}

/// Where a server's TLS files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (leaf first), PEM.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1), PEM.
    pub key: PathBuf,
    /// The CAs client certificates must chain to, PEM; None: no client certificates asked.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}: {what}")]
    Pem { path: String, what: String },
    #[error("the TLS setup is refused: {0}")]
    Config(String),
}

/// The names of a verified client certificate: its URI SANs (SPIFFE ids) and DNS SANs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    pub uris: Vec<String>,
    pub dns: Vec<String>,
}

impl PeerIdentity {
    /// An identity with these names (what a test's certificate would carry).
    pub fn new(uris: &[&str], dns: &[&str]) -> PeerIdentity {
        PeerIdentity {
            uris: uris.iter().map(|s| (*s).to_owned()).collect(),
            dns: dns.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The names of a certificate (DER); None when it cannot be parsed or has none.
    pub fn of_certificate(der: &CertificateDer<'_>) -> Option<PeerIdentity> {
        let cert = webpki::EndEntityCert::try_from(der).ok()?;
        let identity = PeerIdentity {
            uris: cert.valid_uri_names().map(str::to_owned).collect(),
            dns: cert.valid_dns_names().map(str::to_owned).collect(),
        };
        (!identity.uris.is_empty() || !identity.dns.is_empty()).then_some(identity)
    }

    /// Every name, URIs first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.uris.iter().chain(&self.dns).map(String::as_str)
    }

    /// The name it goes by: its first URI (a SPIFFE id), else its first DNS name.
    pub fn primary(&self) -> &str {
        self.names().next().unwrap_or_default()
    }
}

/// What a request handler (a request extension) or a gRPC service (tonic's connect info)
/// learns about the connection it arrived on.
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    /// Over TLS.
    pub tls: bool,
    /// The verified client certificate's names; None without one.
    pub identity: Option<Arc<PeerIdentity>>,
}

/// A server's TLS, shared by its connections; cloning shares it.
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

struct Inner {
    files: TlsFiles,
    auth: ClientAuth,
    /// ALPN protocols offered, in preference order.
    alpn: Vec<Vec<u8>>,
    loaded: Mutex<Loaded>,
}

struct Loaded {
    config: Arc<ServerConfig>,
    /// The files as they were when `config` was built.
    stamp: Stamp,
    /// When the files were last looked at.
    checked: Instant,
    /// Files that failed to load: not tried (nor logged) again until they change.
    failed: Option<Stamp>,
}

/// Each file's (modification time, length, inode), None when it cannot be read.
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.inner.files)
            .field("auth", &self.inner.auth)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads the files; an error names the file. `alpn`: the protocols the server speaks
    /// (`h2`, `http/1.1`), so a client that offers ALPN agrees on one.
    pub fn load(files: TlsFiles, auth: ClientAuth, alpn: &[&[u8]]) -> Result<Tls, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let stamp = stamp(&files);
        let config = build(&files, auth, &alpn)?;
        let loaded = Loaded {
            config,
            stamp,
            checked: Instant::now(),
            failed: None,
        };
        Ok(Tls {
            inner: Arc::new(Inner {
                files,
                auth,
                alpn,
                loaded: Mutex::new(loaded),
            }),
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.inner.files
    }

    /// Clients must present a certificate from the client CA.
    pub fn requires_client_certificates(&self) -> bool {
        self.inner.files.client_ca.is_some() && self.inner.auth == ClientAuth::Required
    }

    fn lock(&self) -> MutexGuard<'_, Loaded> {
        // A panic while holding the lock leaves a whole config behind: keep going.
        self.inner.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration a new connection gets: the files' current one when they changed since
    /// the last look (at most every [`RELOAD_CHECK`]) and load, else the last good one.
    pub fn config(&self) -> Arc<ServerConfig> {
        let mut loaded = self.lock();
        if loaded.checked.elapsed() >= RELOAD_CHECK {
            loaded.checked = Instant::now();
            self.reload_if_changed(&mut loaded);
        }
        loaded.config.clone()
    }

    fn reload_if_changed(&self, loaded: &mut Loaded) {
        let files = &self.inner.files;
        let now = stamp(files);
        if now == loaded.stamp || loaded.failed.as_ref() == Some(&now) {
            return;
        }
        match build(files, self.inner.auth, &self.inner.alpn) {
            Ok(config) => {
                tracing::info!(cert = %files.cert.display(), "TLS files changed: reloaded; new connections use them");
                loaded.config = config;
                loaded.stamp = now;
                loaded.failed = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS files changed but do not load: keeping the last good ones");
                loaded.failed = Some(now);
            }
        }
    }

    /// The TLS handshake on an accepted connection, and the client certificate's names.
    pub async fn accept(
        &self,
        tcp: TcpStream,
    ) -> std::io::Result<(TlsStream<TcpStream>, Option<PeerIdentity>)> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        let stream = acceptor.accept(tcp).await?;
        let identity = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(PeerIdentity::of_certificate);
        Ok((stream, identity))
    }
}

fn stamp(files: &TlsFiles) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let paths = [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ];
    paths
        .into_iter()
        .flatten()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        })
        .collect()
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |what: String| TlsError::Pem {
        path: path.display().to_string(),
        what,
    };
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("not PEM certificates ({e})")))?;
    if certs.is_empty() {
        return Err(pem_error("holds no certificate".into()));
    }
    Ok(certs)
}

/// A `ServerConfig` from the files as they are now.
fn build(
    files: &TlsFiles,
    auth: ClientAuth,
    alpn: &[Vec<u8>],
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?).map_err(|e| TlsError::Pem {
        path: files.key.display().to_string(),
        what: format!("no private key ({e})"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| TlsError::Pem {
                    path: ca.display().to_string(),
                    what: format!("not a usable CA certificate ({e})"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Pem {
            path: files.key.display().to_string(),
            what: format!("does not go with {} ({e})", files.cert.display()),
        })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(Arc::new(config))
}
