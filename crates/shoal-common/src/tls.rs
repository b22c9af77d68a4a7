//! Reading TLS material from PEM files, and the crypto provider, for the
//! server's and the client's TLS configurations alike (`docs/security.md`,
//! "TLS"). Errors name the file and what is wrong with it.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use std::path::Path;
use std::sync::Arc;

/// The crypto provider of every TLS configuration Shoal makes (*ring*,
/// chosen explicitly: the process-wide default is never installed or
/// relied on).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, in order (the leaf first, then its
/// chain). At least one.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read TLS certificate file {}: {e}", path.display()))?
        .collect();
    let certs = certs.map_err(|e| format!("TLS certificate file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS certificate file {} holds no certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("TLS key file {}: {e}", path.display()))
}

/// The CA certificates of a PEM file, as trust roots.
pub fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| format!("TLS CA file {}: {e}", path.display()))?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_names_the_file_and_refuses_files_without_pem() {
        let dir = std::env::temp_dir().join(format!("shoal-common-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(load_certs(&empty).unwrap_err().contains("empty.pem"));
        assert!(load_key(&empty).unwrap_err().contains("empty.pem"));
        assert!(load_certs(&dir.join("missing.pem")).unwrap_err().contains("missing.pem"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
