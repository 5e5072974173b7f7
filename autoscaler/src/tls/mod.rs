//! TLS on the mirrored runner API: the certificate store that serves every new handshake the
//! current certificate and can swap it without touching open connections (`store`), the reload
//! triggers (SIGHUP and a change of the files' modification time, `watch`), and PEM loading
//! (`load`). Connections, handshakes included, are served by `conn`.

mod load;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::conn::ConnectionLimits;

pub use crate::conn::HANDSHAKE_TIMEOUT;
pub use load::{TlsError, certified_key, read_certificates, relay_ca_pem, to_pem};
pub use watch::{RELOAD_CHECK_INTERVAL, watch};

/// The certificate and key files of the listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// The newer of the two files' modification times (`None` when either cannot be read).
    pub fn modified(&self) -> Option<SystemTime> {
        let m = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        Some(m(&self.certificate)?.max(m(&self.key)?))
    }
}

/// The certificate served to new handshakes; replaced whole by [`CertStore::reload`].
#[derive(Debug)]
pub struct CertStore {
    files: CertFiles,
    current: ArcSwap<CertifiedKey>,
}

impl CertStore {
    /// Loads the files; fails (naming the file) when they do not make a usable certificate.
    pub fn load(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let key = certified_key(&files.certificate, &files.key)?;
        Ok(Arc::new(Self {
            files,
            current: ArcSwap::from_pointee(key),
        }))
    }

    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// Reads the files again. On success new handshakes get the new certificate; on failure the
    /// old one stays and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = certified_key(&self.files.certificate, &self.files.key)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// A rustls server configuration whose certificate comes from this store (HTTP/1.1 only,
    /// as stock runners speak).
    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        let mut config = rustls::ServerConfig::builder_with_provider(load::provider())
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|_| rustls::ServerConfig::builder())
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// Serves `router` on `listener` until `stop` under `limits`: over TLS with the certificate of
/// `certs` when given, plain HTTP otherwise.
pub fn serve(
    listener: TcpListener,
    certs: Option<Arc<CertStore>>,
    router: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let tls = certs.map(|c| TlsAcceptor::from(c.server_config()));
    tokio::spawn(async move { crate::conn::serve(listener, tls, router, &limits, stop).await })
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests;
