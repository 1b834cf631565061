//! Workloads' strategies, as kube-apiserver's (`pkg/apis/{apps,batch,core}/v1/defaults.go`,
//! `pkg/apis/{apps,batch}/validation`, `pkg/registry/{apps,batch}/*/strategy.go`): Deployments,
//! ReplicaSets, StatefulSets, DaemonSets, ReplicationControllers, Jobs and CronJobs. Their
//! defaults (the pod template's too), the validation of their selectors and templates with
//! kube's messages, what an update may change, and their `scale` subresource.

use serde_json::{json, Map, Value};

use crate::pods::set_default;
use crate::status::{FieldError, FieldErrorType};

/// The workload kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    ReplicationController,
    Job,
    CronJob,
}

use Workload::*;

impl Workload {
    /// Where its pod template is.
    fn template(self) -> &'static str {
        match self {
            CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }

    /// The template's field path in kube's messages.
    fn template_field(self) -> &'static str {
        match self {
            CronJob => "spec.jobTemplate.spec.template",
            _ => "spec.template",
        }
    }
}

/// The object at `path` in `v` (created empty, and made an object, where missing).
fn object_at<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut at = v;
    for p in path {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        at = at.as_object_mut().expect("an object").entry(*p).or_insert_with(|| Value::Object(Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(Map::new());
    }
    at.as_object_mut().expect("an object")
}

/// kube's defaults for a new or updated workload (`SetDefaults_<Kind>`), its pod template's
/// included.
pub fn defaults(w: Workload, v: &mut Value) {
    if let Some(t) = v.pointer_mut(w.template()) {
        crate::pods::defaults(t);
    }
    let spec = object_at(v, &["spec"]);
    match w {
        Deployment => {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = object_at(spec.entry("strategy").or_insert_with(|| json!({})), &[]);
            set_default(strategy, "type", json!("RollingUpdate"));
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                let rolling = object_at(strategy.entry("rollingUpdate").or_insert_with(|| json!({})), &[]);
                set_default(rolling, "maxUnavailable", json!("25%"));
                set_default(rolling, "maxSurge", json!("25%"));
            }
        }
        ReplicaSet => set_default(spec, "replicas", json!(1)),
        StatefulSet => {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(spec, "revisionHistoryLimit", json!(10));
            let strategy = object_at(spec.entry("updateStrategy").or_insert_with(|| json!({})), &[]);
            if strategy.get("type").is_none_or(|t| t.as_str() == Some("")) {
                strategy.insert("type".into(), json!("RollingUpdate"));
                strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            }
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                if let Some(rolling) = strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
                    set_default(rolling, "partition", json!(0));
                }
            }
            let retention =
                object_at(spec.entry("persistentVolumeClaimRetentionPolicy").or_insert_with(|| json!({})), &[]);
            set_default(retention, "whenDeleted", json!("Retain"));
            set_default(retention, "whenScaled", json!("Retain"));
        }
        DaemonSet => {
            set_default(spec, "revisionHistoryLimit", json!(10));
            let strategy = object_at(spec.entry("updateStrategy").or_insert_with(|| json!({})), &[]);
            set_default(strategy, "type", json!("RollingUpdate"));
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                let rolling = object_at(strategy.entry("rollingUpdate").or_insert_with(|| json!({})), &[]);
                set_default(rolling, "maxUnavailable", json!(1));
                set_default(rolling, "maxSurge", json!(0));
            }
        }
        ReplicationController => {
            set_default(spec, "replicas", json!(1));
            let labels =
                spec.get("template").and_then(|t| t.pointer("/metadata/labels")).filter(|l| is_nonempty(l)).cloned();
            if let Some(labels) = labels {
                if spec.get("selector").is_none_or(|s| !is_nonempty(s)) {
                    spec.insert("selector".into(), labels.clone());
                }
                labels_unless_labelled(v, labels);
            }
        }
        Job => {
            if spec.get("completions").is_none() && spec.get("parallelism").is_none() {
                spec.insert("completions".into(), json!(1));
            }
            set_default(spec, "parallelism", json!(1));
            let backoff = if spec.get("backoffLimitPerIndex").is_some_and(|b| !b.is_null()) { i32::MAX } else { 6 };
            set_default(spec, "backoffLimit", json!(backoff));
            set_default(spec, "completionMode", json!("NonIndexed"));
            set_default(spec, "suspend", json!(false));
            let replacement = if spec.get("podFailurePolicy").is_some_and(|p| !p.is_null()) {
                "Failed"
            } else {
                "TerminatingOrFailed"
            };
            set_default(spec, "podReplacementPolicy", json!(replacement));
            let labels =
                spec.get("template").and_then(|t| t.pointer("/metadata/labels")).filter(|l| is_nonempty(l)).cloned();
            if let Some(labels) = labels {
                labels_unless_labelled(v, labels);
            }
        }
        CronJob => {
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
        }
    }
}

fn is_nonempty(v: &Value) -> bool {
    v.as_object().is_some_and(|o| !o.is_empty())
}

/// A new Job's selector and template labels (kube's `generateSelector`): unless the client
/// chose its own (`manualSelector`), the pods are selected by the job's uid, and labelled with
/// it and the job's name; the job takes the template's labels if it has none.
pub fn job_selector(v: &mut Value) {
    let uid = crate::meta::get(v, "uid").to_string();
    let name = crate::meta::get(v, "name").to_string();
    if v.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let labels = object_at(v, &["spec", "template", "metadata", "labels"]);
    for (k, val) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels.insert(k.into(), json!(val));
    }
    let labels = Value::Object(labels.clone());
    if v.pointer("/spec/selector").is_none_or(Value::is_null) {
        object_at(v, &["spec"])
            .insert("selector".into(), json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
    }
    labels_unless_labelled(v, labels);
}

/// `v` takes `labels` if it has none (a workload takes its template's).
fn labels_unless_labelled(v: &mut Value, labels: Value) {
    let meta = object_at(v, &["metadata"]);
    if meta.get("labels").is_none_or(|l| !is_nonempty(l)) {
        meta.insert("labels".into(), labels);
    }
}

/// Go's `%#v` of a `map[string]string` (keys sorted, as Go prints maps).
fn go_map(v: Option<&Value>) -> String {
    let Some(m) = v.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return "map[string]string(nil)".into();
    };
    let mut pairs: Vec<(&String, &Value)> = m.iter().collect();
    pairs.sort_by_key(|(k, _)| *k);
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{}", crate::status::go_quote(k), crate::status::go_quote(v.as_str().unwrap_or(""))))
        .collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

/// Go's `%#v` of a `metav1.LabelSelector`.
fn go_selector(s: &Value) -> String {
    let exprs = s.get("matchExpressions").and_then(Value::as_array).filter(|e| !e.is_empty());
    let exprs = match exprs {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(es) => {
            let items: Vec<String> = es
                .iter()
                .map(|e| {
                    let text = |f: &str| crate::status::go_quote(e.get(f).and_then(Value::as_str).unwrap_or(""));
                    let values = match e.get("values").and_then(Value::as_array).filter(|v| !v.is_empty()) {
                        None => "[]string(nil)".to_string(),
                        Some(vs) => crate::status::go_strings(vs.iter().map(|v| v.as_str().unwrap_or(""))),
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                        text("key"),
                        text("operator")
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{exprs}}}", go_map(s.get("matchLabels")))
}

/// Whether `labels` satisfy a `metav1.LabelSelector` (an empty selector selects everything).
pub fn selects(selector: &Value, labels: Option<&Value>) -> bool {
    crate::selector::LabelSelector::of_value(selector).is_some_and(|s| s.matches(labels))
}

fn nonnegative(v: &Value, pointer: &str, field: &str, errors: &mut Vec<FieldError>) {
    if let Some(n) = v.pointer(pointer).and_then(Value::as_i64).filter(|n| *n < 0) {
        errors.push(FieldError::new(
            FieldErrorType::Invalid,
            field,
            Some(json!(n)),
            "must be greater than or equal to 0",
        ));
    }
}

/// The pod template's errors (kube's `ValidatePodTemplateSpec` as far as keel checks a pod),
/// with the template's path in front of the pod's.
fn template_errors(w: Workload, v: &Value, errors: &mut Vec<FieldError>) {
    let at = w.template_field();
    let Some(template) = v.pointer(w.template()).filter(|t| t.is_object()) else {
        errors.push(FieldError::required(at));
        return;
    };
    for mut e in crate::pods::validate(template) {
        e.field = format!("{at}.{}", e.field);
        errors.push(e);
    }
    let restart = template.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("");
    match w {
        Job | CronJob if !matches!(restart, "OnFailure" | "Never") => {
            errors.push(FieldError::not_supported(
                &format!("{at}.spec.restartPolicy"),
                restart,
                &["OnFailure", "Never"],
            ));
        }
        Job | CronJob => {}
        _ if restart != "Always" => {
            errors.push(FieldError::not_supported(&format!("{at}.spec.restartPolicy"), restart, &["Always"]));
        }
        _ => {}
    }
    if !matches!(w, Job | CronJob) {
        if let Some(d) = template.pointer("/spec/activeDeadlineSeconds").filter(|d| !d.is_null()) {
            let which = if w == DaemonSet { "DaemonSet" } else { "ReplicaSet" };
            errors.push(FieldError::new(
                FieldErrorType::Invalid,
                &format!("{at}.spec.activeDeadlineSeconds"),
                Some(d.clone()),
                &format!("activeDeadlineSeconds in {which} is not Supported"),
            ));
        }
    }
}

/// What kube's validation refuses in a workload about to be stored (its metadata's name aside).
pub fn validate(w: Workload, v: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let template_labels = v.pointer(&format!("{}/metadata/labels", w.template()));
    let mismatch = |errors: &mut Vec<FieldError>| {
        errors.push(FieldError::verbatim(
            FieldErrorType::Invalid,
            &format!("{}.metadata.labels", w.template_field()),
            go_map(template_labels),
            "`selector` does not match template `labels`",
        ));
    };
    match w {
        Deployment | ReplicaSet | StatefulSet | DaemonSet => {
            match v.pointer("/spec/selector").filter(|s| !s.is_null()) {
                None => errors.push(FieldError::required("spec.selector")),
                Some(s) => {
                    let empty = s.get("matchLabels").and_then(Value::as_object).is_none_or(Map::is_empty)
                        && s.get("matchExpressions").and_then(Value::as_array).is_none_or(Vec::is_empty);
                    if empty {
                        let what = match w {
                            Deployment => "deployment",
                            DaemonSet => "daemonset",
                            _ => "",
                        };
                        if !what.is_empty() {
                            errors.push(FieldError::verbatim(
                                FieldErrorType::Invalid,
                                "spec.selector",
                                format!("&{}", go_selector(s)),
                                &format!("empty selector is invalid for {what}"),
                            ));
                        }
                    } else if !selects(s, template_labels) {
                        mismatch(&mut errors);
                    }
                }
            }
        }
        ReplicationController => {
            let selector = v.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty());
            match selector {
                None => errors.push(FieldError::required("spec.selector")),
                Some(s) => {
                    let label = |k: &str| template_labels.and_then(|l| l.get(k));
                    if !s.iter().all(|(k, val)| label(k) == Some(val)) {
                        mismatch(&mut errors);
                    }
                }
            }
        }
        Job => {
            if let Some(s) = v.pointer("/spec/selector").filter(|s| !s.is_null()) {
                if !selects(s, template_labels) {
                    mismatch(&mut errors);
                }
            }
            for f in ["parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"]
            {
                nonnegative(v, &format!("/spec/{f}"), &format!("spec.{f}"), &mut errors);
            }
        }
        CronJob => {
            if v.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or("").is_empty() {
                errors.push(FieldError::required("spec.schedule"));
            }
            const POLICIES: &[&str] = &["Allow", "Forbid", "Replace"];
            let policy = v.pointer("/spec/concurrencyPolicy").and_then(Value::as_str).unwrap_or("");
            if !POLICIES.contains(&policy) {
                errors.push(FieldError::not_supported("spec.concurrencyPolicy", policy, POLICIES));
            }
        }
    }
    template_errors(w, v, &mut errors);
    for f in ["replicas", "minReadySeconds", "revisionHistoryLimit"] {
        nonnegative(v, &format!("/spec/{f}"), &format!("spec.{f}"), &mut errors);
    }
    if w == Deployment {
        let strategy = v.pointer("/spec/strategy/type").and_then(Value::as_str).unwrap_or("");
        if !matches!(strategy, "RollingUpdate" | "Recreate") {
            errors.push(FieldError::not_supported("spec.strategy.type", strategy, &["Recreate", "RollingUpdate"]));
        }
    }
    errors
}

/// What kube refuses in an update of `old` to `new` beyond what `validate` refuses: a changed
/// selector (apps/v1 selectors are immutable; a Job's too), and for a StatefulSet any spec
/// change but those kube lists.
pub fn update_errors(w: Workload, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let selector = |v: &Value| v.pointer("/spec/selector").cloned().unwrap_or(Value::Null);
    if matches!(w, Deployment | ReplicaSet | StatefulSet | DaemonSet | Job) && selector(old) != selector(new) {
        let s = selector(new);
        errors.push(FieldError::verbatim(
            FieldErrorType::Invalid,
            "spec.selector",
            if s.is_null() { "null".into() } else { go_selector(&s) },
            "field is immutable",
        ));
    }
    if w == StatefulSet {
        const MAY_CHANGE: &[&str] = &[
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ];
        let rest = |v: &Value| {
            let mut spec = v.get("spec").and_then(Value::as_object).cloned().unwrap_or_default();
            spec.retain(|k, _| !MAY_CHANGE.contains(&k.as_str()));
            spec
        };
        if rest(old) != rest(new) {
            errors.push(FieldError::new(
                FieldErrorType::Forbidden,
                "spec",
                None,
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
    errors
}

/// The `autoscaling/v1` Scale of a workload that has one (kube's `scaleFromDeployment` and its
/// kin): the object's identity, its desired and current replicas, and its selector as text.
pub fn scale_of(w: Workload, v: &Value) -> Value {
    let meta = v.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut m = Map::new();
    for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(x) = meta.get(f) {
            m.insert(f.into(), x.clone());
        }
    }
    let selector = match w {
        ReplicationController => {
            let mut pairs: Vec<String> = v
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, val)| format!("{k}={}", val.as_str().unwrap_or("")))
                .collect();
            pairs.sort();
            pairs.join(",")
        }
        _ => crate::printers::selector(v.pointer("/spec/selector")).unwrap_or_default(),
    };
    let mut spec = Map::new();
    if let Some(r) = v.pointer("/spec/replicas").filter(|r| r.as_i64().is_some_and(|n| n != 0)) {
        spec.insert("replicas".into(), r.clone());
    }
    let mut status = Map::new();
    status.insert("replicas".into(), v.pointer("/status/replicas").cloned().unwrap_or(json!(0)));
    if !selector.is_empty() {
        status.insert("selector".into(), Value::String(selector));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": spec,
        "status": status,
    })
}

/// kube's validation of a Scale sent to a workload.
pub fn scale_errors(scale: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    nonnegative(scale, "/spec/replicas", "spec.replicas", &mut errors);
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}
                }
            }
        })
    }

    #[test]
    fn deployments_get_kubes_defaults() {
        let mut d = deployment();
        defaults(Deployment, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(validate(Deployment, &d).is_empty(), "{:?}", validate(Deployment, &d));
        // A Recreate strategy gets no rolling update.
        let mut r = deployment();
        r["spec"]["strategy"] = json!({"type": "Recreate"});
        defaults(Deployment, &mut r);
        assert_eq!(r["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn selectors_must_match_template_labels_as_kube_words_it() {
        let mut d = deployment();
        d["spec"]["template"]["metadata"]["labels"] = json!({"app": "other", "tier": "a"});
        defaults(Deployment, &mut d);
        let errors: Vec<String> = validate(Deployment, &d).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\", \"tier\":\"a\"}: `selector` does not match template `labels`"]
        );
        d["spec"]["selector"] = json!({});
        let errors: Vec<String> = validate(Deployment, &d).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["spec.selector: Invalid value: &v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"]
        );
        d["spec"].as_object_mut().unwrap().remove("selector");
        let errors: Vec<String> = validate(Deployment, &d).iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["spec.selector: Required value"]);
    }

    #[test]
    fn templates_are_validated_as_pods_under_their_path() {
        let mut d = deployment();
        d["spec"]["template"]["spec"] = json!({"containers": [{"name": "x"}], "restartPolicy": "Never"});
        d["spec"]["replicas"] = json!(-1);
        defaults(Deployment, &mut d);
        let errors: Vec<String> = validate(Deployment, &d).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "spec.template.spec.containers[0].image: Required value",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
    }

    #[test]
    fn jobs_select_their_pods_by_uid_and_want_a_restart_policy() {
        let mut j = json!({
            "metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}}
        });
        defaults(Job, &mut j);
        job_selector(&mut j);
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}));
        assert_eq!(j["metadata"]["labels"]["job-name"], "pi");
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"], "pi");
        let errors: Vec<String> = validate(Job, &j).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""]
        );
    }

    #[test]
    fn replication_controllers_take_their_selector_from_the_template() {
        let mut rc = json!({
            "metadata": {"name": "rc"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        });
        defaults(ReplicationController, &mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"a": "b"}));
        assert_eq!(rc["metadata"]["labels"], json!({"a": "b"}));
        assert!(validate(ReplicationController, &rc).is_empty());
        assert_eq!(scale_of(ReplicationController, &rc)["status"], json!({"replicas": 0, "selector": "a=b"}));
    }

    #[test]
    fn selectors_print_and_match_as_kube_s() {
        let s = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                {"key": "zone", "operator": "Exists"}
            ]
        });
        assert_eq!(crate::printers::selector(Some(&s)).unwrap(), "app=web,!canary,env notin (dev),tier in (a,b),zone");
        assert!(selects(&s, Some(&json!({"app": "web", "tier": "a", "zone": "z"}))));
        assert!(!selects(&s, Some(&json!({"app": "web", "tier": "c", "zone": "z"}))));
        assert!(!selects(&s, Some(&json!({"app": "web", "tier": "a", "zone": "z", "canary": "1"}))));
        assert!(!selects(&s, Some(&json!({"app": "web", "tier": "a", "zone": "z", "env": "dev"}))));
        assert!(selects(&json!({}), None));
    }

    #[test]
    fn scales_show_desired_and_current_replicas() {
        let mut d = deployment();
        defaults(Deployment, &mut d);
        d["metadata"]["namespace"] = json!("default");
        d["status"] = json!({"replicas": 2});
        let s = scale_of(Deployment, &d);
        assert_eq!(
            s,
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"replicas": 1},
                "status": {"replicas": 2, "selector": "app=web"}
            })
        );
        let errors: Vec<String> =
            scale_errors(&json!({"spec": {"replicas": -2}})).iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["spec.replicas: Invalid value: -2: must be greater than or equal to 0"]);
    }

    #[test]
    fn selectors_and_statefulset_specs_are_immutable() {
        let mut old = deployment();
        defaults(StatefulSet, &mut old);
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        new["spec"]["serviceName"] = json!("svc");
        let errors: Vec<String> = update_errors(StatefulSet, &old, &new).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2);
        assert_eq!(
            errors[0],
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"x\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
        );
        assert!(errors[1].starts_with("spec: Forbidden: updates to statefulset spec for fields other than"));
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(5);
        assert!(update_errors(StatefulSet, &old, &scaled).is_empty());
    }
}
