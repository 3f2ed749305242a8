//! Feast's SQL registry on PostgreSQL (`registry_type: sql`): the tables Feast's `SqlRegistry`
//! writes (`feast/infra/registry/sql.py`: one table per kind of object, one row per object
//! holding its serialized protobuf) read back into the same `feast.core.Registry` a file
//! registry holds, so everything downstream is unchanged.
//!
//! Change detection is a digest of the same rows computed by PostgreSQL (one round trip, 32
//! bytes back), not `feast_metadata`'s `last_updated_timestamp`: that one counts whole seconds
//! (two applies within a second look alike) and is not written under `purge_feast_metadata`.
//! Feast's writes are plain INSERT/UPDATE through SQLAlchemy, with no NOTIFY to LISTEN for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode;

/// Connecting, and each query, give up after this long.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The registry objects Ferry reads, one query: each row is (field number of the object's list
/// in `feast.core.Registry`, object name, serialized object), ordered so that the digest is
/// stable. Feast's `proto()` assembles the same lists from the same tables.
const ROWS: &str = "SELECT 1 AS f, entity_name AS n, entity_proto AS p FROM entities \
      WHERE project_id = $1 \
    UNION ALL SELECT 6, feature_view_name, feature_view_proto FROM feature_views \
      WHERE project_id = $1 \
    UNION ALL SELECT 7, feature_service_name, feature_service_proto FROM feature_services \
      WHERE project_id = $1 \
    UNION ALL SELECT 8, feature_view_name, feature_view_proto FROM on_demand_feature_views \
      WHERE project_id = $1 \
    UNION ALL SELECT 14, feature_view_name, feature_view_proto FROM stream_feature_views \
      WHERE project_id = $1";

/// How the connection is encrypted (`sslmode` in the URL, else `PGSSLMODE`, as libpq does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    /// `disable`: plain TCP.
    Disable,
    /// `prefer` (libpq's default) and `allow`: TLS when the server offers it, certificate not
    /// verified; plain TCP otherwise.
    Prefer,
    /// `require`: TLS or no connection; the certificate is not verified (libpq's meaning when
    /// no root certificate is given).
    Require,
    /// `verify-full` and `verify-ca`: TLS, the certificate verified against this CA file
    /// (`sslrootcert`, else `PGSSLROOTCERT`) and the host name (also for `verify-ca`: stricter
    /// than libpq).
    Verify(PathBuf),
}

/// A parsed `registry.path` of a SQL registry.
#[derive(Clone, Debug)]
pub struct SqlRegistry {
    /// The URL as written, password replaced by `***`: what messages name.
    pub shown: String,
    config: tokio_postgres::Config,
    pub tls: Tls,
}

/// Parses a SQLAlchemy PostgreSQL URL as Feast writes it (`postgresql+psycopg://user:pass@host:
/// port/db?sslmode=...`); `env` reads `PGSSLMODE` and `PGSSLROOTCERT`.
pub fn parse(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<SqlRegistry, String> {
    let shown = redact(url);
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("'{shown}' is not a database URL"))?;
    let dialect = scheme.split('+').next().unwrap_or(scheme);
    if !matches!(dialect, "postgresql" | "postgres") {
        return Err(format!(
            "'{shown}': the {dialect} SQL registry is not supported; Ferry reads a SQL registry \
             on PostgreSQL only"
        ));
    }
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (mut mode, mut root) = (env("PGSSLMODE"), env("PGSSLROOTCERT"));
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.to_owned()),
            Some(("sslrootcert", v)) => root = Some(v.to_owned()),
            Some((k @ ("sslcert" | "sslkey" | "sslcrl" | "sslpassword"), _)) => {
                return Err(format!(
                    "'{shown}': {k} is not supported (no client certificates)"
                ))
            }
            _ => kept.push(pair),
        }
    }
    let tls = tls_mode(mode.as_deref(), root, &shown)?;
    let mut pg = format!("postgresql://{base}");
    if !kept.is_empty() {
        pg = format!("{pg}?{}", kept.join("&"));
    }
    let mut config: tokio_postgres::Config = pg.parse().map_err(|e| format!("'{shown}': {e}"))?;
    config.connect_timeout(TIMEOUT);
    config.application_name("ferry");
    config.ssl_mode(match tls {
        Tls::Disable => SslMode::Disable,
        Tls::Prefer => SslMode::Prefer,
        Tls::Require | Tls::Verify(_) => SslMode::Require,
    });
    Ok(SqlRegistry { shown, config, tls })
}

fn tls_mode(mode: Option<&str>, root: Option<String>, shown: &str) -> Result<Tls, String> {
    Ok(match mode.unwrap_or("prefer") {
        "disable" => Tls::Disable,
        "allow" | "prefer" => Tls::Prefer,
        "require" => Tls::Require,
        m @ ("verify-ca" | "verify-full") => Tls::Verify(PathBuf::from(root.ok_or_else(|| {
            format!("'{shown}': sslmode {m} needs a CA: sslrootcert=FILE or PGSSLROOTCERT")
        })?)),
        m => return Err(format!("'{shown}': sslmode '{m}' is not one of disable, allow, prefer, require, verify-ca, verify-full")),
    })
}

/// The URL with its password (between `user:` and `@`) replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

impl SqlRegistry {
    async fn connect(&self) -> Result<tokio_postgres::Client, String> {
        let connected = match &self.tls {
            Tls::Disable => {
                let (client, conn) = self
                    .config
                    .connect(tokio_postgres::NoTls)
                    .await
                    .map_err(describe)?;
                tokio::spawn(conn);
                client
            }
            tls => {
                let make = tokio_postgres_rustls::MakeRustlsConnect::new(client_config(tls)?);
                let (client, conn) = self.config.connect(make).await.map_err(describe)?;
                tokio::spawn(conn);
                client
            }
        };
        Ok(connected)
    }

    async fn rows(&self, project: &str) -> Result<Vec<tokio_postgres::Row>, String> {
        let client = self.connect().await?;
        client
            .query(&format!("{ROWS} ORDER BY 1, 2"), &[&project])
            .await
            .map_err(describe)
    }

    /// The project's entities, feature views, feature services, on-demand and stream feature
    /// views, each as (field number of its list in `feast.core.Registry`, serialized object).
    pub async fn fetch(&self, project: &str) -> Result<Vec<(u32, Vec<u8>)>, String> {
        let rows = tokio::time::timeout(TIMEOUT, self.rows(project))
            .await
            .map_err(|_| format!("no answer within {TIMEOUT:?}"))??;
        let mut objects = Vec::with_capacity(rows.len());
        for row in &rows {
            let field: i32 = row.try_get(0).map_err(describe)?;
            let object: Vec<u8> = row.try_get(2).map_err(describe)?;
            objects.push((u32::try_from(field).map_err(|e| e.to_string())?, object));
        }
        Ok(objects)
    }

    /// A digest of the rows [`SqlRegistry::fetch`] reads: changes when `feast apply` changes
    /// any of them.
    pub async fn stamp(&self, project: &str) -> Result<Vec<u8>, String> {
        let digest = async {
            let client = self.connect().await?;
            let sql = format!(
                "SELECT count(*), md5(string_agg(p, '\\x00'::bytea ORDER BY f, n)) FROM ({ROWS}) r"
            );
            let row = client
                .query_one(&sql, &[&project])
                .await
                .map_err(describe)?;
            let count: i64 = row.try_get(0).map_err(describe)?;
            let md5: Option<String> = row.try_get(1).map_err(describe)?;
            Ok::<_, String>(format!("{count}:{}", md5.unwrap_or_default()).into_bytes())
        };
        tokio::time::timeout(TIMEOUT, digest)
            .await
            .map_err(|_| format!("no answer within {TIMEOUT:?}"))?
    }
}

/// A PostgreSQL error with its detail; a missing table means no Feast registry is there.
fn describe(e: tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        if db.code() == &tokio_postgres::error::SqlState::UNDEFINED_TABLE {
            return format!(
                "{} (no Feast registry tables in this database: has `feast apply` run against \
                 it?)",
                db.message()
            );
        }
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

/// The rustls client for `tls` (not `Disable`).
fn client_config(tls: &Tls) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    Ok(match tls {
        Tls::Verify(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            let shown = ca.display();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{shown}: {e}"))? {
                roots
                    .add(cert.map_err(|e| format!("{shown}: {e}"))?)
                    .map_err(|e| format!("{shown}: {e}"))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
    })
}

/// libpq's `prefer` and `require`: the channel is encrypted, the server not authenticated. The
/// handshake's signatures are still checked (a broken handshake fails).
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;
