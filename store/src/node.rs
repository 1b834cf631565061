//! A keel member: the engine, MVCC, openraft, the watch hub, the lessor and the limits, put
//! together. The gRPC services hold an `Arc<Member>` and call [`Member::write`] (every write is a
//! Raft command) and [`Member::linearize`] (the read barrier before a linearizable read).
//!
//! Background tasks, all ended by [`Member::shutdown`]: the watch hub's sync loop, the periodic
//! progress notifications, the Raft term feed for watch headers, and the lessor's loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::ResponseHeader;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::BasicNode;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use tokio::task::JoinHandle;

use crate::config::{ClusterState, Config};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::lessor::Lessor;
use crate::mvcc::{Mvcc, View};
use crate::raft::log_store::LogStore;
use crate::raft::network::{decode, encode, Dialer, Peers};
use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, Raft, Reply};
use crate::watch::Hub;

/// The etcd API version keel speaks (reported by `/version` and `Maintenance.Status`).
pub const ETCD_API_VERSION: &str = "3.5.0";
/// The cluster version keel reports.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";

/// How long a request waits before asking again while the cluster has no leader.
const NO_LEADER_RETRY: Duration = Duration::from_millis(50);

/// What a follower forwards to the leader over the peer service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Forwarded {
    Write(Command),
    /// The leader's read index, for a linearizable read on a follower.
    ReadIndex,
    /// A lease keep-alive (only the leader keeps lease deadlines).
    KeepAlive(i64),
    /// A lease's remaining time as the leader counts it.
    Remaining(i64),
}

/// The leader's answer to a [`Forwarded`] request.
#[derive(Debug, Serialize, Deserialize)]
pub enum ForwardReply {
    Write(Result<Reply>),
    ReadIndex(Result<u64>),
    /// The granted TTL.
    KeepAlive(Result<i64>),
    /// Whole seconds left, None if the lease does not exist.
    Remaining(Result<Option<u64>>),
}

fn unexpected_reply() -> Error {
    Error::Io("unexpected reply from the leader".into())
}

/// Request limits enforced at the gRPC edge.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_bytes: u64,
    pub max_txn_ops: usize,
}

/// One running member.
pub struct Member {
    pub id: u64,
    pub cluster_id: u64,
    pub name: String,
    pub raft: Raft,
    pub mvcc: Arc<Mvcc>,
    pub hub: Arc<Hub>,
    pub lessor: Lessor,
    pub limits: Limits,
    /// How long a request may wait for Raft before answering `etcdserver: request timed out`.
    pub request_timeout: Duration,
    engine: Arc<dyn Engine>,
    /// Peer channels, shared with the Raft network; used to forward to the leader.
    dialer: Dialer,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Becomes true when the member starts shutting down: long-lived streams end.
    closing: tokio::sync::watch::Sender<bool>,
}

/// etcd's member id: the first 8 bytes (big endian) of SHA-1 over the sorted peer URLs and the
/// cluster token.
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = Sha1::new();
    for u in &urls {
        h.update(u.as_bytes());
    }
    h.update(token.as_bytes());
    u64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

/// etcd's cluster id: SHA-1 over the sorted member ids (big endian), first 8 bytes.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    u64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

impl Member {
    /// Starts a member on `engine` per `cfg`; bootstraps a new single-member cluster on first start.
    pub async fn start(cfg: &Config, engine: Arc<dyn Engine>) -> anyhow::Result<Arc<Member>> {
        let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (n, u) in &cfg.initial_cluster {
            by_name.entry(n.as_str()).or_default().push(u.clone());
        }
        let ids: Vec<u64> = by_name.values().map(|urls| member_id(urls, &cfg.initial_cluster_token)).collect();
        let Some(my_urls) = by_name.get(cfg.name.as_str()) else {
            anyhow::bail!("couldn't find local name {:?} in the initial cluster configuration", cfg.name);
        };
        let id = member_id(my_urls, &cfg.initial_cluster_token);
        let cluster_id = cluster_id(&ids);

        let mvcc = Arc::new(Mvcc::open(engine.clone())?);
        let sm = StateMachine::open(mvcc.clone())?;
        let hub = sm.hub().clone();
        // etcd fragments watch responses at the request limit plus its gRPC overhead allowance.
        hub.configure(cluster_id, id, cfg.max_request_bytes as usize + crate::server::GRPC_OVERHEAD_BYTES);
        let log = LogStore::new(engine.clone());
        let rcfg = openraft::Config {
            cluster_name: cfg.initial_cluster_token.clone(),
            heartbeat_interval: cfg.heartbeat_interval_ms,
            election_timeout_min: cfg.election_timeout_ms,
            election_timeout_max: cfg.election_timeout_ms * 2,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_count.max(1)),
            max_in_snapshot_log_to_keep: 5000,
            ..Default::default()
        };
        let rcfg = Arc::new(rcfg.validate()?);
        let peers = Peers::default();
        let dialer = peers.dialer.clone();
        let raft = Raft::new(id, rcfg, peers, log, sm).await?;
        if !raft.is_initialized().await? {
            if cfg.initial_cluster_state == ClusterState::Existing {
                anyhow::bail!("keel: joining an existing cluster is not supported by this build yet");
            }
            // Every member of a new cluster initializes with the same membership, as etcd's
            // members all bootstrap from --initial-cluster; the first election follows.
            let members: BTreeMap<u64, BasicNode> = by_name
                .values()
                .map(|urls| (member_id(urls, &cfg.initial_cluster_token), BasicNode { addr: urls.join(",") }))
                .collect();
            if let Err(e) = raft.initialize(members).await {
                // A peer's vote or log may have reached us first: the cluster exists already.
                tracing::info!("raft initialize: {e}");
            }
        }
        let request_timeout = Duration::from_millis(5000 + 2 * cfg.election_timeout_ms);
        let member = Arc::new(Member {
            id,
            cluster_id,
            name: cfg.name.clone(),
            lessor: Lessor::new(id, cfg.heartbeat_interval_ms, cfg.election_timeout_ms),
            raft,
            mvcc,
            hub,
            limits: Limits { max_request_bytes: cfg.max_request_bytes, max_txn_ops: cfg.max_txn_ops },
            request_timeout,
            engine,
            dialer,
            tasks: Mutex::new(Vec::new()),
            closing: tokio::sync::watch::channel(false).0,
        });
        member.start_tasks(cfg.watch_progress_notify_interval);
        Ok(member)
    }

    fn start_tasks(self: &Arc<Self>, progress_interval: Duration) {
        let mut tasks = self.tasks.lock();
        tasks.push(tokio::spawn(self.hub.clone().run()));
        let (hub, mut metrics) = (self.hub.clone(), self.raft.metrics());
        tasks.push(tokio::spawn(async move {
            loop {
                let term = metrics.borrow_and_update().current_term;
                hub.set_term(term);
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        }));
        tasks.push(tokio::spawn(Lessor::run(Arc::downgrade(self))));
        if !progress_interval.is_zero() {
            let hub = self.hub.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick =
                    tokio::time::interval_at(tokio::time::Instant::now() + progress_interval, progress_interval);
                loop {
                    tick.tick().await;
                    hub.notify_progress();
                }
            }));
        }
    }

    /// Proposes a write and waits until it is applied (and synced) on the leader; a follower
    /// forwards it to the leader. While there is no leader it waits for one, up to the request
    /// timeout, then answers `etcdserver: no leader`.
    pub async fn write(&self, cmd: Command) -> Result<Reply> {
        match tokio::time::timeout(self.request_timeout, self.write_or_forward(cmd, true)).await {
            Err(_) => Err(self.timed_out()),
            Ok(r) => r,
        }
    }

    /// etcd's answer to a request that ran out of time: no leader, or timed out.
    fn timed_out(&self) -> Error {
        if self.raft.metrics().borrow().current_leader.is_none() {
            Error::NoLeader
        } else {
            Error::Timeout
        }
    }

    async fn write_or_forward(&self, cmd: Command, may_forward: bool) -> Result<Reply> {
        loop {
            match self.raft.client_write(cmd.clone()).await {
                Ok(resp) => return resp.data.0,
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => match f.leader_node {
                    Some(node) if may_forward => match self.forward(&node.addr, Forwarded::Write(cmd.clone())).await {
                        // The leader is unreachable: wait for this member to learn of a new one.
                        Err(Error::NoLeader) => tokio::time::sleep(NO_LEADER_RETRY).await,
                        Err(e) => return Err(e),
                        Ok(ForwardReply::Write(r)) => return r,
                        Ok(_) => return Err(unexpected_reply()),
                    },
                    Some(_) => return Err(Error::NotLeader),
                    None => tokio::time::sleep(NO_LEADER_RETRY).await,
                },
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                    return Err(Error::Io(e.to_string()))
                }
                Err(RaftError::Fatal(_)) => return Err(Error::Stopped),
            }
        }
    }

    /// Sends a request to the leader's peer service. An unreachable leader is `NoLeader`.
    async fn forward(&self, leader_url: &str, f: Forwarded) -> Result<ForwardReply> {
        let mut client = self.dialer.client(leader_url).map_err(Error::Io)?;
        let mut req = tonic::Request::new(encode(&f));
        req.set_timeout(self.request_timeout);
        match client.forward(req).await {
            Ok(r) => decode::<Result<ForwardReply>>(&r.into_inner()).map_err(Error::Io)?,
            Err(status) => {
                self.dialer.forget(leader_url);
                Err(match status.code() {
                    tonic::Code::DeadlineExceeded => Error::Timeout,
                    _ => Error::NoLeader,
                })
            }
        }
    }

    /// The leader's peer URL, if this member knows a leader.
    fn leader_url(&self) -> Option<String> {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        let leader = m.current_leader?;
        m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())
    }

    /// Asks the leader (this member, or over the peer service) for a lease-timer answer.
    async fn ask_leader(self: &Arc<Self>, f: Forwarded) -> Result<ForwardReply> {
        let local = self.serve_forwarded(f.clone()).await?;
        let not_leader = matches!(
            &local,
            ForwardReply::KeepAlive(Err(Error::NotLeader | Error::NoLeader))
                | ForwardReply::Remaining(Err(Error::NotLeader | Error::NoLeader))
        );
        match self.leader_url() {
            Some(url) if not_leader && self.raft.metrics().borrow().current_leader != Some(self.id) => {
                self.forward(&url, f).await
            }
            _ => Ok(local),
        }
    }

    /// Renews a lease on the leader; returns its granted TTL.
    pub async fn renew_lease(self: &Arc<Self>, id: i64) -> Result<i64> {
        match self.ask_leader(Forwarded::KeepAlive(id)).await? {
            ForwardReply::KeepAlive(r) => r,
            _ => Err(unexpected_reply()),
        }
    }

    /// A lease's remaining time on the leader, in whole seconds; None if it does not exist.
    pub async fn lease_remaining(self: &Arc<Self>, id: i64) -> Result<Option<u64>> {
        match self.ask_leader(Forwarded::Remaining(id)).await? {
            ForwardReply::Remaining(r) => r,
            _ => Err(unexpected_reply()),
        }
    }

    /// Serves a request forwarded by a follower (leader side; never forwards again).
    pub async fn serve_forwarded(self: &Arc<Self>, f: Forwarded) -> Result<ForwardReply> {
        Ok(match f {
            Forwarded::KeepAlive(id) => ForwardReply::KeepAlive(self.lessor.renew(self, id)),
            Forwarded::Remaining(id) => ForwardReply::Remaining({
                let record = self.mvcc.read().leases().get(id).map(|l| l.record);
                match record {
                    None => Ok(None),
                    Some(r) => match self.lessor.remaining(self, id, &r) {
                        Some(left) => Ok(Some(left.as_secs())),
                        None => Err(Error::NotLeader),
                    },
                }
            }),
            Forwarded::Write(cmd) => ForwardReply::Write(self.write_or_forward(cmd, false).await),
            Forwarded::ReadIndex => ForwardReply::ReadIndex(match self.raft.get_read_log_id().await {
                Ok((read, _)) => Ok(read.map(|l| l.index).unwrap_or(0)),
                Err(RaftError::APIError(_)) => Err(Error::NotLeader),
                Err(RaftError::Fatal(_)) => Err(Error::Stopped),
            }),
        })
    }

    /// The read barrier (ReadIndex): returns once this member has applied everything the
    /// leader had committed when it was called. A follower asks the leader for the index.
    pub async fn linearize(&self) -> Result<()> {
        match tokio::time::timeout(self.request_timeout, self.read_barrier()).await {
            Err(_) => Err(self.timed_out()),
            Ok(r) => r,
        }
    }

    async fn read_barrier(&self) -> Result<()> {
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => match f.leader_node {
                    Some(node) => {
                        let index = match self.forward(&node.addr, Forwarded::ReadIndex).await {
                            Err(Error::NoLeader) => {
                                tokio::time::sleep(NO_LEADER_RETRY).await;
                                continue;
                            }
                            Err(e) => return Err(e),
                            Ok(ForwardReply::ReadIndex(r)) => r?,
                            Ok(_) => return Err(unexpected_reply()),
                        };
                        self.raft
                            .wait(None)
                            .applied_index_at_least(Some(index), "read barrier")
                            .await
                            .map_err(|_| Error::Stopped)?;
                        return Ok(());
                    }
                    None => tokio::time::sleep(NO_LEADER_RETRY).await,
                },
                Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
                    tokio::time::sleep(NO_LEADER_RETRY).await
                }
                Err(RaftError::Fatal(_)) => return Err(Error::Stopped),
            }
        }
    }

    /// The current Raft term.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Fills a response header as etcd does: ids, term, and the current revision if unset.
    pub fn fill(&self, h: &mut Option<ResponseHeader>) {
        let h = h.get_or_insert_with(Default::default);
        h.cluster_id = self.cluster_id;
        h.member_id = self.id;
        h.raft_term = self.term();
        if h.revision == 0 {
            h.revision = self.mvcc.current_rev();
        }
    }

    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// Starts shutting down: every watch stream and lease keep-alive stream ends, so the client
    /// listeners can drain.
    pub fn begin_shutdown(&self) {
        self.closing.send_replace(true);
        self.hub.close_all();
    }

    /// Resolves once [`Member::begin_shutdown`] was called.
    pub async fn closing(&self) {
        let _ = self.closing.subscribe().wait_for(|c| *c).await;
    }

    /// Checkpoints lease TTLs (if leader), then stops Raft; in-flight writes are answered first
    /// or fail with `server stopped`.
    pub async fn shutdown(&self) {
        self.lessor.checkpoint(self).await;
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_etcds_defaults() {
        // A default `etcd` (peer URL http://localhost:2380, token etcd-cluster) is member
        // 8e9e05c52164694d of cluster cdf818194e3a8c32.
        let id = member_id(&["http://localhost:2380".to_string()], "etcd-cluster");
        assert_eq!(format!("{id:x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:x}", cluster_id(&[id])), "cdf818194e3a8c32");
    }
}
