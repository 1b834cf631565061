//! Shared rounds: many concurrent callers, one execution of an operation.
//!
//! A linearizable read needs a ReadIndex: a round of heartbeats in which a quorum confirms the
//! leader, giving the commit index the read must wait for. One round can serve every read that
//! was waiting when it began, as etcd's read loop does, instead of one round per read.
//!
//! The guarantee that makes this correct: a caller is only ever answered by a round that started
//! after it joined. A caller arriving while a round is under way waits for the next one, which
//! starts as soon as the current one ends and serves everyone who arrived meanwhile. Rounds run
//! in a task of their own, so a caller that gives up (a client's deadline) does not stop a round
//! that others wait for; the task ends when nobody is waiting.

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

struct State<T> {
    running: bool,
    waiting: Vec<oneshot::Sender<T>>,
}

/// Runs one operation for many callers at once.
pub struct Rounds<T> {
    state: Arc<Mutex<State<T>>>,
}

impl<T> Default for Rounds<T> {
    fn default() -> Self {
        Self { state: Arc::new(Mutex::new(State { running: false, waiting: Vec::new() })) }
    }
}

impl<T: Clone + Send + 'static> Rounds<T> {
    /// The outcome of a run of `round` that started after this call; `None` only if the round's
    /// task died (the runtime is shutting down).
    pub async fn join<F, Fut>(&self, round: F) -> Option<T>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send,
    {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut s = self.state.lock();
            s.waiting.push(tx);
            !std::mem::replace(&mut s.running, true)
        };
        if start {
            let state = self.state.clone();
            tokio::spawn(async move {
                loop {
                    let joined = {
                        let mut s = state.lock();
                        if s.waiting.is_empty() {
                            s.running = false;
                            return;
                        }
                        std::mem::take(&mut s.waiting)
                    };
                    let out = round().await;
                    for tx in joined {
                        let _ = tx.send(out.clone());
                    }
                }
            });
        }
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::sync::Notify;

    #[tokio::test]
    async fn callers_during_a_round_get_the_next_one() {
        let rounds = Arc::new(Rounds::<u64>::default());
        let started = Arc::new(AtomicU64::new(0));
        let release = Arc::new(Notify::new());
        let round = {
            let (started, release) = (started.clone(), release.clone());
            move || {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                    release.notified().await;
                    n
                }
            }
        };
        let first = tokio::spawn({
            let (rounds, round) = (rounds.clone(), round.clone());
            async move { rounds.join(round).await }
        });
        // Wait (with a deadline) until round 1 is under way, then join twice more.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while started.load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "round 1 never started");
            tokio::task::yield_now().await;
        }
        let later: Vec<_> = (0..2)
            .map(|_| {
                let (rounds, round) = (rounds.clone(), round.clone());
                tokio::spawn(async move { rounds.join(round).await })
            })
            .collect();
        release.notify_one();
        assert_eq!(first.await.unwrap(), Some(1));
        while started.load(Ordering::SeqCst) < 2 {
            assert!(tokio::time::Instant::now() < deadline, "round 2 never started");
            tokio::task::yield_now().await;
        }
        release.notify_one();
        for h in later {
            assert_eq!(h.await.unwrap(), Some(2), "both late callers share round 2");
        }
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_caller_giving_up_does_not_stop_the_round() {
        let rounds = Arc::new(Rounds::<u8>::default());
        let release = Arc::new(Notify::new());
        let round = {
            let release = release.clone();
            move || {
                let release = release.clone();
                async move {
                    release.notified().await;
                    7
                }
            }
        };
        let quitter = tokio::spawn({
            let (rounds, round) = (rounds.clone(), round.clone());
            async move { rounds.join(round).await }
        });
        tokio::task::yield_now().await;
        let stayer = tokio::spawn({
            let (rounds, round) = (rounds.clone(), round.clone());
            async move { rounds.join(round).await }
        });
        quitter.abort();
        tokio::task::yield_now().await;
        release.notify_one();
        release.notify_one();
        assert_eq!(stayer.await.unwrap(), Some(7));
    }
}
