//! In-process informers: a controller's view of one resource, fed straight from the resource's
//! watch cache (the cached objects themselves: no HTTP, no encoding). An informer delivers every
//! object the cache holds, then every change; when the cache drops it (a re-list, a queue that
//! overflowed) it starts over and, as client-go's reflector does on a re-list, reports as
//! deleted what went while it was away.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{Cache, Kind, Object, Selectors, Start};

/// One change an informer reports.
#[derive(Clone, Debug)]
pub enum Change {
    Added(Arc<Object>),
    /// Old, new.
    Modified(Arc<Object>, Arc<Object>),
    Deleted(Arc<Object>),
}

impl Change {
    /// The object as it is now (as it was last, for a deletion).
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Change::Added(o) | Change::Modified(_, o) | Change::Deleted(o) => o,
        }
    }

    /// The object before the change, for a modification.
    pub fn old(&self) -> Option<&Arc<Object>> {
        match self {
            Change::Modified(o, _) => Some(o),
            _ => None,
        }
    }
}

/// Feeds `handler` every object of `cache` that `sel` selects, then every change to them (an
/// object leaving the selection is deleted), until the task is aborted.
pub async fn run(cache: Arc<Cache>, sel: Selectors, handler: impl Fn(Change) + Send + Sync + 'static) {
    let mut known: HashMap<String, Arc<Object>> = HashMap::new();
    loop {
        if !cache.wait_for(0, Duration::from_secs(3600)).await {
            continue;
        }
        let mut sub = match cache.watch(Start::Now, None, sel.clone()) {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut now: HashMap<String, Arc<Object>> = HashMap::with_capacity(sub.initial.len());
        for o in std::mem::take(&mut sub.initial) {
            let change = match known.remove(&o.key) {
                Some(old) if old.rev == o.rev => None,
                Some(old) => Some(Change::Modified(old, o.clone())),
                None => Some(Change::Added(o.clone())),
            };
            now.insert(o.key.clone(), o);
            if let Some(c) = change {
                handler(c);
            }
        }
        for (_, gone) in known.drain() {
            handler(Change::Deleted(gone));
        }
        known = now;
        while let Some((e, seen)) = sub.next().await {
            let (kind, object) = e.as_seen(seen);
            let change = match (kind, &e.prev) {
                (Kind::Modified, Some(p)) => Change::Modified(p.clone(), object.clone()),
                (Kind::Added | Kind::Modified, _) => Change::Added(object.clone()),
                (Kind::Deleted, _) => Change::Deleted(object.clone()),
            };
            match &change {
                Change::Deleted(o) => known.remove(&o.key),
                c => known.insert(c.object().key.clone(), c.object().clone()),
            };
            handler(change);
        }
    }
}

/// `namespace/name` (or `name`) of a cached object: the key work queues hold.
pub fn key_of(o: &Object) -> String {
    let name = o.key.rsplit('/').next().unwrap_or("");
    if o.namespace.is_empty() {
        name.to_string()
    } else {
        format!("{}/{name}", o.namespace)
    }
}

/// The namespace (None for a cluster-scoped object) and name of a queue key.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use serde_json::json;

    fn configmaps() -> &'static crate::resources::Resource {
        crate::resources::find("", "v1", "configmaps").unwrap()
    }

    fn put(c: &Cache, name: &str, rev: i64) {
        let v = serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": "d"}})).unwrap();
        c.apply(format!("/registry/configmaps/d/{name}"), Some(v), rev);
    }

    #[tokio::test]
    async fn an_informer_reports_the_state_then_changes_and_what_a_relist_lost() {
        let c = Arc::new(Cache::new(configmaps(), "/registry/configmaps/".into(), true));
        c.replace(Vec::new(), 1);
        put(&c, "a", 2);
        put(&c, "b", 3);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = tokio::spawn(run(c.clone(), Selectors::everything(), move |ch| {
            let what = match &ch {
                Change::Added(_) => "added",
                Change::Modified(..) => "modified",
                Change::Deleted(_) => "deleted",
            };
            s.lock().push(format!("{what} {}@{}", key_of(ch.object()), ch.object().rev));
        }));
        let wait = |n: usize| {
            let seen = seen.clone();
            async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while seen.lock().len() < n {
                    assert!(tokio::time::Instant::now() < deadline, "{:?}", seen.lock());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        wait(2).await;
        put(&c, "a", 4);
        c.apply("/registry/configmaps/d/b".into(), None, 5);
        wait(4).await;
        // A re-list without a: it is reported deleted; c is new.
        let cv = serde_json::to_vec(&json!({"metadata": {"name": "c", "namespace": "d"}})).unwrap();
        c.replace(vec![Object::decode(configmaps(), "/registry/configmaps/d/c".into(), cv, 9).unwrap()], 9);
        wait(6).await;
        task.abort();
        let mut got = seen.lock().clone();
        got[..2].sort();
        got[4..].sort();
        assert_eq!(
            got,
            ["added d/a@2", "added d/b@3", "modified d/a@4", "deleted d/b@5", "added d/c@9", "deleted d/a@4"]
        );
    }

    #[test]
    fn keys_split_into_namespace_and_name() {
        assert_eq!(split_key("ns/x"), (Some("ns"), "x"));
        assert_eq!(split_key("node-1"), (None, "node-1"));
    }
}
