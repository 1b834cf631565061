//! A controller's work queue, as client-go's rate-limited work queue behaves: a key is queued
//! at most once however often it is added; a key being worked on is not handed to a second
//! worker, and one added meanwhile comes back once the first is done; a key whose work failed
//! returns after a delay that doubles with each failure (5 ms up to 1000 s, client-go's
//! `DefaultControllerRateLimiter` per item) until it succeeds and is forgotten.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The first retry's delay.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// The longest delay between retries.
pub const MAX_DELAY: Duration = Duration::from_secs(1000);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys waiting to be worked on (queued, or added again while being worked on).
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
}

/// A work queue of object keys (`namespace/name`, or `name`).
#[derive(Clone, Default)]
pub struct Queue {
    state: Arc<Mutex<State>>,
    ready: Arc<Notify>,
}

impl Queue {
    pub fn new() -> Queue {
        Queue::default()
    }

    /// Queues `key` unless it already waits.
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut st = self.state.lock();
        if !st.dirty.insert(key.clone()) {
            return;
        }
        if !st.processing.contains(&key) {
            st.queue.push_back(key);
            drop(st);
            self.ready.notify_one();
        }
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queues `key` again after its failure's delay.
    pub fn retry(&self, key: &str) {
        let n = {
            let mut st = self.state.lock();
            let n = st.failures.entry(key.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        self.add_after(key, Self::delay(n));
    }

    /// The delay before retry `n` (from 1).
    pub fn delay(n: u32) -> Duration {
        BASE_DELAY.saturating_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX)).min(MAX_DELAY)
    }

    /// Forgets `key`'s failures.
    pub fn forget(&self, key: &str) {
        self.state.lock().failures.remove(key);
    }

    /// How many times `key` failed since it was last forgotten.
    pub fn failures(&self, key: &str) -> u32 {
        self.state.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to work on, waiting for one; it is the caller's until `done`.
    pub async fn next(&self) -> String {
        loop {
            let notified = self.ready.notified();
            {
                let mut st = self.state.lock();
                if let Some(key) = st.queue.pop_front() {
                    st.dirty.remove(&key);
                    st.processing.insert(key.clone());
                    if !st.queue.is_empty() {
                        self.ready.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// The work on `key` is over; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &str) {
        let mut st = self.state.lock();
        st.processing.remove(key);
        if st.dirty.contains(key) {
            st.queue.push_back(key.to_string());
            drop(st);
            self.ready.notify_one();
        }
    }

    /// How many keys are queued.
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Works the queue with `workers` workers until the task is aborted: `work` on each key; a
    /// failure is logged and retried after its delay, a success forgets the key's failures.
    pub async fn work<F, Fut>(self, name: &'static str, workers: usize, work: F)
    where
        F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), super::Failure>> + Send,
    {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let (q, work) = (self.clone(), work.clone());
            set.spawn(async move {
                loop {
                    let key = q.next().await;
                    match work(key.clone()).await {
                        Ok(()) => q.forget(&key),
                        Err(e) => {
                            // A conflict is the cache being behind a write: retried quietly.
                            if e.reason != "Conflict" {
                                tracing::info!(controller = name, key, error = %e, "retrying");
                            }
                            q.retry(&key);
                        }
                    }
                    q.done(&key);
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_waits_once_and_comes_back_if_added_while_worked_on() {
        let q = Queue::new();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        let a = q.next().await;
        assert_eq!(a, "a");
        q.add("a");
        // Being worked on, it is not handed out again until done.
        assert_eq!(q.next().await, "b");
        assert!(q.is_empty());
        q.done("a");
        assert_eq!(q.next().await, "a");
        q.done("a");
        q.done("b");
        assert!(q.is_empty());
    }

    #[test]
    fn retries_back_off_exponentially_up_to_the_maximum() {
        assert_eq!(Queue::delay(1), Duration::from_millis(5));
        assert_eq!(Queue::delay(2), Duration::from_millis(10));
        assert_eq!(Queue::delay(11), Duration::from_millis(5 * 1024));
        assert_eq!(Queue::delay(40), MAX_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_key_returns_after_its_delay_and_is_forgotten_on_success() {
        let q = Queue::new();
        q.add("k");
        let k = q.next().await;
        q.retry(&k);
        q.done(&k);
        assert!(q.is_empty());
        assert_eq!(q.failures("k"), 1);
        let back = tokio::time::timeout(Duration::from_secs(1), q.next()).await.unwrap();
        assert_eq!(back, "k");
        q.forget("k");
        q.done("k");
        assert_eq!(q.failures("k"), 0);
    }
}
