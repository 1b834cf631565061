//! Authorization (`--authorization-mode`): `system:masters` first, then each mode in order until
//! one allows — AlwaysAllow, AlwaysDeny, Node (kubelets: the `system:node` rules and the objects
//! of the pods bound to them) and RBAC over the Roles, ClusterRoles and their bindings the watch
//! caches hold, evaluated as kube's `rbac` authorizer does. A denial is kube's 403. The same rule
//! logic gives the escalation checks on RBAC writes (a user grants only what it holds, unless it
//! may `escalate` or `bind`) and the rules review.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use serde_json::Value;

use super::{Request, User, NODES, NODE_PREFIX};
use crate::resources::{self, Resource};
use crate::rest::Api;
use crate::status::{self, Details, Status};

/// One `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Node,
    Rbac,
}

/// The modes in order.
#[derive(Debug, Clone)]
pub struct Authorizer {
    pub modes: Vec<Mode>,
}

impl Default for Authorizer {
    fn default() -> Self {
        Authorizer { modes: vec![Mode::AlwaysAllow] }
    }
}

/// A decision with kube's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny(String),
    NoOpinion(String),
}

impl Authorizer {
    /// `--authorization-mode`'s value (kube's names; each at most once).
    pub fn parse(modes: &[String]) -> Result<Authorizer, String> {
        let mut out = Vec::new();
        for m in modes.iter().map(|m| m.trim()).filter(|m| !m.is_empty()) {
            let mode = match m {
                "AlwaysAllow" => Mode::AlwaysAllow,
                "AlwaysDeny" => Mode::AlwaysDeny,
                "Node" => Mode::Node,
                "RBAC" => Mode::Rbac,
                "ABAC" | "Webhook" => {
                    return Err(format!("authorization mode {m:?} is not supported by keel-apiserver"))
                }
                other => return Err(format!("authorization-mode {other:?} is not a valid mode")),
            };
            if out.contains(&mode) {
                return Err(format!("authorization-mode {m:?} has mode specified more than once"));
            }
            out.push(mode);
        }
        if out.is_empty() {
            return Err("at least one authorization-mode must be passed".into());
        }
        Ok(Authorizer { modes: out })
    }

    /// What the modes decide on `req` by `user`, with the reasons kube gives.
    pub fn decide(&self, api: &Api, user: &User, req: &Request) -> Decision {
        if user.is_superuser() {
            return Decision::Allow(String::new());
        }
        let mut reasons = Vec::new();
        for mode in &self.modes {
            let d = match mode {
                Mode::AlwaysAllow => Decision::Allow(String::new()),
                Mode::AlwaysDeny => Decision::NoOpinion("Everything is forbidden.".into()),
                Mode::Node => node(api, user, req),
                Mode::Rbac => rbac(api, user, req),
            };
            match d {
                Decision::NoOpinion(r) => {
                    if !r.is_empty() {
                        reasons.push(r);
                    }
                }
                d => return d,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }

    /// Ok if `user` may do `req`, else kube's 403.
    pub fn authorize(&self, api: &Api, user: &User, req: &Request) -> Result<(), Status> {
        match self.decide(api, user, req) {
            Decision::Allow(_) => Ok(()),
            Decision::Deny(reason) | Decision::NoOpinion(reason) => Err(forbidden(user, req, &reason)),
        }
    }
}

/// kube's 403 for `req` by `user` (`responsewriters.Forbidden`).
pub fn forbidden(user: &User, req: &Request, reason: &str) -> Status {
    let q = status::go_quote;
    let mut why = if !req.resource_request {
        format!("User {} cannot {} path {}", q(&user.name), req.verb, q(&req.path))
    } else {
        let scope = if req.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", q(&req.namespace))
        };
        format!(
            "User {} cannot {} resource {} in API group {} {scope}",
            q(&user.name),
            req.verb,
            q(&req.resource_path()),
            q(&req.api_group)
        )
    };
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let gr = status::GroupResource { group: &req.api_group, resource: &req.resource };
    let message = if req.resource.is_empty() {
        format!("forbidden: {why}")
    } else if req.name.is_empty() {
        format!("{gr} is forbidden: {why}")
    } else {
        format!("{gr} {} is forbidden: {why}", q(&req.name))
    };
    let details = Details {
        name: req.name.clone(),
        group: req.api_group.clone(),
        kind: req.resource.clone(),
        ..Default::default()
    };
    Status::failure(403, "Forbidden", message, Some(details))
}

fn rbac_resource(plural: &str) -> &'static Resource {
    resources::find("rbac.authorization.k8s.io", "v1", plural).expect("RBAC resources are served")
}

/// Every object of RBAC's `plural` (in `namespace`) the cache holds, decoded once.
fn cached<T: serde::de::DeserializeOwned + Send + Sync + 'static>(
    api: &Api,
    plural: &str,
    namespace: Option<&str>,
) -> Vec<Arc<T>> {
    api.cached_list(rbac_resource(plural), namespace).iter().filter_map(|o| o.decoded::<T>()).collect()
}

/// Whether `subject` (of a binding in `namespace`) names `user` (kube's `appliesToUser`).
fn applies(subject: &Subject, user: &User, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace);
            !ns.is_empty() && super::service_account(&user.name) == Some((ns, subject.name.as_str()))
        }
        _ => false,
    }
}

fn describe_subject(subject: &Subject, namespace: &str) -> String {
    let q = status::go_quote;
    match subject.kind.as_str() {
        "ServiceAccount" => {
            let ns = subject.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace);
            format!("{} {}", subject.kind, q(&format!("{}/{ns}", subject.name)))
        }
        _ => format!("{} {}", subject.kind, q(&subject.name)),
    }
}

/// The rules a role reference resolves to, in a binding of `namespace` (empty for a
/// ClusterRoleBinding), or kube's error for a missing role.
pub fn role_rules(api: &Api, role: &RoleRef, namespace: &str) -> Result<Vec<PolicyRule>, String> {
    let q = status::go_quote;
    match role.kind.as_str() {
        "Role" => api
            .cached(rbac_resource("roles"), Some(namespace), &role.name)
            .and_then(|o| o.decoded::<Role>())
            .map(|r| r.rules.clone().unwrap_or_default())
            .ok_or_else(|| format!("role.rbac.authorization.k8s.io {} not found", q(&role.name))),
        "ClusterRole" => api
            .cached(rbac_resource("clusterroles"), None, &role.name)
            .and_then(|o| o.decoded::<ClusterRole>())
            .map(|r| r.rules.clone().unwrap_or_default())
            .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {} not found", q(&role.name))),
        other => Err(format!("unsupported role reference kind: {}", q(other))),
    }
}

/// Visits every rule that applies to `user` in `namespace` (cluster-wide bindings first), with
/// a description of where it comes from, until `visit` returns true; the errors met.
fn visit_rules(
    api: &Api,
    user: &User,
    namespace: &str,
    mut visit: impl FnMut(&dyn Fn() -> String, &PolicyRule) -> bool,
) -> Vec<String> {
    let cluster = cached::<ClusterRoleBinding>(api, "clusterrolebindings", None);
    let local =
        if namespace.is_empty() { Vec::new() } else { cached::<RoleBinding>(api, "rolebindings", Some(namespace)) };
    // (kind, name as kube shows it, role, subjects, namespace), cluster-wide first.
    let bindings = cluster
        .iter()
        .map(|b| ("ClusterRoleBinding", b.metadata.name.clone().unwrap_or_default(), &b.role_ref, &b.subjects, ""))
        .chain(local.iter().map(|b| {
            let name = format!("{}/{namespace}", b.metadata.name.as_deref().unwrap_or(""));
            ("RoleBinding", name, &b.role_ref, &b.subjects, namespace)
        }));
    let mut errors = Vec::new();
    for (kind, name, role, subjects, ns) in bindings {
        let Some(subject) = subjects.iter().flatten().find(|s| applies(s, user, ns)) else { continue };
        match role_rules(api, role, ns) {
            Ok(rules) => {
                let q = status::go_quote;
                let source = || {
                    format!(
                        "{kind} {} of {} {} to {}",
                        q(&name),
                        role.kind,
                        q(&role.name),
                        describe_subject(subject, ns)
                    )
                };
                if rules.iter().any(|r| visit(&source, r)) {
                    return errors;
                }
            }
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// Every rule that applies to `user` in `namespace`, and the errors met resolving them.
pub fn rules_for(api: &Api, user: &User, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules = Vec::new();
    let errors = visit_rules(api, user, namespace, |_, r| {
        rules.push(r.clone());
        false
    });
    (rules, errors)
}

/// kube's aggregate of errors: one as it is, several in brackets.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn rbac(api: &Api, user: &User, req: &Request) -> Decision {
    let mut allowed = None;
    let errors = visit_rules(api, user, &req.namespace, |source, rule| {
        let ok = allows(req, rule);
        if ok {
            allowed = Some(source());
        }
        ok
    });
    if let Some(source) = allowed {
        return Decision::Allow(format!("RBAC: allowed by {source}"));
    }
    if errors.is_empty() {
        Decision::NoOpinion(String::new())
    } else {
        Decision::NoOpinion(format!("RBAC: {}", aggregate(&errors)))
    }
}

fn has(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == item)
}

/// Whether `rule` allows `req` (kube's `RuleAllows`).
pub fn allows(req: &Request, rule: &PolicyRule) -> bool {
    let verbs = &rule.verbs;
    if !(has(verbs, "*") || has(verbs, &req.verb)) {
        return false;
    }
    if !req.resource_request {
        return rule
            .non_resource_urls
            .iter()
            .flatten()
            .any(|u| u == "*" || *u == req.path || u.strip_suffix('*').is_some_and(|p| req.path.starts_with(p)));
    }
    let groups = rule.api_groups.as_deref().unwrap_or(&[]);
    if !(has(groups, "*") || has(groups, &req.api_group)) {
        return false;
    }
    let combined = req.resource_path();
    let resources = rule.resources.as_deref().unwrap_or(&[]);
    let resource_ok = resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!req.subresource.is_empty()
                && r.len() == req.subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(&req.subresource))
    });
    if !resource_ok {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => has(names, &req.name),
    }
}

/// The rules kube's Node authorizer grants every kubelet (the `system:node` role's).
fn node_rules() -> &'static [PolicyRule] {
    static RULES: std::sync::OnceLock<Vec<PolicyRule>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| super::bootstrap::cluster_role_rules("system:node"))
}

/// The Node authorizer: a kubelet (`system:node:<name>` in `system:nodes`) may read the
/// secrets, config maps, claims and volumes of the pods bound to its node and ask tokens for
/// their service accounts, and otherwise do what the `system:node` rules say.
fn node(api: &Api, user: &User, req: &Request) -> Decision {
    let Some(node) = user.name.strip_prefix(NODE_PREFIX) else { return Decision::NoOpinion(String::new()) };
    if !user.groups.iter().any(|g| g == NODES) {
        return Decision::NoOpinion(String::new());
    }
    if node.is_empty() {
        return Decision::NoOpinion("unknown node".into());
    }
    if req.resource_request && req.api_group.is_empty() {
        let graph = match (req.resource.as_str(), req.subresource.as_str()) {
            ("secrets" | "configmaps" | "persistentvolumeclaims", "") => {
                Some(matches!(req.verb.as_str(), "get" | "list" | "watch"))
            }
            ("persistentvolumes", "") => Some(req.verb == "get"),
            ("serviceaccounts", "token") => Some(req.verb == "create"),
            _ => None,
        };
        if let Some(verb_ok) = graph {
            if !verb_ok || req.name.is_empty() {
                return Decision::NoOpinion(format!(
                    "can only {} {}",
                    if req.resource == "serviceaccounts" {
                        "create tokens for individual service accounts"
                    } else {
                        "read resources of this type"
                    },
                    "bound to this node's pods"
                ));
            }
            return if referenced(api, node, req) {
                Decision::Allow(String::new())
            } else {
                Decision::NoOpinion(format!("no relationship found between node '{node}' and this object"))
            };
        }
    }
    if node_rules().iter().any(|r| allows(req, r)) {
        return Decision::Allow(String::new());
    }
    Decision::NoOpinion(String::new())
}

/// Whether a pod bound to `node` references the object `req` names.
fn referenced(api: &Api, node: &str, req: &Request) -> bool {
    let pods = resources::find("", "v1", "pods").expect("pods are served");
    let ns = (!req.namespace.is_empty()).then_some(req.namespace.as_str());
    api.cached_list(pods, ns).iter().any(|o| {
        let pod = o.json(pods);
        pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node) && pod_references(&pod, req)
    })
}

fn pod_references(pod: &Value, req: &Request) -> bool {
    let spec = &pod["spec"];
    let name = req.name.as_str();
    let is = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str) == Some(name);
    let containers = || {
        ["containers", "initContainers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|k| spec[k].as_array().into_iter().flatten())
    };
    let volumes = || spec["volumes"].as_array().into_iter().flatten();
    match req.resource.as_str() {
        "secrets" => {
            spec["imagePullSecrets"].as_array().into_iter().flatten().any(|s| is(s, "/name"))
                || volumes().any(|v| {
                    is(v, "/secret/secretName")
                        || v.pointer("/projected/sources")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .any(|s| is(s, "/secret/name"))
                })
                || containers().any(|c| {
                    c["envFrom"].as_array().into_iter().flatten().any(|e| is(e, "/secretRef/name"))
                        || c["env"].as_array().into_iter().flatten().any(|e| is(e, "/valueFrom/secretKeyRef/name"))
                })
        }
        "configmaps" => {
            volumes().any(|v| {
                is(v, "/configMap/name")
                    || v.pointer("/projected/sources")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .any(|s| is(s, "/configMap/name"))
            }) || containers().any(|c| {
                c["envFrom"].as_array().into_iter().flatten().any(|e| is(e, "/configMapRef/name"))
                    || c["env"].as_array().into_iter().flatten().any(|e| is(e, "/valueFrom/configMapKeyRef/name"))
            })
        }
        "persistentvolumeclaims" => volumes().any(|v| is(v, "/persistentVolumeClaim/claimName")),
        "serviceaccounts" => {
            let sa = spec.get("serviceAccountName").and_then(Value::as_str).unwrap_or("default");
            sa == name
        }
        _ => false,
    }
}

/// One rule broken down into atomic rules (one verb, group, resource, name or URL), in kube's
/// order (`BreakdownRule`).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &str| Some(vec![s.to_string()]);
    let mut out = Vec::new();
    for g in rule.api_groups.iter().flatten() {
        for r in rule.resources.iter().flatten() {
            for v in &rule.verbs {
                let atomic =
                    PolicyRule { api_groups: one(g), resources: one(r), verbs: vec![v.clone()], ..Default::default() };
                match rule.resource_names.as_deref() {
                    Some(names) if !names.is_empty() => {
                        out.extend(names.iter().map(|n| PolicyRule { resource_names: one(n), ..atomic.clone() }))
                    }
                    _ => out.push(atomic),
                }
            }
        }
    }
    for u in rule.non_resource_urls.iter().flatten() {
        for v in &rule.verbs {
            out.push(PolicyRule { non_resource_urls: one(u), verbs: vec![v.clone()], ..Default::default() });
        }
    }
    out
}

/// Whether `owner` covers all of atomic rule `wanted` (kube's `ruleCovers`).
fn covers(owner: &PolicyRule, wanted: &PolicyRule) -> bool {
    let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
    let all = |owned: &[String], asked: &[String]| has(owned, "*") || asked.iter().all(|a| has(owned, a));
    let (o_res, w_res) = (list(&owner.resources), list(&wanted.resources));
    let resources = has(&o_res, "*")
        || w_res
            .iter()
            .all(|r| has(&o_res, r) || r.split_once('/').is_some_and(|(_, sub)| has(&o_res, &format!("*/{sub}"))));
    let (o_urls, w_urls) = (list(&owner.non_resource_urls), list(&wanted.non_resource_urls));
    let urls = w_urls
        .iter()
        .all(|u| o_urls.iter().any(|o| o == "*" || o == u || o.strip_suffix('*').is_some_and(|p| u.starts_with(p))));
    let (o_names, w_names) = (list(&owner.resource_names), list(&wanted.resource_names));
    let names = o_names.is_empty() || (!w_names.is_empty() && w_names.iter().all(|n| has(&o_names, n)));
    all(&owner.verbs, &wanted.verbs)
        && all(&list(&owner.api_groups), &list(&wanted.api_groups))
        && resources
        && urls
        && names
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| status::go_quote(s)).collect::<Vec<_>>().join(" "))
}

/// kube's `CompactString` of a rule.
fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (name, l) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
    ] {
        if let Some(l) = l.as_ref().filter(|l| !l.is_empty()) {
            parts.push(format!("{name}:{}", go_list(l)));
        }
    }
    if !r.verbs.is_empty() {
        parts.push(format!("Verbs:{}", go_list(&r.verbs)));
    }
    format!("{{{}}}", parts.join(", "))
}

/// The atomic rules of `wanted` that `owned` does not cover, compacted as kube compacts them
/// (the verbs of one group, resource and name together).
fn missing(owned: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for atomic in wanted.iter().flat_map(breakdown) {
        if owned.iter().any(|o| covers(o, &atomic)) {
            continue;
        }
        let simple = atomic.non_resource_urls.is_none();
        let same = out.iter_mut().find(|r| {
            simple
                && r.non_resource_urls.is_none()
                && r.api_groups == atomic.api_groups
                && r.resources == atomic.resources
                && r.resource_names == atomic.resource_names
        });
        match same {
            Some(r) => r.verbs.extend(atomic.verbs),
            None => out.push(atomic),
        }
    }
    out
}

/// kube's escalation check: Ok if `user` holds every rule of `wanted` in `namespace`, else the
/// message kube refuses the write with.
pub fn confirm_no_escalation(api: &Api, user: &User, namespace: &str, wanted: &[PolicyRule]) -> Result<(), String> {
    let (owned, errors) = rules_for(api, user, namespace);
    let lacking = missing(&owned, wanted);
    if lacking.is_empty() {
        return Ok(());
    }
    let mut described: Vec<String> = lacking.iter().map(compact_string).collect();
    described.sort();
    described.dedup();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        status::go_quote(&user.name),
        go_list(&user.groups),
        described.join("\n")
    );
    if !errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
    }
    Err(message)
}

/// kube's escalation prevention on an RBAC write of `new` (over `old`) by the current user: a
/// role's rules must be the user's own unless it may `escalate` the role (an aggregation rule
/// needs everything); a binding's role must be the user's own unless it may `bind` the role.
/// Members of `system:masters` are not checked.
pub fn guard_rbac_write(api: &Api, r: &Resource, new: &Value, old: Option<&Value>) -> Result<(), Status> {
    use crate::resources::Strategy;
    if !matches!(r.strategy, Strategy::Role(_) | Strategy::Binding(_)) {
        return Ok(());
    }
    let user = super::current();
    if user.is_superuser() {
        return Ok(());
    }
    let namespace = crate::meta::get(new, "namespace").to_string();
    let name = crate::meta::get(new, "name").to_string();
    let gr = status::GroupResource { group: r.group, resource: r.plural };
    let refuse = |why: String| status::forbidden(gr, &name, &why);
    let may = |verb: &str, resource: &str, role: &str, ns: &str| {
        let req = Request {
            resource_request: true,
            verb: verb.into(),
            api_group: r.group.into(),
            api_version: "v1".into(),
            namespace: ns.into(),
            resource: resource.into(),
            name: role.into(),
            ..Request::default()
        };
        matches!(api.auth.authz.decide(api, &user, &req), Decision::Allow(_))
    };
    if r.strategy == Strategy::Role(true) || r.strategy == Strategy::Role(false) {
        if may("escalate", r.plural, &name, &namespace) {
            return Ok(());
        }
        if new.get("aggregationRule").is_some_and(|a| !a.is_null()) {
            let everything = PolicyRule {
                api_groups: Some(vec!["*".into()]),
                resources: Some(vec!["*".into()]),
                verbs: vec!["*".into()],
                ..Default::default()
            };
            let urls =
                PolicyRule { non_resource_urls: Some(vec!["*".into()]), verbs: vec!["*".into()], ..Default::default() };
            if confirm_no_escalation(api, &user, &namespace, &[everything, urls]).is_err() {
                return Err(refuse("must have cluster-admin privileges to use the aggregationRule".into()));
            }
            return Ok(());
        }
        let rules: Vec<PolicyRule> =
            serde_json::from_value(new.get("rules").cloned().unwrap_or(Value::Null)).unwrap_or_default();
        if old.is_some_and(|o| o.get("rules") == new.get("rules")) {
            return Ok(());
        }
        return confirm_no_escalation(api, &user, &namespace, &rules).map_err(refuse);
    }
    let role: RoleRef = serde_json::from_value(new.get("roleRef").cloned().unwrap_or(Value::Null))
        .map_err(|e| status::bad_request(e.to_string()))?;
    if old.is_some_and(|o| o.get("subjects") == new.get("subjects")) {
        return Ok(());
    }
    let plural = if role.kind == "Role" { "roles" } else { "clusterroles" };
    if may("bind", plural, &role.name, &namespace) {
        return Ok(());
    }
    // A binding to a role that does not exist is refused as kube refuses it: the role not found.
    let rules = role_rules(api, &role, &namespace).map_err(|_| {
        status::not_found(status::GroupResource { group: "rbac.authorization.k8s.io", resource: plural }, &role.name)
    })?;
    confirm_no_escalation(api, &user, &namespace, &rules).map_err(refuse)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        PolicyRule {
            api_groups: v(groups),
            resources: v(resources),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            resource_names: if names.is_empty() { None } else { v(names) },
            ..Default::default()
        }
    }

    fn req(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Request {
        Request {
            resource_request: true,
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "ns".into(),
            ..Default::default()
        }
    }

    #[test]
    fn rules_allow_as_kubes_rule_allows() {
        let pods = rule(&[""], &["pods"], &["get", "list"], &[]);
        assert!(allows(&req("get", "", "pods", "", "x"), &pods));
        assert!(!allows(&req("delete", "", "pods", "", "x"), &pods));
        assert!(!allows(&req("get", "apps", "pods", "", "x"), &pods));
        assert!(!allows(&req("get", "", "pods", "log", "x"), &pods), "a subresource is its own resource");
        let logs = rule(&[""], &["*/log"], &["get"], &[]);
        assert!(allows(&req("get", "", "pods", "log", "x"), &logs));
        assert!(!allows(&req("get", "", "pods", "", "x"), &logs));
        let named = rule(&["*"], &["*"], &["*"], &["a"]);
        assert!(allows(&req("update", "apps", "deployments", "", "a"), &named));
        assert!(!allows(&req("update", "apps", "deployments", "", "b"), &named));
        assert!(!allows(&req("list", "apps", "deployments", "", ""), &named), "names never allow a whole list");
        let urls = PolicyRule {
            non_resource_urls: Some(vec!["/healthz".into(), "/api/*".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        };
        let path = |p: &str| Request { verb: "get".into(), path: p.into(), ..Default::default() };
        assert!(allows(&path("/healthz"), &urls));
        assert!(allows(&path("/api/v1"), &urls));
        assert!(!allows(&path("/apis"), &urls));
    }

    #[test]
    fn escalation_lists_what_is_missing_as_kube_does() {
        let owned = vec![rule(&[""], &["pods"], &["get", "list"], &[]), rule(&[""], &["*/log"], &["get"], &[])];
        assert!(missing(&owned, &[rule(&[""], &["pods"], &["get"], &[])]).is_empty());
        assert!(missing(&owned, &[rule(&[""], &["pods/log"], &["get"], &[])]).is_empty());
        let lacking = missing(&owned, &[rule(&["", "apps"], &["pods"], &["get", "delete", "watch"], &[])]);
        let text: Vec<String> = lacking.iter().map(compact_string).collect();
        assert_eq!(
            text,
            [
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"watch\"]}",
                "{APIGroups:[\"apps\"], Resources:[\"pods\"], Verbs:[\"get\" \"delete\" \"watch\"]}"
            ]
        );
        let named_owner = vec![rule(&[""], &["secrets"], &["get"], &["a"])];
        assert!(missing(&named_owner, &[rule(&[""], &["secrets"], &["get"], &["a"])]).is_empty());
        assert_eq!(missing(&named_owner, &[rule(&[""], &["secrets"], &["get"], &[])]).len(), 1);
    }

    #[test]
    fn forbidden_messages_are_kubes() {
        let user = User { name: "x".into(), ..User::default() };
        let mut r = req("list", "", "pods", "", "");
        r.namespace = "y".into();
        assert_eq!(
            forbidden(&user, &r, "").message,
            "pods is forbidden: User \"x\" cannot list resource \"pods\" in API group \"\" in the namespace \"y\""
        );
        let r = Request { namespace: String::new(), ..req("get", "apps", "deployments", "scale", "d") };
        assert_eq!(
            forbidden(&user, &r, "").message,
            "deployments.apps \"d\" is forbidden: User \"x\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope"
        );
        let path = Request { verb: "get".into(), path: "/foo".into(), ..Default::default() };
        assert_eq!(forbidden(&user, &path, "no").message, "forbidden: User \"x\" cannot get path \"/foo\": no");
    }
}
