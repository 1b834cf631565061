//! PATCH bodies: JSON patch (RFC 6902, the `json-patch` crate), JSON merge patch (RFC 7386, the
//! same crate) and kube's strategic merge patch, written here: no Rust crate implements it. A
//! strategic patch merges maps as a merge patch does, and merges lists as each field's patch
//! strategy says: kube's `patchStrategy`/`patchMergeKey` struct tags of each field of the
//! built-in types, which the generated type table carries ([`Markers`]) and walks ([`Node`]); its
//! directives `$patch` (replace, delete, merge), `$deleteFromPrimitiveList/`, `$setElementOrder/`
//! and `$retainKeys` are honoured.

use serde_json::{Map, Value};

#[cfg(doc)]
use crate::proto::Markers;
use crate::proto::{Child, Node};
use crate::status::{self, Status};

/// The patch types kube serves (server-side apply is issue 12's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Json,
    Merge,
    Strategic,
}

/// The patch type of a request's Content-Type; kube's 415 for another.
pub fn kind_of(content_type: &str, custom: bool) -> Result<Kind, Status> {
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/json-patch+json" => Ok(Kind::Json),
        "application/merge-patch+json" => Ok(Kind::Merge),
        // A custom resource has no strategic merge patch: its schema names no patch strategies.
        "application/strategic-merge-patch+json" if !custom => Ok(Kind::Strategic),
        _ if custom => Err(Status::failure(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            None,
        )),
        _ => Err(Status::failure(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
            None,
        )),
    }
}

/// How a list field merges in a strategic patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// The patch's list replaces the object's (no patch strategy).
    Replace,
    /// A list of scalars: the patch's values are added to the object's (`patchStrategy:"merge"`).
    Union,
    /// A list of objects merged by the value of this key (`patchMergeKey`).
    MergeKey(&'static str),
}

/// The strategy of a list field, from its markers (kube's struct tags).
fn list_strategy(field: Child) -> ListStrategy {
    match field.markers {
        Some(m) if m.strategy.split(',').any(|s| s == "merge") => {
            if m.merge_key.is_empty() {
                ListStrategy::Union
            } else {
                ListStrategy::MergeKey(m.merge_key)
            }
        }
        _ => ListStrategy::Replace,
    }
}

/// `patch` (a body of `kind`) applied to `current`, an object of the type rooted at `root` (whose
/// fields' markers say how a strategic patch merges them).
pub fn apply(kind: Kind, root: Node, current: &Value, patch: &[u8]) -> Result<Value, Status> {
    let mut out = current.clone();
    match kind {
        Kind::Json => {
            let p: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| status::bad_request(e.to_string()))?;
            json_patch::patch(&mut out, &p).map_err(|e| invalid_patch(e.to_string()))?;
        }
        Kind::Merge => {
            let p: Value = serde_json::from_slice(patch).map_err(|e| status::bad_request(e.to_string()))?;
            if !p.is_object() {
                return Err(status::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut out, &p);
        }
        Kind::Strategic => {
            let p: Value = serde_json::from_slice(patch).map_err(|e| status::bad_request(e.to_string()))?;
            let Value::Object(p) = p else {
                return Err(status::bad_request("a strategic merge patch must be a JSON object"));
            };
            out = merge_map(current.as_object().cloned().unwrap_or_default(), p, root)
                .map(Value::Object)
                .unwrap_or(Value::Null);
        }
    }
    Ok(out)
}

/// kube's answer to a JSON patch that cannot be applied (`NewGenericServerResponse(422, ...)`):
/// a generic message, the reason in its one cause.
fn invalid_patch(why: String) -> Status {
    let details = status::Details {
        causes: vec![status::Cause { reason: "UnexpectedServerResponse", message: why, field: String::new() }],
        ..Default::default()
    };
    Status::failure(422, "Invalid", "the server rejected our request due to an error in our request", Some(details))
}

/// Merges patch map `p` into `target`, an object at `node`; `None` when the patch deletes it.
fn merge_map(mut target: Map<String, Value>, mut p: Map<String, Value>, node: Node) -> Option<Map<String, Value>> {
    match p.remove("$patch").as_ref().and_then(Value::as_str) {
        Some("delete") => return None,
        Some("replace") => {
            p.retain(|k, _| !k.starts_with('$'));
            return Some(p);
        }
        _ => {}
    }
    let retain = p.remove("$retainKeys");
    let mut orders = Vec::new();
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (target.get_mut(field), &v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            orders.push((field.to_string(), v));
            continue;
        }
        let field = node.child(&k);
        let replace = field.markers.is_some_and(|m| m.strategy == "replace");
        match (v, target.remove(&k)) {
            (Value::Null, _) => {}
            (Value::Object(pm), Some(Value::Object(tm))) if !replace => {
                if let Some(m) = merge_map(tm, pm, field.node) {
                    target.insert(k, Value::Object(m));
                }
            }
            (Value::Object(pm), _) => {
                if let Some(m) = merge_map(Map::new(), pm, field.node) {
                    target.insert(k, Value::Object(m));
                }
            }
            (Value::Array(pl), old) => {
                let old = match old {
                    Some(Value::Array(l)) => l,
                    _ => Vec::new(),
                };
                target.insert(k, Value::Array(merge_list(old, pl, field)));
            }
            (v, _) => {
                target.insert(k, v);
            }
        }
    }
    for (field, order) in orders {
        if let (Some(Value::Array(list)), Value::Array(order)) = (target.get_mut(&field), order) {
            reorder(list, &order, list_strategy(node.child(&field)));
        }
    }
    if let Some(Value::Array(keep)) = retain {
        target.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Some(target)
}

/// Merges the patch's list into the object's list `field`.
fn merge_list(mut target: Vec<Value>, patch: Vec<Value>, field: Child) -> Vec<Value> {
    let items = field.node;
    match list_strategy(field) {
        ListStrategy::Replace => patch.into_iter().filter(|v| !is_directive(v)).collect(),
        ListStrategy::Union => {
            for v in patch {
                if !target.contains(&v) {
                    target.push(v);
                }
            }
            target
        }
        ListStrategy::MergeKey(key) => {
            for item in patch {
                let Value::Object(mut pm) = item else { continue };
                let id = pm.get(key).cloned();
                let at = target.iter().position(|t| id.is_some() && t.get(key) == id.as_ref());
                match pm.get("$patch").and_then(Value::as_str) {
                    Some("delete") => {
                        if let Some(i) = at {
                            target.remove(i);
                        }
                    }
                    Some("replace") => {
                        pm.remove("$patch");
                        match at {
                            Some(i) => target[i] = Value::Object(pm),
                            None => target.push(Value::Object(pm)),
                        }
                    }
                    _ => match at {
                        Some(i) => {
                            let Value::Object(tm) = target.remove(i) else {
                                unreachable!("merge-key items are objects")
                            };
                            if let Some(m) = merge_map(tm, pm, items) {
                                target.insert(i, Value::Object(m));
                            }
                        }
                        None => {
                            if let Some(m) = merge_map(Map::new(), pm, items) {
                                target.push(Value::Object(m));
                            }
                        }
                    },
                }
            }
            target
        }
    }
}

fn is_directive(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key("$patch"))
}

/// Puts the items `order` names first, in its order (a merge-key list's order names keys).
fn reorder(list: &mut Vec<Value>, order: &[Value], strategy: ListStrategy) {
    let id = |v: &Value| match strategy {
        ListStrategy::MergeKey(k) => v.get(k).cloned(),
        _ => Some(v.clone()),
    };
    let ids: Vec<Option<Value>> = order.iter().map(&id).collect();
    let (mut first, rest): (Vec<Value>, Vec<Value>) = list.drain(..).partition(|v| ids.contains(&id(v)));
    first.sort_by_key(|v| ids.iter().position(|i| *i == id(v)));
    list.extend(first);
    list.extend(rest);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn smp(current: Value, patch: Value) -> Value {
        let root = Node::of("v1", "ConfigMap");
        apply(Kind::Strategic, root, &current, &serde_json::to_vec(&patch).unwrap()).unwrap()
    }

    #[test]
    fn strategic_patches_merge_maps_and_lists_as_kube() {
        let cm = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}, "finalizers": ["f1"],
            "ownerReferences": [{"uid": "u1", "name": "o1"}, {"uid": "u2", "name": "o2"}]}, "data": {"k": "v"}});
        let out = smp(
            cm.clone(),
            json!({"metadata": {"labels": {"x": null, "z": "3"}, "finalizers": ["f2"]}, "data": {"n": "m"}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"y": "2", "z": "3"}));
        assert_eq!(out["metadata"]["finalizers"], json!(["f1", "f2"]));
        assert_eq!(out["data"], json!({"k": "v", "n": "m"}));
        let out = smp(
            cm.clone(),
            json!({"metadata": {"ownerReferences": [{"uid": "u2", "name": "renamed"}, {"uid": "u1", "$patch": "delete"}, {"uid": "u3", "name": "o3"}]}}),
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "u2", "name": "renamed"}, {"uid": "u3", "name": "o3"}])
        );
        let out = smp(cm.clone(), json!({"data": {"$patch": "replace", "only": "this"}}));
        assert_eq!(out["data"], json!({"only": "this"}));
        let out = smp(cm.clone(), json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let out =
            smp(cm.clone(), json!({"metadata": {"$setElementOrder/ownerReferences": [{"uid": "u2"}, {"uid": "u1"}]}}));
        assert_eq!(out["metadata"]["ownerReferences"][0]["uid"], "u2");
        let out = smp(cm, json!({"metadata": {"$retainKeys": ["name"], "name": "a"}}));
        assert_eq!(out["metadata"], json!({"name": "a"}));
    }

    /// Lists deep in a type merge by their fields' tags: containers by name, their env by name
    /// and ports by containerPort, volumes by name; a list with no strategy is replaced.
    #[test]
    fn strategic_patches_follow_each_fields_tags() {
        let d = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}],
                "ports": [{"containerPort": 80}]}, {"name": "b", "image": "b:1"}],
            "tolerations": [{"key": "k1"}],
            "volumes": [{"name": "v", "emptyDir": {}}]}}},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}});
        let patch = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}], "ports": [{"containerPort": 81}]}],
            "tolerations": [{"key": "k2"}],
            "volumes": [{"name": "w", "configMap": {"name": "c"}}]}}},
            "status": {"conditions": [{"type": "Progressing", "status": "True"}]}});
        let root = Node::of("apps/v1", "Deployment");
        let out = apply(Kind::Strategic, root, &d, &serde_json::to_vec(&patch).unwrap()).unwrap();
        let pod = &out["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["image"], "a:1");
        assert_eq!(pod["containers"][0]["env"], json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]));
        assert_eq!(pod["containers"][0]["ports"], json!([{"containerPort": 80}, {"containerPort": 81}]));
        assert_eq!(pod["containers"][1]["name"], "b");
        assert_eq!(pod["tolerations"], json!([{"key": "k2"}]));
        assert_eq!(pod["volumes"].as_array().unwrap().len(), 2);
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        // A ConfigMap has no such fields: the same lists are replaced.
        let cm = apply(Kind::Strategic, Node::of("v1", "ConfigMap"), &d, &serde_json::to_vec(&patch).unwrap()).unwrap();
        assert_eq!(cm["spec"]["template"]["spec"]["containers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn json_and_merge_patches_are_the_rfcs() {
        let cm = json!({"data": {"k": "v"}});
        let out = apply(
            Kind::Json,
            Node::Other,
            &cm,
            br#"[{"op":"add","path":"/data/n","value":"m"},{"op":"remove","path":"/data/k"}]"#,
        )
        .unwrap();
        assert_eq!(out, json!({"data": {"n": "m"}}));
        assert_eq!(
            apply(Kind::Json, Node::Other, &cm, br#"[{"op":"test","path":"/data/k","value":"x"}]"#).unwrap_err().code,
            422
        );
        let out = apply(Kind::Merge, Node::Other, &cm, br#"{"data":{"k":null,"a":"b"}}"#).unwrap();
        assert_eq!(out, json!({"data": {"a": "b"}}));
        assert_eq!(kind_of("text/plain", false).unwrap_err().code, 415);
        assert_eq!(kind_of("application/strategic-merge-patch+json", true).unwrap_err().code, 415);
    }
}
