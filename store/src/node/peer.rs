//! Members talking to members: what a follower forwards to the leader ([`Forwarded`]), how the
//! leader serves it, and the one retry loop ([`Member::on_leader`]) every leader-only request
//! goes through. Also the Raft RPCs the peer service hands to openraft.
//!
//! A request is sent to the leader again only when it provably did not reach it (its connection
//! never opened, or the leader refused it before acting), or when asking again is harmless (a
//! read index, a lease's remaining time). A write whose outcome is unknown is never re-sent: it
//! could apply twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{Deserialize, Serialize};

use super::{Member, NO_LEADER_RETRY};
use crate::error::{Error, Result};
use crate::membership::{Change, Changed, MemberInfo};
use crate::raft::network::{decode, encode, never_sent, Dialer};
use crate::raft::proposals::Refused;
use crate::raft::{Command, Reply, TypeConfig};

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

pub(super) fn unexpected_reply() -> Error {
    Error::Io("unexpected reply from the leader".into())
}

/// Where one try of a leader-only request got to (see [`Member::on_leader`]).
pub(crate) enum Try<T> {
    /// Answered here.
    Answer(Result<T>),
    /// This member is not the leader: ask the one at this peer URL, or, if none is known, wait
    /// for one.
    Leader(Option<String>),
    /// Try again after a while (e.g. no quorum yet).
    Again,
}

/// Whether a request may reach the leader twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Only when it provably never reached it (a write: applied twice otherwise).
    NeverSent,
    /// Also when its outcome is unknown or the leader had none to ask (asking changes nothing).
    Harmless,
}

impl Member {
    /// Runs a leader-only request: `here` tries it on this member; when this member does not
    /// lead, `ask` goes to the leader and `answer` takes the matching [`ForwardReply`] variant
    /// (None for any other). Waits [`NO_LEADER_RETRY`] between tries while there is no leader,
    /// the leader turned out stale (`not leader`), or, as `resend` allows, the request did not
    /// get an answer. Unbounded: callers put it within their deadline.
    pub(crate) async fn on_leader<T, F>(
        &self,
        mut here: impl FnMut() -> F,
        ask: Forwarded,
        resend: Resend,
        answer: impl Fn(ForwardReply) -> Option<Result<T>>,
    ) -> Result<T>
    where
        F: Future<Output = Try<T>>,
    {
        loop {
            match here().await {
                Try::Answer(r) => return r,
                Try::Again | Try::Leader(None) => {}
                Try::Leader(Some(url)) => match self.forward(&url, ask.clone()).await.map(&answer) {
                    // The leader's view of itself is newer than ours: wait to learn the new one.
                    Ok(Some(Err(Error::NotLeader))) | Err(Error::NoLeader) => {}
                    Ok(Some(Err(Error::NoLeader))) | Err(Error::TimeoutDueToConnectionLost)
                        if resend == Resend::Harmless => {}
                    Ok(Some(r)) => return r,
                    Ok(None) => return Err(unexpected_reply()),
                    Err(e) => return Err(e),
                },
            }
            tokio::time::sleep(NO_LEADER_RETRY).await;
        }
    }

    /// Writes `cmd` through Raft here (the leader) or, with `may_forward`, on the leader; returns
    /// the reply and the index of its log entry. A write goes to the leader (again) only when it
    /// provably was not proposed: refused here before Raft saw it ([`Refused::NotLeader`]), or its
    /// forward never had a connection (`never_sent`). A forwarded write is answered only once this
    /// member has applied it too, as etcd answers from its own apply: a client never sees a
    /// member's revision go back, e.g. from a write's answer to a serializable read (or across a
    /// crash of this member).
    pub(super) async fn write_or_forward(&self, cmd: Command, may_forward: bool) -> Result<(Reply, u64)> {
        let here = || async {
            match self.proposals.write(cmd.clone()).await {
                Ok((applied, index)) => Try::Answer(applied.0.map(|reply| (reply, index))),
                // Never proposed here (see `Refused`), so it may go to the leader.
                Err(Refused::NotLeader(leader)) if may_forward => Try::Leader(leader.map(|n| n.addr)),
                Err(Refused::NotLeader(_)) => Try::Answer(Err(Error::NotLeader)),
                Err(Refused::LeaderLost) => Try::Answer(Err(Error::TimeoutLeaderFail)),
                Err(Refused::Stopped) => Try::Answer(Err(Error::Stopped)),
            }
        };
        let answer = |r| match r {
            ForwardReply::Write(r) => Some(r),
            _ => None,
        };
        let (reply, index) = self.on_leader(here, Forwarded::Write(cmd.clone()), Resend::NeverSent, answer).await?;
        // At once for a write applied here.
        self.wait_applied(index, "forwarded write").await?;
        Ok((reply, index))
    }

    /// Sends a request to the leader's peer service. An unreachable leader is `NoLeader`.
    pub(super) async fn forward(&self, leader_url: &str, f: Forwarded) -> Result<ForwardReply> {
        forward(&self.dialer, self.request_timeout, leader_url, f).await
    }

    /// The leader's peer URL, if this member knows a leader.
    pub(crate) fn leader_url(&self) -> Option<String> {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        let leader = m.current_leader?;
        m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())
    }

    /// Serves a request forwarded by a follower (leader side; never forwards again).
    pub async fn serve_forwarded(self: &Arc<Self>, f: Forwarded) -> Result<ForwardReply> {
        Ok(match f {
            Forwarded::KeepAlive(id) => ForwardReply::KeepAlive(crate::lessor::renew_here(self, id).await),
            Forwarded::Remaining(id) => ForwardReply::Remaining(crate::lessor::remaining_here(self, id)),
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

    /// openraft's AppendEntries, from the leader.
    pub async fn append_entries(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> std::result::Result<AppendEntriesResponse<u64>, RaftError<u64>> {
        self.raft.append_entries(rpc).await
    }

    /// openraft's RequestVote, from a candidate.
    pub async fn vote(&self, rpc: VoteRequest<u64>) -> std::result::Result<VoteResponse<u64>, RaftError<u64>> {
        self.raft.vote(rpc).await
    }

    /// openraft's InstallSnapshot (one chunk), from the leader.
    pub async fn install_snapshot(
        &self,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> std::result::Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> {
        self.raft.install_snapshot(rpc).await
    }
}

/// Sends a request to a peer's peer service (the leader's, but for leadership transfers),
/// within `timeout`. An unreachable peer is `NoLeader`.
pub(super) async fn forward(dialer: &Dialer, timeout: Duration, url: &str, f: Forwarded) -> Result<ForwardReply> {
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
}
