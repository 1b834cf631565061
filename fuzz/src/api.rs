//! keel-apiserver's request path under arbitrary requests: each input is a request (a first
//! line `METHOD PATH?QUERY`, header lines, an empty line, the body) sent through the whole
//! router in process — authentication (any `Authorization` or `Impersonate-*` header the input
//! carries), authorization, routing, decoding (JSON, YAML, kube's protobuf, patches),
//! validation, admission and storage — on a keel-apiserver started once per process on its
//! embedded keel member, with the API alone (no controllers) and AlwaysAllow, so the request's
//! own handling is what is exercised. It must never panic, and a refused request (4xx or 5xx)
//! must leave the store at the revision it found.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use serde_json::json;
use tower::ServiceExt;

use keel_apiserver::storage::{At, ListOptions};

use super::{APPLIED, REFUSED};

struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    api: keel_apiserver::rest::Api,
    _dir: tempfile::TempDir,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let args = [
            "keel-apiserver".to_string(),
            "--secure-port=0".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--data-dir={}", dir.path().display()),
            "--controllers=".into(),
            "--authorization-mode=AlwaysAllow".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--etcd-compaction-interval=0".into(),
        ];
        let flags = <keel_apiserver::run::Flags as clap::Parser>::parse_from(args);
        let running = runtime.block_on(keel_apiserver::run::start(&flags)).expect("keel-apiserver starts");
        let api = running.api.clone();
        let shared =
            keel_apiserver::server::Shared { api: api.clone(), audit: None, address: running.addr.to_string() };
        let router = keel_apiserver::server::router(Arc::new(shared));
        // The server keeps running for the process's life.
        std::mem::forget(running);
        Server { runtime, router, api, _dir: dir }
    })
}

/// The request an input spells, if it spells one.
fn request(data: &[u8]) -> Option<http::Request<Body>> {
    let text_end = data.windows(2).position(|w| w == b"\n\n").map_or(data.len(), |i| i + 1);
    let (head, body) = data.split_at(text_end);
    let body = body.strip_prefix(b"\n").unwrap_or(body);
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let (method, target) = lines.next()?.split_once(' ')?;
    let mut req = http::Request::builder().method(http::Method::from_bytes(method.as_bytes()).ok()?).uri(target);
    for line in lines {
        if let Some((k, v)) = line.split_once(": ") {
            if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
                req = req.header(k, v);
            }
        }
    }
    req.body(Body::from(body.to_vec())).ok()
}

/// One request through the router. Whether it was understood (its answer is not a 400, 404,
/// 405, 406 or 415: the driver keeps such inputs to mutate further).
pub fn api_request(data: &[u8]) -> bool {
    let Some(req) = request(data) else { return false };
    let s = server();
    let watch = req.uri().query().is_some_and(|q| q.contains("watch=")) || req.uri().path().contains("/watch/");
    let write = req.method() != http::Method::GET && req.method() != http::Method::HEAD;
    let revision = || s.runtime.block_on(s.api.storage.current_revision("/registry/")).expect("the store answers");
    let before = revision();
    let code = s.runtime.block_on(async {
        let answer = s.router.clone().oneshot(req).await.expect("the router answers");
        let code = answer.status().as_u16();
        if !watch {
            // The whole answer is read (a watch's stream is dropped after its headers).
            let _ = axum::body::to_bytes(answer.into_body(), usize::MAX).await;
        }
        code
    });
    if code >= 400 {
        let after = revision();
        if after != before {
            // Something was written and taken back (a service's addresses, say): the store's
            // contents must be what they were.
            let at = |rev| {
                let opts = ListOptions { limit: 0, continue_token: None, at: At::Exact(rev) };
                let page = s.runtime.block_on(s.api.storage.list("/registry/", &opts)).expect("the store lists");
                page.items.into_iter().map(|(k, v)| (k, v.value)).collect::<Vec<_>>()
            };
            assert!(at(before) == at(after), "a request refused with {code} changed the store");
        }
        REFUSED.fetch_add(1, Ordering::Relaxed);
    } else if write {
        APPLIED.fetch_add(1, Ordering::Relaxed);
    }
    !matches!(code, 400 | 404 | 405 | 406 | 415)
}

fn spelled(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {target}\n").into_bytes();
    for (k, v) in headers {
        out.extend(format!("{k}: {v}\n").into_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

pub fn api_request_seeds() -> Vec<Vec<u8>> {
    const JSON: (&str, &str) = ("Content-Type", "application/json");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "labels": {"a": "b"}}, "data": {"k": "v"}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]}});
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d1"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r1"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"}}});
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": {"pods": "3"}}});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "s1"}});
    let body = |v: &serde_json::Value| serde_json::to_vec(v).expect("JSON");
    let ns = "/api/v1/namespaces/default";
    vec![
        spelled("POST", &format!("{ns}/configmaps"), &[JSON], &body(&cm)),
        spelled("POST", &format!("{ns}/pods"), &[JSON], &body(&pod)),
        spelled("POST", "/apis/apps/v1/namespaces/default/deployments", &[JSON], &body(&deploy)),
        spelled("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", &[JSON], &body(&role)),
        spelled("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", &[JSON], &body(&review)),
        spelled("POST", &format!("{ns}/resourcequotas"), &[JSON], &body(&quota)),
        spelled("POST", &format!("{ns}/serviceaccounts"), &[JSON], &body(&sa)),
        spelled("POST", &format!("{ns}/serviceaccounts/s1/token"), &[JSON], br#"{"spec":{"expirationSeconds":3600}}"#),
        spelled(
            "POST",
            &format!("{ns}/configmaps"),
            &[("Content-Type", "application/vnd.kubernetes.protobuf")],
            &keel_apiserver::proto::encode(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c2"}, "data": {"x": "y"}}),
            )
            .expect("a ConfigMap encodes"),
        ),
        spelled(
            "POST",
            &format!("{ns}/configmaps"),
            &[("Content-Type", "application/yaml")],
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c3\ndata:\n  k: v\n",
        ),
        spelled("PUT", &format!("{ns}/configmaps/c1"), &[JSON], &body(&cm)),
        spelled(
            "PATCH",
            &format!("{ns}/configmaps/c1"),
            &[("Content-Type", "application/merge-patch+json")],
            br#"{"data":{"k":"w"}}"#,
        ),
        spelled(
            "PATCH",
            &format!("{ns}/configmaps/c1"),
            &[("Content-Type", "application/json-patch+json")],
            br#"[{"op":"add","path":"/data/x","value":"y"}]"#,
        ),
        spelled(
            "PATCH",
            &format!("{ns}/pods/p1"),
            &[("Content-Type", "application/strategic-merge-patch+json")],
            br#"{"metadata":{"labels":{"x":"y"}},"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}"#,
        ),
        spelled(
            "GET",
            &format!("{ns}/configmaps?labelSelector=a%3Db&fieldSelector=metadata.name%3Dc1&limit=1"),
            &[],
            b"",
        ),
        spelled("GET", &format!("{ns}/pods"), &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")], b""),
        spelled("GET", "/apis/apps/v1/deployments?watch=true&resourceVersion=0", &[], b""),
        spelled(
            "GET",
            &format!("{ns}/configmaps/c1"),
            &[("Authorization", "Bearer eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln")],
            b"",
        ),
        spelled("GET", &format!("{ns}/pods"), &[("Impersonate-User", "alice"), ("Impersonate-Group", "dev")], b""),
        spelled("DELETE", &format!("{ns}/configmaps/c1"), &[JSON], br#"{"propagationPolicy":"Foreground"}"#),
        spelled("DELETE", &format!("{ns}/pods?labelSelector=x%3Dy"), &[], b""),
        spelled(
            "GET",
            "/apis",
            &[("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")],
            b"",
        ),
    ]
}
