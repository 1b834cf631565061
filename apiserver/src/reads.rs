//! Which reads the watch cache serves and which go to the store, as kube 1.33's cacher
//! decides (`k8s.io/apiserver/pkg/storage/cacher/delegator`):
//!
//! | request                                        | served from                                  |
//! |------------------------------------------------|----------------------------------------------|
//! | LIST `resourceVersionMatch=Exact`              | the store                                    |
//! | LIST with `continue`                           | the store (its token names a store revision) |
//! | LIST `limit` and resourceVersion `N` (no match) | the store (kube's legacy exact read)        |
//! | LIST, resourceVersion unset (consistent)       | the cache once it has reached the store's current revision (KEP-2340); the store if the store's progress notifications are not trusted, or the cache does not get there in 3 s |
//! | LIST or GET, resourceVersion `0`               | the cache as it is; a LIST's `limit` is ignored |
//! | LIST or GET, resourceVersion `N`               | the cache once it has reached N (504 after 3 s) |
//! | GET, resourceVersion unset                     | the store                                    |
//!
//! A LIST the cache serves with a limit gets a continue token at the cache's revision, which
//! the store serves. Until a cache holds its first list, its reads go to the store.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::cache::{Cache, Listed};
use crate::resources::Resource;
use crate::rest::{Api, Query};
use crate::status::{self, Status};

fn rv_of(query: &Query) -> &str {
    query.get("resourceVersion").map(String::as_str).unwrap_or("")
}

fn parsed_rv(rv: &str) -> Result<i64, Status> {
    rv.parse().map_err(|_| status::bad_request(format!("invalid resource version: {rv}")))
}

/// The cache a LIST (already validated) is served from, fresh enough for it, and the limit it
/// applies; None: the store.
pub async fn list_source(
    api: &Api,
    r: &Resource,
    query: &Query,
    limit: i64,
) -> Result<Option<(Arc<Cache>, i64)>, Status> {
    let Some(cache) = api.caches.of(r).filter(|c| c.ready()) else { return Ok(None) };
    let rv = rv_of(query);
    let matching = query.get("resourceVersionMatch").map(String::as_str).unwrap_or("");
    let cont = query.get("continue").is_some_and(|c| !c.is_empty());
    let limit = if rv == "0" { 0 } else { limit };
    match (matching, rv) {
        ("Exact", _) => Ok(None),
        ("", _) if cont || (limit > 0 && !rv.is_empty()) => Ok(None),
        ("", "") if !cache.serves_consistent_reads() => Ok(None),
        ("", "") => match cache.current(&api.storage).await {
            Ok(()) => Ok(Some((cache, limit))),
            Err(s) if s.code == 504 => Ok(None),
            Err(s) => Err(s),
        },
        (_, "0") => Ok(Some((cache, 0))),
        (_, n) => {
            cache.fresh(parsed_rv(n)?).await?;
            Ok(Some((cache, limit)))
        }
    }
}

/// The cache a GET is served from, fresh enough for it; None: the store.
pub async fn get_source(api: &Api, r: &Resource, query: &Query) -> Result<Option<Arc<Cache>>, Status> {
    let Some(cache) = api.caches.of(r).filter(|c| c.ready()) else { return Ok(None) };
    match rv_of(query) {
        "" => Ok(None),
        "0" => Ok(Some(cache)),
        n => {
            cache.fresh(parsed_rv(n)?).await?;
            Ok(Some(cache))
        }
    }
}

/// The list metadata of a LIST from the cache.
fn list_meta(listed: &Listed) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(listed.rev.to_string()));
    if let Some(c) = &listed.continue_token {
        metadata.insert("continue".into(), Value::String(c.clone()));
    }
    if let Some(n) = listed.remaining {
        metadata.insert("remainingItemCount".into(), Value::from(n));
    }
    metadata
}

/// A LIST from the cache as kube writes it: `kind`, `apiVersion`, `metadata`, `items`, each item
/// the bytes the cache encoded once.
pub fn list_json(r: &Resource, listed: &Listed) -> Vec<u8> {
    let metadata = status::go_json(&list_meta(listed));
    let head = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        r.kind,
        r.api_version(),
        String::from_utf8_lossy(&metadata[..metadata.len() - 1])
    );
    let size = head.len() + listed.items.iter().map(|o| o.item.len() + 1).sum::<usize>() + 3;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    for (i, o) in listed.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&o.item);
    }
    out.extend_from_slice(b"]}\n");
    out
}

/// A LIST from the cache as a value (for the answers drawn from it: Tables, metadata).
pub fn list_value(r: &Resource, listed: &Listed) -> Value {
    let items = listed.items.iter().map(|o| serde_json::from_slice(&o.item).unwrap_or(Value::Null)).collect();
    crate::rest::list_of(r, list_meta(listed), items)
}
