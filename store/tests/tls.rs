//! TLS between members and auto-TLS (etcdctl over mutual TLS, compared with etcd, is in
//! `etcdctl.rs`):
//!
//! - three members on `https://` peer URLs with certificates the test's CA signed and
//!   `--peer-client-cert-auth`: they elect, replicate and list each other's https URLs, and the
//!   peer port refuses a connection without a certificate that CA signed;
//! - three members with `--peer-auto-tls`: each makes its own self-signed certificate and they
//!   still form a cluster (auto-TLS encrypts, it does not authenticate);
//! - `--auto-tls` on the client URL: a self-signed certificate that etcdctl accepts with
//!   `--insecure-skip-tls-verify` and a verifying client refuses.
//!
//! Each runs against keel, or against etcd with `KEEL_DIFF_AGAINST=etcd`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::pki::{self, Pki};
use common::{etcdctl, start_cluster_secure, Kind, Secure, Server};
use keel_proto::etcdserverpb::cluster_client::ClusterClient;
use keel_proto::etcdserverpb::{MemberListRequest, PutRequest, RangeRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Whether a TLS client configured as `tls` is refused by the server on `port`: the handshake
/// fails, or (TLS 1.3, where the client's certificate is checked after the client considers the
/// handshake done) the first read ends without a byte from the server.
async fn refused(tls: Arc<rustls::ClientConfig>, port: u16) -> bool {
    // HTTP/1.1, which both servers' peer and client ports answer (etcd's peer port with 404s).
    let mut stream = match pki::dial_http1(tls, port).await {
        Ok(s) => s,
        Err(_) => return true,
    };
    let request = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request).await.is_err() {
        return true;
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => false,
        Err(_) => panic!("the server neither answered nor closed the connection within 10 s"),
    }
}

/// Puts `key` on `writer` and reads it back (linearizable) on `reader`.
async fn replicated(writer: &Server, reader: &Server, key: &'static str, value: &'static str) {
    writer
        .kv()
        .await
        .put(PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: value.as_bytes().to_vec().into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("put on {}: {e}", writer.name()));
    let got = reader
        .kv()
        .await
        .range(RangeRequest { key: key.as_bytes().to_vec().into(), ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("range on {}: {e}", reader.name()))
        .into_inner();
    let values: Vec<&[u8]> = got.kvs.iter().map(|kv| &kv.value[..]).collect();
    assert_eq!(values, vec![value.as_bytes()], "{} reads what {} wrote", reader.name(), writer.name());
}

#[tokio::test]
async fn three_members_replicate_over_peer_tls() {
    let pki = Pki::new();
    let peer = pki.issue("peer", "keel-test-peer");
    let foreign = pki.issue_foreign("foreign", "keel-test-peer");
    let flags = [
        format!("--peer-cert-file={}", peer.cert.display()),
        format!("--peer-key-file={}", peer.key.display()),
        format!("--peer-trusted-ca-file={}", pki.ca_file().display()),
        "--peer-client-cert-auth".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let members = start_cluster_secure(Kind::under_test(), 3, &flags, Secure { client: None, peer: true }).await;

    replicated(&members[0], &members[2], "over-tls", "1").await;
    replicated(&members[2], &members[1], "over-tls", "2").await;

    let list = ClusterClient::new(members[1].channel().await)
        .member_list(MemberListRequest::default())
        .await
        .expect("member list")
        .into_inner();
    let mut urls: Vec<String> = list.members.iter().flat_map(|m| m.peer_ur_ls.clone()).collect();
    urls.sort();
    let mut want: Vec<String> = members.iter().map(Server::peer_url).collect();
    want.sort();
    assert_eq!(urls, want, "the members' peer URLs are the https ones");

    let port = members[0].peer_port();
    assert!(refused(pki.client_config(None), port).await, "peer port served a client without a certificate");
    assert!(refused(pki.client_config(Some(&foreign)), port).await, "peer port served another CA's certificate");
    assert!(!refused(pki.client_config(Some(&peer)), port).await, "peer port refused the cluster's own certificate");
}

#[tokio::test]
async fn three_members_form_a_cluster_with_peer_auto_tls() {
    let members =
        start_cluster_secure(Kind::under_test(), 3, &["--peer-auto-tls"], Secure { client: None, peer: true }).await;
    replicated(&members[1], &members[0], "auto", "1").await;
    for m in &members {
        let fixtures = m.data_dir().join("fixtures").join("peer");
        for file in ["cert.pem", "key.pem"] {
            assert!(fixtures.join(file).exists(), "{}: no {file} in {}", m.name(), fixtures.display());
        }
    }
}

/// A client that checks nothing of the server's certificate, not even the handshake signature
/// (etcd's auto-TLS certificates are ECDSA P-521, which rustls cannot verify): the harness's
/// stand-in for etcdctl's `--insecure-skip-tls-verify`, to see that the server serves.
fn skip_verify() -> Arc<rustls::ClientConfig> {
    let mut config = rustls::ClientConfig::builder_with_provider(keel_store::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnything))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

#[derive(Debug)]
struct AcceptAnything;

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        use rustls::SignatureScheme::*;
        vec![
            ECDSA_NISTP256_SHA256,
            ECDSA_NISTP384_SHA384,
            ECDSA_NISTP521_SHA512,
            ED25519,
            RSA_PSS_SHA256,
            RSA_PKCS1_SHA256,
        ]
    }
}

#[tokio::test]
async fn client_auto_tls_serves_a_self_signed_certificate() {
    let server =
        Server::start_secure(Kind::under_test(), &["--auto-tls"], Secure { client: Some(skip_verify()), peer: false })
            .await;
    let deadline = Duration::from_secs(60);
    let (code, _, stderr) =
        etcdctl::run(&server, &["--insecure-transport=false", "--insecure-skip-tls-verify", "put", "k", "v"], deadline)
            .await;
    assert_eq!(code, Some(0), "etcdctl put over auto-TLS: {stderr}");
    let (code, stdout, stderr) =
        etcdctl::run(&server, &["--insecure-transport=false", "--insecure-skip-tls-verify", "get", "k"], deadline)
            .await;
    assert_eq!((code, stdout.as_str()), (Some(0), "k\nv\n"), "etcdctl get over auto-TLS: {stderr}");
    let (code, _, _) =
        etcdctl::run(&server, &["--insecure-transport=false", "--dial-timeout=1s", "get", "k"], deadline).await;
    assert_ne!(code, Some(0), "etcdctl trusted a self-signed certificate without being told to");
    assert!(refused(Pki::new().client_config(None), server.client_port()).await, "a verifying client accepted it");
    let fixtures = server.data_dir().join("fixtures").join("client");
    assert!(fixtures.join("cert.pem").exists() && fixtures.join("key.pem").exists(), "no certificate in {fixtures:?}");
}
