//! A client that sends its request headers too slowly (slowloris), or nothing at all after TLS
//! over HTTP/1.1 or HTTP/2, is disconnected after kube-apiserver's header read timeout, while a
//! client that sends a whole request is answered on the same server.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

/// A TLS connection to the server, trusting the CA of its kubeconfig.
async fn connect(running: &keel_apiserver::run::Running, alpn: &[u8]) -> Box<dyn keel_store::tls::Conn> {
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
    tls.alpn_protocols = vec![alpn.to_vec()];
    let uri: http::Uri = format!("https://127.0.0.1:{}", running.addr.port()).parse().unwrap();
    keel_store::tls::dial(Arc::new(tls), &uri).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _client) = common::apiserver(dir.path(), &[]).await;

    // A whole request is answered.
    let mut whole = connect(&running, b"http/1.1").await;
    whole.write_all(b"GET /livez HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), whole.read_to_end(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&answer));

    // Headers that never end, and connections that send nothing after TLS (HTTP/2 never sends
    // its preface): the server hangs up on each once the header timeout passes.
    let mut slow = connect(&running, b"http/1.1").await;
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: keel\r\n").await.unwrap();
    let silent = connect(&running, b"http/1.1").await;
    let silent_h2 = connect(&running, b"h2").await;
    let wait = keel_apiserver::run::HEADER_READ_TIMEOUT + Duration::from_secs(30);
    let (a, b, c) = tokio::join!(closed(slow, wait), closed(silent, wait), closed(silent_h2, wait));
    assert!(a && b && c, "a connection was still open after {wait:?}: {a} {b} {c}");
    running.stop().await;
}

/// Whether the server closes `conn` (reading what it sends meanwhile) within `wait`.
async fn closed(mut conn: Box<dyn keel_store::tls::Conn>, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(wait, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}
