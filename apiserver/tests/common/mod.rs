//! What the apiserver's integration tests share: a real etcd (3.4 in CI) to run on.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free port on 127.0.0.1.
pub fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A real etcd, killed (and its data removed) when dropped.
pub struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    peer: String,
    /// Its client URL.
    pub url: String,
}

impl Etcd {
    /// Kills it and starts it again on its data and ports (it may not answer yet).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), &self.url, &self.peer);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts etcd on free ports in a temporary directory (it may not answer yet).
pub fn etcd() -> Etcd {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (format!("http://127.0.0.1:{}", port()), format!("http://127.0.0.1:{}", port()));
    let child = spawn(dir.path(), &client, &peer);
    Etcd { child, dir, peer, url: client }
}

fn spawn(dir: &std::path::Path, client: &str, peer: &str) -> Child {
    let mut cmd = Command::new("etcd");
    cmd.args(["--data-dir", dir.join("data").to_str().unwrap(), "--listen-client-urls", client])
        .args(["--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the child dies with this test's thread.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().expect("etcd on PATH (scripts/deps.sh installs it)")
}

/// keel-apiserver started in this process on a free port over `dir` (with `extra` flags, e.g.
/// `--etcd-servers`), and a kube-rs client of it through the kubeconfig it wrote.
pub async fn apiserver(dir: &std::path::Path, extra: &[String]) -> (keel_apiserver::run::Running, kube::Client) {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    // The API alone unless `extra` asks for controllers (a flag given twice takes its last value).
    let mut args = vec![
        "keel-apiserver".to_string(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        "--controllers=".into(),
        // Without the service account controller no namespace has its `default` account, which
        // the ServiceAccount admission plugin requires of every pod (as on a kube-apiserver
        // without its controller manager).
        "--disable-admission-plugins=ServiceAccount".into(),
    ];
    args.push(format!("--data-dir={}", dir.display()));
    args.extend(extra.iter().cloned());
    let flags = <keel_apiserver::run::Flags as clap::Parser>::parse_from(args);
    let running = keel_apiserver::run::start(&flags).await.expect("keel-apiserver starts");
    let kubeconfig = Kubeconfig::read_from(&running.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    (running, kube::Client::try_from(config).unwrap())
}

/// keel-apiserver started in this process on a free port with its data under
/// `<dir>/apiserver` and `extra` flags (its controllers and simulated nodes as the flags say).
pub async fn started(dir: &std::path::Path, extra: &[String]) -> keel_apiserver::run::Running {
    let mut args = vec![
        "keel-apiserver".to_string(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--data-dir={}", dir.join("apiserver").display()),
    ];
    args.extend(extra.iter().cloned());
    keel_apiserver::run::start(&<keel_apiserver::run::Flags as clap::Parser>::parse_from(args))
        .await
        .expect("keel-apiserver starts")
}

/// kubectl 1.32, pinned by path (plain `kubectl` runs the minor matching the server).
pub const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Kubectl {
    pub kubeconfig: PathBuf,
    pub cache: PathBuf,
    pub files: PathBuf,
}

pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    pub async fn run(&self, args: &[&str]) -> Out {
        let mut cmd = tokio::process::Command::new(KUBECTL);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(&self.cache).args(args);
        cmd.env("HOME", &self.cache).kill_on_drop(true);
        let out = tokio::time::timeout(DEADLINE, cmd.output()).await.expect("kubectl finished").expect("kubectl ran");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl, which must succeed; its output.
    pub async fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(o.ok, "kubectl {args:?} failed: {}{}", o.stdout, o.stderr);
        o.stdout
    }

    /// Runs kubectl, which must fail; what it printed on stderr.
    pub async fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(!o.ok, "kubectl {args:?} succeeded: {}", o.stdout);
        o.stderr
    }

    /// Writes `json` to a file named `name`; its path.
    pub fn file(&self, name: &str, json: serde_json::Value) -> String {
        let p = self.files.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// How long the control plane gets to make a change real in the tests.
pub const SETTLE: Duration = Duration::from_secs(90);

/// Polls `check` until it gives a value, at most `SETTLE`; panics with `what` and the last
/// answer otherwise.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() > deadline => panic!("{what}: still {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
