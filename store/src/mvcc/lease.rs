//! The replicated lease table: which leases exist, their granted TTL, their last checkpointed
//! remaining TTL, and which keys are attached to each.
//!
//! Everything here changes only by applying Raft entries, so every member holds the same table.
//! Time does not appear: when a lease expires is the leader's business (`crate::lessor`), which
//! turns an expiry into a `LeaseRevoke` entry. On disk each lease is one `e` key
//! (`keys::lease_key`) written in the applied batch; attachments are not stored, they are
//! rebuilt from the live keys' `lease` fields when the store opens.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use keel_proto::etcdserverpb::{
    LeaseCheckpointRequest, LeaseCheckpointResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest,
    LeaseRevokeResponse,
};
use serde::{Deserialize, Serialize};

use super::kv::header;
use super::ApplyBatch;
use crate::error::{Error, Result};

/// etcd's largest TTL (`lease.MaxLeaseTTL`), in seconds.
pub const MAX_TTL: i64 = 9_000_000_000;

/// One lease as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The granted TTL in seconds (already raised to the minimum by the proposer).
    pub ttl: i64,
    /// The remaining TTL at the last checkpoint, in seconds; 0 = none (a new leader grants the
    /// full TTL).
    pub remaining: i64,
}

#[derive(Debug, Clone)]
pub struct Lease {
    pub record: LeaseRecord,
    /// Attached keys, in key order (revoke deletes them in this order, as etcd does).
    pub keys: BTreeSet<Bytes>,
}

/// All leases and the key -> lease attachments.
#[derive(Debug, Default, Clone)]
pub struct LeaseTable {
    leases: BTreeMap<i64, Lease>,
    /// The lease of every live key that has one.
    by_key: HashMap<Bytes, i64>,
}

impl LeaseTable {
    pub fn exists(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }

    /// Every lease, by id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &Lease)> {
        self.leases.iter().map(|(id, l)| (*id, l))
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Adds a lease (the caller has checked that `id` is free).
    pub fn insert(&mut self, id: i64, record: LeaseRecord) {
        self.leases.insert(id, Lease { record, keys: BTreeSet::new() });
    }

    /// Removes a lease, returning it; its keys stay attached until they are deleted.
    pub fn remove(&mut self, id: i64) -> Option<Lease> {
        self.leases.remove(&id)
    }

    pub fn set_remaining(&mut self, id: i64, remaining: i64) -> bool {
        match self.leases.get_mut(&id) {
            Some(l) => {
                l.record.remaining = remaining;
                true
            }
            None => false,
        }
    }

    /// Records that `key` now has `lease` (0 = none), detaching it from its previous lease.
    pub fn set_key(&mut self, key: &Bytes, lease: i64) {
        let old = if lease == 0 { self.by_key.remove(key) } else { self.by_key.insert(key.clone(), lease) };
        if old == Some(lease) {
            return;
        }
        if let Some(l) = old.and_then(|o| self.leases.get_mut(&o)) {
            l.keys.remove(key);
        }
        if let Some(l) = self.leases.get_mut(&lease) {
            l.keys.insert(key.clone());
        }
    }

    /// Attaches every key recorded by [`LeaseTable::set_key`] to its lease; for the store's
    /// open, where keys are replayed before the leases are loaded.
    pub fn attach_all(&mut self) {
        for (k, id) in &self.by_key {
            if let Some(l) = self.leases.get_mut(id) {
                l.keys.insert(k.clone());
            }
        }
    }
}

/// Applies a LeaseGrant. The proposer has chosen the id and raised the TTL to the minimum, so
/// every member grants the same lease.
pub fn grant(batch: &mut ApplyBatch, g: &LeaseGrantRequest) -> Result<LeaseGrantResponse> {
    if g.ttl > MAX_TTL {
        return Err(Error::LeaseTtlTooLarge);
    }
    if g.id == 0 {
        return Err(Error::LeaseNotFound);
    }
    if batch.leases().exists(g.id) {
        return Err(Error::LeaseExist);
    }
    batch.grant_lease(g.id, LeaseRecord { ttl: g.ttl, remaining: 0 });
    Ok(LeaseGrantResponse { header: header(batch.current_rev()), id: g.id, ttl: g.ttl, error: String::new() })
}

/// Applies a LeaseRevoke: the lease goes, and its keys are deleted at one revision.
pub fn revoke(batch: &mut ApplyBatch, r: &LeaseRevokeRequest) -> Result<LeaseRevokeResponse> {
    if !batch.revoke_lease(r.id)? {
        return Err(Error::LeaseNotFound);
    }
    Ok(LeaseRevokeResponse { header: header(batch.current_rev()) })
}

/// Applies a LeaseCheckpoint: records remaining TTLs; leases gone meanwhile are skipped.
pub fn checkpoint(batch: &mut ApplyBatch, c: &LeaseCheckpointRequest) -> Result<LeaseCheckpointResponse> {
    for cp in &c.checkpoints {
        batch.checkpoint_lease(cp.id, cp.remaining_ttl);
    }
    Ok(LeaseCheckpointResponse { header: header(batch.current_rev()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_move_between_leases_and_detach_on_delete() {
        let mut t = LeaseTable::default();
        t.insert(1, LeaseRecord { ttl: 10, remaining: 0 });
        t.insert(2, LeaseRecord { ttl: 10, remaining: 0 });
        let k = Bytes::from_static(b"k");
        t.set_key(&k, 1);
        assert!(t.get(1).unwrap().keys.contains(&k));
        t.set_key(&k, 2);
        assert!(t.get(1).unwrap().keys.is_empty());
        assert!(t.get(2).unwrap().keys.contains(&k));
        t.set_key(&k, 0);
        assert!(t.get(2).unwrap().keys.is_empty());
    }
}
