//! The table of served resources: one descriptor per resource, and one generic registry
//! (`crate::rest`) that serves every one of them from it. A custom resource (issue 12) will be a
//! descriptor built at run time and go down the same path.
//!
//! Each descriptor names its type in `k8s-openapi`: objects are decoded into that type and
//! encoded back (`canonical`), so a stored object has exactly the fields the type has, whatever
//! a client sent beside them, and a field of the wrong type is refused as kube refuses it.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview};
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    ReplicationController, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

use crate::storage::keys;
use crate::workloads::Workload;

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
    /// Workloads (`crate::workloads`): defaults of the object and its pod template, validation
    /// of selectors and templates, and a Job's generated selector.
    Workload(Workload),
    /// Services (`crate::services`): defaults, validation, and their cluster IP and node ports.
    Service,
    /// `events.k8s.io/v1` Events, stored as core Events (`crate::events`).
    EventV1,
    /// RBAC roles (`crate::rbac`): their rules validated; `true` for a namespaced Role.
    Role(bool),
    /// RBAC bindings (`crate::rbac`): the role reference and subjects validated, the reference
    /// immutable; `true` for a namespaced RoleBinding.
    Binding(bool),
    /// The review APIs (`crate::auth::reviews`): answered on create, never stored.
    Review,
    /// CustomResourceDefinitions (`crate::crd::validation`): kube's defaults and validation, the
    /// storage version recorded in `status.storedVersions`, and a delete that marks the
    /// definition Terminating until its objects are gone.
    Crd,
    /// A custom resource (`crate::crd`): its definition's structural schema prunes, defaults and
    /// validates it, its CEL rules hold, and its `custom` descriptor says the rest.
    Custom,
}

/// When kube bumps `metadata.generation` (set to 1 on create).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Not tracked.
    None,
    /// On any change of the spec (everything but metadata and status).
    Spec,
    /// On a change of the spec or of the annotations (Deployments: annotations are copied to
    /// their ReplicaSets).
    SpecAndAnnotations,
    /// On a change of the webhooks (webhook configurations, which have no spec).
    Webhooks,
    /// On a change of anything but the metadata and, with a status subresource, the status
    /// (custom resources).
    Content,
}

/// Which names a resource accepts (kube's `NameIsDNSSubdomain`, `NameIsDNSLabel`,
/// `NameIsDNS1035Label`, `ValidatePathSegmentName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Subdomain,
    Label,
    Dns1035,
    /// Any name that is a URL path segment (RBAC's `ValidateRBACName`: `system:...` names).
    PathSegment,
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
    /// The fields its field selectors may name: `metadata.name`, `metadata.namespace` for a
    /// namespaced resource, then its own (kube's `<Kind>ToSelectableFields`).
    pub fields: &'static [&'static str],
    pub names: Names,
    pub strategy: Strategy,
    pub generation: Generation,
    /// The status a new object gets whatever the client sent (JSON), for resources whose status
    /// is their controllers' to write; `None` keeps the client's.
    pub new_status: Option<&'static str>,
    pub deleted: Deleted,
    /// Decodes an object into the resource's type and encodes it back.
    pub canonical: fn(Value) -> Result<Value, serde_json::Error>,
    /// The type's OpenAPI schema (a reference; its definitions land in the generator).
    pub schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// What a custom resource's definition says of it (None for the built-ins).
    pub custom: Option<&'static crate::crd::Custom>,
}

fn schema<K: schemars::JsonSchema>(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<K>()
}

/// The schema of a resource that has no k8s-openapi type (a custom resource's is its
/// definition's, which `crate::openapi` reads from its `Custom`).
pub(crate) fn no_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::default()
}

fn canonical<K: serde::Serialize + serde::de::DeserializeOwned>(v: Value) -> Result<Value, serde_json::Error> {
    serde_json::to_value(serde_json::from_value::<K>(v)?)
}

/// Every verb of a resource (kube's order: alphabetical).
pub(crate) const ALL: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
/// A review's only verb.
const CREATE: &[&str] = &["create"];
/// A status or scale subresource's verbs.
pub(crate) const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
/// Every verb but deletecollection (namespaces).
const NO_DELETECOLLECTION: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
pub(crate) const STATUS: &[(&str, &[&str])] = &[("status", GET_PATCH_UPDATE)];
pub(crate) const SCALE_STATUS: &[(&str, &[&str])] = &[("scale", GET_PATCH_UPDATE), ("status", GET_PATCH_UPDATE)];
/// A namespaced resource's selectable fields.
pub(crate) const NAMESPACED_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
/// A cluster-scoped resource's.
pub(crate) const CLUSTER_FIELDS: &[&str] = &["metadata.name"];
/// kube's `all` category.
const ALL_CATEGORY: &[&str] = &["all"];
/// kube's `api-extensions` category (what extends the API: admission configuration, CRDs).
const API_EXTENSIONS: &[&str] = &["api-extensions"];

/// Whether a `k8s-openapi` scope is a namespace's.
trait Scoped {
    const NAMESPACED: bool;
}

impl Scoped for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scoped for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A descriptor of `$ty` (its group, version, kind, plural and scope from `k8s-openapi`), with
/// the fields given and the rest those of a plain resource.
macro_rules! resource {
    ($ty:ty, $singular:literal $(, $field:ident: $value:expr)* $(,)?) => {
        Resource {
            group: <$ty as k8s_openapi::Resource>::GROUP,
            version: <$ty as k8s_openapi::Resource>::VERSION,
            kind: <$ty as k8s_openapi::Resource>::KIND,
            plural: <$ty as k8s_openapi::Resource>::URL_PATH_SEGMENT,
            singular: $singular,
            namespaced: <<$ty as k8s_openapi::Resource>::Scope as Scoped>::NAMESPACED,
            canonical: canonical::<$ty>,
            schema: schema::<$ty>,
            $($field: $value,)*
            ..PLAIN
        }
    };
}

/// A plain resource; every descriptor starts from it.
const PLAIN: Resource = Resource {
    group: "",
    version: "",
    kind: "",
    plural: "",
    singular: "",
    namespaced: true,
    short_names: &[],
    categories: &[],
    verbs: ALL,
    subresources: &[],
    fields: NAMESPACED_FIELDS,
    names: Names::Subdomain,
    strategy: Strategy::Plain,
    generation: Generation::None,
    new_status: None,
    deleted: Deleted::Status,
    canonical: canonical::<ConfigMap>,
    schema: schema::<ConfigMap>,
    custom: None,
};

/// Every served resource.
pub static RESOURCES: &[Resource] = &[
    // core/v1
    resource!(ConfigMap, "configmap", short_names: &["cm"]),
    resource!(Endpoints, "endpoints", short_names: &["ep"]),
    resource!(
        Event,
        "event",
        short_names: &["ev"],
        fields: &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    ),
    resource!(LimitRange, "limitrange", short_names: &["limits"]),
    resource!(
        Namespace,
        "namespace",
        short_names: &["ns"],
        verbs: NO_DELETECOLLECTION,
        subresources: &[("finalize", &["update"]), ("status", GET_PATCH_UPDATE)],
        fields: &["metadata.name", "status.phase"],
        names: Names::Label,
        strategy: Strategy::Namespace,
        deleted: Deleted::Object,
    ),
    resource!(
        Node,
        "node",
        short_names: &["no"],
        subresources: STATUS,
        fields: &["metadata.name", "spec.unschedulable"],
    ),
    resource!(
        PersistentVolume,
        "persistentvolume",
        fields: CLUSTER_FIELDS,
        short_names: &["pv"],
        subresources: STATUS,
        new_status: Some(r#"{"phase":"Pending"}"#),
        deleted: Deleted::Object,
    ),
    resource!(
        PersistentVolumeClaim,
        "persistentvolumeclaim",
        short_names: &["pvc"],
        subresources: STATUS,
        new_status: Some(r#"{"phase":"Pending"}"#),
        deleted: Deleted::Object,
    ),
    resource!(
        Pod,
        "pod",
        short_names: &["po"],
        categories: ALL_CATEGORY,
        subresources: &[("binding", &["create"]), ("eviction", &["create"]), ("status", GET_PATCH_UPDATE)],
        fields: crate::pods::SELECTABLE,
        strategy: Strategy::Pod,
        deleted: Deleted::Object,
    ),
    resource!(
        ReplicationController,
        "replicationcontroller",
        short_names: &["rc"],
        categories: ALL_CATEGORY,
        subresources: SCALE_STATUS,
        fields: &["metadata.name", "metadata.namespace", "status.replicas"],
        strategy: Strategy::Workload(Workload::ReplicationController),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    resource!(ResourceQuota, "resourcequota", short_names: &["quota"], subresources: STATUS, new_status: Some("{}")),
    resource!(Secret, "secret", fields: &["metadata.name", "metadata.namespace", "type"], strategy: Strategy::Secret),
    resource!(
        Service,
        "service",
        short_names: &["svc"],
        categories: ALL_CATEGORY,
        subresources: STATUS,
        fields: &["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"],
        names: Names::Dns1035,
        strategy: Strategy::Service,
        new_status: Some(r#"{"loadBalancer":{}}"#),
        deleted: Deleted::Object,
    ),
    resource!(
        ServiceAccount,
        "serviceaccount",
        short_names: &["sa"],
        subresources: &[("token", CREATE)],
        deleted: Deleted::Object,
    ),
    // apps/v1
    resource!(ControllerRevision, "controllerrevision"),
    resource!(
        DaemonSet,
        "daemonset",
        short_names: &["ds"],
        categories: ALL_CATEGORY,
        subresources: STATUS,
        strategy: Strategy::Workload(Workload::DaemonSet),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    resource!(
        Deployment,
        "deployment",
        short_names: &["deploy"],
        categories: ALL_CATEGORY,
        subresources: SCALE_STATUS,
        strategy: Strategy::Workload(Workload::Deployment),
        generation: Generation::SpecAndAnnotations,
        new_status: Some("{}"),
    ),
    resource!(
        ReplicaSet,
        "replicaset",
        short_names: &["rs"],
        categories: ALL_CATEGORY,
        subresources: SCALE_STATUS,
        fields: &["metadata.name", "metadata.namespace", "status.replicas"],
        strategy: Strategy::Workload(Workload::ReplicaSet),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    resource!(
        StatefulSet,
        "statefulset",
        short_names: &["sts"],
        categories: ALL_CATEGORY,
        subresources: SCALE_STATUS,
        strategy: Strategy::Workload(Workload::StatefulSet),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    // batch/v1
    resource!(
        CronJob,
        "cronjob",
        short_names: &["cj"],
        categories: ALL_CATEGORY,
        subresources: STATUS,
        strategy: Strategy::Workload(Workload::CronJob),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    resource!(
        Job,
        "job",
        categories: ALL_CATEGORY,
        subresources: STATUS,
        fields: &["metadata.name", "metadata.namespace", "status.successful"],
        strategy: Strategy::Workload(Workload::Job),
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    // coordination.k8s.io/v1
    resource!(Lease, "lease"),
    // authentication.k8s.io/v1
    resource!(SelfSubjectReview, "selfsubjectreview", verbs: CREATE, fields: CLUSTER_FIELDS, strategy: Strategy::Review),
    resource!(TokenReview, "tokenreview", verbs: CREATE, fields: CLUSTER_FIELDS, strategy: Strategy::Review),
    // authorization.k8s.io/v1
    resource!(LocalSubjectAccessReview, "localsubjectaccessreview", verbs: CREATE, strategy: Strategy::Review),
    resource!(
        SelfSubjectAccessReview,
        "selfsubjectaccessreview",
        verbs: CREATE,
        fields: CLUSTER_FIELDS,
        strategy: Strategy::Review,
    ),
    resource!(SelfSubjectRulesReview, "selfsubjectrulesreview", verbs: CREATE, fields: CLUSTER_FIELDS, strategy: Strategy::Review),
    resource!(SubjectAccessReview, "subjectaccessreview", verbs: CREATE, fields: CLUSTER_FIELDS, strategy: Strategy::Review),
    // discovery.k8s.io/v1
    resource!(EndpointSlice, "endpointslice"),
    // events.k8s.io/v1
    resource!(k8s_openapi::api::events::v1::Event, "event", short_names: &["ev"], strategy: Strategy::EventV1),
    // networking.k8s.io/v1
    resource!(Ingress, "ingress", short_names: &["ing"], subresources: STATUS, generation: Generation::Spec, new_status: Some("{}")),
    resource!(IngressClass, "ingressclass", fields: CLUSTER_FIELDS),
    resource!(IPAddress, "ipaddress", short_names: &["ip"], fields: CLUSTER_FIELDS),
    resource!(NetworkPolicy, "networkpolicy", short_names: &["netpol"], generation: Generation::Spec),
    // policy/v1
    resource!(
        PodDisruptionBudget,
        "poddisruptionbudget",
        short_names: &["pdb"],
        subresources: STATUS,
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    // rbac.authorization.k8s.io/v1
    resource!(ClusterRole, "clusterrole", fields: CLUSTER_FIELDS, names: Names::PathSegment, strategy: Strategy::Role(false)),
    resource!(
        ClusterRoleBinding,
        "clusterrolebinding",
        fields: CLUSTER_FIELDS,
        names: Names::PathSegment,
        strategy: Strategy::Binding(false),
    ),
    resource!(Role, "role", names: Names::PathSegment, strategy: Strategy::Role(true)),
    resource!(RoleBinding, "rolebinding", names: Names::PathSegment, strategy: Strategy::Binding(true)),
    // scheduling.k8s.io/v1
    resource!(PriorityClass, "priorityclass", fields: CLUSTER_FIELDS, short_names: &["pc"]),
    // storage.k8s.io/v1
    resource!(StorageClass, "storageclass", fields: CLUSTER_FIELDS, short_names: &["sc"]),
    // admissionregistration.k8s.io/v1
    resource!(
        MutatingWebhookConfiguration,
        "mutatingwebhookconfiguration",
        fields: CLUSTER_FIELDS,
        categories: API_EXTENSIONS,
        generation: Generation::Webhooks,
    ),
    resource!(
        ValidatingAdmissionPolicy,
        "validatingadmissionpolicy",
        fields: CLUSTER_FIELDS,
        categories: API_EXTENSIONS,
        subresources: STATUS,
        generation: Generation::Spec,
        new_status: Some("{}"),
    ),
    resource!(
        ValidatingAdmissionPolicyBinding,
        "validatingadmissionpolicybinding",
        fields: CLUSTER_FIELDS,
        categories: API_EXTENSIONS,
        generation: Generation::Spec,
    ),
    resource!(
        ValidatingWebhookConfiguration,
        "validatingwebhookconfiguration",
        fields: CLUSTER_FIELDS,
        categories: API_EXTENSIONS,
        generation: Generation::Webhooks,
    ),
    // apiextensions.k8s.io/v1
    resource!(
        CustomResourceDefinition,
        "customresourcedefinition",
        short_names: &["crd", "crds"],
        categories: API_EXTENSIONS,
        subresources: STATUS,
        fields: CLUSTER_FIELDS,
        strategy: Strategy::Crd,
        generation: Generation::Spec,
    ),
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

    /// Whether its objects are kept in the store (the reviews are only answered).
    pub fn stored(&self) -> bool {
        self.strategy != Strategy::Review
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
        check::<Deployment>(find("apps", "v1", "deployments").unwrap());
        check::<Job>(find("batch", "v1", "jobs").unwrap());
        check::<k8s_openapi::api::events::v1::Event>(find("events.k8s.io", "v1", "events").unwrap());
    }

    /// Singular names are the lowercased kind; no plural is served twice in a group.
    #[test]
    fn descriptors_are_unique_and_named_as_kube_names_them() {
        for r in RESOURCES {
            assert_eq!(r.singular, r.kind.to_lowercase(), "{}", r.plural);
            assert_eq!(RESOURCES.iter().filter(|o| o.group == r.group && o.plural == r.plural).count(), 1);
            let meta = if r.namespaced { NAMESPACED_FIELDS } else { CLUSTER_FIELDS };
            assert_eq!(&r.fields[..meta.len()], meta, "{}", r.plural);
            assert!(r.namespaced || !r.fields.contains(&"metadata.namespace"), "{}", r.plural);
        }
        assert!(!find("", "v1", "nodes").unwrap().namespaced && find("apps", "v1", "deployments").unwrap().namespaced);
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
