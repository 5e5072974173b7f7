//! `[server.tls]`: TLS on the mirrored runner API. The files are read here too, so that a
//! certificate or key that cannot be used is a configuration problem (exit 64) naming the file,
//! found by `check-config` as well as at start.

use std::path::{Path, PathBuf};

use super::reader::{Problems, Section};
use super::resolve;
use crate::tls::{self, TlsError};

/// Where each machine keeps its system CA certificates, tried in order (Debian and Ubuntu,
/// RHEL and Fedora, openSUSE, Alpine and others).
pub const SYSTEM_CA_FILES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// TLS for the listener of the mirrored runner API.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub certificate: PathBuf,
    /// PEM private key of the leaf.
    pub key: PathBuf,
    /// PEM CA certificates sidecars must trust for the relay; `None` = the chain's last
    /// certificate.
    pub ca_bundle: Option<PathBuf>,
    /// Files on a machine tried in order for its system CA certificates, which are added to the
    /// bundle the sidecar is given (so that clones from GitLab keep verifying).
    pub system_ca_files: Vec<String>,
}

pub(super) fn read_tls(s: Section<'_>, base_dir: &Path, problems: &Problems) -> Option<TlsConfig> {
    let certificate: Option<PathBuf> = s.required("certificate");
    let key: Option<PathBuf> = s.required("key");
    let ca_bundle = s
        .optional::<PathBuf>("ca_bundle")
        .map(|p| resolve(base_dir, p));
    let system_ca_files: Vec<String> = s.or(
        "system_ca_files",
        SYSTEM_CA_FILES.iter().map(|p| (*p).to_string()).collect(),
    );
    if system_ca_files.iter().any(|p| !p.starts_with('/')) {
        s.problem("system_ca_files", "must be absolute paths on the machines");
    }
    let table = s.path_of("");
    s.finish();
    let certificate = resolve(base_dir, certificate?);
    let key = resolve(base_dir, key?);
    check_files(&table, &certificate, &key, ca_bundle.as_deref(), problems);
    Some(TlsConfig {
        certificate,
        key,
        ca_bundle,
        system_ca_files,
    })
}

/// Reads the files as the listener will, so that one it cannot use is reported now.
fn check_files(
    table: &str,
    certificate: &Path,
    key: &Path,
    ca_bundle: Option<&Path>,
    problems: &Problems,
) {
    let at = |k: &str| format!("{table}{k}");
    if let Err(e) = tls::certified_key(certificate, key) {
        problems.add(at(key_of(&e, key)), e.to_string());
    } else if let Err(e) = tls::relay_ca_pem(certificate, ca_bundle) {
        problems.add(at("ca_bundle"), e.to_string());
    }
}

/// The key whose file the error names.
fn key_of(e: &TlsError, key: &Path) -> &'static str {
    if e.path() == key {
        "key"
    } else {
        "certificate"
    }
}
