//! An in-memory engine that models a disk: writes land in `live`; `sync` makes everything written
//! so far durable; [`MemEngine::crash`] throws away what was never synced. Clones share state, so
//! a simulated member can "restart" on the same disk. The live map is shared with the snapshots
//! taken of it and copied by the first write after one (copy on write).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Batch, BatchOp, Engine, Pair, Reads};
use crate::error::Result;
use crate::mvcc::keys;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
struct State {
    live: Arc<Map>,
    durable: Map,
    /// Batches written without sync since the last sync, in order.
    pending: Vec<Batch>,
}

/// In-memory engine with modelled durability.
#[derive(Clone, Default)]
pub struct MemEngine {
    state: Arc<Mutex<State>>,
}

impl State {
    /// Everything written so far survives a crash from now on.
    fn make_durable(&mut self) {
        for b in std::mem::take(&mut self.pending) {
            apply(&mut self.durable, &b);
        }
    }
}

fn apply(map: &mut Map, batch: &Batch) {
    for op in &batch.ops {
        match op {
            BatchOp::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            BatchOp::Delete(k) => {
                map.remove(k);
            }
            BatchOp::DeleteRange(s, e) => {
                let doomed: Vec<_> = map.range(s.clone()..e.clone()).map(|(k, _)| k.clone()).collect();
                for k in doomed {
                    map.remove(&k);
                }
            }
        }
    }
}

fn bounds<'a>(start: &'a [u8], end: &'a [u8]) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (Bound::Included(start), Bound::Excluded(end))
}

impl MemEngine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: everything not synced is gone.
    pub fn crash(&self) {
        let mut st = self.state.lock();
        st.pending.clear();
        st.live = Arc::new(st.durable.clone());
    }
}

/// A snapshot of the in-memory engine: the live map as it was.
struct MemSnapshot(Arc<Map>);

impl Reads for MemSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key).cloned())
    }

    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        if start < end {
            for (k, v) in self.0.range::<[u8], _>(bounds(start, end)) {
                if !f(k, v) {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Reads for MemEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.state.lock().live.get(key).cloned())
    }

    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        // From a snapshot, so `f` may write to this engine.
        self.snapshot().for_each(start, end, f)
    }
}

impl Engine for MemEngine {
    fn snapshot(&self) -> Arc<dyn Reads> {
        Arc::new(MemSnapshot(self.state.lock().live.clone()))
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<Pair>> {
        if start >= end {
            return Ok(Vec::new());
        }
        let st = self.state.lock();
        Ok(st.live.range::<[u8], _>(bounds(start, end)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn last(&self, start: &[u8], end: &[u8]) -> Result<Option<Pair>> {
        if start >= end {
            return Ok(None);
        }
        let st = self.state.lock();
        Ok(st.live.range::<[u8], _>(bounds(start, end)).next_back().map(|(k, v)| (k.clone(), v.clone())))
    }

    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut st = self.state.lock();
        apply(Arc::make_mut(&mut st.live), &batch);
        st.pending.push(batch);
        if sync {
            st.make_durable();
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.state.lock().make_durable();
        Ok(())
    }

    fn backend_size(&self) -> u64 {
        let st = self.state.lock();
        let state_machine = |k: &&Vec<u8>| !k.first().is_some_and(|p| keys::RAFT_PREFIXES.contains(p));
        st.live.iter().filter(|(k, _)| state_machine(k)).map(|(k, v)| (k.len() + v.len()) as u64).sum()
    }

    fn backend_size_in_use(&self) -> u64 {
        self.backend_size()
    }

    fn defragment(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_only_synced_writes() {
        let e = MemEngine::new();
        let mut b = Batch::default();
        b.put(b"a".to_vec(), b"1".to_vec());
        e.write(b, false).unwrap();
        let mut b = Batch::default();
        b.put(b"b".to_vec(), b"2".to_vec());
        e.write(b, true).unwrap();
        let mut b = Batch::default();
        b.put(b"c".to_vec(), b"3".to_vec());
        e.write(b, false).unwrap();
        assert_eq!(e.scan(b"a", b"z").unwrap().len(), 3);
        e.crash();
        let keys: Vec<_> = e.scan(b"a", b"z").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()], "the sync covers the earlier unsynced write");
    }

    #[test]
    fn delete_range_and_last() {
        let e = MemEngine::new();
        let mut b = Batch::default();
        for k in [b"a", b"b", b"c", b"d"] {
            b.put(k.to_vec(), k.to_vec());
        }
        b.delete_range(b"b".to_vec(), b"d".to_vec());
        e.write(b, true).unwrap();
        let keys: Vec<_> = e.scan(b"a", b"z").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"d".to_vec()]);
        assert_eq!(e.last(b"a", b"d").unwrap().unwrap().0, b"a".to_vec());
        assert_eq!(e.last(b"e", b"z").unwrap(), None);
    }

    #[test]
    fn a_snapshot_keeps_what_it_saw() {
        let e = MemEngine::new();
        let put = |k: &[u8], v: &[u8]| {
            let mut b = Batch::default();
            b.put(k.to_vec(), v.to_vec());
            e.write(b, false).unwrap();
        };
        put(b"a", b"1");
        let snap = e.snapshot();
        put(b"a", b"2");
        put(b"b", b"3");
        assert_eq!(snap.get(b"a").unwrap(), Some(b"1".to_vec()));
        let mut seen = Vec::new();
        snap.for_each(b"a", b"z", &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        assert_eq!(seen, vec![(b"a".to_vec(), b"1".to_vec())]);
        assert_eq!(e.get(b"a").unwrap(), Some(b"2".to_vec()));
    }
}
