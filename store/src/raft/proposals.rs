//! Proposal batching: concurrent writes on the leader share one Raft entry.
//!
//! openraft 0.9 appends each `client_write` as its own entry and waits for that append to be
//! flushed before it takes the next one, so without batching the leader does one fsync per
//! write, one at a time. Here a write that arrives while a proposal is in flight waits in a queue;
//! when the proposal is answered, everything queued meanwhile goes out as one
//! [`Command::Batch`] (one entry, one fsync, one replication round), each command applied in
//! queue order with a revision of its own, as if each had its own entry. A write that arrives
//! when nothing is in flight is proposed at once, alone, so a lone client pays no extra wait.
//!
//! The callers themselves propose, one at a time (see [`Proposals::write`]).

use std::mem;
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use super::{Applied, Command, Raft, Reply};

/// What one queued write gets: its reply and the index of the entry that carried it, or why
/// the proposal failed (not the leader, stopped).
pub type Outcome = Result<(Applied, u64), RaftError<u64, ClientWriteError<u64, BasicNode>>>;

/// The outcome of a write whose driver went away: unknown, as a timed-out write's.
fn stopped() -> RaftError<u64, ClientWriteError<u64, BasicNode>> {
    RaftError::Fatal(openraft::error::Fatal::Stopped)
}

/// Most commands in one batch (a batch also stops at `max_bytes`).
const MAX_COMMANDS: usize = 1024;

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
    queue: Vec<(Command, oneshot::Sender<Outcome>)>,
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
    /// at a time drives, proposing batch after batch until its own command is answered, then
    /// hands over to a waiting caller. A driver that is dropped mid-proposal (its client went
    /// away) hands over too; the writes it had in flight are answered "stopped", their outcome
    /// unknown, as a timed-out write's.
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
                let batch = self.take(&mut self.state.lock().queue);
                self.propose(batch).await;
            }
        }
    }

    /// The first queued commands that fit one batch.
    fn take(&self, queue: &mut Vec<(Command, oneshot::Sender<Outcome>)>) -> Vec<(Command, oneshot::Sender<Outcome>)> {
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

    async fn propose(&self, mut batch: Vec<(Command, oneshot::Sender<Outcome>)>) {
        if batch.len() == 1 {
            let (cmd, tx) = batch.pop().expect("one command");
            let _ = tx.send(self.raft.client_write(cmd).await.map(|r| (r.data, r.log_id.index)));
            return;
        }
        let (cmds, txs): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        match self.raft.client_write(Command::Batch(cmds)).await {
            Ok(r) => {
                let index = r.log_id.index;
                match r.data.0 {
                    Ok(Reply::Batch(replies)) if replies.len() == txs.len() => {
                        for (tx, reply) in txs.into_iter().zip(replies) {
                            let _ = tx.send(Ok((reply, index)));
                        }
                    }
                    // A refusal of the batch as a whole (e.g. NOSPACE checked before it): each
                    // command gets it.
                    Err(e) => {
                        for tx in txs {
                            let _ = tx.send(Ok((Applied(Err(e.clone())), index)));
                        }
                    }
                    Ok(other) => {
                        let e = crate::error::Error::Corrupt(format!("a batch answered {other:?}"));
                        for tx in txs {
                            let _ = tx.send(Ok((Applied(Err(e.clone())), index)));
                        }
                    }
                }
            }
            Err(e) => {
                for tx in txs {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}
