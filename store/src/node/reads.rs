//! Linearizable reads: the ReadIndex barrier. A read waits until this member has applied
//! everything the leader had committed when the read arrived; the leader learns that index by
//! confirming with a quorum that it still leads. Concurrent reads share rounds ([`Rounds`]): a
//! follower's round asks the leader once for all its waiting reads, and the leader's own rounds
//! serve its reads and the rounds its followers forward.

use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::BasicNode;

use super::peer::{ForwardReply, Forwarded, Resend, Try};
use super::Member;
use crate::error::{Error, Result};

/// The outcome of a ReadIndex round on the leader.
#[derive(Debug, Clone)]
pub(super) enum LeaderRead {
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
    pub fn here(self) -> Result<u64> {
        match self {
            LeaderRead::Index(i) => Ok(i),
            LeaderRead::Forward(_) => Err(Error::NotLeader),
            LeaderRead::NoQuorum => Err(Error::NoLeader),
            LeaderRead::Stopped => Err(Error::Stopped),
        }
    }
}

impl Member {
    /// The read barrier (ReadIndex): returns once this member has applied everything the
    /// leader had committed when it was called.
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

    /// Returns once this member leads, a quorum has confirmed it, and it has applied everything
    /// it had committed by then: what the leader checks before acting on its own clock (lease
    /// renewals). `not leader` on a follower, never forwarded.
    pub async fn confirm_leadership(&self) -> Result<()> {
        let index = self.leader_read_index().await.here()?;
        self.wait_applied(index, "leadership check").await
    }

    /// Returns once this member has applied the log up to `index`.
    pub(super) async fn wait_applied(&self, index: u64, why: &str) -> Result<()> {
        self.raft.wait(None).applied_index_at_least(Some(index), why).await.map(|_| ()).map_err(|_| Error::Stopped)
    }

    /// One ReadIndex round for this member's reads: the leader's commit index once a quorum
    /// confirmed it leads, asked of the leader when this member is a follower. Retries while
    /// there is no leader, within the request deadline.
    async fn read_index(self: Arc<Self>) -> Result<u64> {
        let here = || async {
            match self.leader_read_index().await {
                LeaderRead::Index(i) => Try::Answer(Ok(i)),
                LeaderRead::Stopped => Try::Answer(Err(Error::Stopped)),
                LeaderRead::NoQuorum => Try::Again,
                LeaderRead::Forward(leader) => Try::Leader(leader.map(|n| n.addr)),
            }
        };
        let answer = |r| match r {
            ForwardReply::ReadIndex(r) => Some(r),
            _ => None,
        };
        // Asking again is harmless: a read index changes nothing.
        self.within_deadline(self.on_leader(here, Forwarded::ReadIndex, Resend::Harmless, answer)).await
    }

    /// A ReadIndex round as the leader, shared with every other read that joined it.
    pub(super) async fn leader_read_index(&self) -> LeaderRead {
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

    /// Resolves once this member is ready to answer clients (see `ready`), at once if it is, or
    /// with `request timed out` after the request deadline.
    pub async fn ready(&self) -> Result<()> {
        if *self.ready.borrow() {
            return Ok(());
        }
        let mut rx = self.ready.subscribe();
        self.within_deadline(async { rx.wait_for(|r| *r).await.map(|_| ()).map_err(|_| Error::Stopped) }).await
    }
}
