//! The default roles and bindings (`bootstrap.yaml`: kube-apiserver 1.33's bootstrap policy),
//! made at start and reconciled as kube reconciles them: a missing object is created; one
//! marked `rbac.authorization.kubernetes.io/autoupdate: "true"` gets the rules (or subjects) it
//! lacks added; one whose mark says otherwise is left as its owner made it.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use serde_json::Value;

use crate::rest::Api;
use crate::status::Status;

/// The policy's objects, as JSON.
pub fn objects() -> Vec<Value> {
    static OBJECTS: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    OBJECTS
        .get_or_init(|| {
            use serde::Deserialize;
            serde_yaml_ng::Deserializer::from_str(include_str!("bootstrap.yaml"))
                .map(|d| Value::deserialize(d).expect("bootstrap.yaml holds YAML documents"))
                .filter(|v| !v.is_null())
                .collect()
        })
        .clone()
}

/// The rules of the policy's ClusterRole `name`.
pub fn cluster_role_rules(name: &str) -> Vec<PolicyRule> {
    objects()
        .into_iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
        .and_then(|o| serde_json::from_value::<ClusterRole>(o).ok())
        .and_then(|r| r.rules)
        .unwrap_or_default()
}

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

fn plural(kind: &str) -> &'static str {
    match kind {
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        _ => "rolebindings",
    }
}

/// `wanted` as the existing `current` should become (None: as it is): the rules or subjects it
/// lacks added, when its owner lets kube keep it.
fn reconciled(current: &Value, wanted: &Value) -> Option<Value> {
    let autoupdate = current.pointer(&format!("/metadata/annotations/{}", AUTOUPDATE.replace('/', "~1")));
    if autoupdate.and_then(Value::as_str) == Some("false") {
        return None;
    }
    let field = if wanted.get("roleRef").is_some() { "subjects" } else { "rules" };
    let have = current.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
    let lacking: Vec<Value> = wanted
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|w| !have.contains(w))
        .cloned()
        .collect();
    let rule_kept = field == "rules" && current.get("aggregationRule").is_some();
    if lacking.is_empty() || rule_kept {
        return None;
    }
    let mut out = current.clone();
    let mut all = have;
    all.extend(lacking);
    out[field] = Value::Array(all);
    Some(out)
}

/// Makes and reconciles every object of the policy.
pub async fn ensure(api: &Api) -> Result<(), Status> {
    for o in objects() {
        let kind = o["kind"].as_str().unwrap_or("");
        let plural = plural(kind);
        let ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let r = crate::resources::find("rbac.authorization.k8s.io", "v1", plural).expect("RBAC resources are served");
        let current = api.caches.of(r).and_then(|c| c.get(&crate::rest::key(api, r, ns, name)).1).map(|c| c.value(r));
        match current {
            None => crate::rest::ensure(api, plural, ns, o.clone()).await?,
            Some(current) => {
                if let Some(updated) = reconciled(&current, &o) {
                    crate::rest::reconcile(api, plural, ns, updated).await?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_holds_kubes_defaults() {
        let objects = objects();
        let find = |kind: &str, name: &str| objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        let admin = find("ClusterRole", "cluster-admin").expect("cluster-admin");
        assert_eq!(admin["rules"][0]["verbs"], serde_json::json!(["*"]));
        let masters = find("ClusterRoleBinding", "cluster-admin").expect("its binding");
        assert_eq!(masters["subjects"][0]["name"], "system:masters");
        for name in [
            "admin",
            "edit",
            "view",
            "system:discovery",
            "system:basic-user",
            "system:public-info-viewer",
            "system:node",
        ] {
            assert!(find("ClusterRole", name).is_some(), "{name}");
        }
        assert!(!cluster_role_rules("system:node").is_empty());
        for o in &objects {
            let kind = o["kind"].as_str().unwrap();
            let typed = match kind {
                "ClusterRole" => serde_json::from_value::<ClusterRole>(o.clone()).is_ok(),
                "ClusterRoleBinding" => {
                    serde_json::from_value::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(o.clone()).is_ok()
                }
                "Role" => serde_json::from_value::<k8s_openapi::api::rbac::v1::Role>(o.clone()).is_ok(),
                "RoleBinding" => serde_json::from_value::<k8s_openapi::api::rbac::v1::RoleBinding>(o.clone()).is_ok(),
                _ => false,
            };
            assert!(typed, "{o}");
        }
    }

    #[test]
    fn reconciling_adds_what_is_missing_unless_told_not_to() {
        let wanted = serde_json::json!({"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        let current = serde_json::json!({"metadata": {}, "rules": [{"verbs": ["get"]}, {"verbs": ["own"]}]});
        let updated = reconciled(&current, &wanted).unwrap();
        assert_eq!(updated["rules"], serde_json::json!([{"verbs": ["get"]}, {"verbs": ["own"]}, {"verbs": ["list"]}]));
        assert_eq!(reconciled(&updated, &wanted), None);
        let kept = serde_json::json!({"metadata": {"annotations": {AUTOUPDATE: "false"}}, "rules": []});
        assert_eq!(reconciled(&kept, &wanted), None);
    }
}
