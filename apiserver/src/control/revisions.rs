//! ControllerRevisions, as DaemonSets and StatefulSets keep their history in them (kube's
//! `history` package): each pod template a controller has had is a ControllerRevision named
//! `<owner>-<hash>`, labelled with `controller-revision-hash`, holding the template as a
//! strategic-merge `replace` patch and a revision number; a template coming back takes the next
//! number (`kubectl rollout undo` and `history` read them). Revisions past the owner's
//! `revisionHistoryLimit` go, oldest first, unless pods still run them.

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::replicaset::controller_of;
use super::Failure;
use crate::meta;

pub const HASH: &str = "controller-revision-hash";

/// What a revision holds for `template`.
fn data(template: &Value) -> Value {
    let mut t = template.clone();
    if let Value::Object(m) = &mut t {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The owner's revision for its current template: (hash, revision number), made or renumbered
/// as needed; old revisions past the limit pruned (`in_use`: hashes pods still run).
pub async fn current(
    client: &Client,
    owner: &Value,
    kind: &str,
    api_version: &str,
    in_use: &[String],
) -> Result<(String, i64), Failure> {
    let revisions = resource("apps", "v1", "controllerrevisions");
    let ns = meta::get(owner, "namespace");
    let uid = meta::get(owner, "uid");
    let template = owner.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    let want = data(&template);
    let mut mine: Vec<Value> = client
        .cached_list(revisions, Some(ns))
        .iter()
        .map(|o| o.value(revisions))
        .filter(|v| controller_of(v).is_some_and(|(_, _, u)| u == uid))
        .collect();
    mine.sort_by_key(|v| v.get("revision").and_then(Value::as_i64).unwrap_or(0));
    let max = mine.last().and_then(|v| v.get("revision").and_then(Value::as_i64)).unwrap_or(0);
    let hash_of = |v: &Value| {
        v.pointer("/metadata/labels").and_then(|l| l.get(HASH)).and_then(Value::as_str).unwrap_or("").to_string()
    };
    let (hash, number) = match mine.iter().find(|v| super::deployment::same_template(&v["data"], &want)) {
        Some(found) => {
            let number = found.get("revision").and_then(Value::as_i64).unwrap_or(0);
            if number < max {
                let mut renumbered = found.clone();
                renumbered["revision"] = json!(max + 1);
                client.update(revisions, Some(ns), meta::get(found, "name"), None, &renumbered).await?;
                (hash_of(found), max + 1)
            } else {
                (hash_of(found), number)
            }
        }
        None => {
            let collisions = owner.pointer("/status/collisionCount").and_then(Value::as_i64).unwrap_or(0);
            let hash = super::deployment::template_hash(&template, collisions);
            let mut labels = owner.pointer("/spec/selector/matchLabels").cloned().unwrap_or_else(|| json!({}));
            labels[HASH] = json!(hash);
            let name = meta::get(owner, "name");
            let revision = json!({
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": format!("{name}-{hash}"),
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [super::controller_ref(api_version, kind, name, uid)],
                },
                "data": want,
                "revision": max + 1,
            });
            match client.create(revisions, Some(ns), &revision).await {
                Ok(_) => {}
                Err(e) if e.is("AlreadyExists") => {
                    return Err(Failure::local(format!("revision {name}-{hash} exists with another template")))
                }
                Err(e) => return Err(e),
            }
            (hash, max + 1)
        }
    };
    let limit = owner.pointer("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(10).max(0) as usize;
    let old: Vec<&Value> = mine.iter().filter(|v| hash_of(v) != hash && !in_use.contains(&hash_of(v))).collect();
    for v in old.iter().take(old.len().saturating_sub(limit)) {
        match client.delete(revisions, Some(ns), meta::get(v, "name"), &json!({})).await {
            Err(e) if !e.is("NotFound") => return Err(e),
            _ => {}
        }
    }
    Ok((hash, number))
}

/// The revision hash a pod runs.
pub fn hash_of_pod(p: &Value) -> &str {
    p.pointer("/metadata/labels").and_then(|l| l.get(HASH)).and_then(Value::as_str).unwrap_or("")
}
