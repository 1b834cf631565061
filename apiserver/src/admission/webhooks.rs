//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook: every write a webhook's rules and
//! selectors match is sent, as an `admission.k8s.io` AdmissionReview, over HTTPS to the URL or
//! service its configuration names (trusting its `caBundle`), within its timeout. Mutating
//! webhooks run one after another (configurations by name) and may answer a JSON patch; the
//! validating ones run all at once and may only allow or deny. A webhook that cannot be called
//! fails the write unless its `failurePolicy` is Ignore.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt as _;
use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::{json, Map, Value};

use super::Attributes;
use crate::rest::Api;
use crate::selector::LabelSelector;
use crate::status::{self, FieldError, FieldErrorType, Status};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as LabelSelectorApi;

/// How long a webhook may take when its configuration does not say (kube's default).
const DEFAULT_TIMEOUT: i32 = 10;
/// The largest AdmissionReview answer read back.
const MAX_ANSWER_BYTES: usize = crate::rest::MAX_BODY_BYTES;

/// A webhook of either kind, as far as matching and calling go.
struct Hook<'a> {
    name: &'a str,
    client: &'a reg::WebhookClientConfig,
    rules: &'a [reg::RuleWithOperations],
    failure_policy: Option<&'a str>,
    namespace_selector: Option<&'a LabelSelectorApi>,
    object_selector: Option<&'a LabelSelectorApi>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    versions: &'a [String],
    /// Its CEL match conditions.
    conditions: &'a [reg::MatchCondition],
    /// Whether it is a mutating webhook (which may answer a patch).
    mutating: bool,
    /// A mutating webhook's `reinvocationPolicy: IfNeeded`.
    reinvoke: bool,
    /// Its place among the webhooks (for the audit annotations kube writes).
    index: usize,
}

/// Every webhook of `configs` in order, as a [`Hook`] (the fields both kinds share, by name);
/// `reinvoke` says whether one asks to be called again.
macro_rules! hooks {
    ($configs:expr, $mutating:expr, $reinvoke:expr) => {
        $configs
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten())
            .enumerate()
            .map(|(index, w)| Hook {
                name: &w.name,
                client: &w.client_config,
                rules: w.rules.as_deref().unwrap_or_default(),
                failure_policy: w.failure_policy.as_deref(),
                namespace_selector: w.namespace_selector.as_ref(),
                object_selector: w.object_selector.as_ref(),
                side_effects: &w.side_effects,
                timeout_seconds: w.timeout_seconds,
                versions: &w.admission_review_versions,
                conditions: w.match_conditions.as_deref().unwrap_or_default(),
                mutating: $mutating,
                reinvoke: $reinvoke(w),
                index,
            })
            .collect::<Vec<Hook<'_>>>()
    };
}

/// The configurations of `plural` the watch cache holds, by name (kube's order of calling).
fn configurations<T>(api: &Api, plural: &str) -> Vec<Arc<T>>
where
    T: serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let Some(r) = crate::resources::find("admissionregistration.k8s.io", "v1", plural) else { return Vec::new() };
    let mut all: Vec<(String, Arc<T>)> =
        api.cached_list(r, None).iter().filter_map(|o| Some((o.key.clone(), o.decoded::<T>()?))).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.into_iter().map(|(_, t)| t).collect()
}

/// Whether a write of `a` is never sent to webhooks: the admission configurations themselves,
/// so that a broken webhook can always be removed (kube's exemption).
fn exempt(a: &Attributes<'_>) -> bool {
    a.r.group == "admissionregistration.k8s.io"
        && matches!(
            a.r.plural,
            "mutatingwebhookconfigurations"
                | "validatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// The mutating webhooks, in turn, on `object` (Null for a delete); each patch applies before
/// the next webhook is called, and webhooks with `reinvocationPolicy: IfNeeded` are called once
/// more when a later one changed the object.
pub async fn mutate(api: &Api, a: &Attributes<'_>, object: &mut Value) -> Result<(), Status> {
    if exempt(a) {
        return Ok(());
    }
    let configs = configurations::<reg::MutatingWebhookConfiguration>(api, "mutatingwebhookconfigurations");
    let hooks = hooks!(configs, true, |w: &reg::MutatingWebhook| w.reinvocation_policy.as_deref() == Some("IfNeeded"));
    if hooks.is_empty() {
        return Ok(());
    }
    // The object each webhook last saw, for reinvocation.
    let mut seen: Vec<Option<Value>> = vec![None; hooks.len()];
    let mut changed = false;
    for (i, h) in hooks.iter().enumerate() {
        if matches(api, h, a, Some(object)) {
            seen[i] = Some(object.clone());
            admit(api, h, a, Some(object), 0).await?;
            changed |= seen[i].as_ref() != Some(object);
        }
    }
    // A second round, once, for the webhooks that asked for it and whose object changed after.
    if changed {
        for (i, h) in hooks.iter().enumerate() {
            if h.reinvoke && seen[i].as_ref().is_some_and(|s| s != object) {
                admit(api, h, a, Some(object), 1).await?;
            }
        }
    }
    Ok(())
}

/// The validating webhooks, all at once, on the write about to be stored; the first to deny
/// (in configuration order) is the answer.
pub async fn validate(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    if exempt(a) {
        return Ok(());
    }
    let configs = configurations::<reg::ValidatingWebhookConfiguration>(api, "validatingwebhookconfigurations");
    let hooks = hooks!(configs, false, |_: &reg::ValidatingWebhook| false);
    let calls = hooks.iter().filter(|h| matches(api, h, a, a.object)).map(|h| admit(api, h, a, None, 0));
    for done in futures::future::join_all(calls).await {
        done?;
    }
    Ok(())
}

/// Whether a webhook's rules and selectors take the write `a` of `object`.
fn matches(api: &Api, h: &Hook<'_>, a: &Attributes<'_>, object: Option<&Value>) -> bool {
    h.rules.iter().any(|rule| rule_matches(&Rule::from(rule), a))
        && namespace_matches(api, h.namespace_selector, a, object)
        && selected(h.object_selector, [object, a.old])
}

/// An admission rule's terms (webhooks' `RuleWithOperations`, policies' `NamedRuleWithOperations`).
pub(super) struct Rule<'a> {
    pub operations: &'a Option<Vec<String>>,
    pub groups: &'a Option<Vec<String>>,
    pub versions: &'a Option<Vec<String>>,
    pub resources: &'a Option<Vec<String>>,
    pub scope: Option<&'a str>,
}

/// A rule's terms from either kind of rule (their fields share names).
macro_rules! rule_from {
    ($($ty:ty),*) => {$(
        impl<'a> From<&'a $ty> for Rule<'a> {
            fn from(r: &'a $ty) -> Self {
                Rule {
                    operations: &r.operations,
                    groups: &r.api_groups,
                    versions: &r.api_versions,
                    resources: &r.resources,
                    scope: r.scope.as_deref(),
                }
            }
        }
    )*};
}

rule_from!(reg::RuleWithOperations, reg::NamedRuleWithOperations);

/// kube's rule matching: operation, group, version, resource (with subresource) and scope.
pub(super) fn rule_matches(rule: &Rule<'_>, a: &Attributes<'_>) -> bool {
    let has = |list: &Option<Vec<String>>, x: &str| list.iter().flatten().any(|v| v == "*" || v == x);
    let resource = |pattern: &str| -> bool {
        let (res, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
        let res_ok = res == "*" || res == a.r.plural;
        let sub_ok = match (sub, a.subresource) {
            ("", s) => s.is_empty(),
            ("*", _) => true,
            (want, s) => want == s,
        };
        res_ok && sub_ok
    };
    let namespaces = a.r.group.is_empty() && a.r.plural == "namespaces";
    let scope = match rule.scope {
        Some("Namespaced") => !namespaces && !a.namespace.is_empty(),
        Some("Cluster") => namespaces || a.namespace.is_empty(),
        Some("*") | None => true,
        Some(_) => false,
    };
    has(rule.operations, a.operation)
        && has(rule.groups, a.r.group)
        && has(rule.versions, a.r.version)
        && rule.resources.iter().flatten().any(|p| resource(p))
        && scope
}

/// A selector absent or empty takes everything; one kube cannot read takes nothing.
fn selector_of(sel: Option<&LabelSelectorApi>) -> Option<LabelSelector> {
    match sel {
        None => Some(LabelSelector::default()),
        Some(s) => LabelSelector::of_api(s),
    }
}

/// Whether the labels of any of `objects` (the new object, the old one) are selected.
pub(super) fn selected(sel: Option<&LabelSelectorApi>, objects: [Option<&Value>; 2]) -> bool {
    let Some(s) = selector_of(sel) else { return false };
    if s.is_empty() {
        return true;
    }
    objects.iter().flatten().filter(|o| !o.is_null()).any(|o| s.matches(o.pointer("/metadata/labels")))
}

/// A namespace selector: a namespaced object's namespace's labels, a Namespace's own; other
/// cluster-scoped objects always match.
pub(super) fn namespace_matches(
    api: &Api,
    sel: Option<&LabelSelectorApi>,
    a: &Attributes<'_>,
    object: Option<&Value>,
) -> bool {
    let namespaces = a.r.group.is_empty() && a.r.plural == "namespaces";
    if namespaces {
        return selected(sel, [object, a.old]);
    }
    if !a.r.namespaced || a.namespace.is_empty() {
        return true;
    }
    let Some(s) = selector_of(sel) else { return false };
    if s.is_empty() {
        return true;
    }
    let labels = super::namespace_of(api, a.namespace);
    s.matches(labels.as_deref().and_then(|n| n.pointer("/metadata/labels")))
}

/// An object as admission shows it: with its kind and apiVersion.
pub(super) fn typed(a: &Attributes<'_>, v: Option<&Value>) -> Value {
    match v {
        Some(Value::Object(m)) => a.r.with_type(m.clone()),
        _ => Value::Null,
    }
}

/// What the write `a` is, as an AdmissionRequest says it (without its uid and objects): kube
/// sends it to webhooks and gives it to policies as `request`.
pub(super) fn request_of(a: &Attributes<'_>) -> Map<String, Value> {
    let user = a.user;
    let mut user_info = json!({"username": user.name});
    if !user.uid.is_empty() {
        user_info["uid"] = json!(user.uid);
    }
    if !user.groups.is_empty() {
        user_info["groups"] = json!(user.groups);
    }
    if !user.extra.is_empty() {
        user_info["extra"] = json!(user.extra);
    }
    let kind = json!({"group": a.r.group, "version": a.r.version, "kind": a.r.kind});
    let resource = json!({"group": a.r.group, "version": a.r.version, "resource": a.r.plural});
    let options = match a.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut req = Map::new();
    req.insert("kind".into(), kind.clone());
    req.insert("resource".into(), resource.clone());
    if !a.subresource.is_empty() {
        req.insert("subResource".into(), json!(a.subresource));
    }
    req.insert("requestKind".into(), kind);
    req.insert("requestResource".into(), resource);
    if !a.subresource.is_empty() {
        req.insert("requestSubResource".into(), json!(a.subresource));
    }
    if !a.name.is_empty() {
        req.insert("name".into(), json!(a.name));
    }
    if !a.namespace.is_empty() {
        req.insert("namespace".into(), json!(a.namespace));
    }
    req.insert("operation".into(), json!(a.operation));
    req.insert("userInfo".into(), user_info);
    req.insert("dryRun".into(), json!(a.dry_run));
    req.insert("options".into(), json!({"kind": options, "apiVersion": "meta.k8s.io/v1"}));
    req
}

/// The AdmissionReview sent for the write `a` of `object`.
fn review(version: &str, a: &Attributes<'_>, object: Option<&Value>, uid: &str) -> Value {
    let mut req = Map::new();
    req.insert("uid".into(), json!(uid));
    req.extend(request_of(a));
    req.insert("object".into(), typed(a, object));
    req.insert("oldObject".into(), typed(a, a.old));
    json!({"kind": "AdmissionReview", "apiVersion": format!("admission.k8s.io/{version}"), "request": req})
}

/// Calls webhook `h` for the write `a` and applies its answer: a denial is the write's refusal,
/// a patch (mutating webhooks, `object` given) is applied to `object`, warnings go back to the
/// client. A webhook that cannot be called fails the write unless its failure policy is Ignore.
async fn admit(
    api: &Api,
    h: &Hook<'_>,
    a: &Attributes<'_>,
    object: Option<&mut Value>,
    round: usize,
) -> Result<(), Status> {
    // A mutating webhook sees the object as mutated so far; a validating one the object to store.
    let sent = object.as_deref().or(a.object);
    // Its match conditions: one false skips it; one that fails refuses the write unless the
    // webhook fails open.
    match super::policy::conditions_hold(a, sent, h.conditions) {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(_) if h.failure_policy == Some("Ignore") => return Ok(()),
        Err(why) => return Err(super::forbidden(a, &why)),
    }
    // A webhook with side effects is not called on a dry run: the write is refused.
    if a.dry_run && !matches!(h.side_effects, "None" | "NoneOnDryRun") {
        return Err(status::bad_request(format!(
            "admission webhook {} does not support dry run",
            status::go_quote(h.name)
        )));
    }
    let answer = match call(api, h, a, sent).await {
        Ok(answer) => answer,
        Err(why) if h.failure_policy == Some("Ignore") => {
            tracing::warn!(webhook = h.name, "failed calling webhook, failing open: {why}");
            let kind = if h.mutating { "mutation" } else { "validating" };
            super::annotate(
                &format!("failed-open.{kind}.webhook.admission.k8s.io/round_{round}_index_{}", h.index),
                h.name.to_string(),
            );
            return Ok(());
        }
        Err(why) => {
            return Err(crate::rest::internal(format!("failed calling webhook {}: {why}", status::go_quote(h.name))))
        }
    };
    for (k, v) in answer.get("auditAnnotations").and_then(Value::as_object).into_iter().flatten() {
        if let Some(v) = v.as_str() {
            super::annotate(&format!("{}/{k}", h.name), v.to_string());
        }
    }
    for w in answer.get("warnings").and_then(Value::as_array).into_iter().flatten() {
        if let Some(w) = w.as_str() {
            super::warn(w.to_string());
        }
    }
    if answer.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Err(denied(h.name, answer.get("status")));
    }
    let patch = answer.get("patch").and_then(Value::as_str).unwrap_or("");
    let ops = decode_patch(patch).map_err(crate::rest::internal)?;
    if ops.0.is_empty() {
        return Ok(());
    }
    match object.filter(|o| !o.is_null()) {
        Some(o) => patched(a, o, &ops).map_err(crate::rest::internal),
        None => Err(crate::rest::internal(format!(
            "admission webhook {} attempted to modify the object, which is not supported for this operation",
            status::go_quote(h.name)
        ))),
    }
}

/// A webhook's patch: base64 of a JSON patch (none when empty).
fn decode_patch(patch: &str) -> Result<json_patch::Patch, String> {
    use base64::Engine as _;
    if patch.is_empty() {
        return Ok(json_patch::Patch(Vec::new()));
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// Applies a webhook's base64 JSON patch to `object` (with its kind and apiVersion, as sent).
fn patched(a: &Attributes<'_>, object: &mut Value, ops: &json_patch::Patch) -> Result<(), String> {
    let mut doc = typed(a, Some(object));
    json_patch::patch(&mut doc, ops).map_err(|e| e.to_string())?;
    let Value::Object(mut m) = doc else { return Err("the patched object is not an object".into()) };
    m.remove("kind");
    m.remove("apiVersion");
    // The object keeps its own kind and apiVersion where it carried them.
    for k in ["kind", "apiVersion"] {
        if let Some(v) = object.get(k).cloned() {
            m.insert(k.into(), v);
        }
    }
    *object = Value::Object(m);
    Ok(())
}

/// kube's refusal for a webhook's denial: its status, code at least 400, message prefixed.
fn denied(name: &str, result: Option<&Value>) -> Status {
    let text = |f: &str| result.and_then(|r| r.get(f)).and_then(Value::as_str).unwrap_or("").to_string();
    let by = format!("admission webhook {} denied the request", status::go_quote(name));
    let (message, reason) = (text("message"), text("reason"));
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let code = result.and_then(|r| r.get("code")).and_then(Value::as_u64).unwrap_or(0);
    let code = if (400..=599).contains(&code) { code as u16 } else { 400 };
    let mut s = Status::failure(code, "", message, None);
    s.reason = reason.into();
    s
}

/// Where a webhook is reached: the address dialled, the TLS name expected, the request path
/// and the URL as kube prints it in errors.
struct Endpoint {
    addrs: Vec<std::net::SocketAddr>,
    server_name: String,
    path: String,
    url: String,
}

/// The endpoint of a webhook's client config: its URL's host, or its service's endpoints with
/// the service's DNS name for TLS.
async fn endpoint(api: &Api, h: &Hook<'_>, timeout: i32) -> Result<Endpoint, String> {
    let query = format!("timeout={timeout}s");
    if let Some(url) = &h.client.url {
        let uri: http::Uri = url.parse().map_err(|e| format!("invalid url {url:?}: {e}"))?;
        let host = uri.host().unwrap_or("").trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(443);
        let path = format!("{}?{query}", joined(uri.path()));
        let url = format!("https://{}{path}", uri.authority().map(|a| a.as_str()).unwrap_or(""));
        let addrs = match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(a) => a.collect(),
            Err(e) => return Err(post_failed(&url, format!("dial tcp: lookup {host}: {e}"))),
        };
        return Ok(Endpoint { addrs, server_name: host, path, url });
    }
    let Some(svc) = &h.client.service else { return Err("no url or service given".into()) };
    let port = svc.port.unwrap_or(443);
    let path = format!("{}?{query}", joined(svc.path.as_deref().unwrap_or("")));
    let server_name = format!("{}.{}.svc", svc.name, svc.namespace);
    let url = format!("https://{server_name}:{port}{path}");
    let addrs = service_addresses(api, &svc.namespace, &svc.name, port).map_err(|why| post_failed(&url, why))?;
    Ok(Endpoint { addrs, server_name, path, url })
}

/// The ready addresses of service `ns/name` for its port `port` (through its Endpoints, as
/// kube-apiserver reaches services with `--enable-aggregator-routing`: keel's cluster IPs are
/// not routed).
fn service_addresses(api: &Api, ns: &str, name: &str, port: i32) -> Result<Vec<std::net::SocketAddr>, String> {
    let services = crate::resources::find("", "v1", "services").expect("services are served");
    let endpoints = crate::resources::find("", "v1", "endpoints").expect("endpoints are served");
    let Some(svc) = api.cached(services, Some(ns), name).map(|o| o.json(services)) else {
        return Err(format!("services {} not found", status::go_quote(name)));
    };
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(p) = ports.iter().find(|p| p.get("port").and_then(Value::as_i64) == Some(port as i64)) else {
        return Err(format!("no service port {port} found for service {name:?}"));
    };
    let port_name = p.get("name").and_then(Value::as_str).unwrap_or("");
    let eps = api.cached(endpoints, Some(ns), name).map(|o| o.json(endpoints));
    let mut addrs = Vec::new();
    for subset in eps.as_deref().and_then(|e| e.get("subsets")).and_then(Value::as_array).into_iter().flatten() {
        let target = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|sp| sp.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|sp| sp.get("port").and_then(Value::as_u64));
        let Some(target) = target else { continue };
        for ip in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
            if let Some(ip) = ip.get("ip").and_then(Value::as_str).and_then(|s| s.parse::<std::net::IpAddr>().ok()) {
                addrs.push(std::net::SocketAddr::new(ip, target as u16));
            }
        }
    }
    if addrs.is_empty() {
        return Err(format!("no endpoints available for service {name:?}"));
    }
    Ok(addrs)
}

/// A webhook's path as kube joins it to `/`: cleaned, rooted, without a trailing slash.
fn joined(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    format!("/{}", parts.join("/"))
}

/// POSTs an AdmissionReview of the write `a` to the webhook and reads its answer: the
/// `response`, checked as kube checks it.
async fn call(api: &Api, h: &Hook<'_>, a: &Attributes<'_>, object: Option<&Value>) -> Result<Value, String> {
    let Some(version) = h.versions.iter().find(|v| *v == "v1" || *v == "v1beta1") else {
        return Err("webhook does not accept known AdmissionReview versions (v1, v1beta1)".into());
    };
    let uid = crate::meta::uid();
    let review = review(version, a, object, &uid);
    let timeout = h.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT).clamp(1, 30);
    let at = endpoint(api, h, timeout).await?;
    let post = |why: String| post_failed(&at.url, why);
    let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
    let sent = tokio::time::timeout(Duration::from_secs(timeout as u64), exchange(h, &at, body));
    let (code, bytes) = match sent.await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => return Err(post(why)),
        Err(_) => return Err(post("context deadline exceeded".into())),
    };
    if !(200..300).contains(&code) {
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        return Err(format!(
            "failed to call webhook: an error on the server ({}) has prevented the request from succeeding",
            status::go_quote(&text)
        ));
    }
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let back: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    let Some(response) = back.get("response").filter(|r| r.is_object()) else {
        return Err(invalid("webhook response was absent".into()));
    };
    if version == "v1beta1" {
        // kube checks neither the uid nor the kind of a v1beta1 answer, and reads its patch as
        // a JSON patch.
        return Ok(response.clone());
    }
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got_uid != uid {
        return Err(invalid(format!(
            "expected response.uid={}, got {}",
            status::go_quote(&uid),
            status::go_quote(got_uid)
        )));
    }
    let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let (api_version, kind) = (text(&back, "apiVersion"), text(&back, "kind"));
    if (api_version.as_str(), kind.as_str()) != ("admission.k8s.io/v1", "AdmissionReview") {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        )));
    }
    let (patch, patch_type) = (response.get("patch"), response.get("patchType").and_then(Value::as_str));
    match (h.mutating, patch.is_some(), patch_type) {
        (false, true, _) => return Err(invalid("validating webhook may not return response.patch".into())),
        (false, false, Some(_)) => return Err(invalid("validating webhook may not return response.patchType".into())),
        (true, true, None) => return Err(invalid("webhook returned response.patch but not response.patchType".into())),
        (true, false, Some(_)) => {
            return Err(invalid("webhook returned response.patchType but not response.patch".into()))
        }
        (true, true, Some("")) => return Err(invalid("webhook returned invalid response.patchType of \"\"".into())),
        (true, true, Some(t)) if t != "JSONPatch" => {
            return Err(format!("unsupported patch type {}", status::go_quote(t)))
        }
        _ => {}
    }
    Ok(response.clone())
}

/// One HTTPS exchange: dial an address of `at`, verify its certificate for the service or host
/// name against the webhook's `caBundle` (the system's roots without one), POST the review.
async fn exchange(h: &Hook<'_>, at: &Endpoint, body: Vec<u8>) -> Result<(u16, bytes::Bytes), String> {
    let bundle = h.client.ca_bundle.as_ref().map(|b| b.0.as_slice()).unwrap_or_default();
    let config = client_config(bundle)?;
    let name = rustls::pki_types::ServerName::try_from(at.server_name.clone()).map_err(|e| e.to_string())?;
    let mut last = String::from("no address to dial");
    let mut tcp = None;
    for addr in &at.addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("dial tcp {addr}: connect: {}", go_errno(&e)),
        }
    }
    let tcp = tcp.ok_or(last)?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::post(&at.path)
        .header(http::header::HOST, at.server_name.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .header(http::header::USER_AGENT, "kube-apiserver-admission")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let answer = send.send_request(req).await.map_err(|e| e.to_string())?;
    let code = answer.status().as_u16();
    let limited = http_body_util::Limited::new(answer.into_body(), MAX_ANSWER_BYTES);
    let bytes = limited.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((code, bytes))
}

/// TLS client configurations by the CA bundle they trust (empty: the system's roots), made once
/// rather than on every call (the system's roots are read from disk).
static CLIENT_CONFIGS: std::sync::LazyLock<parking_lot::Mutex<HashMap<Vec<u8>, Arc<rustls::ClientConfig>>>> =
    std::sync::LazyLock::new(Default::default);

/// The most configurations kept (webhook configurations are few; a bound keeps churn finite).
const KEPT_CLIENT_CONFIGS: usize = 256;

/// The TLS client configuration trusting the PEM `bundle` (the system's roots when empty).
fn client_config(bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    if let Some(c) = CLIENT_CONFIGS.lock().get(bundle) {
        return Ok(c.clone());
    }
    let roots = if bundle.is_empty() {
        keel_store::tls::system_roots()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(bundle).flatten() {
            let _ = roots.add(c);
        }
        roots
    };
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(keel_store::tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let mut kept = CLIENT_CONFIGS.lock();
    if kept.len() >= KEPT_CLIENT_CONFIGS {
        kept.clear();
    }
    kept.insert(bundle.to_vec(), config.clone());
    Ok(config)
}

/// A POST to `url` that failed, as kube words it (`why` as Go's HTTP client does).
fn post_failed(url: &str, why: impl std::fmt::Display) -> String {
    format!("failed to call webhook: Post {}: {why}", status::go_quote(url))
}

/// An I/O error as Go's net package words the common ones.
fn go_errno(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset by peer".into(),
        _ => e.to_string(),
    }
}

/// kube's v1 defaults of a webhook configuration (`SetDefaults_*Webhook`, `SetDefaults_Rule`,
/// `SetDefaults_ServiceReference`).
pub fn defaults(v: &mut Value, mutating: bool) {
    for w in v.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(w) = w.as_object_mut() else { continue };
        let mut default = |k: &str, value: Value| {
            if w.get(k).is_none_or(Value::is_null) {
                w.insert(k.into(), value);
            }
        };
        default("failurePolicy", json!("Fail"));
        default("matchPolicy", json!("Equivalent"));
        default("namespaceSelector", json!({}));
        default("objectSelector", json!({}));
        default("timeoutSeconds", json!(DEFAULT_TIMEOUT));
        if mutating {
            default("reinvocationPolicy", json!("Never"));
        }
        for rule in w.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(rule) = rule.as_object_mut() {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".into(), json!("*"));
                }
            }
        }
        let svc = w.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut);
        if let Some(svc) = svc {
            if svc.get("port").is_none_or(Value::is_null) {
                svc.insert("port".into(), json!(443));
            }
        }
    }
}

/// The operations a rule may name.
const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

/// What kube's validation refuses in a webhook configuration (`ValidateMutatingWebhookConfiguration`
/// and its validating twin), in kube's order.
pub fn errors(v: &Value, mutating: bool) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    let hooks = v.get("webhooks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, w) in hooks.iter().enumerate() {
        let at = |f: &str| format!("webhooks[{i}].{f}");
        let text = |f: &str| w.get(f).and_then(Value::as_str);
        let name = text("name").unwrap_or("");
        out.extend(hook_name_errors(&at("name"), name));
        for (j, rule) in w.get("rules").and_then(Value::as_array).into_iter().flatten().enumerate() {
            out.extend(rule_errors(&at(&format!("rules[{j}]")), rule));
        }
        let supported = |f: &str, allowed: &[&str], out: &mut Vec<FieldError>| {
            if let Some(x) = text(f) {
                if !allowed.contains(&x) {
                    out.push(FieldError::not_supported(&at(f), x, allowed));
                }
            }
        };
        supported("failurePolicy", &["Fail", "Ignore"], &mut out);
        supported("matchPolicy", &["Equivalent", "Exact"], &mut out);
        match text("sideEffects") {
            None => out.push(FieldError::new(
                FieldErrorType::Required,
                &at("sideEffects"),
                None,
                "must specify one of None, NoneOnDryRun",
            )),
            Some(_) => supported("sideEffects", &["None", "NoneOnDryRun"], &mut out),
        }
        if let Some(t) = w.get("timeoutSeconds").and_then(Value::as_i64) {
            if !(1..=30).contains(&t) {
                out.push(FieldError::invalid(
                    &at("timeoutSeconds"),
                    json!(t),
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
        for sel in ["namespaceSelector", "objectSelector"] {
            out.extend(crate::validation::selector_errors(w, &format!("/{sel}"), &at(sel)));
        }
        if mutating {
            supported("reinvocationPolicy", &["IfNeeded", "Never"], &mut out);
        }
        out.extend(client_errors(&at("clientConfig"), w.get("clientConfig").unwrap_or(&Value::Null)));
        let conditions = w.get("matchConditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let declared = super::policy::CONDITION_VARIABLES;
        out.extend(super::policy::condition_errors(&at("matchConditions"), conditions, &declared));
        out.extend(review_version_errors(&at("admissionReviewVersions"), w.get("admissionReviewVersions")));
        if !name.is_empty() {
            if names.contains(&name) {
                out.push(FieldError::new(FieldErrorType::Duplicate, &at("name"), Some(json!(name)), ""));
            }
            names.push(name);
        }
    }
    out
}

/// An Invalid error whose value is a list of strings, as Go prints one.
pub(super) fn listed(field: &str, items: &[&str], why: &str) -> FieldError {
    FieldError::verbatim(FieldErrorType::Invalid, field, status::go_strings(items.iter().copied()), why)
}

/// kube's `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
pub(super) fn hook_name_errors(field: &str, name: &str) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(field)];
    }
    let problems = crate::meta::name_problems(crate::resources::Names::Subdomain, name);
    if !problems.is_empty() {
        return vec![FieldError::invalid(field, json!(name), &problems.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            field,
            json!(name),
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

/// A rule's operations, groups, versions, resources and scope.
pub(super) fn rule_errors(at: &str, rule: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let list = |f: &str| -> Vec<&str> {
        rule.get(f).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
    };
    let field = |f: &str| format!("{at}.{f}");
    let ops = list("operations");
    if ops.is_empty() {
        out.push(FieldError::required(&field("operations")));
    } else if ops.len() > 1 && ops.contains(&"*") {
        let go =
            status::go_strings(ops.iter().copied()).replacen("[]string", "[]admissionregistration.OperationType", 1);
        let why = "if '*' is present, must not specify other operations";
        out.push(FieldError::verbatim(FieldErrorType::Invalid, &field("operations"), go, why));
    }
    for (k, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            out.push(FieldError::not_supported(&format!("{}[{k}]", field("operations")), op, &OPERATIONS));
        }
    }
    for (f, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let items = list(f);
        if items.is_empty() {
            out.push(FieldError::required(&field(f)));
        } else if items.len() > 1 && items.contains(&"*") {
            let why = format!("if '*' is present, must not specify other {what}");
            out.push(listed(&field(f), &items, &why));
        }
        if f == "apiVersions" {
            for (k, v) in items.iter().enumerate() {
                if v.is_empty() {
                    out.push(FieldError::required(&format!("{}[{k}]", field(f))));
                }
            }
        }
    }
    out.extend(resources_errors(&field("resources"), &list("resources")));
    if let Some(scope) = rule.get("scope").and_then(Value::as_str) {
        let scopes = ["*", "Cluster", "Namespaced"];
        if !scopes.contains(&scope) {
            out.push(FieldError::not_supported(&field("scope"), scope, &scopes));
        }
    }
    out
}

/// kube's `validateResources`: wildcards may not be mixed with what they cover.
pub(super) fn resources_errors(field: &str, resources: &[&str]) -> Vec<FieldError> {
    let mut out = Vec::new();
    if resources.is_empty() {
        return vec![FieldError::required(field)];
    }
    // Resources with all their subresources (`res/*`), and subresources of all (`*/sub`).
    let (mut all_subs, mut of_all): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    let mut plain = false;
    let mut plain_other = false;
    for (k, r) in resources.iter().enumerate() {
        let at = format!("{field}[{k}]");
        if r.is_empty() {
            out.push(FieldError::required(&at));
            continue;
        }
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        if all_subs.contains(&res) {
            out.push(FieldError::invalid(&at, json!(r), &format!("if '{res}/*' is present, must not specify {r}")));
        }
        if !sub.is_empty() && of_all.contains(&sub) {
            out.push(FieldError::invalid(&at, json!(r), &format!("if '*/{sub}' is present, must not specify {r}")));
        }
        if sub == "*" {
            all_subs.push(res);
        }
        if res == "*" && !sub.is_empty() {
            of_all.push(sub);
        }
        if sub.is_empty() {
            if res == "*" {
                plain = true;
            } else {
                plain_other = true;
            }
        }
    }
    if resources.len() > 1 && resources.contains(&"*/*") {
        out.push(listed(field, resources, "if '*/*' is present, must not specify other resources"));
    }
    if plain && plain_other {
        out.push(listed(field, resources, "if '*' is present, must not specify other resources without subresources"));
    }
    out
}

/// A client config: a URL or a service, exactly one.
fn client_errors(at: &str, c: &Value) -> Vec<FieldError> {
    let url = c.get("url").and_then(Value::as_str);
    let service = c.get("service").filter(|s| s.is_object());
    match (url, service) {
        (Some(url), None) => url_errors(&format!("{at}.url"), url),
        (None, Some(svc)) => service_errors(&format!("{at}.service"), svc),
        _ => vec![FieldError::new(FieldErrorType::Required, at, None, "exactly one of url or service is required")],
    }
}

/// kube's `ValidateWebhookURL` with HTTPS required.
fn url_errors(field: &str, url: &str) -> Vec<FieldError> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut out = Vec::new();
    let Some((scheme, rest)) = url.split_once("://") else {
        // Without a scheme the URL is a path: no https, no host.
        out.push(FieldError::invalid(field, json!(""), &format!("'https' is the only allowed URL scheme{FORM}")));
        out.push(FieldError::invalid(field, json!(""), &format!("host must be specified{FORM}")));
        return out;
    };
    if scheme != "https" {
        out.push(FieldError::invalid(field, json!(scheme), &format!("'https' is the only allowed URL scheme{FORM}")));
    }
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = rest.split('/').next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        out.push(FieldError::invalid(field, json!(host), &format!("host must be specified{FORM}")));
    }
    if let Some(u) = user {
        out.push(FieldError::invalid(field, json!(u), "user information is not permitted in the URL"));
    }
    if !fragment.is_empty() {
        out.push(FieldError::invalid(field, json!(fragment), "fragments are not permitted in the URL"));
    }
    if !query.is_empty() {
        out.push(FieldError::invalid(field, json!(query), "query parameters are not permitted in the URL"));
    }
    out
}

/// kube's `ValidateWebhookService`.
fn service_errors(at: &str, svc: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let text = |f: &str| svc.get(f).and_then(Value::as_str).unwrap_or("");
    if text("name").is_empty() {
        out.push(FieldError::new(FieldErrorType::Required, &format!("{at}.name"), None, "service name is required"));
    }
    if text("namespace").is_empty() {
        out.push(FieldError::new(
            FieldErrorType::Required,
            &format!("{at}.namespace"),
            None,
            "service namespace is required",
        ));
    }
    if let Some(port) = svc.get("port").and_then(Value::as_i64) {
        if !(1..=65535).contains(&port) {
            out.push(FieldError::invalid(
                &format!("{at}.port"),
                json!(port),
                "port is not valid: must be between 1 and 65535, inclusive",
            ));
        }
    }
    let path = text("path");
    let field = format!("{at}.path");
    if path.is_empty() || path == "/" {
        return out;
    }
    if path == "//" {
        out.push(FieldError::invalid(&field, json!(path), "segment[0] may not be empty"));
        return out;
    }
    let Some(trimmed) = path.strip_prefix('/') else {
        out.push(FieldError::invalid(&field, json!(path), "must start with a '/'"));
        return out;
    };
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    for (i, segment) in trimmed.split('/').enumerate() {
        if segment.is_empty() {
            out.push(FieldError::invalid(&field, json!(path), &format!("segment[{i}] may not be empty")));
            continue;
        }
        for p in crate::meta::name_problems(crate::resources::Names::Subdomain, segment) {
            out.push(FieldError::invalid(&field, json!(path), &format!("segment[{i}]: {p}")));
        }
    }
    out
}

/// The AdmissionReview versions a webhook accepts: at least one kube sends.
fn review_version_errors(field: &str, versions: Option<&Value>) -> Vec<FieldError> {
    let list: Vec<&str> = versions.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    if list.is_empty() {
        return vec![FieldError::new(FieldErrorType::Required, field, None, "must specify one of v1, v1beta1")];
    }
    let mut out = Vec::new();
    for (k, v) in list.iter().enumerate() {
        let at = format!("{field}[{k}]");
        if list[..k].contains(v) {
            out.push(FieldError::invalid(&at, json!(v), "duplicate version"));
        }
        for p in crate::meta::name_problems(crate::resources::Names::Dns1035, v) {
            out.push(FieldError::invalid(&at, json!(v), &p));
        }
    }
    if !list.iter().any(|v| *v == "v1" || *v == "v1beta1") {
        out.push(listed(field, &list, "must include at least one of v1, v1beta1"));
    }
    out
}
