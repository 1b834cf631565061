//! TLS on keel's listeners and on the connections a member opens to its peers, with rustls on
//! ring: etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`, `--client-cert-auth` and
//! `--auto-tls`, and their `--peer-*` twins, with etcd's meaning.
//!
//! - A listener whose URL is `https://` serves TLS with the side's certificate. A trusted CA file
//!   or client-cert-auth makes it require, at the handshake, a client certificate that CA signed
//!   (etcd's `RequireAndVerifyClientCert`); a connection without one never reaches a service.
//! - With auto-TLS and no certificate given, a self-signed one is made (once) in
//!   `<data-dir>/fixtures/client` or `.../peer` for the listener hosts. A member dialing peers with
//!   such a certificate does not verify theirs: auto-TLS encrypts, it does not authenticate.
//! - A member dials an `https://` peer URL presenting its peer certificate as client certificate
//!   and verifying the peer's against the peer trusted CA (the system's roots without one).
//! - On the client side with `--client-cert-auth`, the verified certificate's common name goes
//!   with every request on the connection ([`ConnInfo::user`]); the auth layer takes it as the user
//!   when the request carries no token, as etcd.
//!
//! Handshakes run off the accept loop ([`Incoming`]), each with a deadline, so a slow or silent
//! client holds up no other.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{Config, TlsFlags};

/// How long a client or peer may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the system's trusted roots are, for dialing an `https://` peer without a trusted CA.
const SYSTEM_ROOTS: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

/// rustls's ring provider. rustls 0.23.48 deprecates it for lacking post-quantum key exchange
/// (which aws-lc-rs has, at the price of a CMake C build); etcd 3.4's Go TLS has none either.
#[allow(deprecated)]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One side's TLS (client or peer): what its listeners serve and how a member dials with it.
#[derive(Clone)]
pub struct Side {
    server: Arc<ServerConfig>,
    dial: Arc<ClientConfig>,
    /// Whether a verified client certificate's common name is the user (`--client-cert-auth` on
    /// the client side).
    cert_user: bool,
}

/// The member's TLS: the client side and the peer side, each when configured.
#[derive(Clone, Default)]
pub struct Tls {
    pub client: Option<Side>,
    pub peer: Option<Side>,
}

impl Tls {
    /// Loads the certificates the flags name, or makes the auto-TLS ones, for both sides.
    pub fn load(cfg: &Config) -> Result<Tls, String> {
        let fixtures = cfg.data_dir.join("fixtures");
        let hosts = |urls: &[String]| -> Vec<String> { urls.iter().filter_map(|u| url_host(u)).collect() };
        let client_hosts = hosts(&[cfg.listen_client_urls.clone(), cfg.listen_metrics_urls.clone()].concat());
        Ok(Tls {
            client: Side::load(&cfg.client_tls, &fixtures.join("client"), &client_hosts, true)?,
            peer: Side::load(&cfg.peer_tls, &fixtures.join("peer"), &hosts(&cfg.listen_peer_urls), false)?,
        })
    }

    /// How a member dials `https://` peer URLs: with the peer side's certificate, or, without
    /// one, as a client with no certificate that trusts the system's roots.
    pub fn peer_dialing(&self) -> Result<Arc<ClientConfig>, String> {
        match &self.peer {
            Some(side) => Ok(side.dial.clone()),
            None => Ok(Arc::new(
                ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(system_roots())
                    .with_no_client_auth(),
            )),
        }
    }
}

impl Side {
    /// A side that only serves, with `server` (another server's TLS on keel's listeners, such
    /// as keel-apiserver's): a verified client certificate's common name is the connection's
    /// user. It dials nobody.
    pub fn serving(server: Arc<ServerConfig>) -> Side {
        let dial = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the default protocol versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        Side { server, dial: Arc::new(dial), cert_user: true }
    }

    fn load(flags: &TlsFlags, fixtures: &Path, hosts: &[String], client_side: bool) -> Result<Option<Side>, String> {
        let prefix = if client_side { "" } else { "peer-" };
        let (cert_file, key_file, self_signed) = match (&flags.cert_file, &flags.key_file) {
            (Some(c), Some(k)) => (c.clone(), k.clone(), false),
            (None, None) if flags.auto_tls => {
                let (c, k) = self_signed_cert(fixtures, hosts)?;
                (c, k, true)
            }
            (None, None) => return Ok(None),
            _ => return Err(format!("--{prefix}cert-file and --{prefix}key-file must be given together")),
        };
        let certs = read_certs(&cert_file)?;
        let key = PrivateKeyDer::from_pem_file(&key_file)
            .map_err(|e| format!("{}: no private key: {e}", key_file.display()))?;
        let trusted = flags.trusted_ca_file.as_ref().map(|f| trusted_roots(f)).transpose()?;
        let p = provider();
        let versions = |e: rustls::Error| e.to_string();

        let server =
            ServerConfig::builder_with_provider(p.clone()).with_safe_default_protocol_versions().map_err(versions)?;
        let server = match (&trusted, flags.client_cert_auth) {
            (Some(roots), _) => server.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots.clone(), p.clone())
                    .build()
                    .map_err(|e| format!("--{prefix}trusted-ca-file: {e}"))?,
            ),
            (None, true) => {
                return Err(format!(
                    "--{prefix}client-cert-auth needs --{prefix}trusted-ca-file to verify clients with"
                ))
            }
            (None, false) => server.with_no_client_auth(),
        };
        let mut server = server
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("{}: {e}", cert_file.display()))?;
        // Offered in this order: gRPC clients take h2; plain HTTPS clients of /health may not.
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

        let dial =
            ClientConfig::builder_with_provider(p.clone()).with_safe_default_protocol_versions().map_err(versions)?;
        let dial = if self_signed {
            dial.dangerous().with_custom_certificate_verifier(unverified())
        } else {
            dial.with_root_certificates(trusted.unwrap_or_else(|| Arc::new(system_roots())))
        };
        let mut dial = dial.with_client_auth_cert(certs, key).map_err(|e| format!("{}: {e}", cert_file.display()))?;
        dial.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(Side {
            server: Arc::new(server),
            dial: Arc::new(dial),
            cert_user: client_side && flags.client_cert_auth,
        }))
    }
}

fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", file.display()));
    }
    Ok(certs)
}

fn trusted_roots(file: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(read_certs(file)?);
    if added == 0 {
        return Err(format!("{}: no usable CA certificate", file.display()));
    }
    Ok(Arc::new(roots))
}

/// The system's trusted roots (none if the system keeps none where Debian or Fedora do).
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for file in SYSTEM_ROOTS {
        if let Ok(certs) = read_certs(Path::new(file)) {
            roots.add_parsable_certificates(certs);
            break;
        }
    }
    roots
}

/// The auto-TLS certificate and key in `dir`, made for `hosts` if not there yet (as etcd, which
/// keeps its self-signed pair across restarts).
fn self_signed_cert(dir: &Path, hosts: &[String]) -> Result<(PathBuf, PathBuf), String> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let made = rcgen::generate_simple_self_signed(hosts.to_vec()).map_err(|e| format!("auto-tls: {e}"))?;
    let write = || -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(&cert, made.cert.pem())?;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        io::Write::write_all(&mut opts.open(&key)?, made.key_pair.serialize_pem().as_bytes())
    };
    write().map_err(|e| format!("auto-tls: writing {}: {e}", dir.display()))?;
    tracing::info!(dir = %dir.display(), "auto-tls: made a self-signed certificate");
    Ok((cert, key))
}

/// The host of a URL (`https://host:port/...`), without brackets around an IPv6 address.
fn url_host(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    Some(uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string()).filter(|h| !h.is_empty())
}

/// A verifier that accepts a peer's certificate without checking its chain or name (auto-TLS
/// peers), while still checking the handshake signatures, so the channel is encrypted to whoever
/// holds the key.
fn unverified() -> Arc<dyn ServerCertVerifier> {
    Arc::new(Unverified(provider()))
}

#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The common name of a DER certificate's subject.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?.to_string();
    Some(cn)
}

/// Dials the host and port of a peer URL over TCP and completes a TLS handshake as `tls` says.
pub async fn dial(tls: Arc<ClientConfig>, uri: &http::Uri) -> io::Result<Box<dyn Conn>> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let host = uri.host().ok_or_else(|| invalid(format!("{uri}: no host")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = TcpStream::connect((host, uri.port_u16().unwrap_or(443))).await?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(host.to_string()).map_err(|e| invalid(format!("{host}: {e}")))?;
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsConnector::from(tls).connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(Box::new(stream))
}

/// A connection, plain or TLS.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// What the server knows of a connection: the client's address, on a client listener with
/// `--client-cert-auth` the common name of its verified certificate, and the certificates the
/// client presented (leaf first), for servers that verify them per request.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub addr: SocketAddr,
    pub user: Option<String>,
    pub chain: Option<Arc<[CertificateDer<'static>]>>,
}

/// A TCP listener's connections with their TLS handshakes done (when the listener has TLS):
/// a task accepts and hands each handshake to a task of its own; those that complete queue here.
pub struct Incoming {
    ready: mpsc::Receiver<(Box<dyn Conn>, ConnInfo)>,
    local: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl Incoming {
    pub fn new(listener: TcpListener, tls: Option<&Side>) -> io::Result<Incoming> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel::<(Box<dyn Conn>, ConnInfo)>(64);
        let tls = tls.map(|s| (TlsAcceptor::from(s.server.clone()), s.cert_user));
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, addr) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let Some((acceptor, cert_user)) = tls.clone() else {
                    if tx.send((Box::new(tcp), ConnInfo { addr, user: None, chain: None })).await.is_err() {
                        return;
                    }
                    continue;
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => return tracing::debug!(%addr, "TLS handshake failed: {e}"),
                        Err(_) => return tracing::debug!(%addr, "TLS handshake timed out"),
                    };
                    let presented = stream.get_ref().1.peer_certificates();
                    let user = match presented {
                        Some([leaf, ..]) if cert_user => common_name(leaf),
                        _ => None,
                    };
                    let chain =
                        presented.filter(|c| !c.is_empty()).map(|c| c.iter().map(|d| d.clone().into_owned()).collect());
                    let _ = tx.send((Box::new(stream), ConnInfo { addr, user, chain })).await;
                });
            }
        });
        Ok(Incoming { ready, local, acceptor })
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for Incoming {
    type Io = Box<dyn Conn>;
    type Addr = ConnInfo;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(ConnInfo { addr: self.local, user: None, chain: None })
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Incoming>> for ConnInfo {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Incoming>) -> Self {
        stream.remote_addr().clone()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn common_name_of_a_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        let cert = params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap();
        assert_eq!(super::common_name(cert.der()).as_deref(), Some("alice"));
        let mut unnamed = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        unnamed.distinguished_name = rcgen::DistinguishedName::new();
        let cert = unnamed.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap();
        assert_eq!(super::common_name(cert.der()), None);
        assert_eq!(super::common_name(b"not a certificate"), None);
    }

    #[test]
    fn url_hosts() {
        assert_eq!(super::url_host("https://127.0.0.1:2379").as_deref(), Some("127.0.0.1"));
        assert_eq!(super::url_host("https://localhost:2379/").as_deref(), Some("localhost"));
        assert_eq!(super::url_host("https://[::1]:2379").as_deref(), Some("::1"));
        assert_eq!(super::url_host("https://example.com").as_deref(), Some("example.com"));
    }
}
