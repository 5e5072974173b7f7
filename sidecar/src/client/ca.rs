//! `--tls-ca-file`: CA certificates the runner trusts for its server on top of the system's,
//! as `tls-ca-file` does for a stock runner. The same file is handed to jobs as
//! `CI_SERVER_TLS_CA_FILE` and to git for clones (runner-protocol.md §8.1).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ClientError;

/// A PEM CA bundle read from a file.
#[derive(Debug, Clone)]
pub struct CaBundle {
    pub path: PathBuf,
    pub pem: Arc<Vec<u8>>,
}

impl CaBundle {
    /// Reads `path` and checks that it holds at least one certificate.
    pub fn read(path: &Path) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::CaFile {
            path: path.to_path_buf(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate in it".to_owned()));
        }
        Ok(Self {
            path: path.to_path_buf(),
            pem: Arc::new(pem),
        })
    }

    /// The certificates, for an HTTP client.
    pub fn certificates(&self) -> Result<Vec<reqwest::Certificate>, ClientError> {
        reqwest::Certificate::from_pem_bundle(&self.pem).map_err(|e| ClientError::CaFile {
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }
}
