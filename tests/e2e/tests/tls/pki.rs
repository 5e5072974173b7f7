//! Test certificate authorities made with rcgen: each signs leaf certificates for the loopback
//! host, written as PEM files the way an operator would have them.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA that signs certificates for `127.0.0.1` and `localhost`.
pub struct TestCa {
    pub name: String,
    /// The CA certificate, PEM.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate's files: the chain (leaf, then CA) and the key.
pub struct Leaf {
    pub chain: PathBuf,
    pub key: PathBuf,
    /// The leaf alone, DER, to recognise it in a handshake.
    pub der: Vec<u8>,
}

impl TestCa {
    pub fn new(name: &str) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            name: name.to_string(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Issues a leaf and writes `<stem>.pem` (chain) and `<stem>.key` into `dir`.
    pub fn issue(&self, dir: &Path, stem: &str) -> Result<Leaf> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{stem} by {}", self.name));
        let cert = params.signed_by(&key, &self.issuer)?;
        let leaf = Leaf {
            chain: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
            der: cert.der().to_vec(),
        };
        std::fs::write(&leaf.chain, format!("{}{}", cert.pem(), self.pem))?;
        std::fs::write(&leaf.key, key.serialize_pem())?;
        Ok(leaf)
    }

    /// Writes the CA certificate alone to `path`.
    pub fn write(&self, path: &Path) -> Result<PathBuf> {
        std::fs::write(path, &self.pem)?;
        Ok(path.to_path_buf())
    }
}
