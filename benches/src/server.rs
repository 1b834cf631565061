//! Servers under test: etcd or keel processes on 127.0.0.1, started with the very same etcd
//! flags (as keel's integration tests start them), each member in a fresh temporary data dir.
//!
//! A [`Cluster`] owns its processes and directories: dropping it SIGKILLs and reaps every member
//! and removes the directories; each child also gets `PR_SET_PDEATHSIG`, so it dies with the
//! bench if the bench is killed outright. Ports come from binding `127.0.0.1:0`; a start that
//! loses its port to another process is retried with fresh ones. Members log to `server.log` in
//! their directory, whose tail is shown when a start fails.

use std::fs::OpenOptions;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::RangeRequest;
use serde::{Deserialize, Serialize};

/// How long a member may take from spawn to serving a linearizable read.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// How long a member may take to exit after SIGTERM before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// Which server a cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Etcd,
    Keel,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Keel => "keel",
        }
    }
}

struct Member {
    name: String,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Member {
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running single member or cluster of one server kind.
pub struct Cluster {
    kind: Kind,
    program: PathBuf,
    extra_args: Vec<String>,
    members: Vec<Member>,
    initial_cluster: String,
}

impl Cluster {
    /// Starts `n` members of `kind` from `program` (members `m1`..`mn`; etcd's bootstrap flags
    /// plus `extra_args`) and waits until each serves a linearizable read.
    pub async fn start(kind: Kind, program: &Path, n: usize, extra_args: &[String]) -> Result<Cluster> {
        const ATTEMPTS: u32 = 3;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut c = Cluster::unstarted(kind, program, n, extra_args)?;
            for i in 0..n {
                c.spawn(i)?;
            }
            let mut failed = None;
            for i in 0..n {
                if let Err(e) = c.wait_ready(i).await {
                    failed = Some((i, e));
                    break;
                }
            }
            let Some((i, why)) = failed else { return Ok(c) };
            let tail = c.members[i].log_tail(30);
            if tail.contains("address already in use") && attempt < ATTEMPTS {
                continue;
            }
            bail!("{} member {} did not start: {why:#}\n--- its log ---\n{tail}", kind.name(), c.members[i].name);
        }
    }

    fn unstarted(kind: Kind, program: &Path, n: usize, extra_args: &[String]) -> Result<Cluster> {
        let mut members = Vec::with_capacity(n);
        // Hold every port until all are chosen, so they differ.
        let mut held = Vec::new();
        for i in 1..=n {
            let dir = tempfile::Builder::new().prefix(&format!("keel-bench-{}-m{i}-", kind.name())).tempdir()?;
            let (c, p) = (TcpListener::bind("127.0.0.1:0")?, TcpListener::bind("127.0.0.1:0")?);
            let (client_port, peer_port) = (c.local_addr()?.port(), p.local_addr()?.port());
            held.push((c, p));
            members.push(Member { name: format!("m{i}"), dir, client_port, peer_port, child: None });
        }
        drop(held);
        let initial_cluster =
            members.iter().map(|m| format!("{}={}", m.name, m.peer_url())).collect::<Vec<_>>().join(",");
        Ok(Cluster { kind, program: program.to_path_buf(), extra_args: extra_args.to_vec(), members, initial_cluster })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// The process ids of the running members.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.child.as_ref().map(Child::id)).collect()
    }

    /// The command line of member `i`.
    pub fn args(&self, i: usize) -> Vec<String> {
        let m = &self.members[i];
        let (data, client, peer) = (m.dir.path().join("data").display().to_string(), m.endpoint(), m.peer_url());
        let flags: [(&str, &str); 7] = [
            ("--name", &m.name),
            ("--data-dir", &data),
            ("--listen-client-urls", &client),
            ("--advertise-client-urls", &client),
            ("--listen-peer-urls", &peer),
            ("--initial-advertise-peer-urls", &peer),
            ("--initial-cluster", &self.initial_cluster),
        ];
        let mut args: Vec<String> = flags.iter().flat_map(|(f, v)| [f.to_string(), v.to_string()]).collect();
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let args = self.args(i);
        let m = &mut self.members[i];
        let log = OpenOptions::new().create(true).append(true).open(m.log_path())?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&args).current_dir(m.dir.path()).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        // Flags are the only configuration: no ETCD_* variables from the caller's environment.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        die_with_parent(&mut cmd);
        m.child = Some(cmd.spawn().with_context(|| format!("spawning {}", self.program.display()))?);
        Ok(())
    }

    /// Polls member `i` until a linearizable Range succeeds.
    async fn wait_ready(&mut self, i: usize) -> Result<()> {
        let deadline = Instant::now() + READY_DEADLINE;
        let endpoint = self.members[i].endpoint();
        let mut last = String::from("no attempt yet");
        loop {
            if let Some(child) = self.members[i].child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.members[i].child = None;
                    bail!("exited ({status}) before serving; last probe: {last}");
                }
            }
            match probe(&endpoint).await {
                Ok(()) => return Ok(()),
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= deadline {
                bail!("not serving after {READY_DEADLINE:?}; last probe: {last}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops member `i` with SIGTERM (graceful), starts it again on the same data dir and ports,
    /// and returns how long it took from the spawn until it served a linearizable read.
    pub async fn restart(&mut self, i: usize) -> Result<Duration> {
        if let Some(mut child) = self.members[i].child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_DEADLINE;
            while child.try_wait()?.is_none() {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.spawn(i)?;
        let started = Instant::now();
        self.wait_ready(i)
            .await
            .with_context(|| format!("{} did not come back:\n{}", self.kind.name(), self.members[i].log_tail(30)))?;
        Ok(started.elapsed())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.members.iter_mut().for_each(Member::kill9);
    }
}

async fn probe(endpoint: &str) -> Result<()> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_string())?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .connect()
        .await?;
    KvClient::new(channel).range(RangeRequest { key: "keel-bench-ready".into(), ..Default::default() }).await?;
    Ok(())
}

/// Asks the kernel to SIGKILL the child when the spawning thread dies (Linux), so a bench killed
/// outright leaves no server behind. The store's process tests use it too.
pub fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}
