//! The review APIs, answered and never stored: `authorization.k8s.io/v1` SelfSubjectAccessReview,
//! SubjectAccessReview, LocalSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i`
//! and `--list`), `authentication.k8s.io/v1` SelfSubjectReview (`kubectl auth whoami`) and
//! TokenReview; and TokenRequest (`serviceaccounts/<name>/token`, `kubectl create token`).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use super::authz::{self, Decision};
use super::{Request, User};
use crate::resources::Resource;
use crate::rest::{Answer, Api};
use crate::status::{self, FieldError, GroupKind, Status};

/// Whether `r` is one of the review resources answered here.
pub fn is_review(r: &Resource) -> bool {
    matches!(
        (r.group, r.kind),
        ("authorization.k8s.io", _) | ("authentication.k8s.io", "SelfSubjectReview" | "TokenReview")
    )
}

/// The answer to a create of review `r` by `user` (in `namespace` for a local one).
pub fn create(
    api: &Api,
    user: &User,
    r: &Resource,
    namespace: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Answer {
    let mut v = crate::rest::body_value(headers, body, &r.api_version(), r.kind)?;
    let o = v.as_object_mut().ok_or_else(|| status::bad_request("the body is not an object"))?;
    o.insert("apiVersion".into(), r.api_version().into());
    o.insert("kind".into(), r.kind.into());
    let mut v = (r.canonical)(v).map_err(|e| status::bad_request(e.to_string()))?;
    let gk = GroupKind { group: r.group, kind: r.kind };
    let spec = v.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match r.kind {
        "SelfSubjectReview" => {
            let v = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"creationTimestamp": crate::meta::now()}, "status": {"userInfo": user.to_json()}});
            return Ok((StatusCode::CREATED, v));
        }
        "TokenReview" => token_review(api, &spec),
        "SelfSubjectRulesReview" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            if ns.is_empty() {
                return Err(status::bad_request("no namespace on request"));
            }
            let v = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"creationTimestamp": Value::Null}, "spec": {}, "status": rules_review(api, user, ns)});
            return Ok((StatusCode::CREATED, v));
        }
        kind => {
            let (subject, ns_must_be) = match kind {
                "SelfSubjectAccessReview" => (user.clone(), None),
                "LocalSubjectAccessReview" => (subject_of(&spec), namespace),
                _ => (subject_of(&spec), None),
            };
            let req = access_request(&spec, gk, ns_must_be, &subject)?;
            let decision = api.auth.authz.decide(api, &subject, &req);
            access_status(decision)
        }
    };
    v["status"] = status;
    Ok((StatusCode::CREATED, v))
}

/// The user a SubjectAccessReview asks about.
fn subject_of(spec: &Value) -> User {
    let text = |k: &str| spec.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let groups = spec
        .get("groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let extra: BTreeMap<String, Vec<String>> =
        spec.get("extra").cloned().and_then(|e| serde_json::from_value(e).ok()).unwrap_or_default();
    User { name: text("user"), uid: text("uid"), groups, extra }
}

/// The request an access review's spec describes, or kube's 422 for a spec that describes none
/// or both kinds.
fn access_request(spec: &Value, gk: GroupKind<'_>, namespace: Option<&str>, subject: &User) -> Result<Request, Status> {
    let res = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let mut errors = Vec::new();
    match (res, non) {
        (Some(_), Some(_)) => errors.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            non.cloned().unwrap_or_default(),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errors.push(FieldError::invalid(
            "spec.resourceAttributes",
            Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    let about_another = gk.kind == "SubjectAccessReview" || gk.kind == "LocalSubjectAccessReview";
    if about_another && subject.name.is_empty() && subject.groups.is_empty() {
        let e = FieldError::invalid(
            "spec.user",
            Value::String(String::new()),
            "at least one of user or group must be specified",
        );
        errors.push(e);
    }
    let text = |v: Option<&Value>, k: &str| v.and_then(|v| v.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
    if let (Some(ns), Some(_)) = (namespace, res) {
        let given = text(res, "namespace");
        if given != ns {
            errors.push(FieldError::invalid(
                "spec.resourceAttributes.namespace",
                Value::String(given),
                "must match metadata.namespace",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(status::invalid(gk, "", &errors));
    }
    Ok(match res {
        Some(_) => Request {
            resource_request: true,
            verb: text(res, "verb"),
            api_group: text(res, "group"),
            api_version: text(res, "version"),
            namespace: text(res, "namespace"),
            resource: text(res, "resource"),
            subresource: text(res, "subresource"),
            name: text(res, "name"),
            path: String::new(),
        },
        None => Request { verb: text(non, "verb"), path: text(non, "path"), ..Request::default() },
    })
}

fn access_status(decision: Decision) -> Value {
    let (allowed, denied, reason) = match decision {
        Decision::Allow(r) => (true, false, r),
        Decision::Deny(r) => (false, true, r),
        Decision::NoOpinion(r) => (false, false, r),
    };
    let mut s = Map::new();
    s.insert("allowed".into(), allowed.into());
    if denied {
        s.insert("denied".into(), true.into());
    }
    if !reason.is_empty() {
        s.insert("reason".into(), reason.into());
    }
    Value::Object(s)
}

/// SelfSubjectRulesReview's status: what the user may do in `namespace`, as the modes can list it.
fn rules_review(api: &Api, user: &User, namespace: &str) -> Value {
    let star = || vec!["*".to_string()];
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let mut incomplete = false;
    let mut errors = Vec::new();
    let everything = |rr: &mut Vec<Value>, nr: &mut Vec<Value>| {
        rr.push(json!({"verbs": star(), "apiGroups": star(), "resources": star()}));
        nr.push(json!({"verbs": star(), "nonResourceURLs": star()}));
    };
    for mode in &api.auth.authz.modes {
        match mode {
            authz::Mode::AlwaysAllow => everything(&mut resource_rules, &mut non_resource_rules),
            authz::Mode::AlwaysDeny => {}
            authz::Mode::Node => {
                if user.name.starts_with(super::NODE_PREFIX) {
                    incomplete = true;
                    errors.push("node authorizer does not support user rule resolution".to_string());
                }
            }
            authz::Mode::Rbac => {
                let (rules, errs) = authz::rules_for(api, user, namespace);
                for r in rules {
                    let mut o = Map::new();
                    o.insert("verbs".into(), json!(r.verbs));
                    if let Some(urls) = r.non_resource_urls.filter(|u| !u.is_empty()) {
                        o.insert("nonResourceURLs".into(), json!(urls));
                        non_resource_rules.push(Value::Object(o));
                        continue;
                    }
                    o.insert("apiGroups".into(), json!(r.api_groups.unwrap_or_default()));
                    if let Some(res) = r.resources.filter(|x| !x.is_empty()) {
                        o.insert("resources".into(), json!(res));
                    }
                    if let Some(names) = r.resource_names.filter(|x| !x.is_empty()) {
                        o.insert("resourceNames".into(), json!(names));
                    }
                    resource_rules.push(Value::Object(o));
                }
                if !errs.is_empty() {
                    incomplete = true;
                    errors.extend(errs);
                }
            }
        }
    }
    let mut s = Map::new();
    s.insert("resourceRules".into(), Value::Array(resource_rules));
    s.insert("nonResourceRules".into(), Value::Array(non_resource_rules));
    s.insert("incomplete".into(), incomplete.into());
    if !errors.is_empty() {
        s.insert("evaluationError".into(), errors.join(", ").into());
    }
    Value::Object(s)
}

/// TokenReview's status: whether the token authenticates, and as whom.
fn token_review(api: &Api, spec: &Value) -> Value {
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    let mut headers = HeaderMap::new();
    if let Ok(h) = http::HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(http::header::AUTHORIZATION, h);
    }
    let no_anonymous = super::authn::Authenticator { anonymous: false, ..api.auth.authn.without_certificates() };
    match no_anonymous.authenticate(api, &headers, None) {
        Ok(user) if !token.is_empty() => {
            let audiences =
                spec.get("audiences").cloned().unwrap_or_else(|| json!(api.auth.authn.service_accounts.audiences));
            json!({"authenticated": true, "user": user.to_json(), "audiences": audiences})
        }
        _ => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    }
}

/// The most a token may last unless the server says otherwise, and the least (kube's).
const MIN_EXPIRATION: i64 = 600;
const DEFAULT_EXPIRATION: i64 = 3600;

/// A TokenRequest for service account `name` in `namespace`: a signed bound token.
pub async fn token_request(
    api: &Api,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
    dry_run: bool,
    warnings: &mut Vec<String>,
) -> Answer {
    let gk = GroupKind { group: "authentication.k8s.io", kind: "TokenRequest" };
    let mut v = crate::rest::body_value(headers, body, "authentication.k8s.io/v1", "TokenRequest")?;
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), "authentication.k8s.io/v1".into());
        o.insert("kind".into(), "TokenRequest".into());
    }
    let r = crate::resources::find("", "v1", "serviceaccounts").expect("serviceaccounts are served");
    let sa = crate::rest::read(api, r, &crate::rest::key(api, r, Some(namespace), name), name).await?;
    let sa = crate::rest::shown(r, &sa)?;
    let sa_uid = crate::meta::get(&sa, "uid").to_string();
    let spec = v.get("spec").cloned().unwrap_or_else(|| json!({}));
    let auth = &api.auth;
    let audiences: Vec<String> = match spec.get("audiences").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        Some(a) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        None => auth.authn.service_accounts.audiences.clone(),
    };
    let expiration = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(DEFAULT_EXPIRATION);
    if expiration < MIN_EXPIRATION {
        let e = FieldError::invalid(
            "spec.expirationSeconds",
            json!(expiration),
            "may not specify a duration less than 10 minutes",
        );
        return Err(status::invalid(gk, name, &[e]));
    }
    if expiration > auth.max_token_expiration {
        warnings.push(format!(
            "requested expiration of {expiration} seconds shortened to {} seconds",
            auth.max_token_expiration
        ));
    }
    let expiration = expiration.min(auth.max_token_expiration);
    let now = super::authn::now();
    let mut private = json!({
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": sa_uid},
    });
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        let text = |k: &str| bound.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (kind, bname, buid) = (text("kind"), text("name"), text("uid"));
        let api_version = bound.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let plural = match (api_version, kind.as_str()) {
            ("v1", "Pod") => "pods",
            ("v1", "Secret") => "secrets",
            ("v1", "Node") => "nodes",
            _ => {
                let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
                let gvk = if g.is_empty() { format!("/{v}, Kind={kind}") } else { format!("{g}/{v}, Kind={kind}") };
                return Err(status::bad_request(format!("cannot bind token to object of type {gvk}")));
            }
        };
        let br = crate::resources::find("", "v1", plural).expect("a core resource");
        let ns = (plural != "nodes").then_some(namespace);
        let object = crate::rest::read(api, br, &crate::rest::key(api, br, ns, &bname), &bname).await?;
        let object = crate::rest::shown(br, &object)?;
        let uid = crate::meta::get(&object, "uid").to_string();
        if !buid.is_empty() && buid != uid {
            let why = format!(
                "the UID in the bound object reference ({buid}) does not match the UID in record. The object might have been deleted and then recreated"
            );
            return Err(status::conflict(status::GroupResource { group: "", resource: &kind }, &bname, &why));
        }
        if kind == "Pod"
            && object.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default") != name
        {
            return Err(status::bad_request(format!(
                "cannot bind token for serviceaccount {} to pod running with different serviceaccount name.",
                status::go_quote(name)
            )));
        }
        private[kind.to_lowercase()] = json!({"name": bname, "uid": uid});
        if kind == "Pod" {
            if let Some(node) = object.pointer("/spec/nodeName").and_then(Value::as_str) {
                let nr = crate::resources::find("", "v1", "nodes").expect("nodes are served");
                if let Ok(n) = crate::rest::read(api, nr, &crate::rest::key(api, nr, None, node), node).await {
                    let n = crate::rest::shown(nr, &n)?;
                    private["node"] = json!({"name": node, "uid": crate::meta::get(&n, "uid")});
                }
            }
        }
    }
    let claims = json!({
        "aud": audiences,
        "exp": now + expiration,
        "iat": now,
        "iss": auth.issuer,
        "jti": crate::meta::uid(),
        "kubernetes.io": private,
        "nbf": now,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
    });
    let signer = auth.signer.as_ref().ok_or_else(|| crate::rest::internal("no service account signing key"))?;
    let token =
        if dry_run { String::new() } else { signer.sign(&claims).map_err(|e| crate::rest::internal(e.message))? };
    let mut spec = spec;
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(expiration);
    v["spec"] = spec;
    v["metadata"] = json!({"name": name, "namespace": namespace, "creationTimestamp": crate::meta::now()});
    v["status"] = json!({"token": token, "expirationTimestamp": crate::meta::after(expiration)});
    Ok((StatusCode::CREATED, v))
}
