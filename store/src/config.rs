//! The member's configuration, parsed from etcd's own flag names (and `ETCD_*` environment
//! variables, as etcd reads them), so an etcd command line starts keel unchanged.
//!
//! Every etcd 3.5 flag is accepted. Those keel acts on fill [`Config`]; the rest are collected in
//! [`Config::ignored`] and named in one warning at start-up. A flag etcd does not have is an error.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Command};

/// Whether this member bootstraps a new cluster or joins an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// A member's configuration. Defaults are etcd's, except the data dir (`<name>.keel`) and the
/// client listener (`http://127.0.0.1:2379`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// Where the database lives (`--data-dir`).
    pub data_dir: PathBuf,
    /// URLs to serve clients on: gRPC, `/health`, `/version` on each.
    pub listen_client_urls: Vec<String>,
    /// Client URLs advertised to the cluster.
    pub advertise_client_urls: Vec<String>,
    /// URLs to listen on for peer traffic.
    pub listen_peer_urls: Vec<String>,
    /// This member's peer URLs as the cluster knows them; they and the token derive the member id.
    pub initial_advertise_peer_urls: Vec<String>,
    /// `name=peerURL` for every member of the initial cluster.
    pub initial_cluster: Vec<(String, String)>,
    pub initial_cluster_state: ClusterState,
    /// Cluster token: part of every member id, so separate clusters never mix.
    pub initial_cluster_token: String,
    /// Largest request accepted, in bytes (etcd's 1.5 MiB default).
    pub max_request_bytes: u64,
    /// Most operations in one txn branch (etcd's 128 default).
    pub max_txn_ops: usize,
    /// Committed entries between Raft snapshots.
    pub snapshot_count: u64,
    /// Log entries kept behind a snapshot for slow followers; older ones are purged.
    pub snapshot_catchup_entries: u64,
    /// Raft heartbeat interval in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// Raft election timeout in milliseconds.
    pub election_timeout_ms: u64,
    /// How often watchers that asked for progress notifications get one.
    pub watch_progress_notify_interval: std::time::Duration,
    /// Backend size at which the NOSPACE alarm is raised; `None` when disabled.
    pub quota_backend_bytes: Option<u64>,
    /// Extra listeners serving only `/metrics` and `/health`.
    pub listen_metrics_urls: Vec<String>,
    /// debug, info, warn, error, panic or fatal.
    pub log_level: String,
    /// How long an auth token lives after its issue or last use (`--auth-token-ttl`).
    pub auth_token_ttl: std::time::Duration,
    /// bcrypt's cost for password hashes (`--bcrypt-cost`, 4 to 31).
    pub bcrypt_cost: u32,
    /// Client-side TLS: `--cert-file`, `--key-file`, `--trusted-ca-file`, `--client-cert-auth`,
    /// `--auto-tls` (for `https://` client and metrics URLs).
    pub client_tls: TlsFlags,
    /// Peer-side TLS: the `--peer-*` twins of the client-side flags (for `https://` peer URLs).
    pub peer_tls: TlsFlags,
    /// etcd flags that were given but that keel does not act on (yet), for the start-up warning.
    pub ignored: Vec<String>,
}

/// One side's TLS flags (client or peer), as etcd's `TLSInfo`; [`crate::tls`] acts on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFlags {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// CA whose signature a client certificate needs; setting it requires one at the handshake.
    pub trusted_ca_file: Option<PathBuf>,
    /// Require a client certificate the trusted CA signed (and, client side, take its common
    /// name as the user when auth is on).
    pub client_cert_auth: bool,
    /// A self-signed certificate when none is given.
    pub auto_tls: bool,
}

impl TlsFlags {
    /// Whether the side has (or makes) a certificate to serve TLS with.
    pub fn serves_tls(&self) -> bool {
        (self.cert_file.is_some() && self.key_file.is_some()) || self.auto_tls
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::parse_from(["keel"]).expect("defaults parse")
    }
}

/// etcd's default backend quota (2 GiB).
pub const DEFAULT_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// Flags keel acts on: (name, default, help).
const ACTED: &[(&str, &str, &str)] = &[
    ("name", "default", "Human-readable name for this member."),
    ("data-dir", "", "Path to the data directory (default: <name>.keel)."),
    ("listen-client-urls", "http://127.0.0.1:2379", "List of URLs to listen on for client traffic."),
    ("advertise-client-urls", "http://localhost:2379", "List of this member's client URLs to advertise."),
    ("listen-peer-urls", "http://localhost:2380", "List of URLs to listen on for peer traffic."),
    ("initial-advertise-peer-urls", "http://localhost:2380", "List of this member's peer URLs to advertise."),
    (
        "initial-cluster",
        "",
        "Initial cluster configuration for bootstrapping (default: <name>=<advertised peer URLs>).",
    ),
    ("initial-cluster-state", "new", "Initial cluster state ('new' or 'existing')."),
    ("initial-cluster-token", "etcd-cluster", "Initial cluster token for the cluster during bootstrap."),
    ("max-request-bytes", "1572864", "Maximum client request size in bytes the server will accept."),
    ("max-txn-ops", "128", "Maximum number of operations permitted in a transaction."),
    ("snapshot-count", "100000", "Number of committed transactions to trigger a snapshot."),
    (
        "experimental-snapshot-catchup-entries",
        "5000",
        "Number of entries for a slow follower to catch up after compacting the raft log entries.",
    ),
    ("heartbeat-interval", "100", "Time (in milliseconds) of a heartbeat interval."),
    ("election-timeout", "1000", "Time (in milliseconds) for an election to timeout."),
    ("log-level", "info", "Configures log level: debug, info, warn, error, panic, or fatal."),
    ("experimental-watch-progress-notify-interval", "10m0s", "Duration of periodic watch progress notifications."),
    (
        "quota-backend-bytes",
        "0",
        "Raise an alarm when the backend size exceeds the given quota (0 defaults to 2 GiB; negative disables).",
    ),
    ("listen-metrics-urls", "", "List of additional URLs to listen on that serve /metrics and /health."),
    ("auth-token", "simple", "Specify auth token specific options (keel serves 'simple' tokens)."),
    ("auth-token-ttl", "300", "The lifetime in seconds of the auth token."),
    ("bcrypt-cost", "10", "Specify bcrypt algorithm cost factor for auth password hashing."),
    ("cert-file", "", "Path to the client server TLS cert file."),
    ("key-file", "", "Path to the client server TLS key file."),
    ("trusted-ca-file", "", "Path to the client server TLS trusted CA cert file."),
    ("peer-cert-file", "", "Path to the peer server TLS cert file."),
    ("peer-key-file", "", "Path to the peer server TLS key file."),
    ("peer-trusted-ca-file", "", "Path to the peer server TLS trusted CA file."),
];

/// Boolean flags keel acts on (`--flag` or `--flag=true|false`): (name, help).
const ACTED_BOOL: &[(&str, &str)] = &[
    ("client-cert-auth", "Enable client cert authentication."),
    ("auto-tls", "Client TLS using generated certificates."),
    ("peer-client-cert-auth", "Enable peer client cert authentication."),
    ("peer-auto-tls", "Peer TLS using generated certificates."),
];

/// etcd 3.5 flags taking a value that keel accepts but does not act on yet.
const IGNORED_VALUED: &[&str] = &[
    "auto-compaction-mode",
    "auto-compaction-retention",
    "backend-batch-interval",
    "backend-batch-limit",
    "backend-bbolt-freelist-type",
    "cipher-suites",
    "client-cert-allowed-hostname",
    "client-cert-file",
    "client-crl-file",
    "client-key-file",
    "config-file",
    "cors",
    "discovery",
    "discovery-fallback",
    "discovery-proxy",
    "discovery-srv",
    "discovery-srv-name",
    "experimental-backend-bbolt-freelist-type",
    "experimental-bootstrap-defrag-threshold-megabytes",
    "experimental-compact-hash-check-time",
    "experimental-compaction-batch-limit",
    "experimental-compaction-sleep-interval",
    "experimental-corrupt-check-time",
    "experimental-distributed-tracing-address",
    "experimental-distributed-tracing-instance-id",
    "experimental-distributed-tracing-sampling-rate",
    "experimental-distributed-tracing-service-name",
    "experimental-downgrade-check-time",
    "experimental-enable-v2v3",
    "experimental-warning-apply-duration",
    "grpc-keepalive-interval",
    "grpc-keepalive-min-time",
    "grpc-keepalive-timeout",
    "host-whitelist",
    "log-outputs",
    "log-package-levels",
    "log-rotation-config-json",
    "logger",
    "max-concurrent-streams",
    "max-snapshots",
    "max-wals",
    "metrics",
    "peer-cert-allowed-cn",
    "peer-cert-allowed-hostname",
    "peer-client-cert-file",
    "peer-client-key-file",
    "peer-crl-file",
    "proxy",
    "proxy-dial-timeout",
    "proxy-failure-wait",
    "proxy-read-timeout",
    "proxy-refresh-interval",
    "proxy-write-timeout",
    "raft-read-timeout",
    "raft-write-timeout",
    "self-signed-cert-validity",
    "tls-max-version",
    "tls-min-version",
    "v2-deprecation",
    "wal-dir",
];

/// etcd 3.5 boolean flags (`--flag` or `--flag=true|false`) keel accepts but does not act on yet.
const IGNORED_BOOL: &[&str] = &[
    "debug",
    "enable-grpc-gateway",
    "enable-log-rotation",
    "enable-pprof",
    "enable-v2",
    "experimental-compact-hash-check-enabled",
    "experimental-enable-distributed-tracing",
    "experimental-enable-lease-checkpoint",
    "experimental-enable-lease-checkpoint-persist",
    "experimental-initial-corrupt-check",
    "experimental-memory-mlock",
    "experimental-peer-skip-client-san-verification",
    "experimental-stop-grpc-service-on-defrag",
    "experimental-txn-mode-write-with-shared-buffer",
    "force-new-cluster",
    "initial-election-tick-advance",
    "pre-vote",
    "socket-reuse-address",
    "socket-reuse-port",
    "strict-reconfig-check",
    "unsafe-no-fsync",
];

/// The environment variable etcd reads for a flag: `ETCD_` + upper case, dashes as underscores.
fn env_name(flag: &str) -> String {
    format!("ETCD_{}", flag.to_uppercase().replace('-', "_"))
}

fn command() -> Command {
    let mut cmd = Command::new("keel")
        .about("keel: an etcd-compatible, Raft-replicated key-value store. Takes etcd's flags.")
        .version(env!("CARGO_PKG_VERSION"))
        .disable_version_flag(true)
        .arg(Arg::new("version").long("version").action(ArgAction::SetTrue).help("Print the version and exit."));
    for (name, default, help) in ACTED {
        let mut a = Arg::new(*name).long(*name).env(env_name(name)).help(*help).num_args(1);
        if !default.is_empty() {
            a = a.default_value(*default);
        }
        cmd = cmd.arg(a);
    }
    for name in IGNORED_VALUED {
        cmd = cmd.arg(Arg::new(*name).long(*name).env(env_name(name)).num_args(1).hide(true));
    }
    let boolean = |name: &'static str| {
        Arg::new(name).long(name).env(env_name(name)).num_args(0..=1).require_equals(true).default_missing_value("true")
    };
    for (name, help) in ACTED_BOOL {
        cmd = cmd.arg(boolean(name).help(*help));
    }
    for name in IGNORED_BOOL {
        cmd = cmd.arg(boolean(name).hide(true));
    }
    cmd
}

/// A boolean flag as Go's `strconv.ParseBool` reads it; absent is false.
fn flag(m: &ArgMatches, name: &str) -> Result<bool, String> {
    match m.get_one::<String>(name).map(String::as_str) {
        None => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(format!("invalid boolean value {other:?} for -{name}: parse error")),
    }
}

fn path(m: &ArgMatches, name: &str) -> Option<PathBuf> {
    m.get_one::<String>(name).filter(|s| !s.is_empty()).map(PathBuf::from)
}

/// One side's TLS flags; `prefix` is `""` (client) or `"peer-"`.
fn tls_flags(m: &ArgMatches, prefix: &str) -> Result<TlsFlags, String> {
    Ok(TlsFlags {
        cert_file: path(m, &format!("{prefix}cert-file")),
        key_file: path(m, &format!("{prefix}key-file")),
        trusted_ca_file: path(m, &format!("{prefix}trusted-ca-file")),
        client_cert_auth: flag(m, &format!("{prefix}client-cert-auth"))?,
        auto_tls: flag(m, &format!("{prefix}auto-tls"))?,
    })
}

/// etcd's refusal of an `https://` URL on a side without a certificate.
fn check_https(urls: &[String], tls: &TlsFlags, what: &str, flags: &str) -> Result<(), String> {
    match urls.iter().find(|u| u.starts_with("https://")) {
        Some(u) if !tls.serves_tls() => {
            Err(format!("TLS key/cert ({flags}) must be provided for {what} url {u} with HTTPS scheme"))
        }
        _ => Ok(()),
    }
}

fn list(m: &ArgMatches, name: &str) -> Vec<String> {
    m.get_one::<String>(name)
        .map(|s| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect())
        .unwrap_or_default()
}

fn number<T: std::str::FromStr>(m: &ArgMatches, name: &str) -> Result<T, String> {
    let raw = m.get_one::<String>(name).expect("has a default");
    raw.parse().map_err(|_| format!("invalid value {raw:?} for flag --{name}: parse error"))
}

/// What the command line asked for.
pub enum Invocation {
    Run(Box<Config>),
    PrintVersion,
}

/// gRPC's allowance on top of `--max-request-bytes` for a received message (etcd's 512 KiB).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// Request limits enforced at the gRPC edge.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_bytes: u64,
    pub max_txn_ops: usize,
}

impl Limits {
    /// The largest message received (and the size at which watch responses are fragmented):
    /// the request limit plus gRPC's overhead allowance, as etcd sets it.
    pub fn max_message_bytes(&self) -> usize {
        (self.max_request_bytes as usize).saturating_add(GRPC_OVERHEAD_BYTES)
    }
}

impl Config {
    /// The request limits these flags set.
    pub fn limits(&self) -> Limits {
        Limits { max_request_bytes: self.max_request_bytes, max_txn_ops: self.max_txn_ops }
    }

    /// Parses an etcd-style command line (argv[0] first).
    pub fn parse_from<I, T>(args: I) -> Result<Config, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        match Self::invocation_from(args)? {
            Invocation::Run(c) => Ok(*c),
            Invocation::PrintVersion => Err("--version given".into()),
        }
    }

    /// Parses an etcd-style command line, also recognising `--version`.
    pub fn invocation_from<I, T>(args: I) -> Result<Invocation, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let m = command().try_get_matches_from(args).map_err(|e| e.to_string())?;
        if m.get_flag("version") {
            return Ok(Invocation::PrintVersion);
        }
        let name = m.get_one::<String>("name").cloned().unwrap_or_default();
        let data_dir = match m.get_one::<String>("data-dir") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(format!("{name}.keel")),
        };
        let initial_advertise_peer_urls = list(&m, "initial-advertise-peer-urls");
        let initial_cluster = match m.get_one::<String>("initial-cluster") {
            Some(s) if !s.is_empty() => parse_initial_cluster(s)?,
            _ => initial_advertise_peer_urls.iter().map(|u| (name.clone(), u.clone())).collect(),
        };
        let initial_cluster_state = match m.get_one::<String>("initial-cluster-state").map(String::as_str) {
            Some("new") | None => ClusterState::New,
            Some("existing") => ClusterState::Existing,
            Some(other) => {
                return Err(format!(
                    "invalid value {other:?} for flag --initial-cluster-state: must be one of new, existing"
                ))
            }
        };
        let log_level = m.get_one::<String>("log-level").cloned().unwrap_or_default();
        if !["debug", "info", "warn", "error", "panic", "fatal"].contains(&log_level.as_str()) {
            return Err(format!("invalid value {log_level:?} for flag --log-level"));
        }
        let auth_token = m.get_one::<String>("auth-token").cloned().unwrap_or_default();
        match auth_token.split(',').next().unwrap_or_default() {
            "simple" => {}
            "jwt" => return Err("--auth-token jwt: keel issues simple tokens only (use --auth-token simple)".into()),
            other => return Err(format!("invalid value {other:?} for flag --auth-token: unknown token type")),
        }
        let bcrypt_cost: u32 = number(&m, "bcrypt-cost")?;
        if !(keel_auth::MIN_BCRYPT_COST..=keel_auth::MAX_BCRYPT_COST).contains(&bcrypt_cost) {
            return Err(format!(
                "invalid value {bcrypt_cost} for flag --bcrypt-cost: must be between {} and {}",
                keel_auth::MIN_BCRYPT_COST,
                keel_auth::MAX_BCRYPT_COST
            ));
        }
        let listen_client_urls = list(&m, "listen-client-urls");
        let listen_peer_urls = list(&m, "listen-peer-urls");
        let listen_metrics_urls = list(&m, "listen-metrics-urls");
        let client_tls = tls_flags(&m, "")?;
        let peer_tls = tls_flags(&m, "peer-")?;
        check_https(&listen_client_urls, &client_tls, "client", "--cert-file, --key-file")?;
        check_https(&listen_metrics_urls, &client_tls, "metrics", "--cert-file, --key-file")?;
        check_https(&listen_peer_urls, &peer_tls, "peer", "--peer-cert-file, --peer-key-file")?;
        let mut ignored: Vec<String> = IGNORED_VALUED
            .iter()
            .chain(IGNORED_BOOL)
            .filter(|n| m.value_source(n).is_some_and(|s| s != clap::parser::ValueSource::DefaultValue))
            .map(|n| format!("--{n}"))
            .collect();
        ignored.sort();
        Ok(Invocation::Run(Box::new(Config {
            name,
            data_dir,
            listen_client_urls,
            advertise_client_urls: list(&m, "advertise-client-urls"),
            listen_peer_urls,
            initial_advertise_peer_urls,
            initial_cluster,
            initial_cluster_state,
            initial_cluster_token: m.get_one::<String>("initial-cluster-token").cloned().unwrap_or_default(),
            max_request_bytes: number(&m, "max-request-bytes")?,
            max_txn_ops: number(&m, "max-txn-ops")?,
            snapshot_count: number(&m, "snapshot-count")?,
            snapshot_catchup_entries: number(&m, "experimental-snapshot-catchup-entries")?,
            heartbeat_interval_ms: number(&m, "heartbeat-interval")?,
            election_timeout_ms: number(&m, "election-timeout")?,
            watch_progress_notify_interval: duration(&m, "experimental-watch-progress-notify-interval")?,
            quota_backend_bytes: match number::<i64>(&m, "quota-backend-bytes")? {
                q if q < 0 => None,
                0 => Some(DEFAULT_QUOTA_BYTES),
                q => Some(q as u64),
            },
            listen_metrics_urls,
            log_level,
            auth_token_ttl: std::time::Duration::from_secs(number(&m, "auth-token-ttl")?),
            bcrypt_cost,
            client_tls,
            peer_tls,
            ignored,
        })))
    }
}

fn duration(m: &ArgMatches, name: &str) -> Result<std::time::Duration, String> {
    let raw = m.get_one::<String>(name).expect("has a default");
    parse_go_duration(raw)
        .ok_or_else(|| format!("invalid value {raw:?} for flag --{name}: time: invalid duration {raw:?}"))
}

/// Parses a Go duration (`10m0s`, `1.5s`, `300ms`, `1h2m`); signs are refused.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    if s == "0" {
        return Some(std::time::Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num.parse().ok()?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = tail;
    }
    Some(std::time::Duration::from_secs_f64(total))
}

fn parse_initial_cluster(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .map(|part| {
            let (n, u) = part
                .trim()
                .split_once('=')
                .ok_or_else(|| format!("invalid value {s:?} for flag --initial-cluster: expected name=url"))?;
            Ok((n.to_string(), u.to_string()))
        })
        .collect()
}

/// Resolves an `http://host:port` or `https://host:port` URL to a socket address.
pub fn url_addr(url: &str) -> Result<SocketAddr, String> {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return Err(format!("{url}: URL scheme must be http or https"));
    };
    let hostport = rest.trim_end_matches('/');
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .find(|a| a.is_ipv4())
        .or_else(|| hostport.to_socket_addrs().ok().and_then(|mut a| a.next()))
        .ok_or_else(|| format!("{url}: no address"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn go_durations() {
        use std::time::Duration;
        assert_eq!(super::parse_go_duration("10m0s"), Some(Duration::from_secs(600)));
        assert_eq!(super::parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(super::parse_go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(super::parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(super::parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(super::parse_go_duration("10"), None);
        assert_eq!(super::parse_go_duration("-1s"), None);
        assert_eq!(super::parse_go_duration(""), None);
    }

    use super::*;

    #[test]
    fn defaults_are_a_single_local_member() {
        let c = Config::default();
        assert_eq!(c.name, "default");
        assert_eq!(c.data_dir, PathBuf::from("default.keel"));
        assert_eq!(c.listen_client_urls, vec!["http://127.0.0.1:2379"]);
        assert_eq!(c.initial_cluster, vec![("default".to_string(), "http://localhost:2380".to_string())]);
        assert_eq!(c.max_request_bytes, 1572864);
        assert_eq!(c.max_txn_ops, 128);
        assert!(c.ignored.is_empty());
    }

    #[test]
    fn etcd_flags_parse_and_unknown_flags_fail() {
        let c = Config::parse_from([
            "keel",
            "--name",
            "n1",
            "--data-dir=/tmp/x",
            "--initial-cluster",
            "n1=http://127.0.0.1:2380",
            "--max-txn-ops",
            "7",
            "--auto-compaction-retention",
            "1",
            "--enable-pprof",
        ])
        .unwrap();
        assert_eq!(c.name, "n1");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.max_txn_ops, 7);
        assert_eq!(c.ignored, vec!["--auto-compaction-retention", "--enable-pprof"]);
        assert!(Config::parse_from(["keel", "--no-such-flag", "1"]).is_err());
        assert!(Config::parse_from(["keel", "--max-txn-ops", "many"]).is_err());
        assert!(Config::parse_from(["keel", "--initial-cluster-state", "old"]).is_err());
    }

    #[test]
    fn tls_flags_parse_and_https_needs_a_certificate() {
        let c = Config::parse_from([
            "keel",
            "--listen-client-urls=https://127.0.0.1:2379",
            "--cert-file=/c.pem",
            "--key-file",
            "/k.pem",
            "--trusted-ca-file=/ca.pem",
            "--client-cert-auth",
            "--peer-auto-tls=true",
            "--peer-client-cert-auth=false",
        ])
        .unwrap();
        assert_eq!(c.client_tls.cert_file, Some(PathBuf::from("/c.pem")));
        assert_eq!(c.client_tls.key_file, Some(PathBuf::from("/k.pem")));
        assert_eq!(c.client_tls.trusted_ca_file, Some(PathBuf::from("/ca.pem")));
        assert!(c.client_tls.client_cert_auth && !c.client_tls.auto_tls);
        assert!(c.peer_tls.auto_tls && !c.peer_tls.client_cert_auth && c.peer_tls.cert_file.is_none());
        assert!(c.ignored.is_empty());
        let e = Config::parse_from(["keel", "--listen-client-urls=https://127.0.0.1:2379"]).unwrap_err();
        assert_eq!(
            e,
            "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:2379 with HTTPS scheme"
        );
        let e = Config::parse_from(["keel", "--listen-peer-urls=https://127.0.0.1:2380", "--cert-file=/c.pem"]);
        assert!(e.unwrap_err().contains("(--peer-cert-file, --peer-key-file) must be provided for peer url"));
        assert!(Config::parse_from(["keel", "--listen-client-urls=https://127.0.0.1:2379", "--auto-tls"]).is_ok());
        assert!(Config::parse_from(["keel", "--auto-tls=maybe"]).is_err());
    }

    #[test]
    fn urls_resolve() {
        assert_eq!(url_addr("http://127.0.0.1:2379").unwrap(), "127.0.0.1:2379".parse().unwrap());
        assert_eq!(url_addr("https://127.0.0.1:2379").unwrap(), "127.0.0.1:2379".parse().unwrap());
        assert!(url_addr("unix://keel.sock").is_err());
    }
}
