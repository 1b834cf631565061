//! Membership changes and leadership transfer, both leader-only and one at a time (`reconfig`).
//! A change is checked as etcd checks it (strict reconfiguration: the started voters must keep a
//! quorum), then handed to openraft's joint consensus; a transfer makes way for the target, as
//! openraft 0.9 has no transfer call of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};

use super::identity::member_id;
use super::peer::{forward, ForwardReply, Forwarded, Resend, Try};
use super::Member;
use crate::error::{Error, Result};
use crate::membership::{self, Change, Changed, MemberInfo};

impl Member {
    /// The members as this member knows them (its applied membership).
    pub fn members(&self) -> Vec<MemberInfo> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        membership::members(membership.membership(), self.mvcc.read().registry())
    }

    /// Applies a membership change on the leader (forwarded there from any member); answers the
    /// members afterwards as the leader sees them.
    pub async fn change_membership(self: &Arc<Self>, change: Change) -> Result<Changed> {
        let here = || async {
            if self.is_leader() {
                Try::Answer(self.change_here(change.clone()).await)
            } else {
                Try::Leader(self.leader_url())
            }
        };
        let answer = |r| match r {
            ForwardReply::Change(r) => Some(r),
            _ => None,
        };
        let ask = Forwarded::Change(change.clone());
        self.within_deadline(self.on_leader(here, ask, Resend::NeverSent, answer)).await
    }

    /// A membership change on this member, which must be the leader; checked as etcd checks it.
    pub(super) async fn change_here(&self, change: Change) -> Result<Changed> {
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

/// etcd's answer for a membership change openraft refused.
fn change_err(e: RaftError<u64, ClientWriteError<u64, BasicNode>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => Error::NotLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => Error::Io(e.to_string()),
        RaftError::Fatal(_) => Error::Stopped,
    }
}
