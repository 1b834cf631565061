//! Shared support for keel's integration tests: start a real etcd or a keel process with the very
//! same etcd command-line flags, wait until it serves, talk to it over gRPC, restart it on the same
//! data directory, and make sure it is gone when the test ends.
//!
//! A [`Server`] owns its child process and a temporary directory holding the data dir and the
//! server's combined stdout/stderr (`server.log`). Dropping the handle kills the process (SIGKILL),
//! reaps it and removes the directory — also when the test panics, in which case the tail of the
//! server log is printed first. As a second line of defence the child gets `PR_SET_PDEATHSIG`, so
//! it dies with the thread that spawned it if the test process is killed outright. Spawn servers
//! from the test's own thread (as `#[tokio::test]` does), never from `spawn_blocking`, whose
//! threads come and go.
//!
//! Ports are picked by binding `127.0.0.1:0` (both ports held at once, so they differ) and
//! released just before the spawn. Should another process grab one in between, the start is
//! retried with fresh ports.
//!
//! `KEEL_DIFF_AGAINST=etcd` makes [`Kind::under_test`] a second etcd instead of keel: the
//! differential tests then compare etcd with etcd, which must show no difference. That validates
//! the harness itself.

#![allow(dead_code)]

pub mod etcdctl;
pub mod pki;

use std::fs::OpenOptions;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::{RangeRequest, StatusRequest};
use tonic::transport::{Channel, Endpoint};

/// How long a server may take from spawn to answering requests.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// Per-request deadline on channels handed out by [`Server::channel`]: a hung server turns into a
/// `DeadlineExceeded` answer (and so into a reported difference) instead of a hung test.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Which binary a [`Server`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The real etcd (`etcd` on `PATH`; 3.4.23 in CI).
    Etcd,
    /// The `keel` binary built by cargo for this test.
    Keel,
}

impl Kind {
    /// The server compared against etcd: keel, or a second etcd when `KEEL_DIFF_AGAINST=etcd`.
    pub fn under_test() -> Kind {
        match std::env::var("KEEL_DIFF_AGAINST").as_deref() {
            Ok("etcd") => Kind::Etcd,
            Ok("keel") | Ok("") | Err(_) => Kind::Keel,
            Ok(other) => panic!("KEEL_DIFF_AGAINST={other}: expected `etcd` or `keel`"),
        }
    }

    pub fn program(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Keel => env!("CARGO_BIN_EXE_keel"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Keel => "keel",
        }
    }
}

/// Which of a test server's URLs are `https://`: the client URL, reached by the harness (its
/// readiness probe and [`Server::channel`]) with this TLS client configuration, and the peer URL.
#[derive(Clone, Default)]
pub struct Secure {
    pub client: Option<Arc<rustls::ClientConfig>>,
    pub peer: bool,
}

/// A running etcd or keel process on 127.0.0.1: a single-member cluster, or one member of a
/// cluster started with [`start_cluster`].
pub struct Server {
    kind: Kind,
    /// `--name`, and `--initial-cluster` (None: just this member).
    name: String,
    initial_cluster: Option<String>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    extra_args: Vec<String>,
    secure: Secure,
    child: Option<Child>,
    /// How many times the process was spawned (1 after start, +1 per restart).
    spawns: u32,
}

impl Server {
    /// Starts `kind` with etcd's standard single-member flags and waits until it serves.
    pub async fn start(kind: Kind) -> Server {
        Server::start_with(kind, &[]).await
    }

    /// Like [`Server::start`], appending `extra_args` (etcd flags) to the command line.
    pub async fn start_with(kind: Kind, extra_args: &[&str]) -> Server {
        Server::start_secure(kind, extra_args, Secure::default()).await
    }

    /// Like [`Server::start_with`], with the URLs `secure` makes `https://` (the TLS flags are
    /// the caller's, in `extra_args`).
    pub async fn start_secure(kind: Kind, extra_args: &[&str], secure: Secure) -> Server {
        const ATTEMPTS: u32 = 3;
        for attempt in 1..=ATTEMPTS {
            let mut server = unstarted(kind, "default", extra_args, &secure);
            server.spawn();
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(why) => {
                    let log = server.log();
                    // etcd says "bind: address already in use", keel "Address already in use".
                    let port_taken = log.to_lowercase().contains("address already in use");
                    if port_taken && attempt < ATTEMPTS {
                        eprintln!("{} lost its port to someone else, retrying", kind.name());
                        continue;
                    }
                    server.kill9();
                    panic!(
                        "{} did not start: {why}\ncommand: {}\n--- last lines of {} ---\n{}",
                        kind.name(),
                        server.command_line(),
                        server.log_path().display(),
                        tail(&log, 40)
                    );
                }
            }
        }
        unreachable!()
    }

    /// The member's `--name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the process is running (not killed by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process has exited by itself (it is then reaped).
    pub fn has_exited(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(_))) => {
                self.child = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `http(s)://127.0.0.1:<client port>`, the URL given to `--listen-client-urls`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.secure.client.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's combined stdout and stderr, over all its spawns.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn log(&self) -> String {
        std::fs::read(self.log_path()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The OS process id of the current child, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A fresh gRPC channel to the client URL (each request bounded by [`REQUEST_TIMEOUT`]).
    pub async fn channel(&self) -> Channel {
        self.connect(Duration::from_secs(5), REQUEST_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("connect to {} at {}: {e}", self.kind.name(), self.endpoint()))
    }

    /// A gRPC channel to the client URL, over TLS when it is `https://`.
    async fn connect(&self, connect_timeout: Duration, timeout: Duration) -> Result<Channel, String> {
        let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{}", self.client_port))
            .map_err(|e| e.to_string())?
            .connect_timeout(connect_timeout)
            .timeout(timeout);
        let connected = match self.secure.client.clone() {
            None => endpoint.connect().await,
            Some(tls) => {
                let port = self.client_port;
                endpoint
                    .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                        let tls = tls.clone();
                        async move { pki::dial(tls, port).await.map(hyper_util::rt::TokioIo::new) }
                    }))
                    .await
            }
        };
        connected.map_err(|e| format!("connect: {e}"))
    }

    pub async fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel().await)
    }

    pub async fn maintenance(&self) -> MaintenanceClient<Channel> {
        MaintenanceClient::new(self.channel().await)
    }

    /// Kills the process with SIGKILL (no chance to flush anything) and reaps it. Data dir and
    /// ports are kept for [`Server::respawn`].
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same data dir and ports and waits until it serves.
    pub async fn respawn(&mut self) {
        assert!(self.child.is_none(), "respawn while the server is running");
        self.spawn();
        if let Err(why) = self.wait_ready().await {
            self.kill9();
            panic!(
                "{} did not come back after restart #{}: {why}\n--- last lines of {} ---\n{}",
                self.kind.name(),
                self.spawns - 1,
                self.log_path().display(),
                tail(&self.log(), 40)
            );
        }
    }

    /// Stops the process with SIGTERM and waits (up to [`STARTUP_DEADLINE`]) until it exits:
    /// a graceful shutdown, which must not hang on open streams.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not stop within {STARTUP_DEADLINE:?} of SIGTERM", self.kind.name());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `kill -9` then respawn on the same data dir and ports: a crash and recovery.
    pub async fn restart(&mut self) {
        self.kill9();
        self.respawn().await;
    }

    fn args(&self) -> Vec<String> {
        let client = self.endpoint();
        let peer = self.peer_url();
        let mut args: Vec<String> = vec![
            "--name".into(),
            self.name.clone(),
            "--data-dir".into(),
            self.data_dir().display().to_string(),
            "--listen-client-urls".into(),
            client.clone(),
            "--advertise-client-urls".into(),
            client,
            "--listen-peer-urls".into(),
            peer.clone(),
            "--initial-advertise-peer-urls".into(),
            peer.clone(),
            "--initial-cluster".into(),
            self.initial_cluster.clone().unwrap_or_else(|| format!("{}={peer}", self.name)),
        ];
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn command_line(&self) -> String {
        let mut line = self.kind.program().to_string();
        for arg in self.args() {
            line.push(' ');
            line.push_str(&arg);
        }
        line
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new().create(true).append(true).open(self.log_path()).expect("open server log");
        self.spawns += 1;
        writeln!(&log, "=== keel test harness: spawn #{}: {}", self.spawns, self.command_line())
            .expect("write server log");
        let mut cmd = Command::new(self.kind.program());
        cmd.args(self.args())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log);
        // Flags must be the only configuration: drop ETCD_* variables a developer may have set.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", self.kind.program()));
        self.child = Some(child);
    }

    /// Polls until a linearizable Range succeeds, or Status reports a leader (the member is then
    /// able to serve writes), the child exits, or [`STARTUP_DEADLINE`] passes.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_DEADLINE;
        let mut last_error = String::from("no attempt made");
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("process exited ({status}) before serving; last probe: {last_error}"));
                }
            }
            match self.probe().await {
                Ok(()) => return Ok(()),
                Err(e) => last_error = e,
            }
            if Instant::now() >= deadline {
                return Err(format!("not serving after {STARTUP_DEADLINE:?}; last probe: {last_error}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- test failed; last lines of {} log ({}) ---\n{}",
                self.kind.name(),
                self.log_path().display(),
                tail(&self.log(), 30)
            );
        }
    }
}

impl Server {
    async fn probe(&self) -> Result<(), String> {
        probe(self.connect(Duration::from_millis(500), Duration::from_secs(2)).await?).await
    }
}

async fn probe(channel: Channel) -> Result<(), String> {
    let range = KvClient::new(channel.clone())
        .range(RangeRequest { key: "keel-test-readiness-probe".into(), ..Default::default() })
        .await;
    let range_err = match range {
        Ok(_) => return Ok(()),
        Err(status) => status,
    };
    match MaintenanceClient::new(channel).status(StatusRequest {}).await {
        Ok(resp) if resp.get_ref().leader != 0 => Ok(()),
        Ok(_) => Err(format!("Range: {range_err}; Status: no leader yet")),
        Err(status) => Err(format!("Range: {range_err}; Status: {status}")),
    }
}

/// A temporary directory and two free ports (client, peer) for a new server.
fn fresh_place(kind: Kind, tag: &str) -> (tempfile::TempDir, u16, u16) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("keel-test-{}-{tag}", kind.name()))
        .tempdir()
        .expect("create temp dir");
    let (client, peer) = free_port_pair();
    (dir, client, peer)
}

/// Two distinct free TCP ports on 127.0.0.1 (client, peer), released on return.
fn free_port_pair() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let ports = (a.local_addr().expect("local addr").port(), b.local_addr().expect("local addr").port());
    drop((a, b));
    ports
}

pub use keel_bench::server::die_with_parent;

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Polls `done` every `every` until it holds (true) or `deadline` passes (false).
pub async fn poll_until(deadline: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + deadline;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Starts an `n`-member cluster of `kind` (members `m1`..`mn`, etcd's bootstrap flags, fresh
/// ports) and waits until every member serves linearizable reads.
pub async fn start_cluster(kind: Kind, n: usize) -> Vec<Server> {
    start_cluster_with(kind, n, &[]).await
}

/// A member that is not running yet, named `name`, with fresh ports and `extra_args`.
fn unstarted(kind: Kind, name: &str, extra_args: &[&str], secure: &Secure) -> Server {
    let (dir, client_port, peer_port) = fresh_place(kind, &format!("{name}-"));
    Server {
        kind,
        name: name.to_string(),
        initial_cluster: None,
        dir,
        client_port,
        peer_port,
        extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        secure: secure.clone(),
        child: None,
        spawns: 0,
    }
}

impl Server {
    /// This member's `name=peerURL` entry of `--initial-cluster`.
    pub fn initial_cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url())
    }

    /// The peer URL.
    pub fn peer_url(&self) -> String {
        let scheme = if self.secure.peer { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.peer_port)
    }
}

/// `n` members (`m1`..`mn`) of a cluster that has not started, each with `extra_args`: for data
/// directories made before the first start (a restore); [`start_prepared`] starts them.
pub fn unstarted_cluster(kind: Kind, n: usize, extra_args: &[&str]) -> Vec<Server> {
    let mut members: Vec<Server> =
        (1..=n).map(|i| unstarted(kind, &format!("m{i}"), extra_args, &Secure::default())).collect();
    let initial = members.iter().map(Server::initial_cluster_entry).collect::<Vec<_>>().join(",");
    for m in &mut members {
        m.initial_cluster = Some(initial.clone());
    }
    members
}

/// Starts every member of [`unstarted_cluster`] and waits until each serves.
pub async fn start_prepared(members: &mut [Server]) {
    for m in members.iter_mut() {
        m.spawn();
    }
    for m in members.iter_mut() {
        if let Err(why) = m.wait_ready().await {
            m.kill9();
            panic!("{} {} did not start: {why}\n{}", m.kind.name(), m.name, tail(&m.log(), 40));
        }
    }
}

impl Server {
    /// The `--initial-cluster` this member starts with.
    pub fn initial_cluster(&self) -> String {
        self.initial_cluster.clone().unwrap_or_else(|| self.initial_cluster_entry())
    }
}

/// A new member `name` that has not started yet, for `etcdctl member add` with its
/// [`Server::peer_url`] first; [`join`] then starts it.
pub fn new_member(kind: Kind, name: &str, extra_args: &[&str]) -> Server {
    let mut args = vec!["--initial-cluster-state", "existing"];
    args.extend_from_slice(extra_args);
    unstarted(kind, name, &args, &Secure::default())
}

/// Starts `member` (from [`new_member`]) into the cluster of `members` and waits until it serves.
pub async fn join(member: &mut Server, members: &[&Server]) {
    let mut initial: Vec<String> = members.iter().map(|m| m.initial_cluster_entry()).collect();
    initial.push(member.initial_cluster_entry());
    member.initial_cluster = Some(initial.join(","));
    member.respawn().await;
}

/// How many times a cluster is started on fresh ports when a member found its port taken.
const PORT_ATTEMPTS: usize = 3;

/// Like [`start_cluster`], appending `extra_args` to every member's command line.
///
/// Ports come from `127.0.0.1:0` and are released before the members bind them; meanwhile the
/// first members' outgoing connections (to peers not up yet) take ephemeral ports from the same
/// range and can take a later member's. A member that fails with "Address already in use" gets
/// the whole cluster started again on fresh ports; any other failure fails the test.
pub async fn start_cluster_with(kind: Kind, n: usize, extra_args: &[&str]) -> Vec<Server> {
    start_cluster_secure(kind, n, extra_args, Secure::default()).await
}

/// Like [`start_cluster_with`], with the URLs `secure` makes `https://`.
pub async fn start_cluster_secure(kind: Kind, n: usize, extra_args: &[&str], secure: Secure) -> Vec<Server> {
    let mut attempt = 1;
    loop {
        let mut members: Vec<Server> =
            (1..=n).map(|i| unstarted(kind, &format!("m{i}"), extra_args, &secure)).collect();
        let initial: Vec<String> = members.iter().map(Server::initial_cluster_entry).collect();
        for m in &mut members {
            m.initial_cluster = Some(initial.join(","));
            m.spawn();
        }
        let mut port_taken = false;
        for m in &mut members {
            if let Err(why) = m.wait_ready().await {
                let log = m.log();
                if log.to_lowercase().contains("address already in use") && attempt < PORT_ATTEMPTS {
                    eprintln!(
                        "{} {}: its port was taken; the cluster starts again on fresh ports",
                        kind.name(),
                        m.name
                    );
                    port_taken = true;
                    break;
                }
                panic!(
                    "{} {} did not start: {why}\n--- last lines of its log ---\n{}",
                    kind.name(),
                    m.name,
                    tail(&log, 40)
                );
            }
        }
        if !port_taken {
            return members;
        }
        attempt += 1;
    }
}
