//! Reading PEM files: certificate chains, private keys and CA bundles. Each
//! failure is a [`ConfigError`] at the JSON path of the setting that named
//! the file, saying which file and what is wrong with it.

use crate::settings::resolve;
use crate::settings::ConfigError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::path::Path;

/// The bytes of `file` (relative to `base_dir`); `path` is the JSON path
/// that named it.
fn read(file: &str, base_dir: &Path, path: &str) -> Result<(Vec<u8>, String), ConfigError> {
    if file.is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    let resolved = resolve(base_dir, file);
    let shown = resolved.display().to_string();
    let bytes = std::fs::read(&resolved)
        .map_err(|e| ConfigError::new(path, format!("cannot read {shown}: {e}")).with_file(&resolved))?;
    Ok((bytes, shown))
}

/// The certificates of the PEM file `file`, in file order (a chain: leaf
/// first). At least one.
pub(crate) fn load_certs(
    file: &str,
    base_dir: &Path,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let (bytes, shown) = read(file, base_dir, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(path, format!("{shown} is not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            path,
            format!("{shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
        ));
    }
    Ok(certs)
}

/// The private key of the PEM file `file` (the first one in it).
pub(crate) fn load_key(
    file: &str,
    base_dir: &Path,
    path: &str,
) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let (bytes, shown) = read(file, base_dir, path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| ConfigError::new(path, format!("{shown} holds no usable PEM private key: {e}")))
}

/// The trust anchors of the PEM CA file `file`: every certificate in it
/// must parse as one.
pub(crate) fn load_roots(file: &str, base_dir: &Path, path: &str) -> Result<RootCertStore, ConfigError> {
    let certs = load_certs(file, base_dir, path)?;
    let mut roots = RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| ConfigError::new(path, format!("certificate #{} is not a usable CA: {e}", i + 1)))?;
    }
    Ok(roots)
}
