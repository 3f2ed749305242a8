//! Test certificates made at test time with `rcgen`: a CA, and leaf certificates it signs for
//! servers and clients (DNS and URI SANs, e.g. SPIFFE ids), written as PEM files where a
//! process under test reads them. One leaf serves both ways (server and client auth), so a
//! test can give the same files to a server and to the Envoy that calls it.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority that lives as long as the test.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate, PEM: the client CA bundle a server trusts, or the CA a client
    /// validates the server with.
    pub pem: String,
}

/// A leaf certificate and its key, PEM.
#[derive(Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Where a leaf's files were written.
#[derive(Clone, Debug)]
pub struct LeafFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    /// A leaf with these DNS names (an IP literal becomes an IP SAN) and URIs (SPIFFE ids).
    pub fn issue(&self, dns: &[&str], uris: &[&str]) -> Leaf {
        let names: Vec<String> = dns.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        for uri in uris {
            let uri = (*uri).try_into().unwrap();
            params.subject_alt_names.push(SanType::URI(uri));
        }
        let cn = dns
            .first()
            .or(uris.first())
            .copied()
            .unwrap_or("ferry-test");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.pem).unwrap();
        path.to_owned()
    }
}

impl Leaf {
    /// Writes `NAME.crt` and `NAME.key` into `dir`.
    pub fn write(&self, dir: &Path, name: &str) -> LeafFiles {
        let files = LeafFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        self.write_to(&files);
        files
    }

    /// Writes over existing files (a rotation): the key first, then the certificate, each
    /// replaced whole (written beside, then renamed), as a Kubernetes secret volume swaps them.
    pub fn write_to(&self, files: &LeafFiles) {
        for (path, text) in [(&files.key, &self.key_pem), (&files.cert, &self.cert_pem)] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    }
}
