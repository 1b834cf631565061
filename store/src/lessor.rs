//! The leader's side of leases: expiry timers, keep-alives, remaining TTLs, lease ids.
//!
//! The lease table itself is replicated state (`mvcc::lease`); time is not. Only the leader keeps
//! expiry deadlines, in memory: when it becomes leader (a new term) it forgets any old deadlines
//! and gives every lease its full remaining time again — the checkpointed remaining TTL if there
//! is one, else the granted TTL — so nothing expires because of an election. It starts them
//! only once it has applied every entry its predecessors committed: a keep-alive clears a
//! checkpointed remaining TTL through Raft before it is acknowledged, and a new leader that
//! started from the stale value would expire a lease its client had just renewed. An expired lease
//! becomes a `LeaseExpire` Raft entry, so every member deletes the same keys at the same
//! revision; it names the term of the decision and does nothing from an entry of another term
//! (a revoke still queued when this member lost the lead must not land after it leads again).
//! Every [`CHECKPOINT_INTERVAL`], and when the member shuts down, the leader records the
//! remaining TTLs through Raft (`LeaseCheckpoint`), so a restart does not reset long leases.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use keel_proto::etcdserverpb::{
    LeaseCheckpoint, LeaseCheckpointRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest,
};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::mvcc::lease::{LeaseRecord, MAX_TTL};
use crate::mvcc::View;
use crate::node::{ForwardReply, Forwarded, Member, Resend, Try};
use crate::raft::{Command, Proto, Reply};

/// How often the leader looks for expired leases (etcd checks every 500 ms too).
pub const EXPIRY_TICK: Duration = Duration::from_millis(500);
/// How often the leader checkpoints remaining TTLs (etcd's default checkpoint interval).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(300);
/// Most revokes in flight at once (etcd revokes at most 1000 per second), so a mass expiry does
/// not flood Raft; the rest follow in the next ticks.
const REVOKES_IN_FLIGHT: usize = 500;
/// Checkpoints per Raft entry (etcd's maxLeaseCheckpointBatchSize).
const CHECKPOINT_BATCH: usize = 1000;

#[derive(Default)]
struct Deadlines {
    /// The term these deadlines belong to; None when not leader.
    term: Option<u64>,
    /// The last log index when this member saw itself lead `term`. Every entry committed by an
    /// earlier leader is at or below it; until it is applied the lease table may still hold
    /// remaining TTLs that a later entry cleared, so no deadline is started from it.
    settles_at: u64,
    expiry: HashMap<i64, Instant>,
    /// Leases whose revoke is being proposed.
    revoking: HashSet<i64>,
}

pub struct Lessor {
    member_id: u64,
    /// etcd's minimum TTL in seconds: 1.5 election timeouts, rounded up.
    min_ttl: i64,
    next_id: AtomicU64,
    deadlines: Mutex<Deadlines>,
}

impl Deadlines {
    /// A lease's deadline, started now with its fresh TTL if it has none yet.
    fn deadline(&mut self, id: i64, r: &LeaseRecord, now: Instant) -> Instant {
        *self.expiry.entry(id).or_insert_with(|| now + fresh_ttl(r))
    }
}

/// Every lease in the table, with its record.
fn lease_records(m: &Member) -> Vec<(i64, LeaseRecord)> {
    m.read().leases().iter().map(|(id, l)| (id, l.record)).collect()
}

/// The TTL a lease gets again when a leader (re)starts its timer.
fn fresh_ttl(r: &LeaseRecord) -> Duration {
    Duration::from_secs(if r.remaining > 0 { r.remaining } else { r.ttl }.max(0) as u64)
}

impl Lessor {
    pub fn new(member_id: u64, heartbeat_ms: u64, election_timeout_ms: u64) -> Self {
        // etcd: (3 * election ticks / 2) heartbeats, rounded up to whole seconds.
        let ticks = election_timeout_ms / heartbeat_ms.max(1);
        let min_ttl = ((3 * ticks / 2) * heartbeat_ms).div_ceil(1000) as i64;
        // Ids as etcd makes them: the member's low 16 bits, then a counter starting at a random
        // point (etcd takes the clock), so ids differ between members and across restarts. The
        // randomness is the seedable one, so a simulated history replays.
        let suffix = (crate::raft::runtime::random_u64() & ((1 << 40) - 1)) << 8;
        Self { member_id, min_ttl, next_id: AtomicU64::new(suffix), deadlines: Mutex::new(Deadlines::default()) }
    }

    /// A fresh lease id (positive, non-zero) that `taken` does not know.
    fn new_id(&self, taken: impl Fn(i64) -> bool) -> i64 {
        loop {
            let suffix = self.next_id.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & ((1 << 48) - 1);
            let id = (((self.member_id & 0xffff) << 48 | suffix) & (i64::MAX as u64)) as i64;
            if id != 0 && !taken(id) {
                return id;
            }
        }
    }

    /// Brings the deadlines in line with this member's role: a new term as leader starts every
    /// lease afresh; a follower keeps none.
    fn sync_role(&self, m: &Member) -> parking_lot::MutexGuard<'_, Deadlines> {
        let status = m.raft_status();
        let (term, last_log) = (status.leading.then_some(status.term), status.last_log_index);
        let mut d = self.deadlines.lock();
        if d.term != term {
            d.term = term;
            d.settles_at = last_log;
            d.expiry.clear();
        }
        d
    }

    /// Whether this leader has applied everything its predecessors committed (see
    /// `Deadlines::settles_at`), so the lease table's remaining TTLs can start deadlines.
    fn settled(d: &Deadlines, m: &Member) -> bool {
        m.raft_status().applied_index >= d.settles_at
    }

    /// Renews a lease (a keep-alive); returns its granted TTL, and whether a checkpointed
    /// remaining TTL must now be cleared through Raft (before the renewal is acknowledged: a new
    /// leader would otherwise start the lease from the stale, shorter remaining time).
    fn renew(&self, m: &Member, id: i64) -> Result<(i64, bool)> {
        let mut d = self.sync_role(m);
        if d.term.is_none() {
            return Err(if m.raft_status().leader.is_some() { Error::NotLeader } else { Error::NoLeader });
        }
        let record = m.read().leases().get(id).map(|l| l.record).ok_or(Error::LeaseNotFound)?;
        let now = Instant::now();
        if d.expiry.get(&id).is_some_and(|e| *e <= now) {
            // Expired; its revoke is on the way.
            return Err(Error::LeaseNotFound);
        }
        let mut ttl = Duration::from_secs(record.ttl.max(0) as u64);
        if crate::plant::on("lease-expires-early") {
            ttl /= 2;
        }
        d.expiry.insert(id, now + ttl);
        Ok((record.ttl, record.remaining > 0))
    }

    /// Clears a lease's checkpointed remaining TTL (after a renewal) through Raft.
    async fn clear_checkpoint(m: &Member, id: i64) -> Result<()> {
        let cp = LeaseCheckpointRequest { checkpoints: vec![LeaseCheckpoint { id, remaining_ttl: 0 }] };
        m.write(Command::LeaseCheckpoint(Proto(cp))).await.map(|_| ())
    }

    /// A lease's remaining time as the leader counts it; None if this member is not the leader.
    fn remaining(&self, m: &Member, id: i64, record: &LeaseRecord) -> Option<Duration> {
        let mut d = self.sync_role(m);
        d.term?;
        if !d.expiry.contains_key(&id) && !Self::settled(&d, m) {
            return Some(fresh_ttl(record));
        }
        let now = Instant::now();
        let at = d.deadline(id, record, now);
        Some(at.saturating_duration_since(now))
    }

    /// Starts a new lease's timer (after its grant was applied).
    fn granted(&self, m: &Member, id: i64, ttl: i64) {
        let mut d = self.sync_role(m);
        if d.term.is_some() {
            d.expiry.insert(id, Instant::now() + Duration::from_secs(ttl.max(0) as u64));
        }
    }

    /// One expiry pass: proposes a revoke for every expired lease.
    fn expire(&self, m: &Arc<Member>) {
        let mut d = self.sync_role(m);
        if d.term.is_none() || !Self::settled(&d, m) {
            return;
        }
        // Read after the settled check: the table then holds every predecessor's entry.
        let leases = lease_records(m);
        let now = Instant::now();
        let live: HashSet<i64> = leases.iter().map(|(id, _)| *id).collect();
        d.expiry.retain(|id, _| live.contains(id));
        let term = d.term.unwrap_or_default();
        let mut due = Vec::new();
        for (id, r) in &leases {
            let at = d.deadline(*id, r, now);
            if at <= now && d.revoking.len() < REVOKES_IN_FLIGHT && d.revoking.insert(*id) {
                due.push(*id);
            }
        }
        drop(d);
        for id in due {
            let m = m.clone();
            tokio::spawn(async move {
                let revoke = Proto(LeaseRevokeRequest { id });
                let _ = m.propose_as_leader(Command::LeaseExpire { term, revoke }).await;
                m.lessor().deadlines.lock().revoking.remove(&id);
            });
        }
    }

    /// Records every lease's remaining TTL through Raft (leader only).
    pub async fn checkpoint(&self, m: &Member) {
        let mut cps = Vec::new();
        {
            let mut d = self.sync_role(m);
            if d.term.is_none() || !Self::settled(&d, m) {
                return;
            }
            let leases = lease_records(m);
            let now = Instant::now();
            for (id, r) in &leases {
                let at = d.deadline(*id, r, now);
                let left = at.saturating_duration_since(now).as_secs_f64().ceil() as i64;
                if left < r.ttl && left != r.remaining {
                    cps.push(LeaseCheckpoint { id: *id, remaining_ttl: left.max(1) });
                }
            }
        }
        for chunk in cps.chunks(CHECKPOINT_BATCH) {
            let req = LeaseCheckpointRequest { checkpoints: chunk.to_vec() };
            if m.propose_as_leader(Command::LeaseCheckpoint(Proto(req))).await.is_err() {
                return;
            }
        }
    }

    /// The leader's loop: expiry every [`EXPIRY_TICK`], checkpoints every
    /// [`CHECKPOINT_INTERVAL`]. Ends when the member is gone.
    pub async fn run(member: Weak<Member>) {
        let mut tick = tokio::time::interval(EXPIRY_TICK);
        let mut last_checkpoint = Instant::now();
        loop {
            tick.tick().await;
            let Some(m) = member.upgrade() else { return };
            m.lessor().expire(&m);
            if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                last_checkpoint = Instant::now();
                m.lessor().checkpoint(&m).await;
            }
        }
    }
}

/// Grants a lease through Raft (etcd's LeaseGrant): the TTL raised to the minimum and the id
/// chosen here, carried in the entry, so every member grants the same lease; the leader starts
/// its timer once it is applied.
pub async fn grant(m: &Member, mut g: LeaseGrantRequest) -> Result<LeaseGrantResponse> {
    if g.ttl > MAX_TTL {
        return Err(Error::LeaseTtlTooLarge);
    }
    let lessor = m.lessor();
    g.ttl = g.ttl.max(lessor.min_ttl);
    if g.id == 0 {
        g.id = lessor.new_id(|id| m.read().leases().exists(id));
    }
    match m.write(Command::LeaseGrant(Proto(g))).await? {
        Reply::LeaseGrant(Proto(resp)) => {
            lessor.granted(m, resp.id, resp.ttl);
            Ok(resp)
        }
        _ => Err(Error::Io("unexpected reply to LeaseGrant".into())),
    }
}

/// Renews a lease on the leader (a keep-alive, asked of the leader from a follower); returns its
/// granted TTL.
pub async fn keep_alive(m: &Member, id: i64) -> Result<i64> {
    let answer = |r| match r {
        ForwardReply::KeepAlive(r) => Some(r),
        _ => None,
    };
    ask_leader(m, || renew_here(m, id), Forwarded::KeepAlive(id), answer).await
}

/// A lease's remaining time on the leader, in whole seconds; None if it does not exist.
pub async fn remaining(m: &Member, id: i64) -> Result<Option<u64>> {
    let answer = |r| match r {
        ForwardReply::Remaining(r) => Some(r),
        _ => None,
    };
    ask_leader(m, || async move { remaining_here(m, id) }, Forwarded::Remaining(id), answer).await
}

/// Runs a lease request that only the leader can answer (`not leader` here otherwise) here or
/// on the leader; asking again is harmless.
async fn ask_leader<T, F>(
    m: &Member,
    here: impl Fn() -> F,
    ask: Forwarded,
    answer: impl Fn(ForwardReply) -> Option<Result<T>>,
) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    let here = || {
        let tried = here();
        async move {
            match tried.await {
                Err(Error::NotLeader | Error::NoLeader) if !m.is_leader() => Try::Leader(m.leader_url()),
                Err(Error::NotLeader | Error::NoLeader) => Try::Again,
                r => Try::Answer(r),
            }
        }
    };
    m.within_deadline(m.on_leader(here, ask, Resend::Harmless, answer)).await
}

/// Renews a lease here, once a quorum has confirmed that this member still leads (as etcd
/// does since etcd-io/etcd#15247): a leader cut off from the others would otherwise extend a
/// lease that the real leader lets expire, and the client would count on time it does not
/// have.
pub async fn renew_here(m: &Member, id: i64) -> Result<i64> {
    m.confirm_leadership().await?;
    let (ttl, stale_checkpoint) = m.lessor().renew(m, id)?;
    if stale_checkpoint {
        Lessor::clear_checkpoint(m, id).await?;
    }
    Ok(ttl)
}

/// A lease's remaining time as this member, the leader, counts it (`not leader` otherwise);
/// None if the lease does not exist.
pub fn remaining_here(m: &Member, id: i64) -> Result<Option<u64>> {
    let Some(record) = m.read().leases().get(id).map(|l| l.record) else { return Ok(None) };
    m.lessor().remaining(m, id, &record).map(|left| Some(left.as_secs())).ok_or(Error::NotLeader)
}
