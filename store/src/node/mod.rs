//! A keel member: the engine, MVCC, openraft, the watch hub, the lessor and the limits, put
//! together behind a small API. The gRPC services hold an `Arc<Member>` and call
//! [`Member::write`] (every write is a Raft command), [`Member::linearize`] (the read barrier
//! before a linearizable read) and [`Member::read`] (a view of the applied state).
//!
//! Its concerns live in their own files: [`identity`] (ids, joining), [`peer`] (what followers
//! forward to the leader and the one retry loop for leader-only requests), [`reads`]
//! (ReadIndex), [`reconfig`] (membership changes, leadership transfer); lease timers are the
//! [`Lessor`]'s.
//!
//! Background tasks, all ended by [`Member::shutdown`]: the watch hub's sync loop, the periodic
//! progress notifications, the Raft term feed for watch headers, and the lessor's loop.

mod identity;
mod peer;
mod reads;
mod reconfig;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use keel_auth::{AuthError, AuthInfo};
use keel_proto::etcdserverpb::{
    alarm_request::AlarmAction, AlarmRequest, AlarmType, RangeRequest, RangeResponse, ResponseHeader,
};
use openraft::{BasicNode, ServerState};
use parking_lot::Mutex;
use tokio::task::JoinHandle;

pub use identity::{cluster_id, member_id};
pub use peer::{ForwardReply, Forwarded};
pub(crate) use peer::{Resend, Try};

use crate::auth::Tokens;
use crate::config::{ClusterState, Config, Limits};
use crate::engine::{Engine, SyncMode, Syncer};
use crate::error::{Error, Result};
use crate::lessor::Lessor;
use crate::mvcc::registry::Attributes;
use crate::mvcc::{HashKv, Mvcc, ReadView};
use crate::raft::apply::exceeds_quota;
use crate::raft::log_store::LogStore;
use crate::raft::network::{Dialer, Peers};
use crate::raft::proposals::Proposals;
use crate::raft::state_machine::StateMachine;
use crate::raft::{Command, Proto, Raft, Reply};
use crate::rounds::Rounds;
use crate::watch::Hub;
use identity::Identity;
use reads::LeaderRead;

/// The etcd API version keel speaks (reported by `/version` and `Maintenance.Status`).
pub const ETCD_API_VERSION: &str = "3.5.0";
/// The cluster version keel reports.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";

/// How long a request waits before asking again while the cluster has no leader.
const NO_LEADER_RETRY: Duration = Duration::from_millis(50);

/// One running member.
pub struct Member {
    id: u64,
    cluster_id: u64,
    name: String,
    raft: Raft,
    /// Writes proposed on this member as the leader, batched while one is in flight.
    proposals: Proposals,
    mvcc: Arc<Mvcc>,
    hub: Arc<Hub>,
    /// Auth tokens this member has registered (shared with its state machine).
    tokens: Arc<Tokens>,
    /// bcrypt's cost for the password hashes this member makes (`--bcrypt-cost`).
    bcrypt_cost: u32,
    lessor: Lessor,
    limits: Limits,
    /// How long a request may wait for Raft before answering `etcdserver: request timed out`.
    request_timeout: Duration,
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
    /// Leader changes this member has seen (`etcd_server_leader_changes_seen_total`).
    leader_changes: Arc<AtomicU64>,
    /// ReadIndex rounds shared by this member's linearizable reads (leader or follower).
    reads: Rounds<Result<u64>>,
    /// ReadIndex rounds as the leader, shared by its own reads and those its followers forward.
    leader_reads: Rounds<LeaderRead>,
}

/// What this member's Raft knows, at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct RaftStatus {
    pub term: u64,
    /// The leader this member knows of.
    pub leader: Option<u64>,
    /// Whether this member has taken office as the leader (openraft names a leader before it
    /// has; [`Member::is_leader`] goes by the name).
    pub leading: bool,
    pub last_log_index: u64,
    pub applied_index: u64,
    /// Entries up to this index are only in the snapshot.
    pub purged_index: u64,
}

/// How a client proved who it is (the edge reads it from the request).
#[derive(Debug, Clone, Copy)]
pub enum Credentials<'a> {
    /// A token from `Authenticate`.
    Token(&'a str),
    /// The common name of a verified client certificate (`--client-cert-auth`).
    Certificate(&'a str),
    Anonymous,
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
        let known = Identity::read(&*engine)?;
        let identity = match known {
            Some(i) => i,
            None => {
                let i = match cfg.initial_cluster_state {
                    ClusterState::New => Identity {
                        id: member_id(&by_name[cfg.name.as_str()], &cfg.initial_cluster_token),
                        cluster_id: cluster_id(&ids),
                    },
                    ClusterState::Existing => identity::join(cfg, &dialer).await?,
                };
                i.write(&*engine)?;
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
        hub.configure(cluster_id, id, cfg.limits().max_message_bytes());
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
            limits: cfg.limits(),
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
        let over_quota = |quota| exceeds_quota(&cmd, self.engine.backend_size(), quota, &self.limits);
        if self.quota.is_some_and(over_quota) {
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

    /// Whether this member is the leader as far as it knows.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// Whether this member is a learner (it then serves only serializable reads and status).
    pub fn is_learner(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        membership.get_node(&self.id).is_some() && !membership.voter_ids().any(|v| v == self.id)
    }

    /// What this member's Raft knows now.
    pub fn raft_status(&self) -> RaftStatus {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        RaftStatus {
            term: m.current_term,
            leader: m.current_leader,
            leading: m.state == ServerState::Leader && m.current_leader == Some(self.id),
            last_log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            purged_index: m.purged.map_or(0, |l| l.index),
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

    /// Runs `fut` within the request deadline, failing with `request timed out` after it.
    pub(crate) async fn within_deadline<T>(&self, fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.request_timeout, fut).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    /// Who a client is: no user without credentials; a certificate's common name at the auth
    /// revision this member has applied. As etcd, a token is looked up only once this member has
    /// applied the Authenticate entry that issued it (the index in its name), so it works on
    /// every member; one that is unknown, expired or malformed is `invalid auth token`. The auth
    /// revision is the one this member has applied.
    pub async fn caller(&self, credentials: Credentials<'_>) -> Result<AuthInfo> {
        let token = match credentials {
            Credentials::Token(token) => token,
            Credentials::Certificate(name) => {
                return Ok(AuthInfo { username: name.to_string(), revision: self.read().auth().revision() })
            }
            Credentials::Anonymous => return Ok(AuthInfo::default()),
        };
        let invalid = || Error::Auth(AuthError::InvalidAuthToken);
        let index = keel_auth::token_index(token).ok_or_else(invalid)?;
        let applied = self.wait_applied(index, "auth token");
        if tokio::time::timeout(self.request_timeout, applied).await.is_err() {
            return Err(invalid());
        }
        let view = self.read();
        Ok(self.tokens.with(|t, now| view.auth().auth_info(t, token, now))?)
    }

    /// The applied state, for reads: consistent until dropped, and holding off applies meanwhile,
    /// so keep it short.
    pub fn read(&self) -> ReadView<'_> {
        self.mvcc.read()
    }

    /// Answers a Range (etcd's semantics, `mvcc::kv::range`) from the applied state; values are
    /// loaded outside the state lock, so applies go on meanwhile.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeResponse> {
        self.mvcc.range(r)
    }

    /// etcd's HashKV over this member's history up to `rev` (0 = the current revision), hashed
    /// outside the state lock.
    pub fn hash_kv(&self, rev: i64) -> Result<HashKv> {
        self.mvcc.hash_kv(rev)
    }

    /// etcd's Hash: a checksum over every state-machine pair, read from one engine snapshot.
    pub fn hash(&self) -> Result<u32> {
        crate::raft::state_machine::hash(&*self.engine_snapshot())
    }

    /// A point-in-time view of the whole engine, never inside a snapshot install.
    pub fn engine_snapshot(&self) -> Arc<dyn crate::engine::Reads> {
        self.mvcc.engine_snapshot()
    }

    /// The watch hub this member's applies feed.
    pub fn watches(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub(crate) fn lessor(&self) -> &Lessor {
        &self.lessor
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The request limits enforced at the edge.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// bcrypt's cost for the password hashes this member makes (`--bcrypt-cost`).
    pub fn bcrypt_cost(&self) -> u32 {
        self.bcrypt_cost
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

    /// The revision of the state this member has applied.
    pub fn current_rev(&self) -> i64 {
        self.mvcc.current_rev()
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
