//! RBAC objects' validation, as kube-apiserver's (`pkg/apis/rbac/validation`): rules need
//! verbs and either API groups and resources or non-resource URLs (never both, and not in a
//! namespaced Role), bindings a role reference of a known kind and a name, and subjects of a
//! known kind with the API group that kind takes; a binding's role reference never changes.

use serde_json::{json, Value};

use crate::status::{go_quote, go_strings, FieldError, FieldErrorType};

const GROUP: &str = "rbac.authorization.k8s.io";

fn list<'a>(v: &'a Value, field: &str) -> Vec<&'a str> {
    v.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// kube's `ValidatePolicyRule` of each rule of a Role (`namespaced`) or ClusterRole.
pub fn rule_errors(v: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, rule) in v.get("rules").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = |f: &str| format!("rules[{i}].{f}");
        if list(rule, "verbs").is_empty() {
            errors.push(FieldError::new(
                FieldErrorType::Required,
                &at("verbs"),
                None,
                "verbs must contain at least one value",
            ));
        }
        let urls = list(rule, "nonResourceURLs");
        if !urls.is_empty() {
            if namespaced {
                errors.push(FieldError::verbatim(
                    FieldErrorType::Invalid,
                    &at("nonResourceURLs"),
                    go_strings(urls.iter().copied()),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if ["apiGroups", "resources", "resourceNames"].iter().any(|f| !list(rule, f).is_empty()) {
                errors.push(FieldError::verbatim(
                    FieldErrorType::Invalid,
                    &at("nonResourceURLs"),
                    go_strings(urls.iter().copied()),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if rule.get("apiGroups").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            errors.push(FieldError::new(
                FieldErrorType::Required,
                &at("apiGroups"),
                None,
                "resource rules must supply at least one api group",
            ));
        }
        if list(rule, "resources").is_empty() {
            errors.push(FieldError::new(
                FieldErrorType::Required,
                &at("resources"),
                None,
                "resource rules must supply at least one resource",
            ));
        }
    }
    errors
}

/// kube's `ValidateRoleBinding` / `ValidateClusterRoleBinding` (`namespaced` for a
/// RoleBinding): the role reference and each subject.
pub fn binding_errors(v: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let role = v.get("roleRef").cloned().unwrap_or(json!({}));
    if text(&role, "apiGroup") != GROUP {
        errors.push(FieldError::not_supported("roleRef.apiGroup", text(&role, "apiGroup"), &[GROUP]));
    }
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    let kind = text(&role, "kind");
    if !kinds.contains(&kind) {
        errors.push(FieldError::not_supported("roleRef.kind", kind, kinds));
    }
    let name = text(&role, "name");
    if name.is_empty() {
        errors.push(FieldError::required("roleRef.name"));
    } else {
        for p in crate::meta::path_segment_problems(name) {
            errors.push(FieldError::new(FieldErrorType::Invalid, "roleRef.name", Some(json!(name)), &p));
        }
    }
    for (i, s) in v.get("subjects").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = |f: &str| format!("subjects[{i}].{f}");
        let name = text(s, "name");
        if name.is_empty() {
            errors.push(FieldError::required(&at("name")));
        }
        let group = text(s, "apiGroup");
        match text(s, "kind") {
            "ServiceAccount" => {
                if !name.is_empty() {
                    for p in crate::meta::name_problems(crate::resources::Names::Subdomain, name) {
                        errors.push(FieldError::new(FieldErrorType::Invalid, &at("name"), Some(json!(name)), &p));
                    }
                }
                if !group.is_empty() {
                    errors.push(FieldError::not_supported(&at("apiGroup"), group, &[""]));
                }
                if !namespaced && text(s, "namespace").is_empty() {
                    errors.push(FieldError::required(&at("namespace")));
                }
            }
            "User" | "Group" if group != GROUP => {
                errors.push(FieldError::not_supported(&at("apiGroup"), group, &[GROUP]));
            }
            "User" | "Group" => {}
            other => errors.push(FieldError::not_supported(&at("kind"), other, &["ServiceAccount", "User", "Group"])),
        }
    }
    errors
}

/// A binding's role reference may not change (`ValidateRoleBindingUpdate`).
pub fn binding_update_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    if old.get("roleRef") == new.get("roleRef") {
        return Vec::new();
    }
    let r = new.get("roleRef").cloned().unwrap_or(json!({}));
    let go = format!(
        "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
        go_quote(text(&r, "apiGroup")),
        go_quote(text(&r, "kind")),
        go_quote(text(&r, "name"))
    );
    vec![FieldError::verbatim(FieldErrorType::Invalid, "roleRef", go, "cannot change roleRef")]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(errors: Vec<FieldError>) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_are_validated_as_kube_validates_them() {
        let role = json!({"rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"resources": ["pods"]},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"], "resources": ["pods"]},
        ]});
        assert_eq!(
            strings(rule_errors(&role, true)),
            [
                "rules[1].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[2].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[2].nonResourceURLs: Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs",
            ]
        );
        let cluster = json!({"rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
        assert!(rule_errors(&cluster, false).is_empty());
    }

    #[test]
    fn bindings_need_a_role_and_known_subjects() {
        let ok = json!({
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}, {"kind": "User", "apiGroup": GROUP, "name": "jane"}]
        });
        assert!(binding_errors(&ok, true).is_empty());
        let bad = json!({
            "roleRef": {"apiGroup": "x", "kind": "Thing"},
            "subjects": [{"kind": "User", "name": "jane"}, {"kind": "Robot", "name": "r"}, {"kind": "ServiceAccount", "name": "sa"}]
        });
        assert_eq!(
            strings(binding_errors(&bad, false)),
            [
                "roleRef.apiGroup: Unsupported value: \"x\": supported values: \"rbac.authorization.k8s.io\"",
                "roleRef.kind: Unsupported value: \"Thing\": supported values: \"ClusterRole\"",
                "roleRef.name: Required value",
                "subjects[0].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[2].namespace: Required value",
            ]
        );
        let moved = json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "writer"}});
        assert_eq!(
            strings(binding_update_errors(&ok, &moved)),
            ["roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"writer\"}: cannot change roleRef"]
        );
    }
}
