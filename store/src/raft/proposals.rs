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

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::BasicNode;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use super::{Applied, Command, Raft, Reply, TypeConfig};

/// What one queued write gets: its reply and the index of the entry that carried it, or why
/// the proposal failed (not the leader, stopped).
pub type Outcome = Result<(Applied, u64), RaftError<u64, ClientWriteError<u64, BasicNode>>>;

/// The outcome of a write whose driver went away: unknown, as a timed-out write's.
fn stopped() -> RaftError<u64, ClientWriteError<u64, BasicNode>> {
    RaftError::Fatal(openraft::error::Fatal::Stopped)
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
    /// driver that is dropped while it awaits an answer (its client went away) hands over too;
    /// the writes of that proposal are answered "stopped", their outcome unknown, as a timed-out
    /// write's.
    pub async fn write(&self, cmd: Command) -> Outcome {
        let (tx, mut rx) = oneshot::channel();
        self.state.lock().queue.push((cmd, tx));
        loop {
            let drive = !mem::replace(&mut self.state.lock().running, true);
            if !drive {
                let handed_over = self.handover.notified();
                tokio::select! {
                    biased;
                    r = &mut rx => return match r {
                        Ok(outcome) => outcome,
                        Err(_) => Err(stopped()),
                    },
                    _ = handed_over => continue,
                }
            }
            let _driving = Driving(self);
            loop {
                match rx.try_recv() {
                    Ok(r) => return r,
                    Err(oneshot::error::TryRecvError::Closed) => return Err(stopped()),
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
                let oldest = self.state.lock().proposed.pop_front();
                if let Some(p) = oldest {
                    let answer = match p.answer.await {
                        Ok(Ok(r)) => Ok(r),
                        Ok(Err(e)) => Err(RaftError::APIError(e)),
                        Err(_) => Err(stopped()),
                    };
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

    /// Hands `batch` to Raft, a lone command as it is; None if Raft refused it (the waiters
    /// have their answer).
    async fn propose(&self, mut batch: Vec<(Command, Waiter)>) -> Option<Proposed> {
        let (cmd, waiters, batch) = if batch.len() == 1 {
            let (cmd, tx) = batch.pop().expect("one command");
            (cmd, vec![tx], false)
        } else {
            let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            (Command::Batch(cmds), txs, true)
        };
        match self.raft.client_write_ff(cmd).await {
            Ok(answer) => Some(Proposed { answer, batch, waiters }),
            Err(fatal) => {
                answer_waiters(batch, waiters, Err(RaftError::Fatal(fatal)));
                None
            }
        }
    }
}

/// Gives each waiter of a proposal (a `batch`, or a lone command) its part of `answer`.
fn answer_waiters(
    batch: bool,
    mut waiters: Vec<Waiter>,
    answer: Result<ClientWriteResponse<TypeConfig>, RaftError<u64, ClientWriteError<u64, BasicNode>>>,
) {
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
