//! A pod's `binding` subresource, the scheduler's way to place a pod (kube's `BindingREST`):
//! `POST …/pods/<name>/binding` with a v1 Binding sets `spec.nodeName` once, adds the binding's
//! annotations and marks the pod `PodScheduled`, answering a success Status (201).

use axum::body::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use crate::deletion::Options;
use crate::meta;
use crate::resources::Resource;
use crate::rest::{self, Answer, Api};
use crate::status::{self, FieldError, GroupResource, Status};

/// What kube answers a create that its REST storage reports as a success Status (code 201).
pub fn created() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// kube's `UpdatePodCondition`: sets condition `kind` of the pod's status (its transition time
/// moves only when its status does).
pub fn set_condition(pod: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    let Some(o) = pod.as_object_mut() else { return };
    let st = o.entry("status").or_insert_with(|| Value::Object(Map::new()));
    let Some(st) = st.as_object_mut() else { return };
    let conditions = st.entry("conditions").or_insert_with(|| Value::Array(Vec::new()));
    let Some(conditions) = conditions.as_array_mut() else { return };
    let mut c = json!({"type": kind, "status": status, "lastTransitionTime": meta::now()});
    for (f, v) in [("reason", reason), ("message", message)] {
        if !v.is_empty() {
            c[f] = json!(v);
        }
    }
    match conditions.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some(kind)) {
        Some(old) => {
            if old.get("status") == c.get("status") {
                c["lastTransitionTime"] = old.get("lastTransitionTime").cloned().unwrap_or(Value::Null);
            }
            *old = c;
        }
        None => conditions.push(c),
    }
}

/// The body of a subresource request whose kind is `kind` of `api_version`, named as the pod.
pub fn body_named(
    headers: &HeaderMap,
    body: &Bytes,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<Value, Status> {
    let v = rest::body_value(headers, body, api_version, kind)?;
    let given = v.get("kind").and_then(Value::as_str).unwrap_or("");
    if !given.is_empty() && given != kind {
        return Err(status::bad_request(format!(
            "the kind in the data ({given}) does not match the expected kind ({kind})"
        )));
    }
    if meta::get(&v, "name") != name {
        return Err(status::bad_request(format!("name in URL does not match name in {kind} object")));
    }
    Ok(v)
}

/// A request to a pod's subresource: the pod and what was sent.
pub struct PodRequest<'a> {
    pub api: &'a Api,
    pub r: &'a Resource,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
}

/// `POST …/pods/<name>/binding`.
pub async fn bind(req: PodRequest<'_>, dry_run: bool) -> Answer {
    let PodRequest { api, r, namespace, name, headers, body } = req;
    let b = body_named(headers, body, "v1", "Binding", name)?;
    let target = |f: &str| b.pointer(&format!("/target/{f}")).and_then(Value::as_str).unwrap_or("");
    let mut errors = Vec::new();
    if !target("kind").is_empty() && target("kind") != "Node" {
        errors.push(FieldError::not_supported("target.kind", target("kind"), &["Node", "<empty>"]));
    }
    if target("name").is_empty() {
        errors.push(FieldError::required("target.name"));
    }
    if !errors.is_empty() {
        // kube returns these as a plain error, which its handler answers as a 500 with no reason.
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let message = if texts.len() == 1 { texts[0].clone() } else { format!("[{}]", texts.join(", ")) };
        return Err(Status::failure(500, "", message, None));
    }
    let node = target("name");
    let pre = Options {
        uid: Some(meta::get(&b, "uid").to_string()).filter(|u| !u.is_empty()),
        resource_version: Some(meta::get(&b, "resourceVersion").to_string()).filter(|v| !v.is_empty()),
        ..Options::default()
    };
    let binding = GroupResource { group: "", resource: "pods/binding" };
    let k = rest::key(api, r, namespace, name);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let old = rest::read(api, r, &k, name).await?;
        let mut pod = rest::shown(r, &old)?;
        rest::preconditions(&pre, r, name, &pod, old.rev)?;
        let refuse = |why: String| Err(status::conflict(binding, name, &why));
        if !meta::get(&pod, "deletionTimestamp").is_empty() {
            return refuse(format!("pod {name} is being deleted, cannot be assigned to a host"));
        }
        let assigned = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !assigned.is_empty() {
            return refuse(format!("pod {name} is already assigned to node {}", status::go_quote(assigned)));
        }
        if pod.pointer("/spec/schedulingGates").and_then(Value::as_array).is_some_and(|g| !g.is_empty()) {
            return refuse(format!("pod {name} has non-empty .spec.schedulingGates"));
        }
        pod["spec"]["nodeName"] = json!(node);
        if let Some(Value::Object(add)) = b.pointer("/metadata/annotations") {
            let m = meta::metadata(&mut pod);
            let a = m.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(a) = a {
                a.extend(add.clone());
            }
        }
        set_condition(&mut pod, "PodScheduled", "True", "", "");
        match rest::write_over(api, r, &k, name, pod, old.rev, dry_run).await {
            Err(s) if s.reason == "Conflict" && pre.resource_version.is_none() && attempt < rest::PATCH_ATTEMPTS => {}
            Err(s) => return Err(s),
            Ok(_) => return Ok((StatusCode::CREATED, created())),
        }
    }
}
