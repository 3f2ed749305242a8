//! Test certificates made at test time with `rcgen`: a CA, and leaf certificates it signs for
//! servers and clients (DNS and URI SANs, e.g. SPIFFE ids), written as PEM files where a
//! process under test reads them. One leaf serves both ways (server and client auth), so a
//! test can give the same files to a server and to the Envoy that calls it.

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};

/// Serials handed out in this process: 8 bytes, the top bit clear and the top byte non-zero, so
/// the DER integer is exactly these 8 bytes and tools print them as 16 hex digits.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(0);

fn next_serial() -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    0x1000_0000_0000_0000
        | ((clock & 0x00ff_ffff_ffff) << 16)
        | (NEXT_SERIAL.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

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
    /// The certificate's serial number, lowercase hex (16 digits), as Envoy's `/certs` shows it.
    pub serial: String,
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
        let serial = next_serial();
        params.serial_number = Some(SerialNumber::from(serial.to_be_bytes().to_vec()));
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
            serial: format!("{serial:016x}"),
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

/// A Kubernetes secret volume as the kubelet writes it: the data in a folder `..VERSION`, the
/// symlink `..data` to it, and each file (`tls.crt`, `tls.key`, `ca.crt`) a symlink through
/// `..data`. An update writes a new version folder and swaps `..data` in one rename, so every
/// file changes at once and none is ever half written.
pub struct SecretVolume {
    pub dir: PathBuf,
    version: u32,
}

impl SecretVolume {
    /// `dir` holding `leaf` and the CA bundle `ca_pem` (one or more PEM certificates).
    pub fn new(dir: &Path, leaf: &Leaf, ca_pem: &str) -> SecretVolume {
        std::fs::create_dir_all(dir).unwrap();
        let mut v = SecretVolume {
            dir: dir.to_owned(),
            version: 0,
        };
        v.update(leaf, ca_pem);
        for name in ["tls.crt", "tls.key", "ca.crt"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
        }
        v
    }

    /// The files as the party names them.
    pub fn files(&self) -> LeafFiles {
        LeafFiles {
            cert: self.dir.join("tls.crt"),
            key: self.dir.join("tls.key"),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The kubelet's update: a new version folder, then `..data` swapped to it by a rename.
    pub fn update(&mut self, leaf: &Leaf, ca_pem: &str) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let data = self.dir.join(&version);
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("tls.crt"), &leaf.cert_pem).unwrap();
        std::fs::write(data.join("tls.key"), &leaf.key_pem).unwrap();
        std::fs::write(data.join("ca.crt"), ca_pem).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}
