//! What a DELETE does beyond removing an object, as kube-apiserver's generic store does it
//! (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`, `rest.BeforeDelete`, the pod
//! strategy's `CheckGracefulDelete`): graceful deletion (a pod on a node is marked with a
//! deletionTimestamp its grace period ahead and stays until its kubelet deletes it), the garbage
//! collector's finalizers a propagation policy asks for (`orphan`, `foregroundDeletion`), and
//! objects that stay, marked, while any finalizer stands.

use serde_json::{json, Value};

use crate::meta;
use crate::resources::{Resource, Strategy};
use crate::status::{self, FieldError, FieldErrorType, GroupKind, Status};
use crate::workloads::Workload;

/// kube's finalizers of the garbage collector.
pub const ORPHAN: &str = "orphan";
pub const FOREGROUND: &str = "foregroundDeletion";

/// A DELETE's options (`metav1.DeleteOptions`, from the body or the query).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Options {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
}

impl Options {
    /// The options of a DeleteOptions body (JSON) and the query (the body's win); kube's 422
    /// for what `ValidateDeleteOptions` refuses.
    pub fn of(body: Option<&Value>, query: &crate::rest::Query) -> Result<Options, Status> {
        let field = |b: &str| body.and_then(|v| v.get(b)).filter(|x| !x.is_null());
        let pre = |f: &str| body.and_then(|v| v.pointer(&format!("/preconditions/{f}"))).and_then(Value::as_str);
        let grace = match field("gracePeriodSeconds") {
            Some(g) => g.as_i64(),
            None => match query.get("gracePeriodSeconds") {
                Some(q) => Some(q.parse::<i64>().map_err(|_| {
                    status::bad_request(format!("strconv.ParseInt: parsing {}: invalid syntax", status::go_quote(q)))
                })?),
                None => None,
            },
        };
        let opts = Options {
            uid: pre("uid").map(str::to_string),
            resource_version: pre("resourceVersion").map(str::to_string),
            // Negative grace periods count as one second (`rest.BeforeDelete`).
            grace_period: grace.map(|g| if g < 0 { 1 } else { g }),
            propagation: field("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| query.get("propagationPolicy").cloned()),
            orphan_dependents: field("orphanDependents")
                .and_then(Value::as_bool)
                .or_else(|| query.get("orphanDependents").map(|o| o == "true")),
        };
        let mut errors = Vec::new();
        if let Some(p) = &opts.propagation {
            if opts.orphan_dependents.is_some() {
                errors.push(FieldError::new(
                    FieldErrorType::Invalid,
                    "propagationPolicy",
                    Some(json!(p)),
                    "orphanDependents and deletionPropagation cannot be both set",
                ));
            }
            if !["Foreground", "Background", "Orphan"].contains(&p.as_str()) {
                errors.push(FieldError::not_supported(
                    "propagationPolicy",
                    p,
                    &["Foreground", "Background", "Orphan", "nil"],
                ));
            }
        }
        if !errors.is_empty() {
            return Err(status::invalid(GroupKind { group: "meta.k8s.io", kind: "DeleteOptions" }, "", &errors));
        }
        Ok(opts)
    }
}

/// kube's default garbage collection policy of a resource: batch/v1 Jobs and core/v1
/// ReplicationControllers orphan their dependents unless told otherwise; others delete them.
fn orphans_by_default(r: &Resource) -> bool {
    matches!(r.strategy, Strategy::Workload(Workload::Job | Workload::ReplicationController))
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// The finalizers `v` should have for the propagation `opts` ask (kube's
/// `deletionFinalizersForGarbageCollection`), if they differ from what it has.
fn gc_finalizers(r: &Resource, v: &Value, opts: &Options) -> Option<Vec<String>> {
    if r.strategy == Strategy::Namespace || r.kind == "Event" {
        return None;
    }
    let have = finalizers(v);
    let marked = |f: &str| have.iter().find(|h| *h == ORPHAN || *h == FOREGROUND).map(|h| h == f);
    let orphan = match (opts.orphan_dependents, opts.propagation.as_deref()) {
        (Some(o), _) => o,
        (None, Some("Orphan")) => true,
        (None, Some(_)) => false,
        (None, None) => marked(ORPHAN).unwrap_or_else(|| orphans_by_default(r)),
    };
    let foreground = match (opts.orphan_dependents, opts.propagation.as_deref()) {
        (Some(_), _) => false,
        (None, Some(p)) => p == "Foreground",
        (None, None) => marked(FOREGROUND).unwrap_or(false),
    };
    let mut want: Vec<String> = have.iter().filter(|f| *f != ORPHAN && *f != FOREGROUND).cloned().collect();
    if orphan {
        want.push(ORPHAN.into());
    }
    if foreground {
        want.push(FOREGROUND.into());
    }
    let (mut a, mut b) = (have.clone(), want.clone());
    a.sort();
    b.sort();
    (a != b).then_some(want)
}

/// What a DELETE does to the object `v`.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Remove it now.
    Remove,
    /// A deletion already under way that this one does not shorten: answer the object as it is.
    Pending,
    /// Write it as given (marked for deletion, its finalizers as the policy asks) and keep it.
    Keep(Value),
}

fn set_meta(v: &mut Value, field: &str, x: Value) {
    meta::metadata(v).insert(field.into(), x);
}

/// What deleting `v` (an object of `r`) with `opts` does (`rest.BeforeDelete` and the store's
/// `Delete`).
pub fn plan(r: &Resource, v: &Value, opts: &Options) -> Plan {
    let marked = !meta::get(v, "deletionTimestamp").is_empty();
    let period_now = v.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
    let mut out = v.clone();
    let mut graceful = false;
    if r.strategy == Strategy::Pod {
        if marked && period_now > 0 {
            // Already being deleted: only a shorter grace period changes anything.
            match opts.grace_period {
                Some(p) if p < period_now => {
                    if p == 0 {
                        return Plan::Remove;
                    }
                    set_meta(&mut out, "deletionTimestamp", json!(meta::after(p)));
                    set_meta(&mut out, "deletionGracePeriodSeconds", json!(p));
                    return Plan::Keep(out);
                }
                _ => return Plan::Pending,
            }
        }
        if !marked {
            // kube's pod strategy: the pod's own grace period unless the request gives one; none
            // for a pod no node runs or one that has finished.
            let mut period = opts
                .grace_period
                .or_else(|| v.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
                .unwrap_or(0);
            let phase = v.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
            if v.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty()
                || matches!(phase, "Failed" | "Succeeded")
            {
                period = 0;
            }
            if period > 0 {
                graceful = true;
                set_meta(&mut out, "deletionTimestamp", json!(meta::after(period)));
                set_meta(&mut out, "deletionGracePeriodSeconds", json!(period));
            }
        }
    }
    if let Some(f) = gc_finalizers(r, v, opts) {
        set_meta(&mut out, "finalizers", json!(f));
        if f.is_empty() {
            meta::metadata(&mut out).remove("finalizers");
        }
    }
    let pending = !finalizers(&out).is_empty();
    if pending && meta::get(&out, "deletionTimestamp").is_empty() {
        set_meta(&mut out, "deletionTimestamp", json!(meta::now()));
        set_meta(&mut out, "deletionGracePeriodSeconds", json!(0));
    }
    if (graceful || pending) && !marked {
        if let Some(g) = out.pointer("/metadata/generation").and_then(Value::as_i64).filter(|g| *g > 0) {
            set_meta(&mut out, "generation", json!(g + 1));
        }
    }
    match (graceful || pending, &out == v) {
        (false, _) => Plan::Remove,
        (true, true) => Plan::Pending,
        (true, false) => Plan::Keep(out),
    }
}

/// Whether an update leaves `v` (of `r`) to be removed: marked for deletion, no finalizer left
/// (a namespace's own `spec.finalizers` included), and no grace period running (kube's
/// `ShouldDeleteDuringUpdate`, and the namespace store's).
pub fn done(r: &Resource, v: &Value) -> bool {
    let spec_finalizers = v.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    let namespace_held = r.strategy == Strategy::Namespace && spec_finalizers;
    !namespace_held
        && !meta::get(v, "deletionTimestamp").is_empty()
        && finalizers(v).is_empty()
        && v.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0
}

/// kube's refusal of finalizers added to an object being deleted.
pub fn finalizer_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    if meta::get(old, "deletionTimestamp").is_empty() {
        return Vec::new();
    }
    let had = finalizers(old);
    let added: Vec<String> = finalizers(new).into_iter().filter(|f| !had.contains(f)).collect();
    if added.is_empty() {
        return Vec::new();
    }
    let go = status::go_strings(added.iter().map(String::as_str));
    vec![FieldError::new(
        FieldErrorType::Forbidden,
        "metadata.finalizers",
        None,
        &format!("no new finalizers can be added if the object is being deleted, found new finalizers {go}"),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn opts(propagation: Option<&str>) -> Options {
        Options { propagation: propagation.map(str::to_string), ..Default::default() }
    }

    #[test]
    fn propagation_policies_add_the_collector_s_finalizers() {
        let deploy = find("apps", "v1", "deployments").unwrap();
        let d = json!({"metadata": {"name": "web", "generation": 2}});
        assert_eq!(plan(deploy, &d, &opts(None)), Plan::Remove);
        assert_eq!(plan(deploy, &d, &opts(Some("Background"))), Plan::Remove);
        let Plan::Keep(kept) = plan(deploy, &d, &opts(Some("Foreground"))) else { panic!("kept") };
        assert_eq!(kept["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        assert_eq!(kept["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(kept["metadata"]["generation"], 3);
        assert!(kept["metadata"]["deletionTimestamp"].is_string());
        // Deleting again changes nothing; an explicit Background takes the marker off, which
        // leaves nothing to wait for: the object goes.
        assert_eq!(plan(deploy, &kept, &opts(None)), Plan::Pending);
        assert_eq!(plan(deploy, &kept, &opts(Some("Background"))), Plan::Remove);
        let mut cleared = kept.clone();
        cleared["metadata"]["finalizers"] = json!([]);
        assert!(done(deploy, &cleared) && !done(deploy, &kept));
        // Jobs orphan by default.
        let job = find("batch", "v1", "jobs").unwrap();
        let Plan::Keep(j) = plan(job, &json!({"metadata": {"name": "j"}}), &opts(None)) else { panic!("kept") };
        assert_eq!(j["metadata"]["finalizers"], json!(["orphan"]));
        assert_eq!(plan(job, &json!({"metadata": {"name": "j"}}), &opts(Some("Background"))), Plan::Remove);
    }

    #[test]
    fn other_finalizers_keep_an_object_until_they_are_gone() {
        let cm = find("", "v1", "configmaps").unwrap();
        let c = json!({"metadata": {"name": "c", "finalizers": ["example.com/x"]}});
        let Plan::Keep(kept) = plan(cm, &c, &opts(Some("Background"))) else { panic!("kept") };
        assert!(!done(cm, &kept));
        let mut cleared = kept.clone();
        cleared["metadata"]["finalizers"] = json!([]);
        assert!(done(cm, &cleared));
        let errors: Vec<String> = finalizer_errors(&kept, &json!({"metadata": {"finalizers": ["example.com/x", "y"]}}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            ["metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"y\"}"]
        );
    }

    #[test]
    fn pods_on_a_node_go_gracefully() {
        let pods = find("", "v1", "pods").unwrap();
        let unscheduled = json!({"metadata": {"name": "p"}, "spec": {"terminationGracePeriodSeconds": 30}});
        assert_eq!(plan(pods, &unscheduled, &opts(None)), Plan::Remove);
        let running =
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30}});
        let Plan::Keep(marked) = plan(pods, &running, &opts(None)) else { panic!("kept") };
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(!done(pods, &marked));
        // Again: pending; shorter: shortened; zero: removed now.
        assert_eq!(plan(pods, &marked, &opts(None)), Plan::Pending);
        let shorter = Options { grace_period: Some(5), ..Default::default() };
        let Plan::Keep(s) = plan(pods, &marked, &shorter) else { panic!("kept") };
        assert_eq!(s["metadata"]["deletionGracePeriodSeconds"], 5);
        let now = Options { grace_period: Some(0), ..Default::default() };
        assert_eq!(plan(pods, &marked, &now), Plan::Remove);
        let finished = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(plan(pods, &finished, &opts(None)), Plan::Remove);
    }

    #[test]
    fn delete_options_are_validated_as_kube_validates_them() {
        let q = crate::rest::Query::new();
        let both = json!({"propagationPolicy": "Orphan", "orphanDependents": true});
        let e = Options::of(Some(&both), &q).unwrap_err();
        assert_eq!(e.message, "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set");
        let bad = json!({"propagationPolicy": "Later"});
        let e = Options::of(Some(&bad), &q).unwrap_err();
        assert_eq!(e.message, "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Later\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"");
        let mut q = crate::rest::Query::new();
        q.insert("gracePeriodSeconds".into(), "-5".into());
        assert_eq!(Options::of(None, &q).unwrap().grace_period, Some(1));
    }
}
