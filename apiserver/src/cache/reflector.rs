//! What feeds a cache, as kube's reflector feeds its cacher: a list of the resource at one
//! revision, then one store watch from there. A watch that breaks (the store restarted, a
//! connection dropped, a leader changed) is opened again from the revision the cache has
//! reached, so nothing is missed or repeated; only when the store has compacted that revision
//! away is the resource listed again, and the cache's watchers are closed (they resume at their
//! resourceVersion, or learn it is too old and re-list).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{Cache, Object};
use crate::storage::watch::Change;
use crate::storage::{At, ListOptions, Storage, StorageError};

/// Objects per page of the list that fills a cache.
const PAGE: i64 = 10_000;

/// The pause after a failed list or watch, doubled up to `MAX_PAUSE` while failures go on.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Feeds `cache` from `storage` until the task is aborted.
pub async fn run(cache: Arc<Cache>, storage: Storage) {
    let mut pause = FIRST_PAUSE;
    loop {
        match list(&cache, &storage).await {
            Ok((objects, rev)) => {
                cache.replace(objects, rev);
                pause = FIRST_PAUSE;
            }
            Err(e) => {
                tracing::warn!(resource = cache.r.plural, error = %e, "listing for the watch cache failed");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
                continue;
            }
        }
        loop {
            match follow(&cache, &storage).await {
                Followed::Compacted => break,
                Followed::Broken(delivered) => {
                    if delivered {
                        pause = FIRST_PAUSE;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }
}

/// Every object of the resource, at one revision.
async fn list(cache: &Cache, storage: &Storage) -> Result<(Vec<Object>, i64), StorageError> {
    let mut opts = ListOptions { limit: PAGE, continue_token: None, at: At::Latest };
    let mut objects = Vec::new();
    loop {
        let page = storage.list(&cache.prefix, &opts).await?;
        for (key, stored) in page.items {
            match Object::decode(cache.r, key, stored.value, stored.rev) {
                Ok(o) => objects.push(o),
                Err(s) => tracing::warn!(error = %s.message, "an object the cache cannot decode is left out"),
            }
        }
        match page.continue_token {
            Some(t) => opts = ListOptions { limit: PAGE, continue_token: Some(t), at: At::Exact(page.rev) },
            None => return Ok((objects, page.rev)),
        }
    }
}

/// How a store watch ended.
enum Followed {
    /// The store no longer has the revisions after the cache's: list again.
    Compacted,
    /// It broke (whether it delivered anything first): watch again from where the cache is.
    Broken(bool),
}

/// One store watch from the cache's revision, applied to it until it ends.
async fn follow(cache: &Cache, storage: &Storage) -> Followed {
    let (changes, progress) = match storage.watch_with_progress(&cache.prefix, cache.rev()).await {
        Ok(w) => w,
        Err(StorageError::Compacted(_)) => return Followed::Compacted,
        Err(e) => {
            tracing::warn!(resource = cache.r.plural, error = %e, "the watch cache's store watch failed");
            return Followed::Broken(false);
        }
    };
    *cache.progress.lock() = Some(progress);
    let mut changes = std::pin::pin!(changes);
    let mut delivered = false;
    let ended = loop {
        match changes.next().await {
            Some(Ok(Change::Added { key, value, rev } | Change::Modified { key, value, rev, .. })) => {
                cache.apply(key, Some(value), rev)
            }
            Some(Ok(Change::Deleted { key, rev, .. })) => cache.apply(key, None, rev),
            Some(Ok(Change::Progress { rev })) => cache.progress(rev),
            Some(Err(StorageError::Compacted(_))) => break Followed::Compacted,
            Some(Err(e)) => {
                tracing::warn!(resource = cache.r.plural, error = %e, "the watch cache's store watch broke");
                break Followed::Broken(delivered);
            }
            None => break Followed::Broken(delivered),
        }
        delivered = true;
    };
    *cache.progress.lock() = None;
    ended
}
