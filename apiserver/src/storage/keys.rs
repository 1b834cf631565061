//! Where kube-apiserver keeps each resource: `<prefix>/<resource prefix>/<namespace>/<name>`
//! for a namespaced object, `<prefix>/<resource prefix>/<name>` for a cluster-scoped one; the
//! prefix is `--etcd-prefix` (`/registry`). The resource prefix is the resource's plural, but for
//! kube's historical exceptions (its `SpecialDefaultResourcePrefixes`). Built-in groups get no
//! group segment, so a resource served by two groups shares one key space (`events` for core and
//! `events.k8s.io`, `ingresses` for `extensions` and `networking.k8s.io`); resources that kube
//! keeps under a group (CRDs, API services, custom resources) are `<group>/<plural>`.

/// kube's exceptions to "the resource prefix is the plural" (group, plural, prefix).
const SPECIAL: &[(&str, &str, &str)] = &[
    ("", "replicationcontrollers", "controllers"),
    ("", "endpoints", "services/endpoints"),
    ("", "nodes", "minions"),
    ("", "services", "services/specs"),
    ("extensions", "ingresses", "ingress"),
    ("networking.k8s.io", "ingresses", "ingress"),
];

/// Groups whose resources kube keeps under `<group>/<plural>`: the ones its
/// `SimpleStorageFactory` and the CRD handler serve.
const GROUP_PREFIXED: &[&str] = &["apiextensions.k8s.io", "apiregistration.k8s.io"];

/// The resource prefix of `group`'s `plural` (no leading or trailing slash). A custom resource
/// (any group that is not built in) is kept under its group too: pass `custom`.
pub fn resource_prefix(group: &str, plural: &str, custom: bool) -> String {
    if let Some((_, _, p)) = SPECIAL.iter().find(|(g, r, _)| *g == group && *r == plural) {
        return (*p).to_string();
    }
    if custom || GROUP_PREFIXED.contains(&group) {
        return format!("{group}/{plural}");
    }
    plural.to_string()
}

/// The key prefix every object of a resource lives under (ending in `/`), in one namespace if
/// given: what a LIST ranges over.
pub fn collection(prefix: &str, resource: &str, namespace: Option<&str>) -> String {
    let prefix = prefix.trim_end_matches('/');
    match namespace {
        Some(ns) => format!("{prefix}/{resource}/{ns}/"),
        None => format!("{prefix}/{resource}/"),
    }
}

/// The key of one object.
pub fn object(prefix: &str, resource: &str, namespace: Option<&str>, name: &str) -> String {
    collection(prefix, resource, namespace) + name
}

/// The first key after every key that starts with `prefix` (etcd's `WithPrefix` range end).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_where_kube_apiserver_keeps_them() {
        let key = |group, plural, ns, name| object("/registry", &resource_prefix(group, plural, false), ns, name);
        assert_eq!(key("", "pods", Some("default"), "web-0"), "/registry/pods/default/web-0");
        assert_eq!(key("", "nodes", None, "n1"), "/registry/minions/n1");
        assert_eq!(key("", "services", Some("ns"), "api"), "/registry/services/specs/ns/api");
        assert_eq!(key("", "endpoints", Some("ns"), "api"), "/registry/services/endpoints/ns/api");
        assert_eq!(key("", "replicationcontrollers", Some("ns"), "rc"), "/registry/controllers/ns/rc");
        assert_eq!(key("networking.k8s.io", "ingresses", Some("ns"), "i"), "/registry/ingress/ns/i");
        assert_eq!(key("apps", "deployments", Some("ns"), "d"), "/registry/deployments/ns/d");
        assert_eq!(key("events.k8s.io", "events", Some("ns"), "e"), "/registry/events/ns/e");
        assert_eq!(
            key("apiextensions.k8s.io", "customresourcedefinitions", None, "crontabs.stable.example.com"),
            "/registry/apiextensions.k8s.io/customresourcedefinitions/crontabs.stable.example.com"
        );
        let custom = object("/registry", &resource_prefix("stable.example.com", "crontabs", true), Some("ns"), "c");
        assert_eq!(custom, "/registry/stable.example.com/crontabs/ns/c");
        assert_eq!(collection("/registry/", "pods", None), "/registry/pods/");
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
