//! Starting keel-apiserver: its flags (kube-apiserver's names), the store it talks to (etcd
//! servers, or a keel member started in this process), its TLS (given, or a CA and certificates
//! made once in the data directory) and the admin kubeconfig it writes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::Endpoint;

use crate::cache::Caches;
use crate::rest::Api;
use crate::server::{self, Shared};
use crate::storage::Storage;

/// keel-apiserver's flags.
#[derive(clap::Parser, Debug, Clone)]
// A flag given twice takes its last value, as kube-apiserver's flags do.
#[command(
    name = "keel-apiserver",
    version,
    about = "A Kubernetes API server on keel (or etcd)",
    args_override_self = true
)]
pub struct Flags {
    /// etcd servers to use (comma-separated URLs); without them, a keel member runs in this
    /// process with its data under --data-dir.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// The prefix of every key in the store.
    #[arg(long, default_value = "/registry")]
    pub etcd_prefix: String,
    /// How often the store is compacted (a Go duration: 5m, 1h30m; 0 turns it off).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub etcd_compaction_interval: Duration,
    /// The port HTTPS is served on.
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// The address HTTPS is served on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,
    /// The serving certificate (PEM); without it, one is made in the data directory.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA that signs client certificates; without it, the CA made in the data directory.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// How long an event is kept after its last write (a Go duration).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub event_ttl: Duration,
    /// The IPv4 range services' cluster IPs come from (its first address is the `kubernetes`
    /// service's).
    #[arg(long, default_value = "10.0.0.0/24")]
    pub service_cluster_ip_range: String,
    /// The range of services' node ports.
    #[arg(long, default_value = "30000-32767")]
    pub service_node_port_range: String,
    /// The controllers to run (kube-controller-manager's syntax: `*` for every controller on by
    /// default, `name` to enable one, `-name` to disable one; `kube-scheduler` is the scheduler).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// How long a node's kubelet may stay silent before the node lifecycle controller marks the
    /// node unreachable (a Go duration).
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How many simulated kubelets (nodes `node-1` … `node-N`) run in this process.
    #[arg(long, default_value_t = 0)]
    pub simulated_nodes: usize,
    /// The key service account tokens are signed with (PEM, ECDSA P-256); without it, one is
    /// made in the data directory (`pki/sa.key`).
    #[arg(long)]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// Files of keys (PEM: public keys, or private keys whose public halves count) service
    /// account tokens are verified with, beside the signing key's; may be given again.
    #[arg(long)]
    pub service_account_key_file: Vec<PathBuf>,
    /// The issuer of the service account tokens this server issues (the first) and accepts (all);
    /// may be given again.
    #[arg(long, default_value = "https://kubernetes.default.svc.cluster.local")]
    pub service_account_issuer: Vec<String>,
    /// The audiences API tokens must name one of (comma-separated); without them, the issuers.
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// The longest a requested service account token may live (a Go duration; 0: no limit).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub service_account_max_token_expiration: Duration,
    /// Static bearer tokens (kube's CSV: `token,user,uid[,"group1,group2"]`).
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Whether requests without credentials are served as `system:anonymous`.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub anonymous_auth: bool,
    /// The audit policy (audit.k8s.io/v1 Policy); requests are audited when a log path is given.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// Where audit events are written, one JSON line each (`-`: standard output).
    #[arg(long)]
    pub audit_log_path: Option<String>,
    /// kube's EncryptionConfiguration: which resources are encrypted in the store, and how.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    /// Admission plugins to run beside kube's default set (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Admission plugins of kube's default set not to run (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
    /// The authorizers, in order (comma-separated: AlwaysAllow, AlwaysDeny, Node, RBAC).
    #[arg(long, value_delimiter = ',', default_value = "Node,RBAC")]
    pub authorization_mode: Vec<String>,
    /// Where the embedded store, the made certificates and the admin kubeconfig live.
    #[arg(long, default_value = "keel-apiserver.data")]
    pub data_dir: PathBuf,
}

/// A Go boolean flag value (`strconv.ParseBool`).
pub fn parse_bool(s: &str) -> std::result::Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// A Go duration (`time.ParseDuration`): numbers with units h, m, s, ms, us, ns; `0` alone.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || format!("time: invalid duration {:?}", s);
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').ok_or_else(bad)?;
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let secs = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += Duration::from_secs_f64(n * secs);
        rest = &rest[unit..];
    }
    Ok(total)
}

/// A running keel-apiserver.
pub struct Running {
    /// Where HTTPS is served.
    pub addr: SocketAddr,
    /// The admin kubeconfig written at start.
    pub kubeconfig: PathBuf,
    /// The API in this process (benches and tests reach the caches and simulated nodes through it).
    pub api: Api,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    member: Option<Arc<keel_store::node::Member>>,
}

impl Running {
    /// Stops serving, then the embedded member if there is one.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
        if let Some(m) = self.member {
            m.begin_shutdown();
            m.shutdown().await;
        }
    }
}

/// Whether a store of etcd `version` answers progress requests only once every event before
/// them is sent (etcd-io/etcd#15220, fixed in 3.4.31 and 3.5.13: kube's minimum for serving
/// consistent reads from its cache).
fn progress_trusted(version: &str) -> bool {
    let v: Vec<u64> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    match v.as_slice() {
        [3, 4, patch, ..] => *patch >= 31,
        [3, 5, patch, ..] => *patch >= 13,
        [3, minor, ..] => *minor >= 6,
        [major, ..] => *major > 3,
        [] => false,
    }
}

/// The store's version, once one of its endpoints answers (an etcd may listen before it serves).
async fn store_version(storage: &Storage, urls: &[String]) -> Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match storage.version().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(anyhow::anyhow!("{e}")).context(format!("reaching the store at {}", urls.join(",")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Starts a single keel member on the data directory's store, serving its client API on a port
/// of 127.0.0.1 the system picks; its URL.
async fn embedded_member(dir: &Path) -> Result<(Arc<keel_store::node::Member>, String, tokio::task::JoinHandle<()>)> {
    use keel_store::config::Config;
    use keel_store::engine::{RocksEngine, SyncMode};
    use keel_store::raft::network::Dialer;
    let store_dir = dir.join("store");
    std::fs::create_dir_all(&store_dir)?;
    // A single member never dials its peer URL; the URL only names it in the membership.
    let peer = "http://127.0.0.1:2380";
    let cfg = Config::parse_from([
        "keel",
        "--name",
        "keel-apiserver",
        "--data-dir",
        store_dir.to_str().context("a data directory path in UTF-8")?,
        "--initial-cluster",
        &format!("keel-apiserver={peer}"),
        "--initial-advertise-peer-urls",
        peer,
    ])
    .map_err(anyhow::Error::msg)?;
    let engine = Arc::new(RocksEngine::open(&store_dir.join("db"))?);
    let member = keel_store::node::Member::start_with(&cfg, engine, Dialer::default(), SyncMode::Background).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let router = keel_store::server::client_router(keel_store::server::Edge::new(member.clone()));
    let serving = tokio::spawn(async move {
        let _ = keel_store::server::serve_with(listener, router, std::future::pending()).await;
    });
    Ok((member, url, serving))
}

/// The PKI made once in `<data-dir>/pki`: a CA, the serving certificate and the admin's client
/// certificate, all PEM.
struct Pki {
    ca: String,
    serving: (String, String),
    admin: (String, String),
}

fn pki(dir: &Path, hosts: &[String]) -> Result<Pki> {
    let pki = dir.join("pki");
    let read = |n: &str| std::fs::read_to_string(pki.join(n));
    if let (Ok(ca), Ok(sc), Ok(sk), Ok(ac), Ok(ak)) =
        (read("ca.crt"), read("apiserver.crt"), read("apiserver.key"), read("admin.crt"), read("admin.key"))
    {
        return Ok(Pki { ca, serving: (sc, sk), admin: (ac, ak) });
    }
    std::fs::create_dir_all(&pki)?;
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "keel-apiserver-ca");
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issue = |names: Vec<String>,
                 cn: &str,
                 org: Option<&str>,
                 usage: rcgen::ExtendedKeyUsagePurpose|
     -> Result<(String, String)> {
        let key = rcgen::KeyPair::generate()?;
        let mut p = rcgen::CertificateParams::new(names)?;
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(rcgen::DnType::OrganizationName, o);
        }
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca_cert, &ca_key)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let serving = issue(hosts.to_vec(), "keel-apiserver", None, rcgen::ExtendedKeyUsagePurpose::ServerAuth)?;
    let admin =
        issue(Vec::new(), "kubernetes-admin", Some("system:masters"), rcgen::ExtendedKeyUsagePurpose::ClientAuth)?;
    for (name, pem) in [
        ("ca.crt", ca_cert.pem()),
        ("ca.key", ca_key.serialize_pem()),
        ("apiserver.crt", serving.0.clone()),
        ("apiserver.key", serving.1.clone()),
        ("admin.crt", admin.0.clone()),
        ("admin.key", admin.1.clone()),
    ] {
        write_private(&pki.join(name), pem.as_bytes())?;
    }
    Ok(Pki { ca: ca_cert.pem(), serving, admin })
}

/// The service account signing key made once in `<data-dir>/pki/sa.key` (ECDSA P-256, PEM).
fn service_account_key(dir: &Path) -> Result<String> {
    let path = dir.join("pki").join("sa.key");
    if let Ok(pem) = std::fs::read_to_string(&path) {
        return Ok(pem);
    }
    std::fs::create_dir_all(dir.join("pki"))?;
    let pem = rcgen::KeyPair::generate()?.serialize_pem();
    write_private(&path, pem.as_bytes())?;
    Ok(pem)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<std::result::Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        bail!("no certificate in PEM data");
    }
    Ok(certs)
}

/// The client CA's verifier: what the client certificate authenticator checks a presented
/// certificate with.
fn client_verifier(client_ca: &str) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(client_ca)? {
        roots.add(c)?;
    }
    let provider = keel_store::tls::provider();
    Ok(rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?)
}

/// Asks clients for a certificate of the client CA's (named in the handshake) and takes
/// whatever they present once they prove they hold its key: the certificate is checked by
/// authentication, per request, so that a bad one is kube's 401 rather than a failed handshake
/// (kube serves with `tls.RequestClientCert` for the same reason).
#[derive(Debug)]
struct Requested {
    ca: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for Requested {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.ca.root_hint_subjects()
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The TLS server configuration: the serving certificate, and client certificates requested
/// (not required) for the client CA.
fn tls_config(
    serving: (&str, &str),
    ca: Arc<dyn rustls::server::danger::ClientCertVerifier>,
) -> Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    let provider = keel_store::tls::provider();
    let verifier = Arc::new(Requested { ca, algorithms: provider.signature_verification_algorithms });
    let key = PrivateKeyDer::from_pem_slice(serving.1.as_bytes()).context("the serving key")?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(serving.0)?, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

fn kubeconfig(server: &str, ca: &str, admin: &(String, String)) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: keel
  cluster:
    server: {server}
    certificate-authority-data: {}
users:
- name: admin
  user:
    client-certificate-data: {}
    client-key-data: {}
contexts:
- name: keel
  context:
    cluster: keel
    user: admin
current-context: keel
",
        b64(ca),
        b64(&admin.0),
        b64(&admin.1)
    )
}

/// How long a request's headers may take to arrive (kube-apiserver's `ReadHeaderTimeout`): a
/// client that sends them slower is disconnected, so slow clients cannot hold connections open.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

/// How long a connection may stay open with no request in flight (kube-apiserver's
/// `IdleTimeout`): an idle HTTP/1 keep-alive or HTTP/2 connection is closed after it.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The most requests one HTTP/2 connection may have in flight (kube-apiserver's default
/// `--http2-max-streams-per-connection`).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// A connection's requests in flight and when it was last busy, for closing it once idle.
#[derive(Default)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    last: parking_lot::Mutex<Option<tokio::time::Instant>>,
}

impl Activity {
    /// A request begins; the guard ends it when the answer's body is done or dropped.
    fn begin(self: &Arc<Self>) -> ActivityGuard {
        self.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ActivityGuard(self.clone())
    }

    /// Whether the connection has had no request in flight for `idle` (counted from `opened`
    /// when it never had one; a request in flight keeps it busy however long it takes).
    fn idle_for(&self, idle: Duration, opened: tokio::time::Instant) -> bool {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0
            && self.last.lock().unwrap_or(opened).elapsed() >= idle
    }
}

struct ActivityGuard(Arc<Activity>);

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        *self.0.last.lock() = Some(tokio::time::Instant::now());
        self.0.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Serves `router` on the connections of `incoming` until `stopped` turns true, each request
/// knowing its connection (`ConnectInfo`), HTTP/1 headers bounded by [`HEADER_READ_TIMEOUT`]
/// (axum's own loop sets no timer, so hyper's header timeout never applies there), a connection
/// that sends no request within that time, or stays idle for [`IDLE_TIMEOUT`], closed, and
/// HTTP/2 streams per connection bounded.
async fn serve(
    mut incoming: keel_store::tls::Incoming,
    router: axum::Router,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    use axum::serve::Listener as _;
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut until_stopped = stopped.clone();
    loop {
        let (io, info) = tokio::select! {
            c = incoming.accept() => c,
            _ = until_stopped.wait_for(|s| *s) => return,
        };
        let router = router.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let activity = Arc::new(Activity::default());
            let opened = tokio::time::Instant::now();
            let busy = activity.clone();
            let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let guard = busy.begin();
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(axum::extract::ConnectInfo(info.clone()));
                let answer = tower::ServiceExt::oneshot(router.clone(), req);
                async move {
                    // The request is in flight until its answer's body is done (a watch's too).
                    let answer = answer.await?;
                    Ok::<_, std::convert::Infallible>(answer.map(|body| {
                        axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |f| {
                            let _ = &guard;
                            f
                        }))
                    }))
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
            builder.http2().timer(TokioTimer::new()).max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            tokio::pin!(conn);
            let stop = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            // A connection that never sends a request (one that stops after TLS, or never sends
            // HTTP/2's preface) is closed after the header timeout; any other once idle.
            let idle = async {
                loop {
                    let never_asked = activity.last.lock().is_none();
                    let bound = if never_asked { HEADER_READ_TIMEOUT } else { IDLE_TIMEOUT };
                    if activity.idle_for(bound, opened) {
                        return;
                    }
                    // Checked again once the bound could have passed: after the last request
                    // ended, or — a request (a watch) in flight — a whole bound from now, so a
                    // long watch costs one wake-up per bound, not one a second.
                    let now = tokio::time::Instant::now();
                    let busy = activity.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0;
                    let since = if busy { now } else { activity.last.lock().unwrap_or(opened) };
                    tokio::time::sleep_until((since + bound).max(now + Duration::from_secs(1))).await;
                }
            };
            tokio::select! {
                _ = conn.as_mut() => {}
                () = idle => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn.as_mut()).await;
                }
                () = stop => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// Authentication and authorization as the flags configure them.
fn auth(
    flags: &Flags,
    client_ca: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    signing_key: &str,
    signer: Arc<crate::control::tokens::Signer>,
) -> Result<crate::auth::Auth> {
    use crate::auth::authn::{self, Key};
    let authz = crate::auth::authz::Authorizer::parse(&flags.authorization_mode)
        .map_err(|e| anyhow::anyhow!("--authorization-mode: {e}"))?;
    let mut keys =
        Key::from_pem(signing_key).map_err(|e| anyhow::anyhow!("--service-account-signing-key-file: {e}"))?;
    for f in &flags.service_account_key_file {
        let pem = std::fs::read_to_string(f).with_context(|| format!("--service-account-key-file: {}", f.display()))?;
        keys.extend(
            Key::from_pem(&pem).map_err(|e| anyhow::anyhow!("--service-account-key-file {}: {e}", f.display()))?,
        );
    }
    let issuers: Vec<String> = flags.service_account_issuer.iter().filter(|i| !i.is_empty()).cloned().collect();
    if issuers.is_empty() {
        bail!("--service-account-issuer: at least one issuer is required");
    }
    let audiences = if flags.api_audiences.is_empty() { issuers.clone() } else { flags.api_audiences.clone() };
    let tokens = match &flags.token_auth_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("--token-auth-file: {}", f.display()))?;
            authn::token_file(&text).map_err(|e| anyhow::anyhow!("token file '{}' {e}", f.display()))?
        }
        None => Default::default(),
    };
    let max = flags.service_account_max_token_expiration.as_secs() as i64;
    Ok(crate::auth::Auth {
        authn: authn::Authenticator {
            client_ca: Some(client_ca),
            tokens,
            service_accounts: authn::ServiceAccounts { keys, issuers: issuers.clone(), audiences },
            anonymous: flags.anonymous_auth,
        },
        authz,
        signer: Some(signer),
        issuer: issuers[0].clone(),
        max_token_expiration: if max == 0 { i64::MAX } else { max },
    })
}

/// The priority classes kube-apiserver makes at start.
const SYSTEM_PRIORITY_CLASSES: [fn() -> serde_json::Value; 2] = [
    || {
        serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "system-node-critical"}, "value": 2000001000,
            "description": "Used for system critical pods that must not be moved from their current node."})
    },
    || {
        serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "system-cluster-critical"}, "value": 2000000000,
            "description": "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."})
    },
];

/// The namespaces kube-apiserver makes at start.
const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Starts keel-apiserver with `flags`: the store, then HTTPS; returns once it serves.
pub async fn start(flags: &Flags) -> Result<Running> {
    std::fs::create_dir_all(&flags.data_dir)?;
    let controllers = crate::control::enabled(&flags.controllers).map_err(|e| anyhow::anyhow!("--controllers: {e}"))?;
    let ranges = crate::services::Ranges::parse(&flags.service_cluster_ip_range, &flags.service_node_port_range)
        .map_err(|e| anyhow::anyhow!("--service-cluster-ip-range/--service-node-port-range: {e}"))?;
    let mut tasks = Vec::new();
    let (member, urls) = if flags.etcd_servers.is_empty() {
        let (m, url, serving) = embedded_member(&flags.data_dir).await?;
        tasks.push(serving);
        (Some(m), vec![url])
    } else {
        (None, flags.etcd_servers.clone())
    };
    let mut channels = Vec::new();
    for url in &urls {
        let endpoint = Endpoint::from_shared(url.clone()).with_context(|| format!("--etcd-servers: {url}"))?;
        channels.push(endpoint.connect_timeout(Duration::from_secs(3)).timeout(Duration::from_secs(30)).connect_lazy());
    }
    let prefix = flags.etcd_prefix.trim_end_matches('/').to_string();
    let encryption = match &flags.encryption_provider_config {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("--encryption-provider-config: {}", f.display()))?;
            crate::storage::encryption::Encryption::parse(&text, &prefix)
                .map_err(|e| anyhow::anyhow!("--encryption-provider-config {}: {e}", f.display()))?
        }
        None => Default::default(),
    };
    let storage = Storage::with_endpoints(channels).with_encryption(encryption);
    let version = store_version(&storage, &urls).await?;
    // Consistent reads come from the watch caches where the store's progress notifications can
    // be trusted: the member in this process, or an etcd kube trusts.
    let consistent = member.is_some() || progress_trusted(&version);
    let (caches, feeding) = Caches::start(&storage, &prefix, consistent);
    tasks.extend(feeding);

    let listener = tokio::net::TcpListener::bind((flags.bind_address, flags.secure_port)).await?;
    let addr = listener.local_addr()?;
    let host =
        if flags.bind_address.is_unspecified() { "127.0.0.1".to_string() } else { flags.bind_address.to_string() };
    let server_url = format!("https://{}", SocketAddr::new(host.parse()?, addr.port()));
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if !hosts.contains(&host) {
        hosts.push(host.clone());
    }
    let made = pki(&flags.data_dir, &hosts)?;
    let serving = match (&flags.tls_cert_file, &flags.tls_private_key_file) {
        (Some(c), Some(k)) => (std::fs::read_to_string(c)?, std::fs::read_to_string(k)?),
        (None, None) => made.serving.clone(),
        _ => bail!("--tls-cert-file and --tls-private-key-file must be given together"),
    };
    let client_ca = match &flags.client_ca_file {
        Some(f) => std::fs::read_to_string(f)?,
        None => made.ca.clone(),
    };
    let ca_verifier = client_verifier(&client_ca)?;
    let tls = tls_config((&serving.0, &serving.1), ca_verifier.clone())?;
    let kubeconfig_path = flags.data_dir.join("kubeconfig");
    let ca_for_clients = if flags.tls_cert_file.is_some() { String::new() } else { made.ca.clone() };
    write_private(&kubeconfig_path, kubeconfig(&server_url, &ca_for_clients, &made.admin).as_bytes())?;

    let sa_key = match &flags.service_account_signing_key_file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("--service-account-signing-key-file: {}", f.display()))?,
        None => service_account_key(&flags.data_dir)?,
    };
    let token_ca = if ca_for_clients.is_empty() { client_ca.clone() } else { ca_for_clients.clone() };
    let signer = Arc::new(
        crate::control::tokens::Signer::from_pem(&sa_key, token_ca)
            .map_err(|e| anyhow::anyhow!("--service-account-signing-key-file: {e}"))?,
    );
    let auth = auth(flags, ca_verifier, &sa_key, signer.clone())?;
    let admission =
        crate::admission::Chain::of_flags(&flags.enable_admission_plugins, &flags.disable_admission_plugins)
            .map_err(|e| anyhow::anyhow!("--enable-admission-plugins/--disable-admission-plugins: {e}"))?;
    let api = Api {
        storage: storage.clone(),
        prefix,
        caches,
        ranges: std::sync::Arc::new(ranges),
        events: std::sync::Arc::new(crate::storage::Leases::new(flags.event_ttl)),
        proxies: Default::default(),
        auth: Arc::new(auth),
        admission: Arc::new(admission),
        crds: Default::default(),
    };

    let audit = match (&flags.audit_policy_file, &flags.audit_log_path) {
        (Some(policy), Some(path)) => {
            let text = std::fs::read_to_string(policy)
                .with_context(|| format!("--audit-policy-file: {}", policy.display()))?;
            let out: Box<dyn std::io::Write + Send> = if path == "-" {
                Box::new(std::io::stdout())
            } else {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("--audit-log-path: {path}"))?;
                Box::new(std::io::BufWriter::new(f))
            };
            let audit = crate::audit::Audit::new(&text, out)
                .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", policy.display()))?;
            Some(Arc::new(audit))
        }
        _ => None,
    };
    let shared = Arc::new(Shared { api: api.clone(), address: format!("{host}:{}", addr.port()), audit });
    // The store may still be starting (an etcd that listens before it serves): retried.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for ns in SYSTEM_NAMESPACES {
        while let Err(s) = crate::rest::ensure_namespace(&api, ns).await {
            if tokio::time::Instant::now() > deadline {
                bail!("creating namespace {ns}: {}", s.message);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The `kubernetes` service, which holds the range's first address, and its endpoints: this
    // apiserver's address and port.
    let kubernetes = crate::services::kubernetes_service(&api.ranges, addr.port());
    if let Err(s) = crate::rest::reconcile(&api, "services", Some("default"), kubernetes).await {
        bail!("keeping the kubernetes service: {}", s.message);
    }
    let endpoints = crate::services::kubernetes_endpoints(&host, addr.port());
    if let Err(s) = crate::rest::reconcile(&api, "endpoints", Some("default"), endpoints).await {
        bail!("keeping the kubernetes service's endpoints: {}", s.message);
    }
    let slice = crate::services::kubernetes_endpoint_slice(&host, addr.port());
    if let Err(s) = crate::rest::reconcile(&api, "endpointslices", Some("default"), slice).await {
        bail!("keeping the kubernetes service's endpoint slice: {}", s.message);
    }
    if !api.caches.ready(Duration::from_secs(60)).await {
        bail!("the watch caches did not fill from the store within a minute");
    }
    for class in SYSTEM_PRIORITY_CLASSES {
        if let Err(s) = crate::rest::ensure(&api, "priorityclasses", None, class()).await {
            bail!("creating the system priority classes: {}", s.message);
        }
    }
    crate::auth::bootstrap::ensure(&api)
        .await
        .map_err(|s| anyhow::anyhow!("keeping the default RBAC policy: {}", s.message))?;
    tasks.extend(crate::crd::start(&api).await);
    let settings =
        crate::control::Settings { node_monitor_grace_period: flags.node_monitor_grace_period, signer: Some(signer) };
    tasks.extend(crate::control::start(&api, controllers, settings));
    tasks.extend(crate::control::kubelet::start(&api, flags.simulated_nodes));
    if !flags.etcd_compaction_interval.is_zero() {
        tasks.push(tokio::spawn(storage.clone().compact_every(flags.etcd_compaction_interval)));
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let incoming = keel_store::tls::Incoming::new(listener, Some(&keel_store::tls::Side::serving(Arc::new(tls))))?;
    tasks.push(tokio::spawn(serve(incoming, server::router(shared), stopped)));
    tracing::info!(%addr, kubeconfig = %kubeconfig_path.display(), "keel-apiserver serving");
    Ok(Running { addr, kubeconfig: kubeconfig_path, api, stop, tasks, member })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_trusted_from_the_etcd_versions_kube_requires() {
        assert!(!progress_trusted("3.4.23"));
        assert!(progress_trusted("3.4.31"));
        assert!(!progress_trusted("3.5.12"));
        assert!(progress_trusted("3.5.13"));
        assert!(progress_trusted("3.6.0"));
        assert!(!progress_trusted(""));
    }

    #[test]
    fn a_flag_given_twice_takes_its_last_value() {
        let f = <Flags as clap::Parser>::parse_from([
            "keel-apiserver",
            "--data-dir",
            "a",
            "--secure-port=1",
            "--data-dir=b",
        ]);
        assert_eq!((f.data_dir, f.secure_port), (PathBuf::from("b"), 1));
        assert!(<Flags as clap::Parser>::try_parse_from(["keel-apiserver", "--no-such-flag"]).is_err());
    }

    #[test]
    fn durations_parse_as_go_parses_them() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("5"), Err("time: invalid duration \"5\"".to_string()));
        assert!(parse_duration("").is_err() && parse_duration("m").is_err());
    }
}
