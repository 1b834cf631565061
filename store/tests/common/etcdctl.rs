//! `etcdctl` as a child process for the tests that compare its output: spawned with
//! `ETCDCTL_API=3` against one server (no `ETCDCTL_*` from the environment), stdout and stderr
//! collected by reader threads, killed and reaped when dropped, and killed with the test
//! process (`PR_SET_PDEATHSIG`) should that die first.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::Server;

/// A running `etcdctl` whose stdout and stderr two threads collect. Dropping it kills and reaps
/// the process, also when the test panics; the child also gets `PR_SET_PDEATHSIG`, so a test
/// process killed outright leaves no watch behind, retrying a dead server forever.
pub struct Etcdctl {
    child: Option<Child>,
    status: Option<ExitStatus>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Etcdctl {
    pub fn spawn(server: &Server, args: &[String], stdin: Option<&str>) -> Etcdctl {
        let mut cmd = Command::new("etcdctl");
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCDCTL_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", server.endpoint()))
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        super::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn etcdctl {args:?}: {e}"));
        let (stdout, stderr) = (Arc::default(), Arc::default());
        let readers = vec![
            collect(child.stdout.take().expect("etcdctl stdout"), Arc::clone(&stdout)),
            collect(child.stderr.take().expect("etcdctl stderr"), Arc::clone(&stderr)),
        ];
        let mut process = Etcdctl { child: Some(child), status: None, stdout, stderr, readers };
        if let (Some(input), Some(child)) = (stdin, process.child.as_mut()) {
            // Dropped at the end of this block: etcdctl sees the end of its input.
            let mut pipe = child.stdin.take().expect("etcdctl stdin");
            pipe.write_all(input.as_bytes()).expect("write etcdctl stdin");
        }
        process
    }

    pub fn stdout(&self) -> String {
        lossy(&self.stdout)
    }

    /// Whether the process has exited by itself.
    pub fn exited(&mut self) -> bool {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.status = Some(status);
            }
        }
        self.status.is_some()
    }

    /// Whether it still runs, and the end of what it printed.
    pub fn report(&mut self) -> String {
        let state = if self.exited() { format!("it exited ({:?})", self.status) } else { "it runs".to_string() };
        format!(
            "{state}; the end of its stdout:\n{}\nits stderr:\n{}",
            super::tail(&self.stdout(), 10),
            super::tail(&lossy(&self.stderr), 10)
        )
    }

    /// Kills the process unless it has exited, reaps it; exit code (`None`: killed), stdout,
    /// stderr.
    pub fn finish(mut self) -> (Option<i32>, String, String) {
        self.stop();
        (self.status.and_then(|s| s.code()), lossy(&self.stdout), lossy(&self.stderr))
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.status.is_none() {
                let _ = child.kill();
            }
            if let Ok(status) = child.wait() {
                self.status.get_or_insert(status);
            }
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        self.stop();
    }
}

fn collect(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            into.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]);
        }
    })
}

pub fn lossy(bytes: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&bytes.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}

/// Runs `etcdctl args` against `server` until it exits or `deadline` passes (then it is killed):
/// exit code (`None`: killed), stdout, stderr.
pub async fn run(server: &Server, args: &[&str], deadline: std::time::Duration) -> (Option<i32>, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let mut process = Etcdctl::spawn(server, &args, None);
    super::poll_until(deadline, std::time::Duration::from_millis(10), || process.exited()).await;
    process.finish()
}
