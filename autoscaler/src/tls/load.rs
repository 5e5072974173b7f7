//! Reading the listener's certificate chain and private key from PEM files, and the CA bundle
//! handed to sidecars. Every failure names the file it is about.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rustls::crypto::CryptoProvider;
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate, key or CA bundle could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{} is not a valid PEM certificate file: {source}", path.display())]
    CertificatePem {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{}: certificate {index} of the file does not parse: {source}", path.display())]
    Certificate {
        path: PathBuf,
        index: usize,
        source: rustls::Error,
    },
    #[error("{} holds no usable PEM private key: {source}", path.display())]
    KeyPem {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{}: the private key cannot be loaded: {source}", path.display())]
    Key {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("the key in {} does not match the certificate in {}: {source}", key.display(), certificate.display())]
    Mismatch {
        certificate: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

impl TlsError {
    /// The file the error is about (the key's, for a key that does not match).
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. }
            | Self::NoCertificate { path }
            | Self::CertificatePem { path, .. }
            | Self::Certificate { path, .. }
            | Self::KeyPem { path, .. }
            | Self::Key { path, .. } => path,
            Self::Mismatch { key, .. } => key,
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate of a PEM file, each checked to parse as X.509.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::CertificatePem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    for (i, cert) in certs.iter().enumerate() {
        ParsedCertificate::try_from(cert).map_err(|source| TlsError::Certificate {
            path: path.to_path_buf(),
            index: i + 1,
            source,
        })?;
    }
    Ok(certs)
}

/// The provider the listener uses (the process default when one is installed).
pub fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// The chain of `certificate` with the key of `key`, checked to belong together.
pub fn certified_key(certificate: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(certificate)?;
    let key_pem = read(key)?;
    let der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| TlsError::KeyPem {
        path: key.to_path_buf(),
        source,
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|source| TlsError::Key {
            path: key.to_path_buf(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(source) => Err(TlsError::Mismatch {
            certificate: certificate.to_path_buf(),
            key: key.to_path_buf(),
            source,
        }),
    }
}

/// The CA certificates sidecars must trust for the relay, as PEM: the whole `ca_bundle` file
/// when one is configured, else the last certificate of the served chain (its root, or the
/// certificate itself when it is self-signed).
pub fn relay_ca_pem(certificate: &Path, ca_bundle: Option<&Path>) -> Result<String, TlsError> {
    let certs = match ca_bundle {
        Some(bundle) => read_certificates(bundle)?,
        None => {
            let chain = read_certificates(certificate)?;
            chain.into_iter().last().into_iter().collect()
        }
    };
    Ok(certs.iter().map(|c| to_pem(c)).collect())
}

/// One certificate as a PEM block.
pub fn to_pem(cert: &CertificateDer<'_>) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}
