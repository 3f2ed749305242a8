//! TLS on the accept loop, over real sockets with certificates made by rcgen: mTLS admits only
//! certificates of the client CA, the handler sees the peer's identity, and replaced files are
//! used by the next connection (a broken replacement keeps the last good ones).

use super::*;
use bytes::Bytes;
use ferry_test_support::certs::{Ca, LeafFiles};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;

/// Answers with the peer's identity, as the handler sees it.
async fn whoami(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let peer = request.extensions().get::<Peer>().cloned();
    let text = match peer {
        Some(Peer {
            tls: true,
            identity: Some(id),
            ..
        }) => format!("tls {}", id.names().collect::<Vec<_>>().join(",")),
        Some(Peer { tls, .. }) => format!("tls={tls} anonymous"),
        None => "no peer".into(),
    };
    Response::new(Full::new(Bytes::from(text)))
}

struct Files {
    server: LeafFiles,
    client_ca: std::path::PathBuf,
}

fn server_files(dir: &Path, ca: &Ca) -> Files {
    Files {
        server: ca.issue(&["reader.test"], &[]).write(dir, "server"),
        client_ca: ca.write(&dir.join("client-ca.pem")),
    }
}

async fn start(files: &Files) -> SocketAddr {
    let tls = Tls::load(
        TlsFiles {
            cert: files.server.cert.clone(),
            key: files.server.key.clone(),
            client_ca: Some(files.client_ca.clone()),
        },
        ClientAuth::Required,
        &[b"h2", b"http/1.1"],
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = Options {
        tls: Some(tls),
        ..Options::default()
    };
    tokio::spawn(async move {
        serve(listener, &options, whoami, std::future::pending()).await;
    });
    addr
}

/// One GET / over TLS trusting `server_ca`, with `client` as the client certificate: the
/// answer's text, or the error.
async fn call(
    addr: SocketAddr,
    server_ca: &Ca,
    client: Option<&LeafFiles>,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server_ca.pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(f) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&f.cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(&f.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("reader.test").unwrap();
    let stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = Request::get("http://reader.test/")
        .body(Full::<Bytes>::default())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8(body.to_bytes().to_vec()).unwrap())
}

#[tokio::test]
async fn mtls_admits_only_the_client_ca_and_names_the_peer() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, other) = (Ca::new("ferry test CA"), Ca::new("another CA"));
    let files = server_files(dir.path(), &ca);
    let addr = start(&files).await;
    let spiffe = "spiffe://cluster.local/ns/ml/sa/envoy";
    let good = ca
        .issue(&["envoy.ml.svc"], &[spiffe])
        .write(dir.path(), "good");
    assert_eq!(
        call(addr, &ca, Some(&good)).await.unwrap(),
        format!("tls {spiffe},envoy.ml.svc")
    );
    assert!(
        call(addr, &ca, None).await.is_err(),
        "no client certificate"
    );
    let stranger = other
        .issue(&["envoy.ml.svc"], &[spiffe])
        .write(dir.path(), "stranger");
    assert!(
        call(addr, &ca, Some(&stranger)).await.is_err(),
        "a certificate from another CA"
    );
}

#[tokio::test]
async fn replaced_files_serve_the_next_connection_and_broken_ones_keep_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, next_ca) = (Ca::new("CA 1"), Ca::new("CA 2"));
    let files = server_files(dir.path(), &ca);
    let addr = start(&files).await;
    let client = ca.issue(&["client.test"], &[]).write(dir.path(), "client");
    assert!(call(addr, &ca, Some(&client)).await.is_ok());

    // A half-written certificate: refused, the last good files stay.
    std::fs::write(&files.server.cert, "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
    tokio::time::sleep(tls::RELOAD_CHECK + Duration::from_millis(100)).await;
    assert!(
        call(addr, &ca, Some(&client)).await.is_ok(),
        "last good kept"
    );

    // Rotation to another CA (server certificate and client CA): the next connection uses it.
    next_ca.issue(&["reader.test"], &[]).write_to(&files.server);
    next_ca.write(&files.client_ca);
    tokio::time::sleep(tls::RELOAD_CHECK + Duration::from_millis(100)).await;
    let next_client = next_ca
        .issue(&["client.test"], &[])
        .write(dir.path(), "next");
    assert_eq!(
        call(addr, &next_ca, Some(&next_client)).await.unwrap(),
        "tls client.test"
    );
    assert!(
        call(addr, &ca, Some(&client)).await.is_err(),
        "the old CA is no longer trusted, nor the old server certificate"
    );
}
