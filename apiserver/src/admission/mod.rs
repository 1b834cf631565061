//! Admission: the plugins kube-apiserver runs on every write after authorization — mutating
//! ones on the decoded object, then validating ones on the object about to be stored — chosen
//! with `--enable-admission-plugins` / `--disable-admission-plugins` over kube's default set.
//! They run for every write, the in-process controllers' included (the registry calls them, not
//! the HTTP layer).

pub mod pods;
pub mod podsecurity;
pub mod policy;
pub mod quota;
pub mod webhooks;

use serde_json::Value;

use crate::auth::User;
use crate::resources::Resource;
use crate::rest::Api;
use crate::status::{self, Details, Status};

/// An admission plugin keel-apiserver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    NamespaceLifecycle,
    LimitRanger,
    ServiceAccount,
    DefaultTolerationSeconds,
    Priority,
    NodeRestriction,
    PodSecurity,
    MutatingAdmissionWebhook,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionWebhook,
    ResourceQuota,
}

/// Plugins by kube's names, in the order kube runs them.
const PLUGINS: [(&str, Plugin, bool); 11] = [
    ("NamespaceLifecycle", Plugin::NamespaceLifecycle, true),
    ("LimitRanger", Plugin::LimitRanger, true),
    ("ServiceAccount", Plugin::ServiceAccount, true),
    ("NodeRestriction", Plugin::NodeRestriction, false),
    ("PodSecurity", Plugin::PodSecurity, true),
    ("Priority", Plugin::Priority, true),
    ("DefaultTolerationSeconds", Plugin::DefaultTolerationSeconds, true),
    ("MutatingAdmissionWebhook", Plugin::MutatingAdmissionWebhook, true),
    ("ValidatingAdmissionPolicy", Plugin::ValidatingAdmissionPolicy, true),
    ("ValidatingAdmissionWebhook", Plugin::ValidatingAdmissionWebhook, true),
    ("ResourceQuota", Plugin::ResourceQuota, true),
];

/// kube's other plugin names: known, not run by keel-apiserver yet.
const NOT_YET: [&str; 24] = [
    "AlwaysAdmit",
    "AlwaysDeny",
    "AlwaysPullImages",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "ClusterTrustBundleAttest",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DenyServiceExternalIPs",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "ImagePolicyWebhook",
    "LimitPodHardAntiAffinityTopology",
    "MutatingAdmissionPolicy",
    "NamespaceAutoProvision",
    "NamespaceExists",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "PodNodeSelector",
    "PodTolerationRestriction",
    "RuntimeClass",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
];

/// The plugins enabled, in kube's order.
#[derive(Debug, Clone)]
pub struct Chain(Vec<Plugin>);

impl Default for Chain {
    /// kube's default set (of those keel runs).
    fn default() -> Self {
        Chain(PLUGINS.iter().filter(|(_, _, on)| *on).map(|(_, p, _)| *p).collect())
    }
}

impl Chain {
    /// The chain `--enable-admission-plugins` and `--disable-admission-plugins` make of kube's
    /// default set; a name kube does not know, or one keel does not run yet, is an error.
    pub fn of_flags(enable: &[String], disable: &[String]) -> Result<Chain, String> {
        let known = |n: &str| -> Result<Option<Plugin>, String> {
            if let Some((_, p, _)) = PLUGINS.iter().find(|(name, _, _)| *name == n) {
                return Ok(Some(*p));
            }
            if NOT_YET.contains(&n) {
                return Err(format!("admission plugin {n:?} is not run by keel-apiserver yet"));
            }
            Err(format!("plugin {n:?} is unknown"))
        };
        let names = |l: &[String]| l.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect::<Vec<_>>();
        let (enable, disable) = (names(enable), names(disable));
        for n in &enable {
            if disable.contains(n) {
                return Err(format!("{n} plugin is both enabled and disabled"));
            }
        }
        let mut on: Vec<Plugin> = Chain::default().0;
        for n in &enable {
            if let Some(p) = known(n)? {
                if !on.contains(&p) {
                    on.push(p);
                }
            }
        }
        for n in &disable {
            match known(n) {
                Ok(Some(p)) => on.retain(|x| *x != p),
                // Disabling what keel does not run is what the flag asks.
                Ok(None) | Err(_) if NOT_YET.contains(&n.as_str()) => {}
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        let order = |p: &Plugin| PLUGINS.iter().position(|(_, q, _)| q == p).unwrap_or(usize::MAX);
        on.sort_by_key(order);
        Ok(Chain(on))
    }

    fn has(&self, p: Plugin) -> bool {
        self.0.contains(&p)
    }
}

/// What a write asks (kube's `admission.Attributes`).
pub struct Attributes<'a> {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    pub r: &'a Resource,
    /// The subresource written (`status`), or none.
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object written (none for a delete).
    pub object: Option<&'a Value>,
    /// The object as it was (none for a create).
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub user: &'a User,
}

impl<'a> Attributes<'a> {
    /// A create of `object` of `r` named `name` in `namespace`.
    pub fn create(
        r: &'a Resource,
        namespace: &'a str,
        name: &'a str,
        object: Option<&'a Value>,
        dry_run: bool,
        user: &'a User,
    ) -> Self {
        Attributes { operation: "CREATE", r, subresource: "", namespace, name, object, old: None, dry_run, user }
    }
}

/// kube's admission refusal: `<resource> "<name>" is forbidden: <why>` (403).
pub fn forbidden(a: &Attributes<'_>, why: &str) -> Status {
    let gr = status::GroupResource { group: a.r.group, resource: a.r.plural };
    let message = if a.name.is_empty() {
        format!("{gr} is forbidden: {why}")
    } else {
        format!("{gr} {} is forbidden: {why}", status::go_quote(a.name))
    };
    let details =
        Details { name: a.name.into(), group: a.r.group.into(), kind: a.r.plural.into(), ..Default::default() };
    Status::failure(403, "Forbidden", message, Some(details))
}

/// What admission says of a request beside its answer: warnings for the client, annotations for
/// its audit record.
#[derive(Debug, Default, Clone)]
pub struct Notes {
    pub warnings: Vec<String>,
    pub annotations: std::collections::BTreeMap<String, String>,
}

tokio::task_local! {
    /// The notes of the request being served (set by `rest::serve`).
    static NOTES: parking_lot::Mutex<Notes>;
}

/// Runs `work` (one request), collecting what admission notes of it.
pub async fn collecting<F: std::future::Future>(work: F) -> (F::Output, Notes) {
    NOTES
        .scope(parking_lot::Mutex::new(Notes::default()), async {
            let out = work.await;
            (out, NOTES.with(|n| std::mem::take(&mut *n.lock())))
        })
        .await
}

/// A warning for the client of the request being served (none outside a request).
pub fn warn(warning: String) {
    let _ = NOTES.try_with(|n| n.lock().warnings.push(warning));
}

/// An annotation of the request's audit record unless it has one under `key` already.
pub fn annotate_once(key: &str, value: String) {
    let _ = NOTES.try_with(|n| {
        n.lock().annotations.entry(key.to_string()).or_insert(value);
    });
}

/// An annotation of the request's audit record (none outside a request).
pub fn annotate(key: &str, value: String) {
    let _ = NOTES.try_with(|n| n.lock().annotations.insert(key.to_string(), value));
}

/// The mutating plugins, on the object a write would store (Null for a delete), NamespaceLifecycle
/// first and the webhooks last, as kube runs them.
pub async fn mutate(api: &Api, a: &Attributes<'_>, object: &mut Value) -> Result<(), Status> {
    let chain = &api.admission;
    if chain.has(Plugin::NamespaceLifecycle) {
        namespace_lifecycle(api, a).await?;
    }
    pod_plugins(api, a, object).await?;
    if chain.has(Plugin::MutatingAdmissionWebhook) {
        webhooks::mutate(api, a, object).await?;
    }
    Ok(())
}

/// The mutating plugins about a pod's create.
async fn pod_plugins(api: &Api, a: &Attributes<'_>, object: &mut Value) -> Result<(), Status> {
    let chain = &api.admission;
    if a.operation != "CREATE" || a.r.plural != "pods" || !a.r.group.is_empty() || !a.subresource.is_empty() {
        return Ok(());
    }
    // A pod without a spec is refused by validation; there is nothing to admit in it.
    if !object.get("spec").is_some_and(Value::is_object) {
        return Ok(());
    }
    if chain.has(Plugin::LimitRanger) {
        pods::limit_ranges(api, a, object)?;
    }
    if chain.has(Plugin::ServiceAccount) {
        pods::service_account(api, a, object).await?;
    }
    if chain.has(Plugin::Priority) {
        pods::priority(api, a, object)?;
    }
    if chain.has(Plugin::DefaultTolerationSeconds) {
        crate::pods::default_tolerations(object);
    }
    Ok(())
}

/// The validating plugins, on the write about to be stored; the quota charges a create must be
/// stored with.
pub async fn validate(api: &Api, a: &Attributes<'_>) -> Result<Vec<quota::Charge>, Status> {
    let chain = &api.admission;
    if chain.has(Plugin::NodeRestriction) {
        pods::node_restriction(api, a)?;
    }
    if chain.has(Plugin::PodSecurity) {
        podsecurity::admit(api, a).await?;
    }
    if chain.has(Plugin::ValidatingAdmissionPolicy) {
        policy::validate(api, a).await?;
    }
    if chain.has(Plugin::ValidatingAdmissionWebhook) {
        webhooks::validate(api, a).await?;
    }
    charges(api, a).await
}

/// The quota charges of a create (charged anew when a quota moved before the create stored).
pub async fn charges(api: &Api, a: &Attributes<'_>) -> Result<Vec<quota::Charge>, Status> {
    if api.admission.has(Plugin::ResourceQuota) {
        return quota::admit(api, a).await;
    }
    Ok(Vec::new())
}

fn namespaces() -> &'static crate::resources::Resource {
    crate::resources::find("", "v1", "namespaces").expect("namespaces are served")
}

/// The namespace `ns` as the watch cache holds it (none if it is not there).
fn namespace_of(api: &Api, ns: &str) -> Option<std::sync::Arc<Value>> {
    api.cached(namespaces(), None, ns).map(|o| o.json(namespaces()))
}

/// The namespace `ns` as the store holds it now (kube's NotFound when there is none).
async fn stored_namespace(api: &Api, ns: &str) -> Result<Value, Status> {
    let r = namespaces();
    let stored = crate::rest::read(api, r, &crate::rest::key(api, r, None, ns), ns).await?;
    crate::rest::shown(r, &stored)
}

/// The namespace `ns` as the watch cache holds it or, when the cache has not caught up with a
/// namespace made a moment ago, as the store does; none if it does not exist.
async fn namespace(api: &Api, ns: &str) -> Option<std::sync::Arc<Value>> {
    match namespace_of(api, ns) {
        Some(n) => Some(n),
        None => stored_namespace(api, ns).await.ok().map(std::sync::Arc::new),
    }
}

/// The namespaces kube never lets go.
const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// NamespaceLifecycle: nothing is created in a namespace that does not exist or is being
/// terminated, and the system namespaces are never deleted.
async fn namespace_lifecycle(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    if a.operation == "DELETE" && a.r.plural == "namespaces" && a.r.group.is_empty() && IMMORTAL.contains(&a.name) {
        return Err(forbidden(a, "this namespace may not be deleted"));
    }
    if a.operation != "CREATE" || !a.r.namespaced || a.namespace.is_empty() {
        return Ok(());
    }
    let ns = a.namespace;
    let v = stored_namespace(api, ns).await?;
    if v.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        // Kube lets what the namespace's deletion itself writes (events, token reviews) pass;
        // everything else is refused with the cause named.
        let mut s =
            forbidden(a, &format!("unable to create new content in namespace {ns} because it is being terminated"));
        if let Some(d) = s.details.as_mut() {
            d.causes.push(status::Cause {
                reason: "NamespaceTerminating",
                message: format!("namespace {ns} is being terminated"),
                field: "metadata.namespace".into(),
            });
        }
        return Err(s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_choose_from_kubes_default_set() {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let d = Chain::of_flags(&[], &[]).unwrap();
        assert!(d.has(Plugin::ResourceQuota) && !d.has(Plugin::NodeRestriction));
        let c = Chain::of_flags(&s(&["NodeRestriction"]), &s(&["ServiceAccount", "AlwaysPullImages"])).unwrap();
        assert!(c.has(Plugin::NodeRestriction) && !c.has(Plugin::ServiceAccount));
        assert_eq!(c.0.first(), Some(&Plugin::NamespaceLifecycle));
        assert_eq!(Chain::of_flags(&s(&["Nope"]), &[]).unwrap_err(), "plugin \"Nope\" is unknown");
        assert!(Chain::of_flags(&s(&["AlwaysPullImages"]), &[]).unwrap_err().contains("not run by keel-apiserver yet"));
        assert!(Chain::of_flags(&s(&["Priority"]), &s(&["Priority"])).is_err());
    }
}
