//! Who sends a request and what they may do: authentication ([`authn`]: client certificates,
//! static and service account tokens, anonymous requests, impersonation), authorization
//! ([`authz`]: AlwaysAllow, AlwaysDeny, Node, RBAC), the default roles and bindings
//! ([`bootstrap`]) and the review APIs ([`reviews`]), as kube-apiserver does them.

pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod reviews;

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;

use crate::rest::Query;

/// How this server authenticates and authorizes, and signs the tokens it issues.
pub struct Auth {
    pub authn: authn::Authenticator,
    pub authz: authz::Authorizer,
    /// The service account signing key (`--service-account-signing-key-file`).
    pub signer: Option<Arc<crate::control::tokens::Signer>>,
    /// The issuer tokens are signed as (the first `--service-account-issuer`).
    pub issuer: String,
    /// `--service-account-max-token-expiration`, in seconds.
    pub max_token_expiration: i64,
}

impl Default for Auth {
    /// No authentication and every request allowed: for benches and tests that drive the
    /// registry directly.
    fn default() -> Self {
        Auth {
            authn: authn::Authenticator::default(),
            authz: authz::Authorizer::default(),
            signer: None,
            issuer: String::new(),
            max_token_expiration: i64::MAX,
        }
    }
}

tokio::task_local! {
    /// The user of the request being served (set by `rest::serve` around its work), for the
    /// checks deep in the registry that depend on who asks (RBAC escalation, admission).
    static CURRENT: Arc<User>;
}

/// Runs `work` as a request of `user`.
pub async fn acting_as<F: std::future::Future>(user: Arc<User>, work: F) -> F::Output {
    CURRENT.scope(user, work).await
}

/// The user of the request being served; a superuser outside any (the server's own work).
pub fn current() -> Arc<User> {
    CURRENT.try_with(Arc::clone).unwrap_or_else(|_| Arc::new(User::internal_superuser()))
}

/// kube's superuser group: its members may do everything, whatever the authorizers say.
pub const MASTERS: &str = "system:masters";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The anonymous user and its group.
pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The prefix of a service account's user name.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The prefix of a node's user name, and the nodes' group.
pub const NODE_PREFIX: &str = "system:node:";
pub const NODES: &str = "system:nodes";

/// A request's user (kube's `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// kube's anonymous user.
    pub fn anonymous() -> User {
        User { name: ANONYMOUS.into(), groups: vec![UNAUTHENTICATED.into()], ..User::default() }
    }

    /// An identity of this process (a controller, the scheduler, a simulated kubelet), with the
    /// groups kube's credentials for it carry: a service account's groups, `system:nodes` for a
    /// node, and `system:authenticated`.
    pub fn internal(name: &str) -> User {
        let mut groups = Vec::new();
        if let Some((ns, _)) = service_account(name) {
            groups.push("system:serviceaccounts".to_string());
            groups.push(format!("system:serviceaccounts:{ns}"));
        } else if name.starts_with(NODE_PREFIX) {
            groups.push(NODES.to_string());
        }
        groups.push(AUTHENTICATED.to_string());
        User { name: name.into(), groups, ..User::default() }
    }

    /// The server itself (kube's `system:apiserver`, a member of `system:masters`): its own
    /// writes at start.
    pub fn internal_superuser() -> User {
        User { name: "system:apiserver".into(), groups: vec![MASTERS.into(), AUTHENTICATED.into()], ..User::default() }
    }

    /// A member of `system:masters`.
    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// The user's JSON as the review APIs show it (`authentication.k8s.io/v1` UserInfo).
    pub fn to_json(&self) -> serde_json::Value {
        let mut o = serde_json::Map::new();
        o.insert("username".into(), self.name.clone().into());
        if !self.uid.is_empty() {
            o.insert("uid".into(), self.uid.clone().into());
        }
        if !self.groups.is_empty() {
            o.insert("groups".into(), self.groups.clone().into());
        }
        if !self.extra.is_empty() {
            o.insert("extra".into(), serde_json::to_value(&self.extra).expect("strings encode"));
        }
        serde_json::Value::Object(o)
    }
}

/// The namespace and name of a service account user name (`system:serviceaccount:<ns>:<name>`).
pub fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// What a request asks to do, as kube reads it off the path (`RequestInfo`): the attributes
/// authorization decides on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// A request for a resource (under `/api/v1` or `/apis/<group>/<version>`), or for a path.
    pub resource_request: bool,
    /// The path (non-resource requests are authorized on it).
    pub path: String,
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

/// Path segments that begin a resource path after `/api` (`v1`) or `/apis/<group>`.
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];

impl Request {
    /// The request a method, path (its segments after the leading `/`, decoded) and query make,
    /// as kube's `RequestInfoFactory` reads them.
    pub fn of(method: &Method, path: &str, segs: &[&str], query: &Query) -> Request {
        let non_resource =
            || Request { path: path.to_string(), verb: method.as_str().to_lowercase(), ..Request::default() };
        let (group, rest) = match segs {
            ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
            ["apis", g, rest @ ..] if rest.len() >= 2 => (*g, rest),
            _ => return non_resource(),
        };
        let mut r = Request {
            resource_request: true,
            path: path.to_string(),
            api_group: group.to_string(),
            api_version: rest[0].to_string(),
            ..Request::default()
        };
        let mut parts = &rest[1..];
        if SPECIAL_VERBS.contains(&parts[0]) {
            if parts.len() < 2 {
                return non_resource();
            }
            r.verb = parts[0].to_string();
            parts = &parts[1..];
        } else {
            r.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            r.namespace = parts[1].to_string();
            // `namespaces/<ns>/<resource>...`, but `namespaces/<ns>/status` and `/finalize` are
            // the namespace's own subresources.
            if parts.len() > 2 && !["status", "finalize"].contains(&parts[2]) {
                parts = &parts[2..];
            }
        }
        if let Some(p) = parts.first() {
            r.resource = p.to_string();
        }
        if let Some(p) = parts.get(1) {
            r.name = p.to_string();
        }
        if parts.len() >= 3 && r.verb != "proxy" {
            r.subresource = parts[2].to_string();
        }
        if r.name.is_empty() && r.verb == "get" {
            let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
            r.verb = if watch { "watch" } else { "list" }.to_string();
            // A list or watch of one name is authorized as that name.
            if let Some(name) = query.get("fieldSelector").and_then(|s| exact_name(s)) {
                r.name = name;
            }
        }
        if r.name.is_empty() && r.verb == "delete" {
            r.verb = "deletecollection".to_string();
        }
        r
    }

    /// The request a call of the registry makes (the in-process controllers' requests), read
    /// off the path it would have.
    pub fn of_target(
        method: &Method,
        r: &crate::resources::Resource,
        target: &crate::rest::Target,
        query: &Query,
    ) -> Request {
        use crate::rest::Target;
        let mut segs: Vec<&str> =
            if r.group.is_empty() { vec!["api", r.version] } else { vec!["apis", r.group, r.version] };
        let (namespace, name, sub) = match target {
            Target::Collection { namespace } => (namespace.as_deref(), None, None),
            Target::Object { namespace, name, sub } => (namespace.as_deref(), Some(name.as_str()), *sub),
        };
        if let Some(ns) = namespace.filter(|_| r.namespaced) {
            segs.extend(["namespaces", ns]);
        }
        segs.push(r.plural);
        segs.extend(name);
        segs.extend(sub);
        let path = format!("/{}", segs.join("/"));
        Request::of(method, &path, &segs, query)
    }

    /// `<resource>` or `<resource>/<subresource>`.
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=x`, `metadata.name==x`), when it
/// is a valid path segment.
fn exact_name(selector: &str) -> Option<String> {
    let name = selector.split(',').find_map(|t| {
        let (f, v) = t.split_once("==").or_else(|| t.split_once('=')).filter(|(f, _)| !f.ends_with('!'))?;
        (f.trim() == "metadata.name").then(|| v.trim())
    })?;
    let valid = !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('%');
    valid.then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, path: &str, query: &[(&str, &str)]) -> Request {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let query: Query = query.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Request::of(&method, path, &segs, &query)
    }

    #[test]
    fn requests_read_as_kubes_request_info() {
        let r = req(Method::GET, "/api/v1/namespaces/a/pods", &[]);
        assert_eq!((r.verb.as_str(), r.namespace.as_str(), r.resource.as_str()), ("list", "a", "pods"));
        let r = req(Method::GET, "/api/v1/namespaces/a/pods", &[("watch", "true")]);
        assert_eq!(r.verb, "watch");
        let r = req(Method::GET, "/api/v1/watch/namespaces/a/pods/x", &[]);
        assert_eq!((r.verb.as_str(), r.name.as_str()), ("watch", "x"));
        let r = req(Method::GET, "/api/v1/namespaces/a/pods", &[("fieldSelector", "metadata.name=x")]);
        assert_eq!((r.verb.as_str(), r.name.as_str()), ("list", "x"));
        let r = req(Method::POST, "/api/v1/namespaces/a/pods/x/eviction", &[]);
        assert_eq!((r.verb.as_str(), r.resource_path().as_str()), ("create", "pods/eviction"));
        let r = req(Method::DELETE, "/apis/apps/v1/namespaces/a/deployments", &[]);
        assert_eq!((r.verb.as_str(), r.api_group.as_str()), ("deletecollection", "apps"));
        let r = req(Method::PUT, "/api/v1/namespaces/a/finalize", &[]);
        assert_eq!((r.namespace.as_str(), r.resource.as_str(), r.name.as_str()), ("a", "namespaces", "a"));
        assert_eq!(r.subresource, "finalize");
        let r = req(Method::GET, "/api/v1/namespaces/a", &[]);
        assert_eq!((r.verb.as_str(), r.resource.as_str(), r.name.as_str()), ("get", "namespaces", "a"));
        let r = req(Method::GET, "/api/v1/nodes/n/proxy/services/x", &[]);
        assert_eq!((r.resource.as_str(), r.subresource.as_str()), ("nodes", "proxy"));
        for path in ["/api", "/api/v1", "/apis/apps/v1", "/version", "/healthz"] {
            let r = req(Method::GET, path, &[]);
            assert!(!r.resource_request, "{path}");
            assert_eq!((r.verb.as_str(), r.path.as_str()), ("get", path));
        }
    }

    #[test]
    fn internal_identities_carry_kubes_groups() {
        let sa = User::internal("system:serviceaccount:kube-system:deployment-controller");
        assert_eq!(sa.groups, ["system:serviceaccounts", "system:serviceaccounts:kube-system", AUTHENTICATED]);
        assert_eq!(User::internal("system:node:n1").groups, [NODES, AUTHENTICATED]);
        assert_eq!(User::internal("system:kube-scheduler").groups, [AUTHENTICATED]);
        assert_eq!(service_account("system:serviceaccount:a:b"), Some(("a", "b")));
        assert_eq!(service_account("system:serviceaccount:a"), None);
    }
}
