//! Group commit: one `fsync` makes many writes durable.
//!
//! Writers put their batches into the engine unsynced, then ask the [`Syncer`] to tell them once
//! everything written so far is durable. In the background mode a dedicated thread takes every
//! request that is waiting, syncs the engine once, and answers them all; while it syncs, new
//! requests queue for the next round. So under load a single sync covers the Raft log entries of
//! many proposals and the state-machine batches applied meanwhile, and no async runtime worker
//! ever blocks in `fdatasync`.
//!
//! Durability: a request's callback runs only after an engine sync that started after the
//! request was made, so it covers every write the requester made before asking. The inline mode
//! syncs on the caller's thread before answering; the simulation uses it, because a thread of
//! its own would make the order of events depend on the host's scheduler.

use std::sync::mpsc;
use std::sync::Arc;

use super::Engine;

/// The outcome of one sync: an error message if the engine could not sync.
pub type SyncResult = std::result::Result<(), String>;

/// Called once the writes made before its request are durable (or the sync failed).
type Done = Box<dyn FnOnce(&SyncResult) + Send>;

/// Where the syncs happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// On a dedicated thread, one sync per round of waiting requests (production).
    Background,
    /// On the requester's thread, one sync per request (deterministic simulation).
    Inline,
}

/// Hands out "durable now" notifications. Clones share the same thread.
#[derive(Clone)]
pub struct Syncer {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Inline(Arc<dyn Engine>),
    Background(Arc<Background>),
}

/// The sync thread and the way to it. Dropped with the last clone: the thread is then told to
/// stop and joined, so it has let go of the engine (and RocksDB is closed) before the drop
/// returns. A thread left closing a database while the process exits corrupted the heap.
struct Background {
    tx: Option<mpsc::Sender<Done>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            // A callback run by the thread itself could hold the last clone.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl Syncer {
    /// A syncer for `engine`; in the background mode its thread ends, joined, when the last clone
    /// is dropped.
    pub fn new(engine: Arc<dyn Engine>, mode: SyncMode) -> Self {
        let inner = match mode {
            SyncMode::Inline => Inner::Inline(engine),
            SyncMode::Background => {
                let (tx, rx) = mpsc::channel::<Done>();
                let thread = std::thread::Builder::new()
                    .name("keel-sync".into())
                    .spawn(move || run(&*engine, rx))
                    .expect("spawn the sync thread");
                Inner::Background(Arc::new(Background { tx: Some(tx), thread: Some(thread) }))
            }
        };
        Self { inner }
    }

    /// Calls `done` once every write made before this call is durable.
    pub fn after_sync(&self, done: impl FnOnce(&SyncResult) + Send + 'static) {
        match &self.inner {
            Inner::Inline(engine) => done(&sync(&**engine)),
            Inner::Background(bg) => {
                let tx = bg.tx.as_ref().expect("a live syncer has its sender");
                if let Err(mpsc::SendError(done)) = tx.send(Box::new(done)) {
                    // Only after the thread died: nothing can be made durable any more.
                    done(&Err("the sync thread has stopped".into()));
                }
            }
        }
    }

    /// Returns once every write made before this call is durable.
    pub async fn sync(&self) -> SyncResult {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.after_sync(move |r| {
            let _ = tx.send(r.clone());
        });
        rx.await.unwrap_or_else(|_| Err("the sync thread has stopped".into()))
    }
}

fn sync(engine: &dyn Engine) -> SyncResult {
    if crate::plant::on("lost-on-crash") {
        return Ok(());
    }
    engine.sync().map_err(|e| e.to_string())
}

/// The sync thread: waits for a request, takes every other one already waiting, syncs once, and
/// answers them all.
fn run(engine: &dyn Engine, rx: mpsc::Receiver<Done>) {
    while let Ok(first) = rx.recv() {
        let mut round = vec![first];
        round.extend(rx.try_iter());
        let result = sync(engine);
        for done in round {
            done(&result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Batch, MemEngine};

    fn put(e: &MemEngine, k: &[u8]) {
        let mut b = Batch::default();
        b.put(k.to_vec(), b"v".to_vec());
        e.write(b, false).unwrap();
    }

    #[tokio::test]
    async fn a_sync_covers_every_earlier_write_in_both_modes() {
        for mode in [SyncMode::Inline, SyncMode::Background] {
            let e = MemEngine::new();
            let s = Syncer::new(Arc::new(e.clone()), mode);
            put(&e, b"a");
            put(&e, b"b");
            s.sync().await.unwrap();
            put(&e, b"c");
            e.crash();
            let keys: Vec<_> = e.scan(b"a", b"z").unwrap().into_iter().map(|(k, _)| k).collect();
            assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()], "{mode:?}");
        }
    }

    #[tokio::test]
    async fn many_waiting_requests_are_all_answered() {
        let e = MemEngine::new();
        let s = Syncer::new(Arc::new(e.clone()), SyncMode::Background);
        let mut waits = Vec::new();
        for i in 0..100u8 {
            put(&e, &[b'k', i]);
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.after_sync(move |r| {
                let _ = tx.send(r.is_ok());
            });
            waits.push(rx);
        }
        for w in waits {
            assert!(w.await.unwrap());
        }
        e.crash();
        assert_eq!(e.scan(b"k", b"l").unwrap().len(), 100);
    }
}
