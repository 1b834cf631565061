//! Who wrote which fields: `metadata.managedFields` kept on every write, and server-side apply
//! (`application/apply-patch+yaml`), for built-in and custom resources alike, through the pure
//! field-ownership logic of `crate::apply`.
//!
//! Each request runs inside [`writing`], which names its field manager (the `fieldManager`
//! parameter, else the first part of the client's User-Agent, as kube names it). The generic
//! registry then calls [`track`] on every create and update — the fields that changed become the
//! writer's — and, for an apply, [`apply`] merges the configuration into the live object and
//! settles ownership (conflicts are kube's 409); the write that follows does not track again.
//!
//! The types come from the resource's OpenAPI schema as `crate::openapi` publishes it (kube's
//! list types, map keys and atomic markers; a custom resource's structural schema), made once
//! per served resource version and kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use serde_json::{json, Value};

use crate::apply::{self, fieldpath::Path, Context, Set, Types};
use crate::resources::{Resource, Strategy};
use crate::status::{self, FieldError, FieldErrorType, GroupKind, Status};

/// The longest field manager name kube takes.
const MAX_MANAGER: usize = 128;

/// The writer of one request.
struct Writer {
    manager: String,
    /// Set once an apply has settled the managed fields of the object about to be written.
    applied: AtomicBool,
}

tokio::task_local! {
    static WRITER: Writer;
}

/// Runs `work` (one request) as written by field manager `manager`.
pub async fn writing<F: std::future::Future>(manager: String, work: F) -> F::Output {
    WRITER.scope(Writer { manager, applied: AtomicBool::new(false) }, work).await
}

/// The request's field manager: its `fieldManager`, else the User-Agent up to its first `/`
/// (kube's `prefixFromUserAgent`), cut to 128 bytes.
pub fn manager_of(query: &crate::rest::Query, headers: &http::HeaderMap) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let agent = headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let prefix = agent.split('/').next().unwrap_or("");
    let mut end = prefix.len().min(MAX_MANAGER);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    prefix[..end].to_string()
}

/// What kube's `ValidatePatchOptions` (and the create/update options' check) say of a request's
/// `fieldManager` and `force`: `apply` for an apply patch.
pub fn option_errors(query: &crate::rest::Query, options: &str, apply: bool) -> Result<(), Status> {
    let mut errors = Vec::new();
    let manager = query.get("fieldManager").map(String::as_str).unwrap_or("");
    if apply && manager.is_empty() {
        errors.push(FieldError::new(FieldErrorType::Required, "fieldManager", None, "is required for apply patch"));
    }
    if manager.len() > MAX_MANAGER {
        errors.push(FieldError::new(
            FieldErrorType::TooLong,
            "fieldManager",
            None,
            &format!("may not be more than {MAX_MANAGER} bytes"),
        ));
    }
    if manager.chars().any(|c| c.is_control()) {
        errors.push(FieldError::invalid("fieldManager", json!(manager), "may not contain non-printable characters"));
    }
    if query.contains_key("force") && !apply {
        errors.push(FieldError::new(
            FieldErrorType::Forbidden,
            "force",
            None,
            "may not be specified for non-apply patch",
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(status::invalid(GroupKind { group: "meta.k8s.io", kind: options }, "", &errors))
}

fn manager() -> String {
    WRITER.try_with(|w| w.manager.clone()).unwrap_or_default()
}

/// Whether the request's object was settled by a server-side apply (its managed fields are
/// the apply's).
pub(crate) fn applied() -> bool {
    WRITER.try_with(|w| w.applied.load(Ordering::Relaxed)).unwrap_or(false)
}

fn mark_applied() {
    let _ = WRITER.try_with(|w| w.applied.store(true, Ordering::Relaxed));
}

/// A resource's published OpenAPI document and the name of its kind's schema in it.
struct Document {
    doc: Value,
    root: String,
}

/// Documents made, by descriptor (descriptors live as long as the process).
static DOCUMENTS: LazyLock<parking_lot::Mutex<HashMap<usize, Arc<Document>>>> = LazyLock::new(Default::default);

fn document(r: &'static Resource) -> Option<Arc<Document>> {
    let id = r as *const Resource as usize;
    if let Some(d) = DOCUMENTS.lock().get(&id) {
        return Some(d.clone());
    }
    let doc = crate::openapi::document(&[r], r.group, r.version)?;
    let gvk = json!({"group": r.group, "kind": r.kind, "version": r.version});
    let root = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)?
        .iter()
        .find(|(_, s)| {
            s.get("x-kubernetes-group-version-kind").and_then(Value::as_array).is_some_and(|a| a.contains(&gvk))
        })?
        .0
        .clone();
    let d = Arc::new(Document { doc, root });
    DOCUMENTS.lock().insert(id, d.clone());
    Some(d)
}

/// The fields a write of `sub` (empty: the main resource) resets: a status subresource's write
/// owns only the status (kube's status strategies reset `spec`); a write of the main resource
/// of one that has a status subresource, everything but the status.
fn reset(r: &Resource, sub: &str) -> Set {
    let mut set = Set::new();
    let status = r.subresource("status").is_some() || matches!(r.strategy, Strategy::Namespace | Strategy::Crd);
    match sub {
        "status" => set.insert(&Path::fields(&["spec"]).0),
        "" if status => set.insert(&Path::fields(&["status"]).0),
        _ => {}
    }
    set
}

/// Runs `f` with the write's context for `r`, or None when `r` has no schema.
fn with_context<T>(r: &'static Resource, sub: &str, f: impl FnOnce(&Context<'_>) -> T) -> Option<T> {
    let d = document(r)?;
    let types = Types::of_document(&d.doc);
    let root = types.named(&d.root)?;
    let api_version = r.api_version();
    let empty = json!({"apiVersion": api_version, "kind": r.kind});
    let reset = reset(r, sub);
    let now = crate::meta::now();
    let ctx = Context {
        types,
        root,
        api_version: &api_version,
        kind: r.kind,
        subresource: sub,
        reset: &reset,
        empty: &empty,
        now: &now,
    };
    Some(f(&ctx))
}

/// `new`, about to replace `live` (None: a create) through `sub`, with its managed fields
/// brought up to date: what changed is the request's manager's (an `Update` entry). An apply's
/// object, already settled, is left as it is.
pub fn track(r: &'static Resource, sub: &str, live: Option<&Value>, new: Value) -> Value {
    if applied() || !r.stored() {
        return new;
    }
    let manager = manager();
    with_context(r, sub, |ctx| apply::update(ctx, live, &new, &manager).0).unwrap_or(new)
}

/// Server-side apply of `config` (the request's YAML or JSON, decoded) by the request's manager
/// to `live` (None: the object does not exist and the apply creates it): the merged object with
/// its managed fields, or kube's 409 naming each conflict (400/500 for a config that does not
/// fit). `force` takes the conflicting fields over.
pub fn apply(
    r: &'static Resource,
    sub: &str,
    live: Option<&Value>,
    config: &Value,
    force: bool,
) -> Result<Value, Status> {
    let manager = manager();
    let done = with_context(r, sub, |ctx| {
        let live = live.unwrap_or(ctx.empty);
        let managed = apply::managed_for_apply(live).map_err(|e| e.status())?;
        apply::apply(ctx, live, config, managed, &manager, force).map(|(v, _)| v).map_err(|e| e.status())
    })
    .ok_or_else(|| crate::rest::internal(format!("no schema for {}", r.plural)))??;
    mark_applied();
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_create_is_its_managers() {
        let r = crate::resources::find("", "v1", "configmaps").unwrap();
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"a": "1"}});
        let out = writing("kubectl-create".into(), async { track(r, "", None, v) }).await;
        assert_eq!(out["metadata"]["managedFields"][0]["manager"], "kubectl-create", "{out}");
    }

    /// Workloads' and nodes' writes are tracked, on a stack the size of a runtime worker's.
    #[test]
    fn workloads_track_within_a_worker_stack() {
        let t = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                for (g, p, kind) in [("apps", "replicasets", "ReplicaSet"), ("", "pods", "Pod"), ("", "nodes", "Node"), ("apps", "deployments", "Deployment")] {
                    let r = crate::resources::find(g, "v1", p).unwrap();
                    let v = json!({"apiVersion": r.api_version(), "kind": kind, "metadata": {"name": "a", "namespace": "d"},
                        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "n", "image": "i"}]}}, "containers": [{"name": "n", "image": "i", "ports": [{"containerPort": 80}]}]}});
                    let out = writing("m".into(), async { track(r, "", None, v) }).await;
                    assert!(out["metadata"]["managedFields"].is_array(), "{p}");
                }
            });
        });
        t.unwrap().join().unwrap();
    }
}
