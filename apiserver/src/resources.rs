//! The table of served resources: one descriptor per resource, and one generic registry
//! (`crate::rest`) that serves every one of them from it. A custom resource (issue 12) will be a
//! descriptor built at run time and go down the same path.
//!
//! Each descriptor names its type in `k8s-openapi`: objects are decoded into that type and
//! encoded back (`canonical`), so a stored object has exactly the fields the type has, whatever
//! a client sent beside them, and a field of the wrong type is refused as kube refuses it.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use serde_json::{Map, Value};

use crate::storage::keys;

/// What a resource answers to a DELETE that removes it at once (kube's `ReturnDeletedObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// A `Status` of Success naming the object.
    Status,
    /// The object as it was.
    Object,
}

/// Resource-specific behaviour beside the generic registry (kube's strategy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No defaulting beyond the generic one.
    Plain,
    /// Namespaces: `spec.finalizers: [kubernetes]`, `status.phase: Active` and the
    /// `kubernetes.io/metadata.name` label on create; a delete marks the namespace Terminating
    /// while its finalizers stand.
    Namespace,
    /// Secrets: `type` defaults to `Opaque`; `stringData` is merged into `data` (base64) and
    /// dropped, as kube's conversion does.
    Secret,
    /// Pods (`crate::pods`): kube's defaults, a Pending status with the QoS class on create,
    /// validation of the spec, and updates that change only what kube lets them.
    Pod,
}

/// Which names a resource accepts (kube's `NameIsDNSSubdomain` or `NameIsDNSLabel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Subdomain,
    Label,
}

/// One served resource.
pub struct Resource {
    /// API group (empty: the core group).
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The resource name in URLs (plural).
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// The verbs served, in kube's discovery order.
    pub verbs: &'static [&'static str],
    /// The subresources served and their verbs, by name.
    pub subresources: &'static [(&'static str, &'static [&'static str])],
    pub names: Names,
    pub strategy: Strategy,
    pub deleted: Deleted,
    /// Decodes an object into the resource's type and encodes it back.
    pub canonical: fn(Value) -> Result<Value, serde_json::Error>,
    /// The type's OpenAPI schema (a reference; its definitions land in the generator).
    pub schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
}

fn schema<K: schemars::JsonSchema>(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<K>()
}

fn canonical<K: serde::Serialize + serde::de::DeserializeOwned>(v: Value) -> Result<Value, serde_json::Error> {
    serde_json::to_value(serde_json::from_value::<K>(v)?)
}

/// Every verb of a resource (kube's order: alphabetical).
const ALL: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
/// A status subresource's verbs.
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
/// Every verb but deletecollection (namespaces).
const NO_DELETECOLLECTION: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

/// Every served resource.
pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        namespaced: true,
        short_names: &["cm"],
        categories: &[],
        verbs: ALL,
        subresources: &[],
        names: Names::Subdomain,
        strategy: Strategy::Plain,
        deleted: Deleted::Status,
        canonical: canonical::<ConfigMap>,
        schema: schema::<ConfigMap>,
    },
    Resource {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        verbs: NO_DELETECOLLECTION,
        subresources: &[("finalize", &["update"]), ("status", GET_PATCH_UPDATE)],
        names: Names::Label,
        strategy: Strategy::Namespace,
        deleted: Deleted::Object,
        canonical: canonical::<Namespace>,
        schema: schema::<Namespace>,
    },
    Resource {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        namespaced: true,
        short_names: &["po"],
        categories: &["all"],
        verbs: ALL,
        subresources: &[("status", GET_PATCH_UPDATE)],
        names: Names::Subdomain,
        strategy: Strategy::Pod,
        deleted: Deleted::Object,
        canonical: canonical::<Pod>,
        schema: schema::<Pod>,
    },
    Resource {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: ALL,
        subresources: &[],
        names: Names::Subdomain,
        strategy: Strategy::Secret,
        deleted: Deleted::Status,
        canonical: canonical::<Secret>,
        schema: schema::<Secret>,
    },
    Resource {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        namespaced: true,
        short_names: &["sa"],
        categories: &[],
        verbs: ALL,
        subresources: &[],
        names: Names::Subdomain,
        strategy: Strategy::Plain,
        deleted: Deleted::Object,
        canonical: canonical::<ServiceAccount>,
        schema: schema::<ServiceAccount>,
    },
];

impl Resource {
    /// `v1` or `<group>/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The etcd key prefix of this resource's objects (under `--etcd-prefix`).
    pub fn key_prefix(&self) -> String {
        keys::resource_prefix(self.group, self.plural, false)
    }

    pub fn serves(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// The served subresource named `name`.
    pub fn subresource(&self, name: &str) -> Option<&'static str> {
        self.subresources.iter().find(|(n, _)| *n == name).map(|(n, _)| *n)
    }

    /// The verbs of subresource `name` (none if it is not served).
    pub fn subresource_verbs(&self, name: &str) -> &'static [&'static str] {
        self.subresources.iter().find(|(n, _)| *n == name).map_or(&[], |(_, v)| v)
    }

    /// An object's fields with this resource's `kind` and `apiVersion`.
    pub fn with_type(&self, rest: Map<String, Value>) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), Value::String(self.kind.into()));
        m.insert("apiVersion".into(), Value::String(self.api_version()));
        m.extend(rest.into_iter().filter(|(k, _)| k != "kind" && k != "apiVersion"));
        Value::Object(m)
    }
}

/// The resource served at `group`/`version` under `plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The served group-versions, core first, then groups by name.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut gvs: Vec<_> = RESOURCES.iter().map(|r| (r.group, r.version)).collect();
    gvs.sort();
    gvs.dedup();
    gvs
}

/// The resources of one group-version, by name.
pub fn of(group: &str, version: &str) -> Vec<&'static Resource> {
    let mut rs: Vec<_> = RESOURCES.iter().filter(|r| r.group == group && r.version == version).collect();
    rs.sort_by_key(|r| r.plural);
    rs
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The table agrees with k8s-openapi on every type's identity.
    #[test]
    fn descriptors_name_their_types() {
        fn check<K: k8s_openapi::Resource>(r: &Resource) {
            assert_eq!((r.group, r.version, r.kind, r.plural), (K::GROUP, K::VERSION, K::KIND, K::URL_PATH_SEGMENT));
            assert_eq!(r.api_version(), K::API_VERSION);
        }
        check::<ConfigMap>(find("", "v1", "configmaps").unwrap());
        check::<Namespace>(find("", "v1", "namespaces").unwrap());
        check::<Secret>(find("", "v1", "secrets").unwrap());
        check::<Pod>(find("", "v1", "pods").unwrap());
        check::<ServiceAccount>(find("", "v1", "serviceaccounts").unwrap());
    }

    #[test]
    fn canonical_drops_unknown_fields_and_refuses_wrong_types() {
        let cm = find("", "v1", "configmaps").unwrap();
        let v = (cm.canonical)(serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}, "bogus": 1})).unwrap();
        assert_eq!(v["data"]["k"], "v");
        assert!(v.get("bogus").is_none());
        assert!((cm.canonical)(serde_json::json!({"metadata": {"name": "a"}, "data": {"k": 1}})).is_err());
    }
}
