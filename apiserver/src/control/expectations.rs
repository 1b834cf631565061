//! Expectations (kube's `ControllerExpectations`): how many creations and deletions of pods a
//! controller has asked for and not yet seen in its informer. Until they are seen (or
//! `TIMEOUT` passes), the controller does not act on the cache again, which would still show
//! the world before its own writes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use std::sync::Arc;

use super::client::{resource, Client};
use super::informer::{self, Change};
use super::Queue;
use crate::rest::Selectors;

/// How long unmet expectations hold a controller back (kube's `ExpectationsTimeout`).
pub const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy)]
struct Expect {
    adds: i64,
    dels: i64,
    set: Instant,
}

/// Expectations by owner key (`namespace/name`).
#[derive(Default)]
pub struct Expectations(Mutex<HashMap<String, Expect>>);

impl Expectations {
    /// The owner expects `adds` creations and `dels` deletions.
    pub fn expect(&self, key: &str, adds: i64, dels: i64) {
        self.0.lock().insert(key.to_string(), Expect { adds, dels, set: Instant::now() });
    }

    /// Fewer are coming (writes that failed, or never tried).
    pub fn lower(&self, key: &str, adds: i64, dels: i64) {
        if let Some(e) = self.0.lock().get_mut(key) {
            e.adds -= adds;
            e.dels -= dels;
        }
    }

    /// An owned pod changed: a creation or a deletion (or its start) is seen.
    pub fn observe(&self, key: &str, change: &Change, deleting_now: bool) {
        let adds = i64::from(matches!(change, Change::Added(_)));
        let dels = i64::from(matches!(change, Change::Deleted(_)) || deleting_now);
        self.lower(key, adds, dels);
    }

    /// Whether the owner may act: everything it expected was seen, or it waited long enough.
    pub fn met(&self, key: &str) -> bool {
        self.0.lock().get(key).is_none_or(|e| (e.adds <= 0 && e.dels <= 0) || e.set.elapsed() > TIMEOUT)
    }

    pub fn forget(&self, key: &str) {
        self.0.lock().remove(key);
    }
}

/// An informer on pods handing each pod's change to its controller of `kind`: the owner's key
/// queued, its expectations told what was seen.
pub async fn owned_pods(client: Client, kind: &'static str, queue: Queue, expectations: Arc<Expectations>) {
    let pods = resource("", "v1", "pods");
    informer::run(client.cache(pods).clone(), Selectors::everything(), move |ch: Change| {
        let v = ch.object().json(pods);
        let Some((k, name, _)) = super::replicaset::controller_of(&v) else { return };
        if k != kind {
            return;
        }
        let key = format!("{}/{name}", ch.object().namespace);
        let deleting_now = v.pointer("/metadata/deletionTimestamp").is_some()
            && ch.old().is_some_and(|o| o.json(pods).pointer("/metadata/deletionTimestamp").is_none());
        expectations.observe(&key, &ch, deleting_now);
        queue.add(key);
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_met_once_everything_asked_for_is_seen() {
        let e = Expectations::default();
        assert!(e.met("d/rs"));
        e.expect("d/rs", 2, 0);
        assert!(!e.met("d/rs"));
        e.lower("d/rs", 1, 0);
        assert!(!e.met("d/rs"));
        e.lower("d/rs", 1, 0);
        assert!(e.met("d/rs"));
        e.expect("d/rs", 0, 1);
        e.forget("d/rs");
        assert!(e.met("d/rs"));
    }
}
