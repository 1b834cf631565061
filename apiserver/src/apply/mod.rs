//! Server-side apply: field ownership and the merge of applied configurations, as
//! kube-apiserver 1.33 does them with structured-merge-diff v4. Pure functions over JSON
//! values; the request path decodes bodies, picks the manager name and stores the results.
//!
//! Every write records who owns which fields in `metadata.managedFields`. A manager is a name
//! plus how it wrote: `Apply` (server-side apply; one entry per name) or `Update` (any other
//! write; one entry per name and apiVersion), and a subresource.
//!
//! ```text
//!  create/update/patch ──► update(): fields changed old→new go to the writer (Update), are
//!                          taken from everyone else; removed fields leave every set
//!  apply ───────────────► apply(): live ⊕ config (merge by schema); fields the applier owned
//!                          and no longer applies, and nobody else owns, are removed; fields
//!                          the merge changes that others own are conflicts (409) unless
//!                          forced, when they change hands; the applier owns exactly its config
//! ```
//!
//! The layers are kube's field manager chain, in its order: version check, last-applied
//! annotation upkeep and client-side-apply upgrade (manager `kubectl` only), tracking started
//! on first apply (`before-first-apply`), the cap of ten update entries, manager identifiers,
//! timestamps, stripping of metadata that nobody owns (`apiVersion`, `kind`, `metadata.name`,
//! `uid`, …), and SMD's updater. Fields the resource's strategy resets (`status` on the main
//! resource, the rest on `/status`) are in [`Context::reset`] and never owned by this write.
//!
//! Invariants: no managed set holds a stripped or reset field; no entry is empty; an apply that
//! changes nothing changes no timestamp; nothing here panics on client data, and every walk
//! recurses once per level of the values it is given.
//!
//! Not done here: converting managed fields between API versions (an entry of another version
//! is compared as if its paths were this version's), SMD's reconciliation of sets with schema
//! changes (atomic ↔ granular), unions.

pub mod conflict;
pub mod fieldpath;
pub mod managed;
pub mod schema;
pub mod typed;

use serde_json::{Map, Value};

pub use conflict::{Conflict, Conflicts};
pub use fieldpath::{Path, PathElement, Set};
pub use managed::{ManagedEntry, ManagedFields, Operation};
pub use schema::{Atom, ListKind, TypeRef, Types};
pub use typed::Comparison;

use crate::status::Status;
use typed::Strictness;

/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The manager whose applies keep [`LAST_APPLIED`] up to date and may take over fields the
/// annotation shows it set (kube's opt-in is this name).
pub const KUBECTL: &str = "kubectl";
/// kube's limit on the total size of an object's annotations (`TotalAnnotationSizeLimitB`).
const ANNOTATIONS_SIZE_LIMIT: usize = 256 * 1024;

/// What one write is about.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub types: Types<'a>,
    /// The kind's type (`TypeRef::DEDUCED` for a custom resource without a schema).
    pub root: TypeRef<'a>,
    /// The request's group-version (`apps/v1`); managed entries are written at it.
    pub api_version: &'a str,
    pub kind: &'a str,
    /// Empty for the main resource.
    pub subresource: &'a str,
    /// Fields the strategy resets for this (sub)resource; they and everything under them are
    /// nobody's.
    pub reset: &'a Set,
    /// The kind's empty object as kube's `New()` serializes it (for a built-in type, Go's zero
    /// struct: `{"metadata":{"creationTimestamp":null},"spec":{...},"status":{}}`; for a custom
    /// resource `{"apiVersion":..,"kind":..}`). A create is compared against it, so the fields
    /// it has decide which parents a creator owns.
    pub empty: &'a Value,
    /// The write's time, RFC 3339 (`2024-05-01T12:00:00Z`).
    pub now: &'a str,
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// Fields owned by others would change (409).
    Conflicts(Conflicts),
    /// kube's 400: a config of another kind, or one that sets managedFields.
    BadRequest(String),
    /// kube's 500: a config or stored object that does not fit the schema, with kube's text.
    Internal(String),
}

impl ApplyError {
    /// The Status kube answers with.
    pub fn status(&self) -> Status {
        match self {
            ApplyError::Conflicts(c) => c.status(),
            ApplyError::BadRequest(m) => crate::status::bad_request(m.clone()),
            ApplyError::Internal(m) => Status::failure(500, "", m.clone(), None),
        }
    }
}

impl From<Conflicts> for ApplyError {
    fn from(c: Conflicts) -> Self {
        ApplyError::Conflicts(c)
    }
}

/// The fields no manager ever owns (kube's stripmeta).
pub fn stripped_fields() -> Set {
    let mut set = Set::new();
    let paths: [&[&str]; 12] = [
        &["apiVersion"],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ];
    for p in paths {
        set.insert(&Path::fields(p).0);
    }
    set
}

/// The managed fields of a create (`live` = `None`) or of any other non-apply write, and
/// `new` with them in its metadata (kube's `FieldManager.UpdateNoErrors`). The writer
/// (`manager`, an `Update` entry at the request's version) gains every field that changed and
/// its entry's time becomes [`Context::now`]; others lose the fields it changed or removed. An
/// existing object that has no managed fields stays untracked until it is first applied to.
pub fn update(ctx: &Context<'_>, live: Option<&Value>, new: &Value, manager: &str) -> (Value, ManagedFields) {
    let old = live.unwrap_or(ctx.empty);
    let managed = managed::decode_live_or_new(old, new, !ctx.subresource.is_empty());
    let mut object = new.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let managed = if managed.is_empty() && live.is_some() {
        managed
    } else {
        update_tracked(ctx, old, &object, managed, manager)
    };
    managed.write_to(&mut object);
    (object, managed)
}

/// `config` applied to `live` by `manager` (kube's `FieldManager.Apply`): the merged object with
/// its managed fields written in, and those fields. `live` is the stored object, or
/// [`Context::empty`] when the apply creates it; `managed` are its managed fields
/// ([`ManagedFields::from_object`]). Conflicts fail the apply unless `force`; for manager
/// `kubectl`, fields its last-applied annotation shows it set are taken over as if forced, and
/// the annotation follows the config.
pub fn apply(
    ctx: &Context<'_>,
    live: &Value,
    config: &Value,
    managed: ManagedFields,
    manager: &str,
    force: bool,
) -> Result<(Value, ManagedFields), ApplyError> {
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let applied = gvk_string(&text(config, "/apiVersion"), &text(config, "/kind"));
    if applied != gvk_string(ctx.api_version, ctx.kind) {
        return Err(ApplyError::BadRequest(format!("invalid object type: {applied}")));
    }
    if config.pointer("/metadata/managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".into()));
    }
    let named = |v: &Value| {
        format!(
            "{}/{}; {}",
            text(v, "/metadata/namespace"),
            text(v, "/metadata/name"),
            gvk_string(ctx.api_version, ctx.kind)
        )
    };
    typed::validate(&ctx.types, ctx.root, config, Strictness::Config)
        .map_err(|e| ApplyError::Internal(format!("failed to create typed patch object ({}): {e}", named(config))))?;
    typed::validate(&ctx.types, ctx.root, live, Strictness::Live)
        .map_err(|e| ApplyError::Internal(format!("failed to create typed live object ({}): {e}", named(live))))?;

    let (mut object, managed) = match apply_tracked(ctx, live, config, managed.clone(), manager, force) {
        Err(ApplyError::Conflicts(conflicts)) if manager == KUBECTL => {
            // kube's lastAppliedManager: conflicts on fields the annotation shows kubectl set
            // (and that still hold those values) are an upgrade from client-side apply.
            let Some(allowed) = allowed_conflicts_from_last_applied(ctx, live) else {
                return Err(ApplyError::Conflicts(conflicts));
            };
            if !conflicts.to_set().difference(&allowed).is_empty() {
                return Err(ApplyError::Conflicts(conflicts.without(&allowed)));
            }
            apply_tracked(ctx, live, config, managed, manager, true)?
        }
        other => other?,
    };
    if manager == KUBECTL && has_last_applied(&object) {
        set_last_applied(&mut object, &build_last_applied(config));
    }
    managed.write_to(&mut object);
    Ok((object, managed))
}

/// The managed fields of a stored object for [`apply`]; an undecodable list is kube's 500
/// (`failed to decode managed fields: ...`), where other writes would start afresh.
pub fn managed_for_apply(live: &Value) -> Result<ManagedFields, ApplyError> {
    ManagedFields::from_object(live).map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))
}

/// `apiVersion`/`kind` as kube prints a GroupVersionKind: `apps/v1, Kind=Deployment`,
/// `/v1, Kind=Pod`.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = match api_version.split_once('/') {
        Some((_, v)) if v.contains('/') => ("", ""),
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    format!("{group}/{version}, Kind={kind}")
}

/// An update through the inner layers: the writer's identifier, timestamps, stripping, the cap.
fn update_tracked(
    ctx: &Context<'_>,
    old: &Value,
    new: &Value,
    mut managed: ManagedFields,
    manager: &str,
) -> ManagedFields {
    // SMD's Update for a stand-in manager that owns nothing yet; the writer's own entry is
    // treated as anyone else's, then given back its fields with the new ones.
    let Ok(cmp) = settle_others(ctx, old, new, &mut managed, None, true) else { return managed };
    let changed = cmp.modified.union(&cmp.added).recursive_difference(ctx.reset).difference(&stripped_fields());
    if !changed.is_empty() {
        let name = if manager.is_empty() { "unknown" } else { manager };
        let id = managed::identifier(name, Operation::Update, ctx.api_version, ctx.subresource);
        let fields = match managed.remove(&id) {
            Some(previous) => changed.union(&previous.fields),
            None => changed,
        };
        managed.put(ManagedEntry {
            manager: name.into(),
            operation: Operation::Update,
            api_version: ctx.api_version.into(),
            subresource: ctx.subresource.into(),
            time: Some(ctx.now.into()),
            fields,
        });
    }
    managed.cap_update_managers(managed::MAX_UPDATE_MANAGERS);
    managed
}

/// An apply through the inner layers: tracking started on first apply, then SMD's Apply, then
/// stripping and the timestamp.
fn apply_tracked(
    ctx: &Context<'_>,
    live: &Value,
    config: &Value,
    mut managed: ManagedFields,
    manager: &str,
    force: bool,
) -> Result<(Value, ManagedFields), ApplyError> {
    if managed.is_empty() {
        managed = update_tracked(ctx, ctx.empty, live, managed, managed::BEFORE_FIRST_APPLY);
    }
    let (t, root) = (&ctx.types, ctx.root);
    let merged = typed::merge(t, root, live, config);
    let name = if manager.is_empty() { "unknown" } else { manager };
    let id = managed::identifier(name, Operation::Apply, ctx.api_version, ctx.subresource);
    let last = managed.get(&id).map(|e| e.fields.clone());
    managed.put(ManagedEntry {
        manager: name.into(),
        operation: Operation::Apply,
        api_version: ctx.api_version.into(),
        subresource: ctx.subresource.into(),
        time: None,
        fields: typed::to_field_set(t, root, config).recursive_difference(ctx.reset),
    });
    let object = prune(ctx, merged, &managed, last.as_ref());
    settle_others(ctx, live, &object, &mut managed, Some(&id), force)?;
    if let Some(entry) = managed.get(&id) {
        let fields = entry.fields.difference(&stripped_fields());
        managed.set_fields(&id, fields);
    }
    if !typed::values_equal(live, &object) {
        managed.set_time(&id, ctx.now);
    }
    Ok((object, managed))
}

/// SMD's `update`: compares `old` with `new` and takes what changed from every manager but
/// `writer`. Fields others own that were modified or added are conflicts: an error unless
/// `force`, else they change hands; removed fields leave every other set; empty entries go.
fn settle_others(
    ctx: &Context<'_>,
    old: &Value,
    new: &Value,
    managed: &mut ManagedFields,
    writer: Option<&str>,
    force: bool,
) -> Result<Comparison, Conflicts> {
    let mut cmp = typed::compare(&ctx.types, ctx.root, old, new);
    cmp.exclude(ctx.reset);
    let changed = cmp.modified.union(&cmp.added);
    let mut owned: Vec<(String, Set)> = Vec::new();
    for (id, entry) in managed.iter() {
        if Some(id.as_str()) == writer {
            continue;
        }
        let theirs = entry.fields.intersection(&changed);
        if !theirs.is_empty() {
            owned.push((id.clone(), theirs));
        }
    }
    if !force && !owned.is_empty() {
        return Err(Conflicts::from_sets(owned.iter().map(|(id, s)| (id.as_str(), s))));
    }
    let others: Vec<String> =
        managed.iter().map(|(id, _)| id.clone()).filter(|id| Some(id.as_str()) != writer).collect();
    for id in others {
        let Some(entry) = managed.get(&id) else { continue };
        let mut fields = entry.fields.difference(&cmp.removed);
        if let Some((_, lost)) = owned.iter().find(|(owner, _)| *owner == id) {
            fields = fields.difference(lost);
        }
        managed.set_fields(&id, fields);
    }
    if let Some(w) = writer {
        if managed.get(w).is_some_and(|e| e.fields.is_empty()) {
            managed.remove(w);
        }
    }
    Ok(cmp)
}

/// SMD's `prune`: removes what the applier owned last time, no longer applies, and nobody
/// else owns; struct fields emptied that way go too, and fields nobody ever owned stay.
fn prune(ctx: &Context<'_>, merged: Value, managed: &ManagedFields, last: Option<&Set>) -> Value {
    let Some(last) = last.filter(|l| !l.is_empty()) else { return merged };
    let (t, root) = (&ctx.types, ctx.root);
    let ensure = |s: &Set| typed::ensure_named_fields_are_members(t, root, s);
    let set_of = |v: &Value| ensure(&typed::to_field_set(t, root, v));
    let last = ensure(last);
    let pruned = typed::remove_items(t, root, &merged, &last);
    // Add back what someone (the applier's new config included) owns.
    let merged_set = set_of(&merged);
    let owned = ensure(&managed.union_all());
    let pruned = typed::remove_items(t, root, &merged, &merged_set.difference(&set_of(&pruned).union(&owned)));
    // Add back what the applier never owned (defaults, fields of untracked writers).
    let gone = merged_set.difference(&set_of(&pruned)).intersection(&last);
    typed::remove_items(t, root, &merged, &gone)
}

/// The fields kubectl's last-applied annotation on `live` shows it set, still at those values:
/// conflicts on them are allowed when `kubectl` moves to server-side apply (kube's
/// `allowedConflictsFromLastApplied`). `None` when there is no usable annotation.
pub fn allowed_conflicts_from_last_applied(ctx: &Context<'_>, live: &Value) -> Option<Set> {
    let text = live.pointer("/metadata/annotations")?.get(LAST_APPLIED)?.as_str().filter(|s| !s.is_empty())?;
    let last: Value = serde_json::from_str(text).ok()?;
    let has = |key: &str, want: Option<&str>| {
        last.get(key).and_then(Value::as_str).is_some_and(|v| !v.is_empty() && want.is_none_or(|w| w == v))
    };
    if !has("kind", None) || !has("apiVersion", Some(ctx.api_version)) {
        return None;
    }
    let (t, root) = (&ctx.types, ctx.root);
    typed::validate(t, root, &last, Strictness::Config).ok()?;
    typed::validate(t, root, live, Strictness::Config).ok()?;
    let cmp = typed::compare(t, root, &last, live);
    let set = typed::to_field_set(t, root, &last);
    Some(set.difference(&cmp.modified).difference(&cmp.added).difference(&cmp.removed))
}

/// Whether `obj` carries a non-empty last-applied annotation.
pub fn has_last_applied(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The annotation kube writes for an applied `config` (`buildLastApplied`): the config without
/// the annotation, as Go's JSON encoder writes it (keys sorted, HTML-safe, a final newline).
pub fn build_last_applied(config: &Value) -> String {
    let mut obj = config.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        match coerced_annotations(meta) {
            Some(mut annotations) => {
                annotations.remove(LAST_APPLIED);
                meta.insert("annotations".into(), Value::Object(annotations));
            }
            None => {
                meta.remove("annotations");
            }
        }
    }
    let mut out = String::new();
    fieldpath::write_json(&obj, &mut out);
    out.push('\n');
    out
}

/// Sets the last-applied annotation of `obj` to `value`, or drops it when the annotations would
/// exceed kube's 256 KiB limit (`SetLastApplied`).
pub fn set_last_applied(obj: &mut Value, value: &str) {
    let Some(o) = obj.as_object_mut() else { return };
    let Some(meta) = o.entry("metadata").or_insert_with(|| Value::Object(Map::new())).as_object_mut() else {
        return;
    };
    let mut annotations = coerced_annotations(meta).unwrap_or_default();
    annotations.insert(LAST_APPLIED.into(), Value::String(value.into()));
    let size: usize = annotations.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum();
    if size > ANNOTATIONS_SIZE_LIMIT {
        annotations.remove(LAST_APPLIED);
    }
    meta.insert("annotations".into(), Value::Object(annotations));
}

/// The annotations as kube's unstructured accessor reads them (null values become empty
/// strings); `None` when absent, null, or holding a non-string.
fn coerced_annotations(meta: &Map<String, Value>) -> Option<Map<String, Value>> {
    let annotations = meta.get("annotations")?.as_object()?;
    annotations
        .iter()
        .map(|(k, v)| match v {
            Value::String(_) => Some((k.clone(), v.clone())),
            Value::Null => Some((k.clone(), Value::String(String::new()))),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
