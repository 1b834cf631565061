//! CustomResourceDefinitions: resources made at run time. A CRD is stored as any object is; what
//! makes its resources served is this module, in every apiserver of the store:
//!
//! ```text
//!  CRD written ──► CRD watch cache ──► `run` (one worker)
//!                                        ├─ names: NamesAccepted / Established, acceptedNames (status)
//!                                        ├─ Registry::serve: a descriptor per served version
//!                                        │     (+ a watch cache each, made before it is findable)
//!                                        └─ deleting: Terminating, every object deleted, finalizer off
//! ```
//!
//! A served version is a `resources::Resource` like a built-in's, with `Strategy::Custom` and a
//! `Custom` beside it holding what the definition says (schema, subresources, printer columns),
//! so custom objects go down the generic registry's one path (`crate::rest`). Descriptors are
//! `'static` as the built-ins' are: each is made once per distinct shape of its definition and
//! kept for the life of the process (a definition changed a thousand times leaks a thousand
//! small descriptors — the price of one path for every resource).
//!
//! A definition is served while its NamesAccepted or Established condition is true, under its
//! accepted names (kube's `crdHandler`); conversion between versions is `None`: an object is the
//! same in every version but for its `apiVersion`.

pub mod rules;
pub mod schema;
pub mod validation;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::control::{informer, Client, Queue};
use crate::meta;
use crate::resources::{self, Deleted, Generation, Names, Resource, Strategy};
use crate::rest::Api;

/// The finalizer that keeps a deleted definition until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// What a definition says of one served version of its resource.
pub struct Custom {
    /// The definition's name (`<plural>.<group>`).
    pub crd: &'static str,
    pub list_kind: &'static str,
    /// The version's `openAPIV3Schema`, as given and parsed.
    pub raw: Value,
    pub schema: schema::Schema,
    /// Whether the status subresource is on.
    pub status: bool,
    pub scale: Option<ScalePaths>,
    pub columns: Vec<Column>,
    /// Whether this is the version objects are stored in.
    pub storage: bool,
    /// Whether its schema has CEL rules (`x-kubernetes-validations`) anywhere.
    pub has_rules: bool,
    /// The deprecation warning a request of this version gets, if the version is deprecated.
    pub deprecation: Option<String>,
    /// Whether the definition is being deleted (no new objects are taken); shared by its versions.
    terminating: Arc<AtomicBool>,
}

impl Custom {
    pub fn terminating(&self) -> bool {
        self.terminating.load(Ordering::Relaxed)
    }
}

/// The scale subresource's paths (`.spec.replicas`, …).
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// An `additionalPrinterColumns` entry.
pub struct Column {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// The definitions served, by name, each with its descriptors.
#[derive(Clone, Default)]
pub struct Registry(Arc<parking_lot::RwLock<BTreeMap<String, Served>>>);

struct Served {
    /// What the descriptors were made from (spec and accepted names).
    shape: Value,
    resources: Vec<&'static Resource>,
    terminating: Arc<AtomicBool>,
}

impl Registry {
    /// The custom resource served at `group`/`version` under `plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        let served = self.0.read();
        served
            .values()
            .flat_map(|s| s.resources.iter().copied())
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Every custom resource version served.
    pub fn all(&self) -> Vec<&'static Resource> {
        self.0.read().values().flat_map(|s| s.resources.iter().copied()).collect()
    }

    /// Serves definition `crd` as it is now (or stops serving it, when it is not to be served).
    /// Caches for new descriptors are made before they are findable; dropped ones are
    /// unfindable before their caches go.
    fn serve(&self, api: &Api, crd: &Value) {
        let name = meta::get(crd, "name").to_string();
        let servable = condition_true(crd, "NamesAccepted") || condition_true(crd, "Established");
        let terminating = condition_true(crd, "Terminating") || !meta::get(crd, "deletionTimestamp").is_empty();
        let shape = json!({"spec": crd.get("spec"), "names": crd.pointer("/status/acceptedNames")});
        {
            let served = self.0.read();
            if let Some(s) = served.get(&name) {
                s.terminating.store(terminating, Ordering::Relaxed);
                if servable && s.shape == shape {
                    return;
                }
            } else if !servable {
                return;
            }
        }
        let flag = Arc::new(AtomicBool::new(terminating));
        let made = if servable { descriptors(crd, flag.clone()) } else { Vec::new() };
        for r in &made {
            api.caches.add(r);
        }
        let old = {
            let mut served = self.0.write();
            match made.is_empty() {
                true => served.remove(&name),
                false => served.insert(name, Served { shape, resources: made.clone(), terminating: flag }),
            }
        };
        for r in old.iter().flat_map(|s| s.resources.iter()) {
            if !made.iter().any(|m| m.version == r.version && m.plural == r.plural && m.kind == r.kind) {
                api.caches.remove(r);
            }
        }
    }

    /// Stops serving definition `name` (gone from the store).
    fn forget(&self, api: &Api, name: &str) {
        let old = self.0.write().remove(name);
        for r in old.iter().flat_map(|s| s.resources.iter()) {
            api.caches.remove(r);
        }
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_all(v: Option<&Value>) -> &'static [&'static str] {
    let items: Vec<&'static str> = strings(v).into_iter().map(leak).collect();
    Box::leak(items.into_boxed_slice())
}

/// The strings of a JSON array (none if it is not one).
fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Whether condition `kind` of a definition is True.
pub fn condition_true(crd: &Value, kind: &str) -> bool {
    conditions(crd).iter().any(|c| c["type"] == kind && c["status"] == "True")
}

fn conditions(crd: &Value) -> &[Value] {
    crd.pointer("/status/conditions").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A descriptor for each served version of `crd`, under its accepted names.
fn descriptors(crd: &Value, terminating: Arc<AtomicBool>) -> Vec<&'static Resource> {
    let names = crd.pointer("/status/acceptedNames").cloned().unwrap_or(Value::Null);
    let kind = text(&names, "/kind");
    let plural = text(&names, "/plural");
    if kind.is_empty() || plural.is_empty() {
        return Vec::new();
    }
    let group = leak(text(crd, "/spec/group"));
    let namespaced = text(crd, "/spec/scope") == "Namespaced";
    let singular = match text(&names, "/singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let crd_name = leak(meta::get(crd, "name"));
    let (kind, plural, singular) = (leak(kind), leak(plural), leak(&singular));
    let list_kind = leak(&match text(&names, "/listKind") {
        "" => format!("{kind}List"),
        l => l.to_string(),
    });
    let short_names = leak_all(names.get("shortNames"));
    let categories = leak_all(names.get("categories"));
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for v in versions.iter().filter(|v| v["served"] == true) {
        let raw = v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(json!({}));
        let status = v.pointer("/subresources/status").is_some_and(Value::is_object);
        let scale = v.pointer("/subresources/scale").filter(|s| s.is_object()).map(|s| ScalePaths {
            spec_replicas: text(s, "/specReplicasPath").to_string(),
            status_replicas: text(s, "/statusReplicasPath").to_string(),
            label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
        });
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| Column {
                name: text(c, "/name").to_string(),
                kind: text(c, "/type").to_string(),
                format: text(c, "/format").to_string(),
                description: text(c, "/description").to_string(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: text(c, "/jsonPath").to_string(),
            })
            .collect();
        let deprecation =
            (v["deprecated"] == true).then(|| match v.get("deprecationWarning").and_then(Value::as_str) {
                Some(w) => w.to_string(),
                None => format!("{group}/{} {kind} is deprecated", text(v, "/name")),
            });
        let has_rules = raw.to_string().contains("\"x-kubernetes-validations\"");
        let custom: &'static Custom = Box::leak(Box::new(Custom {
            crd: crd_name,
            list_kind,
            schema: schema::Schema::parse(&raw),
            raw,
            status,
            scale,
            columns,
            storage: v["storage"] == true,
            has_rules,
            deprecation,
            terminating: terminating.clone(),
        }));
        let subresources: &'static [(&'static str, &'static [&'static str])] = match (custom.scale.is_some(), status) {
            (true, true) => resources::SCALE_STATUS,
            (true, false) => &[("scale", resources::GET_PATCH_UPDATE)],
            (false, true) => resources::STATUS,
            (false, false) => &[],
        };
        let meta_fields = if namespaced { resources::NAMESPACED_FIELDS } else { resources::CLUSTER_FIELDS };
        let mut fields: Vec<&'static str> = meta_fields.to_vec();
        for f in v.get("selectableFields").and_then(Value::as_array).into_iter().flatten() {
            fields.push(leak(text(f, "/jsonPath").trim_start_matches('.')));
        }
        let r: &'static Resource = Box::leak(Box::new(Resource {
            group,
            version: leak(text(v, "/name")),
            kind,
            plural,
            singular,
            namespaced,
            short_names,
            categories,
            verbs: resources::ALL,
            subresources,
            fields: Box::leak(fields.into_boxed_slice()),
            names: Names::Subdomain,
            strategy: Strategy::Custom,
            generation: Generation::Content,
            new_status: None,
            deleted: Deleted::Status,
            canonical: Ok,
            schema: resources::no_schema,
            custom: Some(custom),
        }));
        out.push(r);
    }
    out
}

/// The definitions' own resource.
fn definitions() -> &'static Resource {
    resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("CRDs are served")
}

/// Serves the definitions in the store now (before the server takes requests), then keeps
/// every definition's names, conditions, serving and deletion as they change; the tasks.
pub async fn start(api: &Api) -> Vec<tokio::task::JoinHandle<()>> {
    let crds = definitions();
    for o in api.cached_list(crds, None) {
        api.crds.serve(api, &o.value(crds));
    }
    let queue = Queue::new();
    let q = queue.clone();
    let cache = api.caches.of(crds).expect("CRDs have a cache");
    let seen = api.clone();
    let watch = tokio::spawn(informer::run(cache, crate::rest::Selectors::everything(), move |ch| {
        let o = ch.object();
        q.add(informer::key_of(o));
        // A definition's names free or claim names in its group: the others of it look again.
        let group = o.value(crds).pointer("/spec/group").cloned();
        for other in seen.cached_list(crds, None) {
            if other.value(crds).pointer("/spec/group") == group.as_ref() {
                q.add(informer::key_of(&other));
            }
        }
    }));
    let client = Client { api: api.clone(), user: Arc::new(crate::auth::User::internal_superuser()) };
    let work = tokio::spawn(queue.clone().work("crd", 1, move |name| {
        let client = client.clone();
        let queue = queue.clone();
        async move {
            if let Some(again) = reconcile(&client, &name).await? {
                queue.add_after(name, again);
            }
            Ok(())
        }
    }));
    vec![watch, work]
}

/// One look at definition `name`: its names and conditions written, its serving made to match,
/// its objects deleted while it is being deleted. Some(delay) to look again after.
async fn reconcile(client: &Client, name: &str) -> Result<Option<Duration>, crate::control::Failure> {
    let api = &client.api;
    let crds = definitions();
    let Some(o) = api.cached(crds, None, name) else {
        api.crds.forget(api, name);
        return Ok(None);
    };
    let crd = o.value(crds);
    let mut status = crd.get("status").cloned().unwrap_or(json!({}));
    if meta::get(&crd, "deletionTimestamp").is_empty() {
        let others: Vec<Value> = api
            .cached_list(crds, None)
            .iter()
            .map(|c| c.value(crds))
            .filter(|c| meta::get(c, "name") != name && c.pointer("/spec/group") == crd.pointer("/spec/group"))
            .collect();
        names(&crd, &others, &mut status);
    }
    if status != crd.get("status").cloned().unwrap_or(json!({})) {
        // Served under the names it is about to be told it has, so that a client that sees it
        // Established finds it served here. The status written comes back through the cache,
        // and the definition is looked at again.
        let mut next = crd.clone();
        next["status"] = status.clone();
        api.crds.serve(api, &next);
        client.put_status(crds, &crd, status).await?;
        return Ok(None);
    }
    api.crds.serve(api, &crd);
    if meta::get(&crd, "deletionTimestamp").is_empty() {
        return Ok(None);
    }
    finalize(client, &crd).await
}

/// The accepted names and the NamesAccepted and Established conditions of `crd`, against the
/// names the `others` of its group hold (kube's naming and establishing controllers).
fn names(crd: &Value, others: &[Value], status: &mut Value) {
    let mut resources_used: Vec<&str> = Vec::new();
    let mut kinds_used: Vec<&str> = Vec::new();
    for o in others {
        for f in ["plural", "singular"] {
            if let Some(s) = o.pointer(&format!("/status/acceptedNames/{f}")).and_then(Value::as_str) {
                resources_used.push(s);
            }
        }
        for s in o.pointer("/status/acceptedNames/shortNames").and_then(Value::as_array).into_iter().flatten() {
            if let Some(s) = s.as_str() {
                resources_used.push(s);
            }
        }
        for f in ["kind", "listKind"] {
            if let Some(s) = o.pointer(&format!("/status/acceptedNames/{f}")).and_then(Value::as_str) {
                kinds_used.push(s);
            }
        }
    }
    let requested = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = status.get("acceptedNames").cloned().unwrap_or(json!({"kind": "", "plural": ""}));
    let mut problem: Option<(&str, String)> = None;
    let fresh = |want: &str, have: &str, used: &[&str]| -> Result<(), String> {
        if want == have || !used.contains(&want) {
            Ok(())
        } else {
            Err(format!("{} is already in use", crate::status::go_quote(want)))
        }
    };
    for (field, reason, used) in [
        ("plural", "PluralConflict", &resources_used),
        ("singular", "SingularConflict", &resources_used),
        ("kind", "KindConflict", &kinds_used),
        ("listKind", "ListKindConflict", &kinds_used),
    ] {
        let want = text(&requested, &format!("/{field}"));
        let have = text(&accepted, &format!("/{field}")).to_string();
        match fresh(want, &have, used) {
            Ok(()) => {
                if !want.is_empty() || field == "plural" || field == "kind" {
                    accepted[field] = Value::String(want.to_string());
                }
            }
            Err(m) => problem = Some((reason, m)),
        }
        if field == "singular" {
            // Short names come between singular and kind, as kube checks them.
            let (want, have) = (strings(requested.get("shortNames")), strings(accepted.get("shortNames")));
            if want != have {
                let errs: Vec<String> =
                    want.iter().filter(|s| !have.contains(s)).filter_map(|s| fresh(s, "", used).err()).collect();
                match errs.as_slice() {
                    [] => match requested.get("shortNames") {
                        Some(s) => accepted["shortNames"] = s.clone(),
                        None => {
                            accepted.as_object_mut().map(|m| m.remove("shortNames"));
                        }
                    },
                    [one] => problem = Some(("ShortNamesConflict", one.clone())),
                    many => problem = Some(("ShortNamesConflict", format!("[{}]", many.join(", ")))),
                }
            }
        }
    }
    match requested.get("categories") {
        Some(c) => accepted["categories"] = c.clone(),
        None => {
            accepted.as_object_mut().map(|m| m.remove("categories"));
        }
    }
    let names_accepted = match &problem {
        None => condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
        Some((reason, message)) => condition("NamesAccepted", "False", reason, message),
    };
    let established = if problem.is_none()
        || conditions_of(status).iter().any(|c| c["type"] == "Established" && c["status"] == "True")
    {
        condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted")
    } else {
        condition("Established", "False", "NotAccepted", "not all names are accepted")
    };
    status["acceptedNames"] = accepted;
    set_condition(status, names_accepted);
    set_condition(status, established);
}

fn conditions_of(status: &Value) -> &[Value] {
    status.get("conditions").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "lastTransitionTime": meta::now(), "reason": reason, "message": message})
}

/// Sets condition `c` in `status`: its transition time kept when its status did not change, and
/// nothing changed at all when reason and message are the same too.
pub fn set_condition(status: &mut Value, mut c: Value) {
    if !status.is_object() {
        *status = json!({});
    }
    let list = status.as_object_mut().expect("an object").entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    match list.iter_mut().find(|o| o["type"] == c["type"]) {
        Some(old) => {
            if old["status"] == c["status"] {
                if old["reason"] == c["reason"] && old["message"] == c["message"] {
                    return;
                }
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = c;
        }
        None => list.push(c),
    }
}

/// A definition being deleted: its objects deleted (kube's finalizing controller), then its
/// finalizer taken off, which lets it go. Some(delay) while objects remain.
async fn finalize(client: &Client, crd: &Value) -> Result<Option<Duration>, crate::control::Failure> {
    let api = &client.api;
    let crds = definitions();
    let finalizers: Vec<Value> =
        crd.pointer("/metadata/finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(None);
    }
    let mut status = crd.get("status").cloned().unwrap_or(json!({}));
    set_condition(
        &mut status,
        condition("Terminating", "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress"),
    );
    if status != crd["status"] {
        client.put_status(crds, crd, status).await?;
        return Ok(None);
    }
    // Every object of the storage version (all versions share the objects).
    let Some(r) = api.crds.all().into_iter().find(|r| r.custom.is_some_and(|c| c.crd == meta::get(crd, "name"))) else {
        return remove_finalizer(client, crd).await;
    };
    let listed = crate::rest::list(api, r, None, &Default::default()).await;
    let (_, listed) = listed.map_err(|s| crate::control::Failure {
        code: s.code,
        reason: s.reason.to_string(),
        message: s.message,
    })?;
    let left: Vec<Value> = listed.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    if left.is_empty() {
        let mut status = crd.get("status").cloned().unwrap_or(json!({}));
        set_condition(
            &mut status,
            condition("Terminating", "False", "InstanceDeletionCompleted", "removed all instances"),
        );
        client.put_status(crds, crd, status).await?;
        return remove_finalizer(client, crd).await;
    }
    for o in &left {
        if !meta::get(o, "deletionTimestamp").is_empty() {
            continue;
        }
        let ns = Some(meta::get(o, "namespace")).filter(|n| !n.is_empty());
        match client.delete(r, ns, meta::get(o, "name"), &json!({})).await {
            Err(e) if !e.is("NotFound") => return Err(e),
            _ => {}
        }
    }
    Ok(Some(Duration::from_millis(200)))
}

async fn remove_finalizer(client: &Client, crd: &Value) -> Result<Option<Duration>, crate::control::Failure> {
    let crds = definitions();
    let Some(now) = client.api.cached(crds, None, meta::get(crd, "name")) else { return Ok(None) };
    let mut now = now.value(crds);
    let kept: Vec<Value> = now
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .cloned()
        .collect();
    meta::metadata(&mut now).insert("finalizers".into(), Value::Array(kept));
    match client.update(crds, None, meta::get(crd, "name"), None, &now).await {
        Err(e) if e.is("NotFound") => Ok(None),
        Err(e) if e.is("Conflict") => Ok(Some(Duration::from_millis(50))),
        Err(e) => Err(e),
        Ok(_) => Ok(None),
    }
}

/// The `autoscaling/v1` Scale of custom object `v` by its definition's paths (kube's
/// `scaleFromCustomResource`): replicas absent are 0, the selector a label selector string.
pub fn scale_of(paths: &ScalePaths, v: &Value) -> Value {
    let mut m = serde_json::Map::new();
    for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(x) = v.pointer(&format!("/metadata/{f}")) {
            m.insert(f.into(), x.clone());
        }
    }
    let at = |path: &str| v.pointer(&pointer(path)).cloned();
    let mut status = json!({"replicas": at(&paths.status_replicas).filter(Value::is_i64).unwrap_or(json!(0))});
    if let Some(sel) = paths.label_selector.as_deref().and_then(at).and_then(|s| s.as_str().map(str::to_string)) {
        status["selector"] = Value::String(sel);
    }
    let mut spec = serde_json::Map::new();
    if let Some(r) = at(&paths.spec_replicas).filter(|r| r.as_i64().is_some_and(|n| n != 0)) {
        spec.insert("replicas".into(), r);
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": m, "spec": spec, "status": status})
}

/// A JSON pointer of a simple JSON path (`.spec.replicas` → `/spec/replicas`).
fn pointer(path: &str) -> String {
    path.trim_start_matches('.').split('.').map(|p| format!("/{p}")).collect()
}

/// Sets the field at simple JSON path `path` of `v` to `x`, making the objects on the way.
pub fn set_path(v: &mut Value, path: &str, x: Value) {
    let mut at = v;
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let m = at.as_object_mut().expect("an object");
        if i + 1 == parts.len() {
            m.insert(p.to_string(), x);
            return;
        }
        at = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

/// Custom object `v` as its version's schema wants it from a client: its metadata as
/// ObjectMeta has it, its defaults applied, and what the schema does not know pruned.
pub fn canonical(c: &Custom, mut v: Value) -> Result<Value, String> {
    let Value::Object(m) = &mut v else { return Err("the object is not a JSON object".into()) };
    if let Some(meta) = m.get("metadata").filter(|x| !x.is_null()) {
        let typed: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(meta.clone()).map_err(|e| e.to_string())?;
        m.insert("metadata".into(), serde_json::to_value(typed).map_err(|e| e.to_string())?);
    }
    let mut pruned = Vec::new();
    schema::prune(&c.schema, &mut v, &mut pruned);
    schema::default(&c.schema, &mut v);
    Ok(v)
}

/// What custom object `v` (replacing `old`, on an update) breaks of its version's schema and
/// CEL rules.
pub fn errors(r: &Resource, v: &Value, old: Option<&Value>) -> Vec<crate::status::FieldError> {
    let Some(c) = r.custom else { return Vec::new() };
    use crate::status::FieldErrorType::{NotSupported, TypeInvalid};
    let mut errors = schema::validate(&c.schema, v);
    if let Some(paths) = &c.scale {
        errors.extend(scale_errors(paths, v));
    }
    if !c.has_rules {
        return errors;
    }
    // A value of the wrong type or outside its enum keeps the rules from running (kube's
    // `hasBlockingErr`), and says so.
    if errors.iter().any(|e| matches!(e.kind, NotSupported | TypeInvalid)) {
        errors.push(crate::status::FieldError::invalid(
            "<nil>",
            json!("null"),
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
        return errors;
    }
    errors.extend(rules::validate(&c.raw, v, old));
    errors
}

/// The scale subresource's own checks of an object (kube's `ValidateCustomResource` for scale):
/// the replicas at the spec path an int32 when given.
fn scale_errors(paths: &ScalePaths, v: &Value) -> Vec<crate::status::FieldError> {
    let mut out = Vec::new();
    let path = paths.spec_replicas.trim_start_matches('.');
    if let Some(x) = v.pointer(&pointer(&paths.spec_replicas)) {
        match x.as_i64() {
            Some(n) if n < 0 => {
                out.push(crate::status::FieldError::invalid(path, x.clone(), "should be a non-negative integer"))
            }
            Some(n) if n > i64::from(i32::MAX) => out.push(crate::status::FieldError::invalid(
                path,
                x.clone(),
                &format!("should be less than or equal to {}", i32::MAX),
            )),
            Some(_) => {}
            None => out.push(crate::status::FieldError::invalid(path, x.clone(), "should be an integer")),
        }
    }
    out
}

/// The first value JSON path `path` finds in `v` (kube's printer-column paths: `.a.b`, `[n]`,
/// `[*]`, `['key']`, and `[?(@.f=="x")]` filters), None if it finds none.
pub fn json_path(v: &Value, path: &str) -> Option<Value> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let mut at: Vec<&Value> = vec![v];
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    while !rest.is_empty() {
        let mut next = Vec::new();
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            for x in &at {
                match (field, x) {
                    ("*", Value::Object(m)) => next.extend(m.values()),
                    ("*", Value::Array(a)) => next.extend(a.iter()),
                    (f, Value::Object(m)) => next.extend(m.get(f)),
                    _ => {}
                }
            }
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = bracket_end(r)?;
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            for x in &at {
                if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                    if let Value::Array(a) = x {
                        next.extend(a.iter().filter(|item| filter_holds(item, f)));
                    }
                } else if inner == "*" {
                    match x {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    }
                } else if let Some(key) = unquote(inner) {
                    if let Value::Object(m) = x {
                        next.extend(m.get(key));
                    }
                } else if let Ok(i) = inner.parse::<i64>() {
                    if let Value::Array(a) = x {
                        let i = if i < 0 { a.len() as i64 + i } else { i };
                        next.extend(usize::try_from(i).ok().and_then(|i| a.get(i)));
                    }
                } else {
                    return None;
                }
            }
        } else {
            return None;
        }
        at = next;
    }
    at.first().map(|x| (*x).clone())
}

/// Where the bracket opened before `r` closes (quotes and nested parentheses skipped).
fn bracket_end(r: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, ch) in r.char_indices() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(ch),
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
}

/// Whether `item` holds filter `f` (`@.a.b=="x"`, `@.n>1`, `@.flag`, with `==`, `!=`, `<`, `<=`,
/// `>`, `>=`).
fn filter_holds(item: &Value, f: &str) -> bool {
    let ops = ["==", "!=", "<=", ">=", "<", ">"];
    let Some((op, at)) = ops.iter().filter_map(|op| f.find(op).map(|i| (*op, i))).min_by_key(|(_, i)| *i) else {
        let path = f.trim().strip_prefix('@').unwrap_or(f.trim());
        return json_path(item, path).is_some_and(|v| !v.is_null() && v != Value::Bool(false));
    };
    let (lhs, rhs) = (f[..at].trim(), f[at + op.len()..].trim());
    let side = |s: &str| -> Option<Value> {
        if let Some(p) = s.strip_prefix('@') {
            return json_path(item, p);
        }
        if let Some(q) = unquote(s) {
            return Some(Value::String(q.to_string()));
        }
        serde_json::from_str(s).ok()
    };
    let (Some(a), Some(b)) = (side(lhs), side(rhs)) else { return false };
    let order = match (&a, &b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().zip(y.as_f64()).and_then(|(x, y)| x.partial_cmp(&y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    };
    use std::cmp::Ordering::*;
    match op {
        "==" => a == b,
        "!=" => a != b,
        "<" => order == Some(Less),
        "<=" => matches!(order, Some(Less | Equal)),
        ">" => order == Some(Greater),
        _ => matches!(order, Some(Greater | Equal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_find_what_kube_finds() {
        let v = json!({"spec": {"a": {"b": 3}, "items": [{"n": "x"}, {"n": "y"}]},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(json_path(&v, ".spec.a.b"), Some(json!(3)));
        assert_eq!(json_path(&v, ".spec.items[1].n"), Some(json!("y")));
        assert_eq!(json_path(&v, ".spec.items[-1].n"), Some(json!("y")));
        assert_eq!(json_path(&v, ".spec.items[*].n"), Some(json!("x")));
        assert_eq!(json_path(&v, ".status.conditions[?(@.type==\"Ready\")].status"), Some(json!("True")));
        assert_eq!(json_path(&v, ".spec['a'].b"), Some(json!(3)));
        assert_eq!(json_path(&v, ".spec.missing"), None);
        assert_eq!(json_path(&v, ".spec.items[9]"), None);
    }

    #[test]
    fn names_in_use_in_the_group_are_refused_and_others_accepted() {
        let crd = |name: &str, plural: &str, kind: &str| json!({"metadata": {"name": name}, "spec": {"group": "g.io", "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind, "listKind": format!("{kind}List")}}});
        let mut other = crd("foos.g.io", "foos", "Foo");
        let mut st = json!({});
        names(&other, &[], &mut st);
        assert_eq!(st["acceptedNames"]["plural"], "foos");
        assert!(conditions_of(&st)
            .iter()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True" && c["reason"] == "NoConflicts"));
        assert!(conditions_of(&st)
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True" && c["reason"] == "InitialNamesAccepted"));
        other["status"] = st;
        let mine = crd("bars.g.io", "bars", "Foo");
        let mut st = json!({});
        names(&mine, &[other], &mut st);
        let accepted = conditions_of(&st).iter().find(|c| c["type"] == "NamesAccepted").unwrap().clone();
        // The kind and its list kind are both taken: the last one checked is reported, as kube's
        // naming controller reports it.
        assert_eq!(
            (accepted["status"].as_str(), accepted["reason"].as_str()),
            (Some("False"), Some("ListKindConflict"))
        );
        assert_eq!(accepted["message"], "\"FooList\" is already in use");
        assert_eq!(st["acceptedNames"]["plural"], "bars");
        assert_eq!(st["acceptedNames"]["kind"], "");
        assert!(conditions_of(&st)
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "False" && c["reason"] == "NotAccepted"));
    }
}
