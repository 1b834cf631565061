//! Members in this process on a real multi-threaded tokio runtime: the races that keel-chaos's
//! single-threaded simulation cannot show (openraft builds snapshots beside apply, installs them
//! under readers, drops a caller's future mid-write) can happen here.
//!
//! Each member is the real store ([`Member::start_with`]) on the in-memory engine, with its real
//! peer service; peers reach each other over in-memory duplex pipes through the dialer's
//! connector seam, so no port is taken. A stopped member's URL refuses connections, and its
//! engine is kept so that it can start again where it was. A member can also be cut off while it
//! runs ([`Cluster::cut`]): its connections break and new ones are refused until it is healed.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
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
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::sync::{mpsc, oneshot};

/// The in-memory network: who listens at which peer URL authority (`m1:2380`), who is cut off,
/// and the connections open between members.
#[derive(Default)]
pub struct Net {
    listening: Mutex<HashMap<String, mpsc::UnboundedSender<Pipe>>>,
    cut: Mutex<HashSet<String>>,
    links: Mutex<Vec<Arc<Link>>>,
}

impl Net {
    /// Opens connections from `from` to listening members; an authority that nobody listens at,
    /// or either end being cut off, refuses.
    pub fn connector(self: &Arc<Self>, from: &str) -> Connector {
        let (net, from) = (self.clone(), from.to_string());
        Arc::new(move |uri: http::Uri| {
            let to = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            let cut = {
                let cut = net.cut.lock();
                cut.contains(&from) || cut.contains(&to)
            };
            let listener = if cut { None } else { net.listening.lock().get(&to).cloned() };
            let link =
                Arc::new(Link { ends: [from.clone(), to.clone()], alive: AtomicBool::new(true), ..Default::default() });
            if listener.is_some() {
                let mut links = net.links.lock();
                links.retain(|l| l.alive.load(Ordering::Acquire));
                links.push(link.clone());
            }
            Box::pin(async move {
                let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, format!("nobody listens at {to}"));
                let listener = listener.ok_or_else(refused)?;
                let (client, server) = tokio::io::duplex(1 << 20);
                listener.send(Pipe { io: server, link: link.clone() }).map_err(|_| refused())?;
                Ok(Box::new(Pipe { io: client, link }) as Box<dyn PeerIo>)
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

    /// Cuts `authority` off: its open connections break, new ones are refused.
    fn cut(&self, authority: &str) {
        self.cut.lock().insert(authority.to_string());
        for link in self.links.lock().iter().filter(|l| l.ends.iter().any(|e| e == authority)) {
            link.alive.store(false, Ordering::Release);
            for w in link.waiting.lock().drain(..) {
                w.wake();
            }
        }
    }

    fn heal(&self, authority: &str) {
        self.cut.lock().remove(authority);
    }
}

/// A connection between two members, alive until either is cut off.
#[derive(Default)]
struct Link {
    ends: [String; 2],
    alive: AtomicBool,
    /// Tasks waiting to read or write, woken when the link breaks.
    waiting: Mutex<Vec<Waker>>,
}

/// One end of a [`Link`]: a duplex pipe that fails once the link is broken.
pub struct Pipe {
    io: DuplexStream,
    link: Arc<Link>,
}

impl Pipe {
    /// `Err` once the link is broken; else `poll`'s answer, remembering the task if it waits.
    fn poll_alive<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut DuplexStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if !self.link.alive.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "cut off")));
        }
        let r = poll(Pin::new(&mut self.io), cx);
        if r.is_pending() {
            self.link.waiting.lock().push(cx.waker().clone());
            if !self.link.alive.load(Ordering::Acquire) {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "cut off")));
            }
        }
        r
    }
}

impl AsyncRead for Pipe {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.poll_alive(cx, |io, cx| io.poll_read(cx, buf))
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_alive(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_alive(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A member's end of the in-memory network.
pub struct Listener {
    incoming: mpsc::UnboundedReceiver<Pipe>,
    authority: String,
}

impl axum::serve::Listener for Listener {
    type Io = Pipe;
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
        let dialer = Dialer::with_connector(self.net.connector(&authority));
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

    /// Cuts member `i` off from the others while it runs.
    pub fn cut(&self, i: usize) {
        self.net.cut(&self.nodes[i].authority());
    }

    /// Lets member `i` reach the others again.
    pub fn heal(&self, i: usize) {
        self.net.heal(&self.nodes[i].authority());
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
