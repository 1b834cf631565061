//! Audit logging (`--audit-policy-file`, `--audit-log-path`): each request the policy gives a
//! level above None is written as `audit.k8s.io/v1` Event JSON lines, one per stage —
//! RequestReceived, ResponseStarted (watches), ResponseComplete — with the user (and the user it
//! impersonates), the object it names, its response status, and at level Request the request's
//! object, at RequestResponse the response's too; as kube's audit filter writes them.

use std::io::Write;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use crate::auth::{Request, User};

/// How much of a request is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    fn parse(s: &str) -> Result<Level, String> {
        Ok(match s {
            "None" => Level::None,
            "Metadata" => Level::Metadata,
            "Request" => Level::Request,
            "RequestResponse" => Level::RequestResponse,
            other => return Err(format!("invalid audit level {other:?}")),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// One rule of the policy: the level of the requests it matches (every list empty: any).
#[derive(Debug, Clone)]
struct Rule {
    level: Level,
    users: Vec<String>,
    groups: Vec<String>,
    verbs: Vec<String>,
    /// (group, resources, resource names)
    resources: Vec<(String, Vec<String>, Vec<String>)>,
    namespaces: Vec<String>,
    urls: Vec<String>,
    omit: Vec<String>,
}

impl Rule {
    fn matches(&self, user: &User, req: &Request) -> bool {
        let any = |l: &[String], v: &str| l.is_empty() || l.iter().any(|x| x == v);
        if !any(&self.users, &user.name) {
            return false;
        }
        if !self.groups.is_empty() && !user.groups.iter().any(|g| self.groups.contains(g)) {
            return false;
        }
        if !any(&self.verbs, &req.verb) {
            return false;
        }
        if !req.resource_request {
            // A rule about resources or namespaces never matches a path.
            if !self.resources.is_empty() || !self.namespaces.is_empty() {
                return false;
            }
            return self.urls.is_empty()
                || self
                    .urls
                    .iter()
                    .any(|u| *u == req.path || u.strip_suffix('*').is_some_and(|p| req.path.starts_with(p)));
        }
        if !self.urls.is_empty() {
            return false;
        }
        if !any(&self.namespaces, &req.namespace) {
            return false;
        }
        self.resources.is_empty()
            || self.resources.iter().any(|(group, resources, names)| {
                let path = req.resource_path();
                *group == req.api_group
                    && (resources.is_empty()
                        || resources.iter().any(|r| {
                            *r == "*"
                                || *r == path
                                || *r == req.resource && req.subresource.is_empty()
                                || r.strip_prefix("*/").is_some_and(|s| s == req.subresource)
                                || r.strip_suffix("/*").is_some_and(|s| s == req.resource)
                        }))
                    && (names.is_empty() || names.contains(&req.name))
            })
    }
}

/// The policy and where its events go.
pub struct Audit {
    rules: Vec<Rule>,
    omit: Vec<String>,
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").field("rules", &self.rules.len()).finish()
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

impl Audit {
    /// The policy of `yaml` (audit.k8s.io/v1 Policy), its events written to `out`.
    pub fn new(yaml: &str, out: Box<dyn Write + Send>) -> Result<Audit, String> {
        let v: Value = serde_yaml_ng::from_str(yaml).map_err(|e| format!("failed decoding: {e}"))?;
        if v.get("kind").and_then(Value::as_str) != Some("Policy") {
            return Err("the file is not an audit.k8s.io Policy".into());
        }
        let mut rules = Vec::new();
        for r in v.get("rules").and_then(Value::as_array).into_iter().flatten() {
            let level = Level::parse(r.get("level").and_then(Value::as_str).unwrap_or(""))?;
            let resources = r
                .get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|g| {
                    let group = g.get("group").and_then(Value::as_str).unwrap_or("").to_string();
                    (group, strings(g.get("resources")), strings(g.get("resourceNames")))
                })
                .collect();
            rules.push(Rule {
                level,
                users: strings(r.get("users")),
                groups: strings(r.get("userGroups")),
                verbs: strings(r.get("verbs")),
                resources,
                namespaces: strings(r.get("namespaces")),
                urls: strings(r.get("nonResourceURLs")),
                omit: strings(r.get("omitStages")),
            });
        }
        if rules.is_empty() {
            return Err("the policy has no rules".into());
        }
        Ok(Audit { rules, omit: strings(v.get("omitStages")), out: Mutex::new(out) })
    }

    /// The level of a request by `user` (the authenticated one), and the stages it omits.
    pub fn level(&self, user: &User, req: &Request) -> (Level, Vec<String>) {
        match self.rules.iter().find(|r| r.matches(user, req)) {
            Some(r) => (r.level, self.omit.iter().chain(&r.omit).cloned().collect()),
            None => (Level::None, Vec::new()),
        }
    }

    fn write(&self, event: &Value) {
        let mut line = serde_json::to_vec(event).expect("an event encodes");
        line.push(b'\n');
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(&line);
            let _ = out.flush();
        }
    }
}

/// kube's audit timestamps: RFC 3339 with microseconds.
pub fn timestamp() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// A body as JSON: JSON itself, or kube's protobuf decoded (the log shows objects as JSON).
fn json_of(body: &[u8]) -> Option<Value> {
    serde_json::from_slice::<Value>(body).ok().or_else(|| crate::proto::decode_any(body).ok())
}

/// One request's audit record, written stage by stage.
pub struct Record {
    pub level: Level,
    omit: Vec<String>,
    event: Map<String, Value>,
}

impl Record {
    /// The record of a request `req` to `uri` by `user` (acting as `acting` when impersonating).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        level: Level,
        omit: Vec<String>,
        user: &User,
        acting: &User,
        req: &Request,
        uri: &str,
        source: Option<std::net::IpAddr>,
        agent: &str,
    ) -> Record {
        let mut e = Map::new();
        e.insert("kind".into(), json!("Event"));
        e.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        e.insert("level".into(), json!(level.name()));
        e.insert("auditID".into(), json!(crate::meta::uid()));
        e.insert("stage".into(), json!("RequestReceived"));
        e.insert("requestURI".into(), json!(uri));
        e.insert("verb".into(), json!(req.verb));
        e.insert("user".into(), user.to_json());
        if acting != user {
            e.insert("impersonatedUser".into(), acting.to_json());
        }
        e.insert("sourceIPs".into(), json!(source.map(|s| vec![s.to_string()]).unwrap_or_default()));
        if !agent.is_empty() {
            e.insert("userAgent".into(), json!(agent));
        }
        if req.resource_request {
            let mut o = Map::new();
            o.insert("resource".into(), json!(req.resource));
            for (k, v) in [("namespace", &req.namespace), ("name", &req.name), ("apiGroup", &req.api_group)] {
                if !v.is_empty() {
                    o.insert(k.into(), json!(v));
                }
            }
            o.insert("apiVersion".into(), json!(req.api_version));
            if !req.subresource.is_empty() {
                o.insert("subresource".into(), json!(req.subresource));
            }
            e.insert("objectRef".into(), Value::Object(o));
        }
        e.insert("requestReceivedTimestamp".into(), json!(timestamp()));
        Record { level, omit, event: e }
    }

    /// Writes the record at `stage` (unless the policy omits it).
    pub fn stage(&mut self, audit: &Audit, stage: &str) {
        if self.level == Level::None || self.omit.iter().any(|s| s == stage) {
            return;
        }
        self.event.insert("stage".into(), json!(stage));
        self.event.insert("stageTimestamp".into(), json!(timestamp()));
        audit.write(&Value::Object(self.event.clone()));
    }

    /// The request's object: what it names completes the objectRef; it is kept whole at level
    /// Request and above.
    pub fn request_object(&mut self, body: &[u8]) {
        let Some(v) = json_of(body) else { return };
        // The object names what the path may not (a create's name): kube fills the objectRef's
        // empty name, namespace, uid and resourceVersion from it.
        if let Some(Value::Object(o)) = self.event.get_mut("objectRef") {
            for k in ["namespace", "name", "uid", "resourceVersion"] {
                let given = v.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or("");
                if !given.is_empty() && o.get(k).and_then(Value::as_str).unwrap_or("").is_empty() {
                    o.insert(k.into(), json!(given));
                }
            }
        }
        if self.level >= Level::Request {
            self.event.insert("requestObject".into(), v);
        }
    }

    /// The response: its code (and its Status when it failed), its object at RequestResponse.
    pub fn response(&mut self, code: u16, body: Option<&[u8]>) {
        let parsed = body.and_then(json_of);
        let mut status = json!({"metadata": {}, "code": code});
        if code >= 400 {
            if let Some(Value::Object(s)) = &parsed {
                for k in ["status", "message", "reason", "details"] {
                    if let Some(v) = s.get(k) {
                        status[k] = v.clone();
                    }
                }
            }
        }
        self.event.insert("responseStatus".into(), status);
        if self.level >= Level::RequestResponse {
            if let Some(v) = parsed {
                self.event.insert("responseObject".into(), v);
            }
        }
    }

    /// A decision's annotations (`authorization.k8s.io/decision` and `/reason`).
    pub fn decided(&mut self, allowed: bool, reason: &str) {
        let mut a = json!({"authorization.k8s.io/decision": if allowed { "allow" } else { "forbid" }});
        if !reason.is_empty() {
            a["authorization.k8s.io/reason"] = json!(reason);
        }
        self.event.insert("annotations".into(), a);
    }

    /// Admission's annotations, beside the decision's.
    pub fn annotated(&mut self, annotations: &std::collections::BTreeMap<String, String>) {
        let all = self.event.entry("annotations").or_insert_with(|| json!({}));
        for (k, v) in annotations {
            all[k.as_str()] = json!(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_rule_sets_the_level() {
        let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: None\n  nonResourceURLs: [/healthz*, /version]\n- level: RequestResponse\n  resources:\n  - group: \"\"\n    resources: [secrets]\n- level: Metadata\n  userGroups: [system:authenticated]\n";
        let a = Audit::new(policy, Box::new(std::io::sink())).unwrap();
        let user = User::internal("alice");
        let req = |verb: &str, resource: &str| Request {
            resource_request: true,
            verb: verb.into(),
            resource: resource.into(),
            namespace: "ns".into(),
            ..Request::default()
        };
        assert_eq!(a.level(&user, &req("get", "secrets")).0, Level::RequestResponse);
        assert_eq!(a.level(&user, &req("list", "pods")), (Level::Metadata, vec!["RequestReceived".to_string()]));
        let path = Request { verb: "get".into(), path: "/healthz/etcd".into(), ..Request::default() };
        assert_eq!(a.level(&user, &path).0, Level::None);
        assert_eq!(a.level(&User::anonymous(), &req("list", "pods")).0, Level::None);
        assert!(Audit::new("kind: Policy\nrules:\n- level: Loud\n", Box::new(std::io::sink())).is_err());
    }
}
