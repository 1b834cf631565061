//! Proposal batching: concurrent writes on the leader share one Raft entry.
//!
//! openraft 0.9 appends each `client_write` as its own entry and waits for that append to be
//! flushed before it takes the next one, so without batching the leader does one fsync per
//! write, one at a time. Here a write that arrives while [`IN_FLIGHT`] proposals are in flight
//! waits in a queue; when the oldest is answered, everything queued meanwhile goes out as one
//! [`Command::Batch`] (one entry, one fsync, one replication round), each command applied in
//! queue order with a revision of its own, as if each had its own entry. A write that arrives
//! when fewer are in flight is proposed at once, so a lone client pays no extra wait, and the
//! next batch is being appended and synced while the one before it is applied and answered.
//!
//! The callers themselves propose, one at a time (see [`Proposals::write`]).

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;

use openraft::error::ClientWriteError;
use openraft::raft::ClientWriteResponse;
use openraft::BasicNode;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use super::{Applied, Command, Raft, Reply, TypeConfig};

/// What one queued write gets: its reply and the index of the entry that carried it, or why
/// it got none.
pub type Outcome = Result<(Applied, u64), Refused>;

/// Why a write got no reply.
///
/// openraft answers `ForwardToLeader` both for an entry it refused before appending it and for
/// one it appended and then truncated when a new leader's log overwrote it; the second may still
/// be committed by a later leader that has it. Only the first may be sent elsewhere. So a batch
/// is handed to Raft only while this member's Raft metrics say it leads (otherwise it is
/// [`Refused::NotLeader`], never proposed), and a `ForwardToLeader` for an entry that was handed
/// over is [`Refused::LeaderLost`]: outcome unknown.
#[derive(Debug, Clone)]
pub enum Refused {
    /// Never proposed: this member does not lead; the leader, if known. Safe to send elsewhere.
    NotLeader(Option<BasicNode>),
    /// Proposed, then dropped by a change of leader: it may or may not be committed.
    LeaderLost,
    /// Raft stopped, or the proposal's outcome was lost with its driver: unknown.
    Stopped,
}

impl Refused {
    /// Raft's refusal of an entry that was handed to it.
    fn of(e: ClientWriteError<u64, BasicNode>) -> Self {
        match e {
            ClientWriteError::ForwardToLeader(_) => Refused::LeaderLost,
            // Client writes carry no membership change; this does not happen to them.
            ClientWriteError::ChangeMembershipError(_) => Refused::LeaderLost,
        }
    }
}

/// Most commands in one batch (a batch also stops at `max_bytes`).
const MAX_COMMANDS: usize = 1024;

/// Most proposals in flight at once.
pub const IN_FLIGHT: usize = 2;

type Waiter = oneshot::Sender<Outcome>;

/// A proposal handed to Raft: the answer to come, and who waits for it (one waiter for a lone
/// command, else one per command of the batch).
struct Proposed {
    answer: oneshot::Receiver<Result<ClientWriteResponse<TypeConfig>, ClientWriteError<u64, BasicNode>>>,
    batch: bool,
    waiters: Vec<Waiter>,
}

/// The queue of writes waiting for the proposal in flight.
#[derive(Clone)]
pub struct Proposals {
    raft: Raft,
    /// Most encoded bytes in one batch: the request limit, so a batch is no larger than the
    /// largest single request a member already accepts.
    max_bytes: usize,
    state: Arc<Mutex<State>>,
    /// Wakes a waiting caller to drive when the driver is done.
    handover: Arc<Notify>,
}

/// The driver's turn: when it ends (answered, or dropped), another caller may drive.
struct Driving<'a>(&'a Proposals);

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        self.0.state.lock().running = false;
        self.0.handover.notify_one();
    }
}

/// The proposal a driver awaits; if the driver is dropped first (its client went away), the
/// proposal returns to the head of the queue for the next driver: the other writers of its batch
/// still get their answers.
struct Oldest<'a>(&'a Proposals, Option<Proposed>);

impl Drop for Oldest<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.1.take() {
            self.0.state.lock().proposed.push_front(p);
        }
    }
}

#[derive(Default)]
struct State {
    queue: Vec<(Command, Waiter)>,
    /// Proposals handed to Raft and not yet answered, oldest first; whoever drives awaits them.
    proposed: VecDeque<Proposed>,
    /// Whether a caller drives the proposals.
    running: bool,
}

impl Proposals {
    pub fn new(raft: Raft, max_bytes: usize) -> Self {
        Self { raft, max_bytes, state: Default::default(), handover: Default::default() }
    }

    /// Proposes `cmd`, alone or with the writes queued beside it; resolves once the entry that
    /// carried it is applied here (the leader), or the proposal failed.
    ///
    /// No task of its own (a spawned one made seeded histories replay differently): one caller
    /// at a time drives, proposing batches and awaiting their answers until its own command is
    /// answered, then hands over to a waiting caller, with the proposals still in flight. A
    /// driver that is dropped while it awaits an answer (its client went away) hands over too,
    /// and the proposal it awaited stays in flight for the next driver: no other writer loses its
    /// answer. A driver dropped while it hands a batch to Raft leaves that batch's outcome
    /// unknown ("stopped", as a timed-out write's); handing over only queues the entry, so that
    /// await does not wait on Raft.
    pub async fn write(&self, cmd: Command) -> Outcome {
        let (tx, mut rx) = oneshot::channel();
        self.state.lock().queue.push((cmd, tx));
        loop {
            let drive = !mem::replace(&mut self.state.lock().running, true);
            if !drive {
                let handed_over = self.handover.notified();
                tokio::select! {
                    biased;
                    r = &mut rx => return r.unwrap_or(Err(Refused::Stopped)),
                    _ = handed_over => continue,
                }
            }
            let _driving = Driving(self);
            loop {
                match rx.try_recv() {
                    Ok(r) => return r,
                    Err(oneshot::error::TryRecvError::Closed) => return Err(Refused::Stopped),
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
                loop {
                    let batch = {
                        let mut state = self.state.lock();
                        if state.proposed.len() >= IN_FLIGHT {
                            break;
                        }
                        self.take(&mut state.queue)
                    };
                    if batch.is_empty() {
                        break;
                    }
                    let proposed = self.propose(batch).await;
                    self.state.lock().proposed.extend(proposed);
                }
                // The oldest proposal goes back at the head of the queue if this driver is
                // dropped while awaiting it, so the next driver answers its waiters.
                let mut oldest = Oldest(self, self.state.lock().proposed.pop_front());
                if let Some(p) = oldest.1.as_mut() {
                    let answer = match (&mut p.answer).await {
                        Ok(Ok(r)) => Ok(r),
                        Ok(Err(e)) => Err(Refused::of(e)),
                        Err(_) => Err(Refused::Stopped),
                    };
                    let p = oldest.1.take().expect("awaited just now");
                    answer_waiters(p.batch, p.waiters, answer);
                }
            }
        }
    }

    /// The first queued commands that fit one batch.
    fn take(&self, queue: &mut Vec<(Command, Waiter)>) -> Vec<(Command, Waiter)> {
        let mut bytes = 0;
        let mut n = 0;
        for (cmd, _) in queue.iter() {
            bytes += cmd.encoded_len();
            if n > 0 && (n == MAX_COMMANDS || bytes > self.max_bytes) {
                break;
            }
            n += 1;
        }
        let rest = queue.split_off(n);
        mem::replace(queue, rest)
    }

    /// Hands `batch` to Raft, a lone command as it is, if this member leads; None if it was not
    /// handed over (the waiters have their answer; see [`Refused`]).
    async fn propose(&self, mut batch: Vec<(Command, Waiter)>) -> Option<Proposed> {
        let not_leader = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let leader = m.current_leader.and_then(|l| m.membership_config.membership().get_node(&l).cloned());
            (m.current_leader != Some(m.id)).then_some(leader)
        };
        if let Some(leader) = not_leader {
            for (_, tx) in batch {
                let _ = tx.send(Err(Refused::NotLeader(leader.clone())));
            }
            return None;
        }
        let (cmd, waiters, batch) = if batch.len() == 1 {
            let (cmd, tx) = batch.pop().expect("one command");
            (cmd, vec![tx], false)
        } else {
            let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            (Command::Batch(cmds), txs, true)
        };
        match self.raft.client_write_ff(cmd).await {
            Ok(answer) => Some(Proposed { answer, batch, waiters }),
            Err(_) => {
                answer_waiters(batch, waiters, Err(Refused::Stopped));
                None
            }
        }
    }
}

/// Gives each waiter of a proposal (a `batch`, or a lone command) its part of `answer`.
fn answer_waiters(batch: bool, mut waiters: Vec<Waiter>, answer: Result<ClientWriteResponse<TypeConfig>, Refused>) {
    let r = match answer {
        Ok(r) => r,
        Err(e) => {
            for tx in waiters {
                let _ = tx.send(Err(e.clone()));
            }
            return;
        }
    };
    let index = r.log_id.index;
    if !batch {
        let tx = waiters.pop().expect("one waiter");
        let _ = tx.send(Ok((r.data, index)));
        return;
    }
    match r.data.0 {
        Ok(Reply::Batch(replies)) if replies.len() == waiters.len() => {
            for (tx, reply) in waiters.into_iter().zip(replies) {
                let _ = tx.send(Ok((reply, index)));
            }
        }
        // A refusal of the batch as a whole (e.g. NOSPACE checked before it): each command
        // gets it.
        Err(e) => {
            for tx in waiters {
                let _ = tx.send(Ok((Applied(Err(e.clone())), index)));
            }
        }
        Ok(other) => {
            let e = crate::error::Error::Corrupt(format!("a batch answered {other:?}"));
            for tx in waiters {
                let _ = tx.send(Ok((Applied(Err(e.clone())), index)));
            }
        }
    }
}
