//! Discovery, generated from the resource table: `/version`, the legacy documents (`/api`,
//! `/api/v1`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`) and aggregated discovery
//! (`apidiscovery.k8s.io/v2`, answered when the client asks for it in `Accept`). Field order is
//! kube's (its Go structs').

use serde::Serialize;

use crate::resources::Resource;

/// The Kubernetes version whose API is served (`k8s-openapi`'s `v1_33` types).
pub const MAJOR: &str = "1";
pub const MINOR: &str = "33";
/// The oldest minor a 1.33 server stays compatible with (its default `minCompatibility`).
const MIN_COMPATIBILITY_MINOR: &str = "32";
/// The `gitVersion` reported: kube's form, with keel's build as the "+" metadata.
pub const GIT_VERSION: &str = concat!("v1.33.0+keel-", env!("CARGO_PKG_VERSION"));

/// The media type of aggregated discovery v2.
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `version.Info` (`k8s.io/apimachinery/pkg/version`); kube writes it indented, without a
/// trailing newline.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    major: &'static str,
    minor: &'static str,
    emulation_major: &'static str,
    emulation_minor: &'static str,
    min_compatibility_major: &'static str,
    min_compatibility_minor: &'static str,
    git_version: &'static str,
    git_commit: &'static str,
    git_tree_state: &'static str,
    build_date: &'static str,
    go_version: &'static str,
    compiler: &'static str,
    platform: String,
}

pub fn version() -> Version {
    Version {
        major: MAJOR,
        minor: MINOR,
        emulation_major: MAJOR,
        emulation_minor: MINOR,
        min_compatibility_major: MAJOR,
        min_compatibility_minor: MIN_COMPATIBILITY_MINOR,
        git_version: GIT_VERSION,
        git_commit: "",
        git_tree_state: "",
        build_date: "",
        go_version: "",
        compiler: "rustc",
        platform: format!(
            "{}/{}",
            std::env::consts::OS,
            if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH }
        ),
    }
}

/// The served group-versions: the core group first, then groups by name, each group's versions
/// by kube's version priority (`v2` before `v1` before `v1beta1` before `v1alpha1`), so that
/// the first is the preferred one.
pub fn group_versions(all: &[&'static Resource]) -> Vec<(&'static str, &'static str)> {
    let mut gvs: Vec<_> = all.iter().map(|r| (r.group, r.version)).collect();
    gvs.sort_by(|a, b| a.0.cmp(b.0).then_with(|| version_priority(a.1).cmp(&version_priority(b.1))));
    gvs.dedup();
    gvs
}

/// A version's place in kube's order (lower first): GA before beta before alpha, higher
/// numbers first within each, then versions of other forms by name.
fn version_priority(v: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, &str) {
    let parsed = v.strip_prefix('v').and_then(|rest| {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (level, minor) = match tail {
            "" => (0, ""),
            t if t.starts_with("beta") => (1, &t[4..]),
            t if t.starts_with("alpha") => (2, &t[5..]),
            _ => return None,
        };
        let minor: u64 = if minor.is_empty() && level == 0 { 0 } else { minor.parse().ok()? };
        Some((level, major, minor))
    });
    match parsed {
        Some((level, major, minor)) => (level, std::cmp::Reverse(major), std::cmp::Reverse(minor), ""),
        None => (3, std::cmp::Reverse(0), std::cmp::Reverse(0), v),
    }
}

/// The resources of one group-version, by name.
pub fn of(all: &[&'static Resource], group: &str, version: &str) -> Vec<&'static Resource> {
    let mut rs: Vec<_> = all.iter().copied().filter(|r| r.group == group && r.version == version).collect();
    rs.sort_by_key(|r| r.plural);
    rs
}

/// Whether an `Accept` header asks for aggregated discovery v2 before anything else it takes.
pub fn wants_aggregated(accept: &str) -> bool {
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let is = |p: &str| params.contains(&p);
        if params[0] == "application/json"
            && is("g=apidiscovery.k8s.io")
            && is("v=v2")
            && is("as=APIGroupDiscoveryList")
        {
            return true;
        }
        if matches!(params[0], "application/json" | "*/*" | "application/*") && params.len() == 1 {
            return false;
        }
    }
    false
}

#[derive(Serialize)]
struct TypeMeta {
    kind: &'static str,
    #[serde(rename = "apiVersion", skip_serializing_if = "str::is_empty")]
    api_version: &'static str,
}

/// `metav1.APIVersions` (`/api`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiVersions {
    kind: &'static str,
    versions: Vec<&'static str>,
    server_address_by_client_cidrs: Vec<ServerAddress>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServerAddress {
    #[serde(rename = "clientCIDR")]
    client_cidr: &'static str,
    server_address: String,
}

/// `/api`: the core group's versions, and where clients reach the server.
pub fn api(server_address: &str) -> ApiVersions {
    ApiVersions {
        kind: "APIVersions",
        versions: vec!["v1"],
        server_address_by_client_cidrs: vec![ServerAddress {
            client_cidr: "0.0.0.0/0",
            server_address: server_address.into(),
        }],
    }
}

/// `metav1.APIResource`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: String,
    singular_name: &'static str,
    namespaced: bool,
    #[serde(skip_serializing_if = "str::is_empty")]
    group: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    version: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    short_names: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    categories: &'static [&'static str],
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_version_hash: Option<String>,
}

/// kube's `StorageVersionHash`: base64 of the first 8 bytes of the SHA-256 of the storage
/// version's `group/version/kind` (the served version for every resource here).
pub fn storage_version_hash(r: &Resource) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(format!("{}/{}/{}", r.group, r.version, r.kind));
    base64::engine::general_purpose::STANDARD.encode(&sum[..8])
}

/// `metav1.APIResourceList` (`/api/v1`, `/apis/<group>/<version>`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceList {
    #[serde(flatten)]
    type_meta: TypeMeta,
    group_version: String,
    resources: Vec<ApiResource>,
}

/// A resource's entry, then one per subresource (`<plural>/<sub>`, no singular name, short
/// names, categories or hash), in kube's order.
fn api_resources(r: &'static Resource) -> impl Iterator<Item = ApiResource> {
    let main = ApiResource {
        name: r.plural.to_string(),
        singular_name: r.singular,
        namespaced: r.namespaced,
        group: "",
        version: "",
        kind: r.kind,
        verbs: r.verbs,
        short_names: r.short_names,
        categories: r.categories,
        storage_version_hash: r.stored().then(|| storage_version_hash(r)),
    };
    let subs = r.subresources.iter().map(|(sub, verbs)| {
        let (group, version, kind) = response_kind(r, sub);
        ApiResource {
            name: format!("{}/{sub}", r.plural),
            singular_name: "",
            namespaced: r.namespaced,
            group,
            version,
            kind,
            verbs,
            short_names: &[],
            categories: &[],
            storage_version_hash: None,
        }
    });
    std::iter::once(main).chain(subs)
}

/// What a subresource takes and answers: a `scale` an `autoscaling/v1` Scale, a pod's `binding`
/// a Binding and its `eviction` a `policy/v1` Eviction, the others the resource's own kind (group
/// and version left out where they are the resource's, as kube leaves them).
fn response_kind(r: &Resource, sub: &str) -> (&'static str, &'static str, &'static str) {
    match sub {
        "scale" => ("autoscaling", "v1", "Scale"),
        "binding" => ("", "", "Binding"),
        "eviction" => ("policy", "v1", "Eviction"),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
        _ => ("", "", r.kind),
    }
}

/// The resource list of a served group-version.
pub fn resource_list(all: &[&'static Resource], group: &str, version: &str) -> Option<ApiResourceList> {
    let rs = of(all, group, version);
    let first = rs.first()?;
    Some(ApiResourceList {
        type_meta: TypeMeta { kind: "APIResourceList", api_version: if group.is_empty() { "" } else { "v1" } },
        group_version: first.api_version(),
        resources: rs.into_iter().flat_map(api_resources).collect(),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupVersion {
    group_version: String,
    version: &'static str,
}

/// `metav1.APIGroup`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiGroup {
    #[serde(flatten)]
    type_meta: TypeMeta,
    name: &'static str,
    versions: Vec<GroupVersion>,
    preferred_version: GroupVersion,
}

fn group(all: &[&'static Resource], name: &'static str, in_list: bool) -> Option<ApiGroup> {
    let versions: Vec<_> = group_versions(all).into_iter().filter(|(g, _)| *g == name).collect();
    let gv = |v: &'static str| GroupVersion { group_version: format!("{name}/{v}"), version: v };
    let preferred = gv(versions.first()?.1);
    Some(ApiGroup {
        type_meta: TypeMeta {
            kind: if in_list { "" } else { "APIGroup" },
            api_version: if in_list { "" } else { "v1" },
        },
        name,
        versions: versions.into_iter().map(|(_, v)| gv(v)).collect(),
        preferred_version: preferred,
    })
}

/// `/apis/<group>`.
pub fn api_group(all: &[&'static Resource], name: &str) -> Option<ApiGroup> {
    let name = all.iter().find(|r| r.group == name && !name.is_empty())?.group;
    group(all, name, false)
}

/// `metav1.APIGroupList` (`/apis`).
#[derive(Serialize)]
pub struct ApiGroupList {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    groups: Vec<ApiGroup>,
}

pub fn api_groups(all: &[&'static Resource]) -> ApiGroupList {
    let mut names: Vec<&'static str> =
        group_versions(all).into_iter().map(|(g, _)| g).filter(|g| !g.is_empty()).collect();
    names.dedup();
    ApiGroupList {
        kind: "APIGroupList",
        api_version: "v1",
        groups: names.into_iter().filter_map(|g| group(all, g, true)).collect(),
    }
}

// Aggregated discovery v2 (`k8s.io/api/apidiscovery/v2`).

#[derive(Serialize)]
struct ResponseKind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceDiscovery {
    resource: &'static str,
    response_kind: ResponseKind,
    scope: &'static str,
    singular_resource: &'static str,
    verbs: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    short_names: &'static [&'static str],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    categories: &'static [&'static str],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subresources: Vec<SubresourceDiscovery>,
}

/// `APISubresourceDiscovery`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubresourceDiscovery {
    subresource: &'static str,
    response_kind: ResponseKind,
    verbs: &'static [&'static str],
}

#[derive(Serialize)]
struct VersionDiscovery {
    version: &'static str,
    resources: Vec<ResourceDiscovery>,
    freshness: &'static str,
}

#[derive(Serialize)]
struct ObjectMeta {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'static str,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<()>,
}

#[derive(Serialize)]
struct GroupDiscovery {
    metadata: ObjectMeta,
    versions: Vec<VersionDiscovery>,
}

/// `APIGroupDiscoveryList`.
#[derive(Serialize)]
pub struct GroupDiscoveryList {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: serde_json::Map<String, serde_json::Value>,
    items: Vec<GroupDiscovery>,
}

fn group_discovery(all: &[&'static Resource], name: &'static str) -> GroupDiscovery {
    let versions = group_versions(all)
        .into_iter()
        .filter(|(g, _)| *g == name)
        .map(|(g, v)| VersionDiscovery {
            version: v,
            resources: of(all, g, v)
                .into_iter()
                .map(|r| ResourceDiscovery {
                    resource: r.plural,
                    // kube leaves a resource's own group and version out of its response kind.
                    response_kind: ResponseKind { group: "", version: "", kind: r.kind },
                    scope: if r.namespaced { "Namespaced" } else { "Cluster" },
                    singular_resource: r.singular,
                    verbs: r.verbs,
                    short_names: r.short_names,
                    categories: r.categories,
                    subresources: r
                        .subresources
                        .iter()
                        .map(|(sub, verbs)| {
                            let (group, version, kind) = response_kind(r, sub);
                            SubresourceDiscovery {
                                subresource: sub,
                                response_kind: ResponseKind { group, version, kind },
                                verbs,
                            }
                        })
                        .collect(),
                })
                .collect(),
            freshness: "Current",
        })
        .collect();
    GroupDiscovery { metadata: ObjectMeta { name, creation_timestamp: None }, versions }
}

/// Aggregated discovery of the core group (`/api`) or of every other group (`/apis`).
pub fn aggregated(all: &[&'static Resource], core: bool) -> GroupDiscoveryList {
    let mut names: Vec<&'static str> = group_versions(all).into_iter().map(|(g, _)| g).collect();
    names.dedup();
    let items = names.into_iter().filter(|g| g.is_empty() == core).map(|g| group_discovery(all, g)).collect();
    GroupDiscoveryList {
        kind: "APIGroupDiscoveryList",
        api_version: "apidiscovery.k8s.io/v2",
        metadata: serde_json::Map::new(),
        items,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::go_json;

    fn builtin() -> Vec<&'static Resource> {
        crate::resources::RESOURCES.iter().collect()
    }

    #[test]
    fn versions_go_by_kubes_priority() {
        let mut vs = vec!["v1beta1", "v1", "v2alpha1", "v2", "v1alpha1", "v1beta2", "foo", "v10"];
        vs.sort_by_key(|v| version_priority(v));
        assert_eq!(vs, ["v10", "v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo"]);
    }

    #[test]
    fn legacy_core_discovery_lists_the_table() {
        let body = String::from_utf8(go_json(&resource_list(&builtin(), "", "v1").unwrap())).unwrap();
        assert!(body.starts_with(r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["cm"],"storageVersionHash":"qFsyl6wFWjQ="}"#), "{body}");
        assert!(resource_list(&builtin(), "autoscaling", "v1").is_none());
        let apps = String::from_utf8(go_json(&resource_list(&builtin(), "apps", "v1").unwrap())).unwrap();
        assert!(apps.contains(r#"{"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]}"#), "{apps}");
        assert!(body.contains(r#"{"name":"namespaces/finalize","singularName":"","namespaced":false,"kind":"Namespace","verbs":["update"]},{"name":"namespaces/status","singularName":"","namespaced":false,"kind":"Namespace","verbs":["get","patch","update"]},{"name":"nodes","#), "{body}");
        assert!(body.contains(r#"{"name":"pods/status","singularName":"","namespaced":true,"kind":"Pod","verbs":["get","patch","update"]}"#), "{body}");
        let aggregated = String::from_utf8(go_json(&aggregated(&builtin(), true))).unwrap();
        assert!(aggregated.contains(r#""subresources":[{"subresource":"binding","responseKind":{"group":"","version":"","kind":"Binding"},"verbs":["create"]},{"subresource":"eviction","responseKind":{"group":"policy","version":"v1","kind":"Eviction"},"verbs":["create"]},{"subresource":"status","responseKind":{"group":"","version":"","kind":"Pod"},"verbs":["get","patch","update"]}]"#), "{aggregated}");
        assert!(body.contains(r#"{"name":"pods/eviction","singularName":"","namespaced":true,"group":"policy","version":"v1","kind":"Eviction","verbs":["create"]}"#), "{body}");
    }

    /// The hashes kube 1.33 serves (docs/apiserver-discovery.md §3).
    #[test]
    fn storage_version_hashes_are_kubes() {
        let hash = |p: &str| storage_version_hash(crate::resources::find("", "v1", p).unwrap());
        assert_eq!(hash("configmaps"), "qFsyl6wFWjQ=");
        assert_eq!(hash("namespaces"), "Q3oi5N2YM8M=");
        assert_eq!(hash("secrets"), "S6u1pOWzb84=");
        assert_eq!(hash("serviceaccounts"), "pbx9ZvyFpBE=");
        assert_eq!(hash("pods"), "xPOwRZ+Yhw8=");
    }

    #[test]
    fn aggregated_discovery_is_asked_for_by_accept() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json, */*"));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        let body = String::from_utf8(go_json(&aggregated(&builtin(), true))).unwrap();
        assert!(body.starts_with(r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"creationTimestamp":null},"versions":[{"version":"v1","resources":[{"resource":"configmaps","responseKind":{"group":"","version":"","kind":"ConfigMap"},"scope":"Namespaced","singularResource":"configmap","verbs":["#), "{body}");
    }
}
