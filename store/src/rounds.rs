//! Shared rounds: many concurrent callers, one execution of an operation.
//!
//! A linearizable read needs a ReadIndex: a round of heartbeats in which a quorum confirms the
//! leader, giving the commit index the read must wait for. One round can serve every read that
//! was waiting when it began, as etcd's read loop does, instead of one round per read.
//!
//! The guarantee that makes this correct: a caller is only ever answered by a round that started
//! after it joined. A caller arriving while a round is under way joins the next one, which
//! starts as soon as the current one ends and serves everyone who joined meanwhile. Every caller
//! polls the round it joined (a shared future, no task of its own: the order of events stays the
//! simulation's), so a caller that gives up (a client's deadline) does not stop a round that
//! others wait for, and a round nobody waits for any more is simply not polled.

use std::future::Future;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt, WeakShared};
use parking_lot::Mutex;

type WeakRound<T> = WeakShared<BoxFuture<'static, T>>;

/// Only weak references to rounds: a round lives as long as a caller polls it, so a round whose
/// callers are all gone (a member's runtime dropped in a crash) is dropped with what it holds.
struct State<T> {
    /// The round not started yet, which new callers join.
    queued: Option<WeakRound<T>>,
    /// The newest round; the next one starts after it.
    last: Option<WeakRound<T>>,
    /// Rounds made so far.
    made: u64,
}

/// Runs one operation for many callers at once.
pub struct Rounds<T> {
    state: Arc<Mutex<State<T>>>,
}

impl<T> Default for Rounds<T> {
    fn default() -> Self {
        Self { state: Arc::new(Mutex::new(State { queued: None, last: None, made: 0 })) }
    }
}

impl<T: Clone + Send + Sync + 'static> Rounds<T> {
    /// The outcome of a run of `round` that started after this call (the one this call joined,
    /// which may be another caller's `round`: all of them must do the same).
    pub async fn join<F, Fut>(&self, round: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let joined = {
            let mut s = self.state.lock();
            match s.queued.as_ref().and_then(WeakShared::upgrade) {
                Some(r) => r,
                None => {
                    s.made += 1;
                    let after = s.last.as_ref().and_then(WeakShared::upgrade);
                    let (me, state) = (s.made, self.state.clone());
                    let r = async move {
                        if let Some(before) = after {
                            before.await;
                        }
                        {
                            // Started: callers from now on need the next round.
                            let mut s = state.lock();
                            if s.made == me {
                                s.queued = None;
                            }
                        }
                        round().await
                    }
                    .boxed()
                    .shared();
                    s.queued = r.downgrade();
                    s.last = r.downgrade();
                    r
                }
            }
        };
        joined.await
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
        // On this single-threaded runtime a yield lets both late callers run up to their wait:
        // they have joined while round 1 is still under way.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(started.load(Ordering::SeqCst), 1, "round 2 must wait for round 1");
        release.notify_one();
        assert_eq!(first.await.unwrap(), 1);
        while started.load(Ordering::SeqCst) < 2 {
            assert!(tokio::time::Instant::now() < deadline, "round 2 never started");
            tokio::task::yield_now().await;
        }
        release.notify_one();
        for h in later {
            assert_eq!(h.await.unwrap(), 2, "both late callers share round 2");
        }
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_caller_giving_up_does_not_stop_the_round() {
        let rounds = Arc::new(Rounds::<u64>::default());
        let started = Arc::new(AtomicU64::new(0));
        let release = Arc::new(Notify::new());
        // Each round answers its own number, so a caller's answer says which round served it.
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
        let quitter = tokio::spawn({
            let (rounds, round) = (rounds.clone(), round.clone());
            async move { rounds.join(round).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1, "the quitter's round is under way");
        let stayer = tokio::spawn({
            let (rounds, round) = (rounds.clone(), round.clone());
            async move { rounds.join(round).await }
        });
        quitter.abort();
        tokio::task::yield_now().await;
        release.notify_one();
        release.notify_one();
        assert_eq!(stayer.await.unwrap(), 2, "the stayer is served by the round after the one it found under way");
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }
}
