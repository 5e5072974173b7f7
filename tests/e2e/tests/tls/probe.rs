//! One TLS connection to the autoscaler, held open across requests, that remembers which
//! certificate its handshake saw: what a sidecar's kept-alive connection is.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

pub struct Connection {
    stream: BufReader<TlsStream<TcpStream>>,
    /// The leaf certificate the server presented, DER.
    pub peer_leaf: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` trusting the PEM CA certificates in `trust`.
    pub async fn open(addr: &str, trust: &str) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(trust.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("127.0.0.1")?.to_owned();
        let stream = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .context("TLS handshake")?;
        let peer_leaf = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .context("no peer certificate")?
            .to_vec();
        Ok(Self {
            stream: BufReader::new(stream),
            peer_leaf,
        })
    }

    /// `POST /api/v4/runners/verify` with an unknown token on this connection; the status.
    pub async fn verify(&mut self) -> Result<u16> {
        let body = r#"{"token":"glrt-not-a-token"}"#;
        let request = format!(
            "POST /api/v4/runners/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await?;
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line).await?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .context("no status")?
            .parse()?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line).await? == 0 {
                bail!("connection closed in the headers");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse()?;
            }
        }
        let mut rest = vec![0; length];
        self.stream.read_exact(&mut rest).await?;
        Ok(status)
    }
}
