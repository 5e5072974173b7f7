use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::*;

/// A CA and a leaf it signed for `localhost`, as PEM: (chain leaf+CA, leaf key, CA).
fn issue(ca_name: &str) -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    (
        format!("{}{}", leaf.pem(), ca_cert.pem()),
        leaf_key.serialize_pem(),
        ca_cert.pem(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn files(dir: &Path, cert: &str, key: &str) -> CertFiles {
    CertFiles {
        certificate: write(dir, "chain.pem", cert),
        key: write(dir, "key.pem", key),
    }
}

#[test]
fn a_matching_chain_and_key_load_and_the_relay_ca_is_the_chains_last_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, key, ca) = issue("CA-R");
    let f = files(dir.path(), &chain, &key);
    let store = CertStore::load(f.clone()).unwrap();
    assert_eq!(store.current.load().cert.len(), 2);
    let relay = relay_ca_pem(&f.certificate, None).unwrap();
    assert_eq!(relay.replace('\r', ""), ca.replace('\r', ""));
}

#[test]
fn a_certificate_that_does_not_parse_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, key, _) = issue("CA-R");
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let f = files(dir.path(), garbage, &key);
    let e = CertStore::load(f.clone()).unwrap_err();
    assert!(matches!(e, TlsError::Certificate { .. }), "{e:?}");
    assert_eq!(e.path(), f.certificate);
    assert!(e.to_string().contains("chain.pem"), "{e}");
    let f = files(dir.path(), "not pem at all\n", &key);
    let e = CertStore::load(f).unwrap_err();
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
}

#[test]
fn a_key_that_does_not_parse_or_match_names_the_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, _, _) = issue("CA-R");
    let (_, other_key, _) = issue("CA-X");
    let f = files(dir.path(), &chain, &other_key);
    let e = CertStore::load(f.clone()).unwrap_err();
    assert!(matches!(e, TlsError::Mismatch { .. }), "{e:?}");
    assert_eq!(e.path(), f.key);
    let f = files(
        dir.path(),
        &chain,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    let e = CertStore::load(f.clone()).unwrap_err();
    assert!(matches!(e, TlsError::Key { .. }), "{e:?}");
    assert!(e.to_string().contains("key.pem"), "{e}");
}

#[test]
fn a_failed_reload_keeps_the_old_certificate_and_a_good_one_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, key, _) = issue("CA-R");
    let f = files(dir.path(), &chain, &key);
    let store = CertStore::load(f).unwrap();
    let before = store.current.load_full();
    let (chain2, key2, _) = issue("CA-R2");
    write(dir.path(), "chain.pem", &chain2);
    assert!(matches!(store.reload(), Err(TlsError::Mismatch { .. })));
    assert!(Arc::ptr_eq(&before, &store.current.load_full()));
    write(dir.path(), "key.pem", &key2);
    store.reload().unwrap();
    assert_ne!(store.current.load().cert[0], before.cert[0]);
}

/// A client that connects and never starts its handshake does not hold up another one's.
#[tokio::test]
async fn a_silent_client_does_not_hold_up_other_handshakes() {
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let (chain, key, ca) = issue("CA-R");
    let store = CertStore::load(files(dir.path(), &chain, &key)).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    let stop = CancellationToken::new();
    let _server = serve(
        tcp,
        Some(store),
        router,
        ConnectionLimits::default(),
        stop.clone(),
    );

    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let talk = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        // Bytes read before a close without close_notify are kept.
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), talk)
        .await
        .expect("the second client was held up");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );
    stop.cancel();
}
