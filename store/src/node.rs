//! A keel member: the engine, MVCC, openraft, the watch hub, the lessor and the limits, put
//! together. The gRPC services hold an `Arc<Member>` and call [`Member::write`] (every write is a
//! Raft command) and [`Member::linearize`] (the read barrier before a linearizable read).
//!
//! Background tasks, all ended by [`Member::shutdown`]: the watch hub's sync loop, the periodic
//! progress notifications, the Raft term feed for watch headers, and the lessor's loop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use keel_auth::{AuthError, AuthInfo};
use keel_proto::etcdserverpb::{alarm_request::AlarmAction, AlarmRequest, AlarmType, ResponseHeader};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use tokio::task::JoinHandle;

use crate::auth::Tokens;
use crate::config::{ClusterState, Config};
use crate::engine::{Engine, SyncMode, Syncer};
use crate::error::{Error, Result};
use crate::lessor::Lessor;
use crate::membership::{self, Change, Changed, MemberInfo};
use crate::mvcc::keys::raft_meta::IDENTITY;
use crate::mvcc::registry::Attributes;
use crate::mvcc::{Mvcc, View};
use crate::raft::apply::needs_space;
use crate::raft::log_store::LogStore;
use crate::raft::network::{decode, encode, never_sent, Dialer, Peers};
use crate::raft::proposals::{Proposals, Refused};
use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, Proto, Raft, Reply};
use crate::rounds::Rounds;
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
    /// A membership change (leader side).
    Change(Change),
    /// The cluster id and members as the receiving member knows them (no forwarding); a member
    /// joining an existing cluster asks this to learn its id.
    Members,
    /// Leadership transfer: the old leader tells the transferee to campaign now.
    Elect,
    /// Leadership transfer: the old leader asks the other members not to campaign meanwhile.
    HoldElections(bool),
}

/// The leader's answer to a [`Forwarded`] request.
#[derive(Debug, Serialize, Deserialize)]
pub enum ForwardReply {
    /// The reply, and the index of the log entry that made it.
    Write(Result<(Reply, u64)>),
    ReadIndex(Result<u64>),
    /// The granted TTL.
    KeepAlive(Result<i64>),
    /// Whole seconds left, None if the lease does not exist.
    Remaining(Result<Option<u64>>),
    Change(Result<Changed>),
    /// The cluster id and the members.
    Members(u64, Vec<MemberInfo>),
    Done(Result<()>),
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
    /// Writes proposed on this member as the leader, batched while one is in flight.
    proposals: Proposals,
    pub mvcc: Arc<Mvcc>,
    pub hub: Arc<Hub>,
    /// Auth tokens this member has registered (shared with its state machine).
    pub tokens: Arc<Tokens>,
    /// bcrypt's cost for the password hashes this member makes (`--bcrypt-cost`).
    pub bcrypt_cost: u32,
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
    /// Becomes true when this member is no longer in the cluster's membership.
    removed: tokio::sync::watch::Sender<bool>,
    /// Becomes true once, after start, this member has applied its own publish entry (see
    /// `publish`). Until then clients wait, and as the leader it answers no ReadIndex: applied
    /// batches are not synced (the Raft log is the durable record), so after a crash this
    /// member's state, and the commit index it starts from, may be behind what it answered
    /// before, until it has applied the log again.
    ready: tokio::sync::watch::Sender<bool>,
    /// While true, the Raft network sends nothing (the leader's part of a leadership transfer).
    hold: Arc<AtomicBool>,
    /// One membership change or leadership transfer at a time.
    reconfig: tokio::sync::Mutex<()>,
    /// The cluster token (part of new member ids).
    token: String,
    /// Backend bytes beyond which writes that need space raise NOSPACE.
    quota: Option<u64>,
    /// openraft's longest election timeout, which is also its leader lease.
    leader_lease: Duration,
    /// gRPC calls started and handled, for `/metrics`.
    pub grpc: crate::server::metrics::GrpcCounters,
    /// Leader changes this member has seen (`etcd_server_leader_changes_seen_total`).
    leader_changes: Arc<std::sync::atomic::AtomicU64>,
    /// ReadIndex rounds shared by this member's linearizable reads (leader or follower).
    reads: Rounds<Result<u64>>,
    /// ReadIndex rounds as the leader, shared by its own reads and those its followers forward.
    leader_reads: Rounds<LeaderRead>,
}

/// The outcome of a ReadIndex round on the leader.
#[derive(Debug, Clone)]
enum LeaderRead {
    /// A quorum confirmed the leadership: reads must wait until this index is applied.
    Index(u64),
    /// Not the leader; the leader, if known.
    Forward(Option<BasicNode>),
    /// The leader could not reach a quorum.
    NoQuorum,
    Stopped,
}

impl LeaderRead {
    /// The read index, for a caller that needs this member to be the leader (no forwarding).
    fn here(self) -> Result<u64> {
        match self {
            LeaderRead::Index(i) => Ok(i),
            LeaderRead::Forward(_) => Err(Error::NotLeader),
            LeaderRead::NoQuorum => Err(Error::NoLeader),
            LeaderRead::Stopped => Err(Error::Stopped),
        }
    }
}

/// The ids a data directory was created with; a restart uses them, not the flags.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Identity {
    id: u64,
    cluster_id: u64,
}

fn read_identity(engine: &dyn Engine) -> Result<Option<Identity>> {
    Ok(engine.get(&crate::mvcc::keys::raft_meta(IDENTITY))?.map(|b| bincode::deserialize(&b)).transpose()?)
}

fn write_identity(engine: &dyn Engine, identity: Identity) -> Result<()> {
    let mut b = crate::engine::Batch::default();
    b.put(crate::mvcc::keys::raft_meta(IDENTITY), bincode::serialize(&identity).expect("identity serializes"));
    engine.write(b, true)
}

/// How long a member joining an existing cluster keeps asking the peers in `--initial-cluster`
/// who it is.
const JOIN_DEADLINE: Duration = Duration::from_secs(60);

/// Learns this member's id and the cluster id from a running member: the member whose peer URLs
/// are this member's advertised peer URLs (etcd's `--initial-cluster-state existing`).
async fn join(cfg: &Config, dialer: &Dialer) -> anyhow::Result<Identity> {
    let mine: BTreeSet<&String> = cfg.initial_advertise_peer_urls.iter().collect();
    let peers: Vec<&String> = cfg.initial_cluster.iter().map(|(_, u)| u).filter(|u| !mine.contains(u)).collect();
    if peers.is_empty() {
        anyhow::bail!("--initial-cluster-state=existing needs another member's peer URL in --initial-cluster");
    }
    let started = tokio::time::Instant::now();
    loop {
        for url in &peers {
            let Ok(mut client) = dialer.client(url) else { continue };
            let mut req = tonic::Request::new(encode(&Forwarded::Members));
            req.set_timeout(Duration::from_secs(2));
            let Ok(resp) = client.forward(req).await else {
                dialer.forget(url);
                continue;
            };
            if let Ok(Ok(ForwardReply::Members(cluster_id, members))) =
                decode::<Result<ForwardReply>>(&resp.into_inner())
            {
                let me = members.iter().find(|m| m.peer_urls.iter().collect::<BTreeSet<_>>() == mine);
                return match me {
                    Some(m) => Ok(Identity { id: m.id, cluster_id }),
                    None => anyhow::bail!(
                        "error validating peerURLs: no member of the existing cluster has peer URLs {:?} (add it with `etcdctl member add` first)",
                        cfg.initial_advertise_peer_urls
                    ),
                };
            }
        }
        if started.elapsed() > JOIN_DEADLINE {
            anyhow::bail!("could not reach any member of the existing cluster at {peers:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    /// Starts a member on `engine` per `cfg`, reaching its peers over TCP; bootstraps a new
    /// cluster on first start.
    pub async fn start(cfg: &Config, engine: Arc<dyn Engine>) -> anyhow::Result<Arc<Member>> {
        Self::start_with(cfg, engine, Dialer::default(), SyncMode::Background).await
    }

    /// Like [`Member::start`], reaching peers through `dialer` (the simulation's network) and
    /// syncing the engine as `sync` says (inline in the simulation, so that it replays).
    pub async fn start_with(
        cfg: &Config,
        engine: Arc<dyn Engine>,
        dialer: Dialer,
        sync: SyncMode,
    ) -> anyhow::Result<Arc<Member>> {
        let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (n, u) in &cfg.initial_cluster {
            by_name.entry(n.as_str()).or_default().push(u.clone());
        }
        let ids: Vec<u64> = by_name.values().map(|urls| member_id(urls, &cfg.initial_cluster_token)).collect();
        if !by_name.contains_key(cfg.name.as_str()) {
            anyhow::bail!("couldn't find local name {:?} in the initial cluster configuration", cfg.name);
        }
        let peers = Peers { dialer: dialer.clone(), hold: Default::default() };
        let hold = peers.hold.clone();
        // A data directory keeps the ids it was created with; the initial-* flags only count once.
        let known = read_identity(&*engine)?;
        let identity = match known {
            Some(i) => i,
            None => {
                let i = match cfg.initial_cluster_state {
                    ClusterState::New => Identity {
                        id: member_id(&by_name[cfg.name.as_str()], &cfg.initial_cluster_token),
                        cluster_id: cluster_id(&ids),
                    },
                    ClusterState::Existing => join(cfg, &dialer).await?,
                };
                write_identity(&*engine, i)?;
                i
            }
        };
        let Identity { id, cluster_id } = identity;

        let mvcc = Arc::new(Mvcc::open(engine.clone())?);
        let syncer = Syncer::new(engine.clone(), sync);
        let sm = StateMachine::open(mvcc.clone())?;
        let hub = sm.hub().clone();
        let tokens = sm.tokens().clone();
        tokens.set_ttl(cfg.auth_token_ttl);
        // etcd fragments watch responses at the request limit plus its gRPC overhead allowance.
        hub.configure(cluster_id, id, cfg.max_request_bytes as usize + crate::server::GRPC_OVERHEAD_BYTES);
        let log = LogStore::new(engine.clone(), syncer);
        let rcfg = openraft::Config {
            cluster_name: cfg.initial_cluster_token.clone(),
            heartbeat_interval: cfg.heartbeat_interval_ms,
            election_timeout_min: cfg.election_timeout_ms,
            election_timeout_max: cfg.election_timeout_ms * 2,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_count.max(1)),
            max_in_snapshot_log_to_keep: cfg.snapshot_catchup_entries,
            ..Default::default()
        };
        let rcfg = Arc::new(rcfg.validate()?);
        let raft = Raft::new(id, rcfg, peers, log, sm).await?;
        if known.is_none() && cfg.initial_cluster_state == ClusterState::New && !raft.is_initialized().await? {
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
            proposals: Proposals::new(raft.clone(), cfg.max_request_bytes as usize),
            raft,
            mvcc,
            hub,
            tokens,
            bcrypt_cost: cfg.bcrypt_cost,
            limits: Limits { max_request_bytes: cfg.max_request_bytes, max_txn_ops: cfg.max_txn_ops },
            request_timeout,
            engine,
            dialer,
            tasks: Mutex::new(Vec::new()),
            closing: tokio::sync::watch::channel(false).0,
            removed: tokio::sync::watch::channel(false).0,
            ready: tokio::sync::watch::channel(false).0,
            hold,
            reconfig: tokio::sync::Mutex::new(()),
            token: cfg.initial_cluster_token.clone(),
            quota: cfg.quota_backend_bytes,
            leader_lease: Duration::from_millis(cfg.election_timeout_ms * 2),
            grpc: Default::default(),
            leader_changes: Default::default(),
            reads: Default::default(),
            leader_reads: Default::default(),
        });
        member.start_tasks(cfg.watch_progress_notify_interval);
        let attributes = Attributes { name: cfg.name.clone(), client_urls: cfg.advertise_client_urls.clone() };
        member.tasks.lock().push(tokio::spawn(publish(Arc::downgrade(&member), attributes)));
        Ok(member)
    }

    fn start_tasks(self: &Arc<Self>, progress_interval: Duration) {
        let mut tasks = self.tasks.lock();
        tasks.push(tokio::spawn(self.hub.clone().run()));
        let (hub, mut metrics, removed, id) = (self.hub.clone(), self.raft.metrics(), self.removed.clone(), self.id);
        let changes = self.leader_changes.clone();
        tasks.push(tokio::spawn(async move {
            let (mut was_member, mut last_leader) = (false, None);
            loop {
                let (term, member, leader) = {
                    let m = metrics.borrow_and_update();
                    (m.current_term, m.membership_config.membership().get_node(&id).is_some(), m.current_leader)
                };
                hub.set_term(term);
                if leader.is_some() && leader != last_leader {
                    changes.fetch_add(1, Ordering::Relaxed);
                }
                last_leader = leader;
                if member {
                    was_member = true;
                } else if was_member {
                    tracing::warn!("the member has been permanently removed from the cluster");
                    removed.send_replace(true);
                    return;
                }
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

    /// Proposes a write and waits until it is applied on the leader (its Raft entry synced on a
    /// quorum; the applied batch itself is not synced, the log is the durable record); a follower
    /// forwards it to the leader. While there is no leader it waits for one, up to the request
    /// timeout, then answers `etcdserver: no leader`.
    pub async fn write(&self, cmd: Command) -> Result<Reply> {
        if self.is_learner() {
            return Err(Error::NotSupportedForLearner);
        }
        if needs_space(&cmd) && self.over_quota(&cmd) {
            // As etcd: raise NOSPACE for this member, refuse the write.
            let raise = AlarmRequest {
                action: AlarmAction::Activate as i32,
                member_id: self.id,
                alarm: AlarmType::Nospace as i32,
            };
            if let Err(e) = self.propose(Command::Alarm(Proto(raise))).await {
                tracing::warn!("raising the NOSPACE alarm: {e}");
            }
            return Err(Error::NoSpace);
        }
        if crate::plant::on("ack-before-commit") {
            return Ok(self.ack_early(cmd));
        }
        self.propose(cmd).await
    }

    /// The planted `ack-before-commit` bug: proposes in the background and answers at once with
    /// a success that may never commit.
    fn ack_early(&self, cmd: Command) -> Reply {
        let reply = match &cmd {
            Command::Put(_) => Reply::Put(Proto(Default::default())),
            Command::Txn(_) => {
                Reply::Txn(Proto(keel_proto::etcdserverpb::TxnResponse { succeeded: true, ..Default::default() }))
            }
            Command::DeleteRange(_) => Reply::DeleteRange(Proto(Default::default())),
            _ => Reply::None,
        };
        let raft = self.raft.clone();
        tokio::spawn(async move {
            let _ = raft.client_write(cmd).await;
        });
        reply
    }

    /// Whether the backend plus `cmd` would exceed the space quota. The command's size is only
    /// worked out when the backend is within the largest request of the quota.
    fn over_quota(&self, cmd: &Command) -> bool {
        let Some(quota) = self.quota else { return false };
        let size = self.engine.backend_size();
        let largest = self.limits.max_request_bytes + crate::server::GRPC_OVERHEAD_BYTES as u64;
        size + largest > quota && size + bincode::serialized_size(cmd).unwrap_or(0) > quota
    }

    /// Whether this member is the leader as far as it knows.
    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// Proposes a command (forwarding it to the leader if need be), without the client-facing
    /// checks of [`Member::write`].
    pub async fn propose(&self, cmd: Command) -> Result<Reply> {
        self.propose_within_deadline(cmd, true).await.map(|(reply, _)| reply)
    }

    /// Proposes `cmd` only while this member leads (`not leader` otherwise, never forwarded): for
    /// the lessor's own decisions, expiries and TTL checkpoints, which belong to the term that
    /// made them. Forwarded, a deposed leader's revoke would reach a new leader that has since
    /// renewed the lease for its client.
    pub async fn propose_as_leader(&self, cmd: Command) -> Result<Reply> {
        self.propose_within_deadline(cmd, false).await.map(|(reply, _)| reply)
    }

    /// Proposes `cmd` within the request deadline; returns its reply and log index.
    async fn propose_within_deadline(&self, cmd: Command, may_forward: bool) -> Result<(Reply, u64)> {
        self.within_deadline(self.write_or_forward(cmd, may_forward)).await
    }

    /// Whether this member is a learner (it then serves only serializable reads and status).
    pub fn is_learner(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        membership.get_node(&self.id).is_some() && !membership.voter_ids().any(|v| v == self.id)
    }

    /// etcd's answer to a request that ran out of time: no leader, or timed out.
    fn timed_out(&self) -> Error {
        if self.raft.metrics().borrow().current_leader.is_none() {
            Error::NoLeader
        } else {
            Error::Timeout
        }
    }

    /// Writes `cmd` through Raft here (the leader) or, with `may_forward`, on the leader; returns
    /// the reply and the index of its log entry. A write goes to the leader (again) only when it
    /// provably was not proposed: refused here before Raft saw it ([`Refused::NotLeader`]), or its
    /// forward never had a connection (`never_sent`). A forwarded write is answered only once this
    /// member has applied it too, as etcd answers from its own apply: a client never sees a
    /// member's revision go back, e.g. from a write's answer to a serializable read (or across a
    /// crash of this member).
    async fn write_or_forward(&self, cmd: Command, may_forward: bool) -> Result<(Reply, u64)> {
        loop {
            match self.proposals.write(cmd.clone()).await {
                Ok((applied, index)) => return applied.0.map(|reply| (reply, index)),
                // Never proposed here (see `Refused`), so it may go to the leader.
                Err(Refused::NotLeader(leader)) => match leader {
                    Some(node) if may_forward => match self.forward(&node.addr, Forwarded::Write(cmd.clone())).await {
                        // The leader is unreachable and the request never reached it, or it no
                        // longer leads (this member's view is stale, e.g. just after a restart):
                        // wait to learn of the new one.
                        Err(Error::NoLeader) | Ok(ForwardReply::Write(Err(Error::NotLeader))) => {
                            tokio::time::sleep(NO_LEADER_RETRY).await
                        }
                        Err(e) => return Err(e),
                        Ok(ForwardReply::Write(Ok((reply, index)))) => {
                            self.wait_applied(index, "forwarded write").await?;
                            return Ok((reply, index));
                        }
                        Ok(ForwardReply::Write(Err(e))) => return Err(e),
                        Ok(_) => return Err(unexpected_reply()),
                    },
                    None if may_forward => tokio::time::sleep(NO_LEADER_RETRY).await,
                    _ => return Err(Error::NotLeader),
                },
                Err(Refused::LeaderLost) => return Err(Error::TimeoutLeaderFail),
                Err(Refused::Stopped) => return Err(Error::Stopped),
            }
        }
    }

    /// Sends a request to the leader's peer service. An unreachable leader is `NoLeader`.
    async fn forward(&self, leader_url: &str, f: Forwarded) -> Result<ForwardReply> {
        forward(&self.dialer, self.request_timeout, leader_url, f).await
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
        let stale = |r: &Result<ForwardReply>| {
            matches!(
                r,
                Err(Error::NoLeader | Error::TimeoutDueToConnectionLost)
                    | Ok(ForwardReply::KeepAlive(Err(Error::NotLeader | Error::NoLeader)))
                    | Ok(ForwardReply::Remaining(Err(Error::NotLeader | Error::NoLeader)))
            )
        };
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        loop {
            let mut reply = self.serve_forwarded(f.clone()).await;
            if stale(&reply) && !self.is_leader() {
                if let Some(url) = self.leader_url() {
                    reply = self.forward(&url, f.clone()).await;
                }
            }
            // Until the request timeout, a stale view of the leader is waited out.
            if !stale(&reply) || tokio::time::Instant::now() >= deadline {
                return reply;
            }
            tokio::time::sleep(NO_LEADER_RETRY).await;
        }
    }

    /// Renews a lease here, once a quorum has confirmed that this member still leads (as etcd
    /// does since etcd-io/etcd#15247): a leader cut off from the others would otherwise extend a
    /// lease that the real leader lets expire, and the client would count on time it does not
    /// have.
    async fn renew_as_leader(self: &Arc<Self>, id: i64) -> Result<i64> {
        let index = self.leader_read_index().await.here()?;
        self.wait_applied(index, "lease renewal").await?;
        let (ttl, stale_checkpoint) = self.lessor.renew(self, id)?;
        if stale_checkpoint {
            Lessor::clear_checkpoint(self, id).await?;
        }
        Ok(ttl)
    }

    /// Returns once this member has applied the log up to `index`.
    async fn wait_applied(&self, index: u64, why: &str) -> Result<()> {
        self.raft.wait(None).applied_index_at_least(Some(index), why).await.map(|_| ()).map_err(|_| Error::Stopped)
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
            Forwarded::KeepAlive(id) => ForwardReply::KeepAlive(self.renew_as_leader(id).await),
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
            Forwarded::ReadIndex => ForwardReply::ReadIndex(self.leader_read_index().await.here()),
            Forwarded::Change(c) => ForwardReply::Change(self.change_here(c).await),
            Forwarded::Members => ForwardReply::Members(self.cluster_id, self.members()),
            Forwarded::Elect => ForwardReply::Done(self.raft.trigger().elect().await.map_err(|_| Error::Stopped)),
            Forwarded::HoldElections(hold) => {
                self.raft.runtime_config().elect(!hold);
                if hold {
                    // Should the old leader die mid-transfer, campaign again after a while anyway.
                    let (raft, after) = (self.raft.clone(), self.request_timeout);
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        raft.runtime_config().elect(true);
                    });
                }
                ForwardReply::Done(Ok(()))
            }
        })
    }

    /// The members as this member knows them (its applied membership).
    pub fn members(&self) -> Vec<MemberInfo> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        membership::members(membership.membership(), self.mvcc.read().registry())
    }

    /// Applies a membership change on the leader (forwarded there from any member); answers the
    /// members afterwards as the leader sees them.
    pub async fn change_membership(self: &Arc<Self>, change: Change) -> Result<Changed> {
        let fut = async {
            loop {
                match self.leader_url() {
                    _ if self.is_leader() => return self.change_here(change.clone()).await,
                    Some(url) => match self.forward(&url, Forwarded::Change(change.clone())).await {
                        Err(Error::NoLeader) => tokio::time::sleep(NO_LEADER_RETRY).await,
                        Err(e) => return Err(e),
                        Ok(ForwardReply::Change(Err(Error::NotLeader))) => tokio::time::sleep(NO_LEADER_RETRY).await,
                        Ok(ForwardReply::Change(r)) => return r,
                        Ok(_) => return Err(unexpected_reply()),
                    },
                    None => tokio::time::sleep(NO_LEADER_RETRY).await,
                }
            }
        };
        self.within_deadline(fut).await
    }

    /// A membership change on this member, which must be the leader; checked as etcd checks it.
    async fn change_here(&self, change: Change) -> Result<Changed> {
        let _one_at_a_time = self.reconfig.lock().await;
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.id) {
            return Err(Error::NotLeader);
        }
        let membership = metrics.membership_config.membership().clone();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let exists = |id: u64| membership.get_node(&id).is_some();
        let started = |id: &u64| self.mvcc.read().registry().attributes.get(id).is_some_and(|a| !a.name.is_empty());
        let quorum = |n: usize| n / 2 + 1;
        let mut added = None;
        let change = match change {
            Change::Add { peer_urls, learner } => {
                membership::validate_urls(&peer_urls)?;
                if membership::urls_taken(&membership, &peer_urls, None) {
                    return Err(Error::PeerUrlExist);
                }
                if learner && membership.nodes().count() > voters.len() {
                    return Err(Error::TooManyLearners);
                }
                // etcd's strict reconfiguration check: the started voters must still make a
                // quorum once the new, not yet started, voter counts.
                if !learner && voters.iter().filter(|v| started(v)).count() < quorum(voters.len() + 1) {
                    return Err(Error::NotEnoughStarted);
                }
                // etcd mixes the wall clock in; the leader's log position is as unique within the
                // cluster and keeps a simulated run replayable.
                let position = metrics.last_log_index.unwrap_or(0);
                let id = member_id(&peer_urls, &format!("{}{position}", self.token));
                if exists(id) {
                    return Err(Error::MemberExist);
                }
                added = Some(MemberInfo {
                    id,
                    name: String::new(),
                    peer_urls: peer_urls.clone(),
                    client_urls: Vec::new(),
                    is_learner: learner,
                });
                let node = membership::node_of(&peer_urls);
                if learner {
                    ChangeMembers::AddNodes(BTreeMap::from([(id, node)]))
                } else {
                    ChangeMembers::AddVoters(BTreeMap::from([(id, node)]))
                }
            }
            Change::Remove(id) => {
                if !exists(id) {
                    return Err(Error::MemberNotFound);
                }
                if voters.contains(&id) {
                    let left = voters.iter().filter(|v| **v != id && started(v)).count();
                    if voters.len() > 1 && left < quorum(voters.len() - 1) {
                        return Err(Error::NotEnoughStarted);
                    }
                    // Without `retain`, the removed voter's node goes too.
                    ChangeMembers::RemoveVoters(BTreeSet::from([id]))
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                }
            }
            Change::Update { id, peer_urls } => {
                membership::validate_urls(&peer_urls)?;
                if !exists(id) {
                    return Err(Error::MemberNotFound);
                }
                if membership::urls_taken(&membership, &peer_urls, Some(id)) {
                    return Err(Error::PeerUrlExist);
                }
                ChangeMembers::SetNodes(BTreeMap::from([(id, membership::node_of(&peer_urls))]))
            }
            Change::Promote(id) => {
                if !exists(id) {
                    return Err(Error::MemberNotFound);
                }
                if voters.contains(&id) {
                    return Err(Error::MemberNotLearner);
                }
                let matched = metrics.replication.as_ref().and_then(|r| r.get(&id).cloned().flatten()).map(|l| l.index);
                if !membership::learner_ready(matched, metrics.last_log_index.unwrap_or(0)) {
                    return Err(Error::LearnerNotReady);
                }
                ChangeMembers::AddVoterIds(BTreeSet::from([id]))
            }
        };
        self.raft.change_membership(change, false).await.map_err(change_err)?;
        Ok(Changed { member: added, members: self.members() })
    }

    /// Moves leadership to `target` (etcd's MoveLeader; only the leader does this). openraft 0.9
    /// has no transfer call, so the leader makes way: it waits until the target has its whole log,
    /// asks the other members not to campaign, stops sending (so their leader lease runs out),
    /// then tells the target to campaign; the target has the longest log and wins.
    pub async fn move_leader(&self, target: u64) -> Result<()> {
        let _one_at_a_time = self.reconfig.lock().await;
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.id) {
            return Err(Error::NotLeader);
        }
        let membership = metrics.membership_config.membership().clone();
        if !membership.voter_ids().any(|v| v == target) {
            return Err(Error::BadLeaderTransferee);
        }
        if target == self.id {
            return Ok(());
        }
        let url = |id: u64| membership.get_node(&id).map(|n| n.addr.clone()).unwrap_or_default();
        let others: Vec<u64> = membership.voter_ids().filter(|v| *v != target && *v != self.id).collect();
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut metrics_rx = self.raft.metrics();
        let caught_up = async {
            loop {
                let done = {
                    let m = metrics_rx.borrow_and_update();
                    let last = m.last_log_index;
                    m.replication.as_ref().and_then(|r| r.get(&target).cloned().flatten()).map(|l| l.index) == last
                };
                if done || metrics_rx.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout_at(deadline, caught_up).await.is_err() {
            return Err(Error::TimeoutLeaderTransfer);
        }
        // Until it is dropped (done, timed out, or the client went away), the members told to
        // hold elections are told to stop holding, and once `hold` is called this member sends
        // nothing and neither heartbeats nor campaigns.
        let mut holding = Holding { member: self, others: Vec::new(), held: false };
        for o in others {
            let u = url(o);
            let _ = self.forward(&u, Forwarded::HoldElections(true)).await;
            holding.others.push(u);
        }
        holding.hold();
        // The followers refuse to vote until the lease of this leader has run out.
        tokio::time::sleep(self.leader_lease + Duration::from_millis(50)).await;
        let elected = async {
            let _ = self.forward(&url(target), Forwarded::Elect).await;
            let mut rx = self.raft.metrics();
            loop {
                if rx.borrow_and_update().current_leader == Some(target) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let outcome = tokio::time::timeout_at(deadline, elected).await;
        holding.release().await;
        outcome.map_err(|_| Error::TimeoutLeaderTransfer)
    }

    /// Whether this member is holding for a leadership transfer (see [`Member::move_leader`]):
    /// sending nothing to its peers, neither heartbeating nor campaigning.
    pub fn transferring(&self) -> bool {
        self.hold.load(Ordering::SeqCst)
    }

    /// Resolves once this member was removed from the cluster.
    pub async fn removed(&self) {
        let _ = self.removed.subscribe().wait_for(|r| *r).await;
    }

    /// Leader changes seen since start.
    pub fn leader_changes(&self) -> u64 {
        self.leader_changes.load(Ordering::Relaxed)
    }

    /// The backend space quota in bytes, if any.
    pub fn quota(&self) -> Option<u64> {
        self.quota
    }

    /// Space used by the backend and by live data, in bytes.
    pub fn backend_sizes(&self) -> (u64, u64) {
        (self.engine.backend_size(), self.engine.backend_size_in_use())
    }

    /// The read barrier (ReadIndex): returns once this member has applied everything the
    /// leader had committed when it was called. Concurrent reads share ReadIndex rounds (see
    /// [`Rounds`]); a follower's round asks the leader, whose own rounds serve it too.
    pub async fn linearize(self: &Arc<Self>) -> Result<()> {
        if self.is_learner() {
            return Err(Error::NotSupportedForLearner);
        }
        if crate::plant::on("stale-read") {
            return Ok(());
        }
        let barrier = async {
            let m = self.clone();
            let index = self.reads.join(move || m.read_index()).await?;
            self.wait_applied(index, "read barrier").await
        };
        self.within_deadline(barrier).await
    }

    /// Resolves once this member is ready to answer clients (see `ready`), at once if it is, or
    /// with `request timed out` after the request deadline.
    pub async fn ready(&self) -> Result<()> {
        if self.is_ready() {
            return Ok(());
        }
        let mut rx = self.ready.subscribe();
        self.within_deadline(async { rx.wait_for(|r| *r).await.map(|_| ()).map_err(|_| Error::Stopped) }).await
    }

    /// Runs `fut` within the request deadline, failing with `request timed out` after it.
    async fn within_deadline<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.request_timeout, fut).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    /// Whether this member is ready to answer clients.
    fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// One ReadIndex round for this member's reads: the leader's commit index once a quorum
    /// confirmed it leads, asked of the leader when this member is a follower. Retries while
    /// there is no leader, within the request deadline.
    async fn read_index(self: Arc<Self>) -> Result<u64> {
        let round = async {
            loop {
                match self.leader_read_index().await {
                    LeaderRead::Index(i) => return Ok(i),
                    LeaderRead::Stopped => return Err(Error::Stopped),
                    LeaderRead::NoQuorum | LeaderRead::Forward(None) => tokio::time::sleep(NO_LEADER_RETRY).await,
                    LeaderRead::Forward(Some(node)) => match self.forward(&node.addr, Forwarded::ReadIndex).await {
                        // Asking again is harmless: a read index changes nothing.
                        Err(Error::NoLeader | Error::TimeoutDueToConnectionLost)
                        | Ok(ForwardReply::ReadIndex(Err(Error::NotLeader | Error::NoLeader))) => {
                            tokio::time::sleep(NO_LEADER_RETRY).await
                        }
                        Err(e) => return Err(e),
                        Ok(ForwardReply::ReadIndex(r)) => return r,
                        Ok(_) => return Err(unexpected_reply()),
                    },
                }
            }
        };
        self.within_deadline(round).await
    }

    /// A ReadIndex round as the leader, shared with every other read that joined it.
    async fn leader_read_index(&self) -> LeaderRead {
        // The commit index a leader restarts with may be behind what it committed before.
        if self.ready().await.is_err() {
            return LeaderRead::NoQuorum;
        }
        let raft = self.raft.clone();
        let round = move || {
            let raft = raft.clone();
            async move {
                match raft.get_read_log_id().await {
                    Ok((read, _)) => LeaderRead::Index(read.map(|l| l.index).unwrap_or(0)),
                    Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                        LeaderRead::Forward(f.leader_node)
                    }
                    Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => LeaderRead::NoQuorum,
                    Err(RaftError::Fatal(_)) => LeaderRead::Stopped,
                }
            }
        };
        self.leader_reads.join(round).await
    }

    /// Who a client is, from the token in its request metadata (`token`, or `authorization` as
    /// etcd's gateway passes it): no user without a token. As etcd, a token is looked up only
    /// once this member has applied the Authenticate entry that issued it (the index in its
    /// name), so it works on every member; one that is unknown, expired or malformed is
    /// `invalid auth token`. The auth revision is the one this member has applied.
    ///
    /// Without a token, a gRPC request on a `--client-cert-auth` connection is from the user its
    /// verified certificate names (its common name), at the auth revision this member has applied.
    pub async fn auth_info(&self, md: &tonic::metadata::MetadataMap) -> Result<AuthInfo> {
        let Some(token) = md.get("token").or_else(|| md.get("authorization")) else {
            let cert_user =
                md.get(crate::server::CERT_USER).and_then(|v| String::from_utf8(v.as_bytes().to_vec()).ok());
            return Ok(match cert_user {
                Some(username) => AuthInfo { username, revision: self.mvcc.read().auth().revision() },
                None => AuthInfo::default(),
            });
        };
        let invalid = || Error::Auth(AuthError::InvalidAuthToken);
        let token = token.to_str().map_err(|_| invalid())?;
        let index = keel_auth::token_index(token).ok_or_else(invalid)?;
        let applied = self.wait_applied(index, "auth token");
        if tokio::time::timeout(self.request_timeout, applied).await.is_err() {
            return Err(invalid());
        }
        let view = self.mvcc.read();
        Ok(self.tokens.with(|t, now| view.auth().auth_info(t, token, now))?)
    }

    /// Writes `cmd` (as [`Member::write`]) for the client the metadata names: with its user and
    /// auth revision when it sent a token, to be checked when the write is applied.
    pub async fn write_for(&self, md: &tonic::metadata::MetadataMap, cmd: Command) -> Result<Reply> {
        let who = self.auth_info(md).await?;
        self.write(crate::auth::as_client(who, cmd)).await
    }

    /// Whether the client the metadata names may manage the cluster (root role) while auth is
    /// on: etcd's check on defragment, snapshot, the hashes and membership changes.
    pub async fn check_admin(&self, md: &tonic::metadata::MetadataMap) -> Result<()> {
        let who = self.auth_info(md).await?;
        Ok(self.mvcc.read().auth().is_admin_permitted(&who)?)
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

/// The leader's part of a leadership transfer in progress (see [`Member::move_leader`]): once
/// held, the Raft network sends nothing and the member neither heartbeats nor campaigns.
/// Dropped, however the transfer ends (a client that goes away drops it mid-way), it turns all
/// three back on, and tells the members that were asked to hold elections that they may campaign
/// again (in the background when dropped; they would time out on their own otherwise).
struct Holding<'a> {
    member: &'a Member,
    /// Peer URLs of the members asked to hold elections.
    others: Vec<String>,
    /// Whether this member holds (sends nothing, no heartbeats, no campaign).
    held: bool,
}

impl Holding<'_> {
    fn hold(&mut self) {
        self.held = true;
        self.member.hold.store(true, Ordering::SeqCst);
        self.member.raft.runtime_config().heartbeat(false);
        self.member.raft.runtime_config().elect(false);
    }

    /// Ends the hold and waits until the other members were told.
    async fn release(mut self) {
        let telling = release_elections(self.member, std::mem::take(&mut self.others));
        drop(self);
        telling.await;
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let m = self.member;
        if self.held {
            m.hold.store(false, Ordering::SeqCst);
            m.raft.runtime_config().heartbeat(true);
            m.raft.runtime_config().elect(true);
        }
        let others = std::mem::take(&mut self.others);
        if others.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release_elections(m, others));
        }
    }
}

/// Tells the members at `urls` that they may campaign again (the end of a transfer's hold).
fn release_elections(m: &Member, urls: Vec<String>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (dialer, timeout) = (m.dialer.clone(), m.request_timeout);
    async move {
        for url in urls {
            let _ = forward(&dialer, timeout, &url, Forwarded::HoldElections(false)).await;
        }
    }
}

/// Sends a request to a peer's peer service (the leader's, but for leadership transfers),
/// within `timeout`. An unreachable peer is `NoLeader`.
async fn forward(dialer: &Dialer, timeout: Duration, url: &str, f: Forwarded) -> Result<ForwardReply> {
    let mut client = dialer.client(url).map_err(Error::Io)?;
    let mut req = tonic::Request::new(encode(&f));
    req.set_timeout(timeout);
    match client.forward(req).await {
        Ok(r) => decode::<Result<ForwardReply>>(&r.into_inner()).map_err(Error::Io)?,
        Err(status) => {
            dialer.forget(url);
            Err(match status.code() {
                tonic::Code::DeadlineExceeded => Error::Timeout,
                _ if never_sent(&status) => Error::NoLeader,
                // The request may have reached the leader: its outcome is unknown, so a write
                // must not be sent again (it could apply twice).
                _ => Error::TimeoutDueToConnectionLost,
            })
        }
    }
}

/// etcd's answer for a membership change openraft refused.
fn change_err(e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Error::NotLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => Error::Io(e.to_string()),
        RaftError::Fatal(_) => Error::Stopped,
    }
}

/// Publishes this member's name and client URLs through Raft once a leader takes them, on every
/// start (etcd's publish), and marks the member ready once it has applied that entry: it was
/// proposed after this start, so everything committed before it (and so everything this member
/// or any other answered before a crash) is applied here by then. A member restarted as the
/// leader of its old term has no new entry of its own to commit otherwise, and a commit index
/// from before the crash that was never synced would let it answer reads without entries it had
/// committed.
async fn publish(member: Weak<Member>, attributes: Attributes) {
    loop {
        let Some(m) = member.upgrade() else { return };
        let cmd = Command::Publish { id: m.id, attributes: attributes.clone() };
        // A forwarded entry is applied on the leader first; this member is ready once it has
        // applied it too.
        let published = match m.propose_within_deadline(cmd, true).await {
            Ok((_, index)) => m.wait_applied(index, "publish").await,
            Err(e) => Err(e),
        };
        match published {
            Ok(()) => {
                m.ready.send_replace(true);
                return;
            }
            Err(e) => tracing::debug!("publishing member attributes: {e}"),
        }
        drop(m);
        tokio::time::sleep(NO_LEADER_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_counts_as_never_sent() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut client = Dialer::default().client(&format!("http://127.0.0.1:{port}")).unwrap();
        let status = client.forward(encode(&Forwarded::ReadIndex)).await.expect_err("nobody listens");
        assert!(never_sent(&status), "{status:?}");
        // Only the error's type counts, not its words.
        assert!(!never_sent(&tonic::Status::unavailable("connection reset by peer")));
        assert!(!never_sent(&tonic::Status::unavailable("connect error: Connection refused")));
    }

    #[test]
    fn ids_match_etcds_defaults() {
        // A default `etcd` (peer URL http://localhost:2380, token etcd-cluster) is member
        // 8e9e05c52164694d of cluster cdf818194e3a8c32.
        let id = member_id(&["http://localhost:2380".to_string()], "etcd-cluster");
        assert_eq!(format!("{id:x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:x}", cluster_id(&[id])), "cdf818194e3a8c32");
    }
}
