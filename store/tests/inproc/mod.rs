//! Members in this process on a real multi-threaded tokio runtime: the races that keel-chaos's
//! single-threaded simulation cannot show (openraft builds snapshots beside apply, installs them
//! under readers, drops a caller's future mid-write) can happen here.
//!
//! Each member is the real store ([`Member::start_with`]) on the in-memory engine, with its real
//! peer service; peers reach each other over in-memory duplex pipes through the dialer's
//! connector seam, so no port is taken. A stopped member's URL refuses connections, and its
//! engine is kept so that it can start again where it was.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::{PutRequest, RangeRequest};
use keel_store::config::Config;
use keel_store::engine::{MemEngine, SyncMode};
use keel_store::mvcc::kv;
use keel_store::node::Member;
use keel_store::raft::network::{Connector, Dialer, PeerIo};
use keel_store::raft::{Command, Proto, Reply};
use keel_store::server;
use parking_lot::Mutex;
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, oneshot};

/// The in-memory network: who listens at which peer URL authority (`m1:2380`).
#[derive(Default)]
pub struct Net {
    listening: Mutex<HashMap<String, mpsc::UnboundedSender<DuplexStream>>>,
}

impl Net {
    /// Opens connections to listening members; any other authority refuses.
    pub fn connector(self: &Arc<Self>) -> Connector {
        let net = self.clone();
        Arc::new(move |uri: http::Uri| {
            let to = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            let listener = net.listening.lock().get(&to).cloned();
            Box::pin(async move {
                let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, format!("nobody listens at {to}"));
                let listener = listener.ok_or_else(refused)?;
                let (client, server) = tokio::io::duplex(1 << 20);
                listener.send(server).map_err(|_| refused())?;
                Ok(Box::new(client) as Box<dyn PeerIo>)
            })
        })
    }

    fn listen(&self, authority: &str) -> Listener {
        let (tx, rx) = mpsc::unbounded_channel();
        self.listening.lock().insert(authority.to_string(), tx);
        Listener { incoming: rx, authority: authority.to_string() }
    }

    fn unlisten(&self, authority: &str) {
        self.listening.lock().remove(authority);
    }
}

/// A member's end of the in-memory network.
pub struct Listener {
    incoming: mpsc::UnboundedReceiver<DuplexStream>,
    authority: String,
}

impl axum::serve::Listener for Listener {
    type Io = DuplexStream;
    type Addr = String;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(io) => (io, self.authority.clone()),
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.authority.clone())
    }
}

/// A running member: the member, what stops its peer service, and that service's task.
struct Running {
    member: Arc<Member>,
    stop: oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<io::Result<()>>,
}

/// One member of a [`Cluster`]: its engine outlives its runs.
pub struct Node {
    pub name: String,
    engine: MemEngine,
    running: Option<Running>,
}

impl Node {
    fn authority(&self) -> String {
        format!("{}:2380", self.name)
    }

    /// The running member; panics if it is stopped.
    pub fn member(&self) -> &Arc<Member> {
        &self.running.as_ref().expect("the member is running").member
    }
}

/// A cluster of in-process members.
pub struct Cluster {
    net: Arc<Net>,
    pub nodes: Vec<Node>,
    /// Flags every member starts with (e.g. `--snapshot-count`).
    flags: Vec<String>,
}

/// How long the harness waits for the cluster to do something.
pub const DEADLINE: Duration = Duration::from_secs(30);

impl Cluster {
    /// Starts `n` members (`m1`...) with `flags`, and waits for a leader.
    pub async fn start(n: usize, flags: &[&str]) -> Cluster {
        let mut c = Cluster {
            net: Arc::default(),
            nodes: (1..=n).map(|i| Node { name: format!("m{i}"), engine: MemEngine::new(), running: None }).collect(),
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        for i in 0..n {
            c.start_node(i).await;
        }
        c.leader().await;
        c
    }

    fn config(&self, i: usize) -> Config {
        let cluster: Vec<String> = self.nodes.iter().map(|n| format!("{}=http://{}", n.name, n.authority())).collect();
        let node = &self.nodes[i];
        let args = [
            "keel".to_string(),
            "--name".into(),
            node.name.clone(),
            "--initial-cluster".into(),
            cluster.join(","),
            "--initial-advertise-peer-urls".into(),
            format!("http://{}", node.authority()),
        ];
        Config::parse_from(args.into_iter().chain(self.flags.iter().cloned())).expect("valid flags")
    }

    /// Starts member `i` on its engine (where it was, if it ran before).
    pub async fn start_node(&mut self, i: usize) -> Arc<Member> {
        let cfg = self.config(i);
        let authority = self.nodes[i].authority();
        let listener = self.net.listen(&authority);
        let dialer = Dialer::with_connector(self.net.connector());
        let engine = Arc::new(self.nodes[i].engine.clone());
        let member = Member::start_with(&cfg, engine, dialer, SyncMode::Background).await.expect("member starts");
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(server::serve_with(listener, server::peer_router(member.clone()), async {
            let _ = stopped.await;
        }));
        self.nodes[i].running = Some(Running { member: member.clone(), stop, serving });
        member
    }

    /// Stops member `i`: its URL refuses connections, its peer service drains, Raft stops.
    pub async fn stop_node(&mut self, i: usize) {
        let authority = self.nodes[i].authority();
        let Some(Running { member, stop, serving }) = self.nodes[i].running.take() else { return };
        self.net.unlisten(&authority);
        let _ = stop.send(());
        member.begin_shutdown();
        member.shutdown().await;
        let _ = tokio::time::timeout(DEADLINE, serving).await;
    }

    /// Stops every member.
    pub async fn stop(mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i).await;
        }
    }

    /// The running members.
    pub fn members(&self) -> Vec<Arc<Member>> {
        self.nodes.iter().filter_map(|n| n.running.as_ref().map(|r| r.member.clone())).collect()
    }

    /// Waits until the running members agree on a leader among them; its index.
    pub async fn leader(&self) -> usize {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let leaders: Vec<Option<u64>> = self.members().iter().map(|m| m.raft_status().leader).collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) {
                    if let Some(i) =
                        self.nodes.iter().position(|n| n.running.as_ref().is_some_and(|r| r.member.id() == *l))
                    {
                        return i;
                    }
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no leader agreed on: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running member has applied the same log index and has the same
    /// revision; returns that revision.
    pub async fn converged(&self) -> i64 {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let at: Vec<(u64, i64)> =
                self.members().iter().map(|m| (m.raft_status().applied_index, m.current_rev())).collect();
            if at.windows(2).all(|w| w[0] == w[1]) {
                return at[0].1;
            }
            assert!(tokio::time::Instant::now() < deadline, "members did not converge: {at:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A put of `key` = `value`.
pub fn put(key: &str, value: &str) -> Command {
    Command::Put(Proto(PutRequest {
        key: key.as_bytes().to_vec().into(),
        value: value.as_bytes().to_vec().into(),
        ..Default::default()
    }))
}

/// The value of `key` on `member` (its applied state), if any.
pub fn value(member: &Member, key: &str) -> Option<Vec<u8>> {
    let r = RangeRequest { key: key.as_bytes().to_vec().into(), ..Default::default() };
    let r = kv::range(&member.read(), &r).expect("a range");
    r.kvs.first().map(|kv| kv.value.to_vec())
}

/// Whether a write's reply is a successful put.
pub fn is_put(r: &Reply) -> bool {
    matches!(r, Reply::Put(_))
}
