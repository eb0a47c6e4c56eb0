//! Certificates made at test time with `rcgen`: a CA, leaves for
//! `127.0.0.1`/`localhost` signed by it, and a scratch directory to write
//! them to (removed on drop).

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A test CA.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
pub(crate) struct Leaf {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) der: CertificateDer<'static>,
}

impl Ca {
    /// A self-signed CA named `name`.
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("ca key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("ca cert"),
        }
    }

    /// The CA certificate, PEM.
    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `127.0.0.1` and `localhost`, subject `cn`.
    pub(crate) fn leaf(&self, cn: &str) -> Leaf {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pressure-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self { dir }
    }

    /// Writes `text` to `name` in the directory; its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        path
    }

    /// Writes `leaf` as `<stem>.crt` and `<stem>.key`.
    pub(crate) fn write_leaf(&self, stem: &str, leaf: &Leaf) {
        self.write(&format!("{stem}.crt"), &leaf.cert_pem);
        self.write(&format!("{stem}.key"), &leaf.key_pem);
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
