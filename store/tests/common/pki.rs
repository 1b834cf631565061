//! Certificates made by the test (rcgen) for the TLS tests: a CA, certificates it signs for
//! servers and clients (valid for 127.0.0.1 and localhost, for both TLS roles, as etcd's peers
//! need), a certificate from an unrelated CA, files for command lines, and a rustls client
//! configuration for the harness's own connections.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A CA and the certificates it signed, as PEM files in a temporary directory.
pub struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A certificate and its key, in files.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new().prefix("keel-test-pki-").tempdir().expect("temp dir");
        let (ca, ca_key) = authority("keel test CA");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        Pki { dir, ca, ca_key }
    }

    /// The directory holding `ca.pem` and every `<name>.pem` / `<name>-key.pem` issued.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A certificate with common name `cn`, signed by this CA, saved as `<name>.pem`.
    pub fn issue(&self, name: &str, cn: &str) -> Issued {
        let (cert, key) = leaf(cn, &self.ca, &self.ca_key);
        self.save(name, &cert.pem(), &key.serialize_pem())
    }

    /// A certificate with common name `cn` signed by another CA, which this one's holders must
    /// refuse, saved as `<name>.pem`.
    pub fn issue_foreign(&self, name: &str, cn: &str) -> Issued {
        let (other, other_key) = authority("some other CA");
        let (cert, key) = leaf(cn, &other, &other_key);
        self.save(name, &cert.pem(), &key.serialize_pem())
    }

    fn save(&self, name: &str, cert: &str, key: &str) -> Issued {
        let issued = Issued {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}-key.pem")),
        };
        std::fs::write(&issued.cert, cert).expect("write certificate");
        std::fs::write(&issued.key, key).expect("write key");
        issued
    }

    /// A rustls client configuration that trusts this CA and presents `client` (if any).
    pub fn client_config(&self, client: Option<&Issued>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(self.ca.der().to_vec())).expect("CA certificate");
        let builder = rustls::ClientConfig::builder_with_provider(keel_store::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots);
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some(issued) => {
                let certs = CertificateDer::pem_file_iter(&issued.cert)
                    .expect("read certificate")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certificate PEM");
                let key = PrivateKeyDer::from_pem_file(&issued.key).expect("key PEM");
                builder.with_client_auth_cert(certs, key).expect("client certificate")
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

fn authority(cn: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    (cert, key)
}

fn leaf(cn: &str, ca: &rcgen::Certificate, ca_key: &KeyPair) -> (rcgen::Certificate, KeyPair) {
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("certificate params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, ca, ca_key).expect("signed certificate");
    (cert, key)
}

/// A TLS connection to 127.0.0.1:`port`, verifying the server as `tls` says.
pub async fn dial(tls: Arc<rustls::ClientConfig>, port: u16) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1").expect("IP server name");
    tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await
}

/// Like [`dial`], offering only HTTP/1.1 in ALPN (etcd's listeners offer h2 alone, so a client
/// that also offers h2 gets it), for plain HTTP/1.1 requests over TLS.
pub async fn dial_http1(tls: Arc<rustls::ClientConfig>, port: u16) -> io::Result<TlsStream<TcpStream>> {
    let mut tls = (*tls).clone();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    dial(Arc::new(tls), port).await
}
