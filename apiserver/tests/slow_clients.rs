//! A client that sends its request headers too slowly (slowloris) is disconnected after
//! kube-apiserver's header read timeout, while a client that sends a whole request is answered on
//! the same server.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

/// A TLS connection to the server, trusting the CA of its kubeconfig.
async fn connect(running: &keel_apiserver::run::Running) -> Box<dyn keel_store::tls::Conn> {
    use base64::Engine as _;
    use rustls::pki_types::pem::PemObject;
    let v: serde_json::Value = serde_yaml_ng::from_slice(&std::fs::read(&running.kubeconfig).unwrap()).unwrap();
    let ca = v["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap();
    let ca = base64::engine::general_purpose::STANDARD.decode(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(keel_store::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let uri: http::Uri = format!("https://127.0.0.1:{}", running.addr.port()).parse().unwrap();
    keel_store::tls::dial(Arc::new(tls), &uri).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _client) = common::apiserver(dir.path(), &[]).await;

    // A whole request is answered.
    let mut whole = connect(&running).await;
    whole.write_all(b"GET /livez HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), whole.read_to_end(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&answer));

    // Headers that never end: the server hangs up once the header timeout passes.
    let mut slow = connect(&running).await;
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: keel\r\n").await.unwrap();
    let wait = keel_apiserver::run::HEADER_READ_TIMEOUT + Duration::from_secs(30);
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(wait, async {
        loop {
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection was still open after {wait:?}");
    running.stop().await;
}
