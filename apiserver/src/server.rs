//! The HTTP surface: kube's paths, routed to discovery, health checks and the generic registry.
//! Anything else answers kube's 404 Status.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::routing::get;
use axum::Router;
use http::{header, Method, StatusCode};

use crate::discovery;
use crate::resources;
use crate::rest::{self, Api, Query, Target};
use crate::status;

/// What the handlers share.
pub struct Shared {
    pub api: Api,
    /// `--audit-policy-file` and `--audit-log-path`: where requests are audited, if anywhere.
    pub audit: Option<Arc<crate::audit::Audit>>,
    /// The address clients reach this server at (`/api`'s `serverAddressByClientCIDRs`).
    pub address: String,
}

/// How long a health check waits for the store.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/version", get(|| async { pretty(&discovery::version()) }))
        .route("/livez", get(|| async { text(StatusCode::OK, "ok") }))
        .route("/healthz", get(health))
        .route("/readyz", get(health))
        .fallback(dispatch)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// The headers a request's credentials and impersonation travel in, removed once read.
const CREDENTIAL_HEADERS: [&str; 4] = ["authorization", "impersonate-user", "impersonate-group", "impersonate-uid"];

/// Every request, before anything else: who sends it (401 if its credentials fail), whom it
/// acts as (impersonation), and whether that user may do what it asks (403) — kube's
/// authentication, impersonation and authorization filters. The user travels on in the
/// request's extensions.
async fn guard(State(s): State<Arc<Shared>>, mut req: Request, next: axum::middleware::Next) -> http::Response<Body> {
    let api = &s.api;
    let conn = req.extensions().get::<axum::extract::ConnectInfo<keel_store::tls::ConnInfo>>().map(|c| c.0.clone());
    let chain = conn.as_ref().and_then(|c| c.chain.clone());
    let authenticated = match api.auth.authn.authenticate(api, req.headers(), chain.as_deref()) {
        Ok(u) => u,
        Err(e) => return rest::failure(e),
    };
    let user = match crate::auth::authn::impersonated(authenticated.clone(), req.headers(), |u, r| {
        api.auth.authz.authorize(api, u, r)
    }) {
        Ok(u) => u,
        Err(e) => return rest::failure(e),
    };
    let headers = req.headers_mut();
    for h in CREDENTIAL_HEADERS {
        headers.remove(h);
    }
    let extras: Vec<_> = headers.keys().filter(|k| k.as_str().starts_with("impersonate-extra-")).cloned().collect();
    for k in extras {
        headers.remove(k);
    }
    let path = req.uri().path().to_string();
    let segs = segments(&path);
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let asked = crate::auth::Request::of(req.method(), &path, &segs, &query_of(req.uri()));
    // The audit record, when the policy asks for one (kube's audit filter sees the
    // authenticated user, and the one impersonated beside it).
    let mut record = s.audit.as_ref().and_then(|audit| {
        let (level, omit) = audit.level(&authenticated, &asked);
        let agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let uri = req.uri().to_string();
        let source = conn.as_ref().map(|c| c.addr.ip());
        let record = crate::audit::Record::new(level, omit, &authenticated, &user, &asked, &uri, source, agent);
        (level != crate::audit::Level::None).then_some((audit.clone(), record))
    });
    if let Some((audit, rec)) = record.as_mut() {
        // The body is read for a Request-level record, and for a create or update, whose object
        // completes the record's objectRef (as kube's LogRequestObject does at Metadata).
        if rec.level >= crate::audit::Level::Request || matches!(asked.verb.as_str(), "create" | "update") {
            let (parts, body) = req.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, rest::MAX_BODY_BYTES).await else {
                return rest::failure(rest::body_too_large());
            };
            rec.request_object(&bytes);
            req = Request::from_parts(parts, Body::from(bytes));
        }
        rec.stage(audit, "RequestReceived");
    }
    let decision = api.auth.authz.decide(api, &user, &asked);
    let answer = match &decision {
        crate::auth::authz::Decision::Allow(_) => {
            req.extensions_mut().insert(Arc::new(user));
            None
        }
        crate::auth::authz::Decision::Deny(why) | crate::auth::authz::Decision::NoOpinion(why) => {
            Some(rest::failure(crate::auth::authz::forbidden(&user, &asked, why)))
        }
    };
    let Some((audit, mut rec)) = record else {
        return match answer {
            Some(refused) => refused,
            None => next.run(req).await,
        };
    };
    match &decision {
        crate::auth::authz::Decision::Allow(why) => rec.decided(true, why),
        crate::auth::authz::Decision::Deny(why) | crate::auth::authz::Decision::NoOpinion(why) => {
            rec.decided(false, why)
        }
    }
    let answer = match answer {
        Some(refused) => refused,
        None => next.run(req).await,
    };
    let (parts, body) = answer.into_parts();
    let code = parts.status.as_u16();
    if let Some(notes) = parts.extensions.get::<crate::admission::Notes>() {
        rec.annotated(&notes.annotations);
    }
    if asked.verb == "watch" && code < 400 {
        // A watch's record: started now, complete when its stream ends.
        rec.response(code, None);
        rec.stage(&audit, "ResponseStarted");
        let mut done = Some((audit, rec));
        let stream = futures::StreamExt::chain(
            body.into_data_stream(),
            futures::stream::poll_fn(move |_| {
                if let Some((audit, mut rec)) = done.take() {
                    rec.stage(&audit, "ResponseComplete");
                }
                std::task::Poll::Ready(None)
            }),
        );
        return http::Response::from_parts(parts, Body::from_stream(stream));
    }
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    rec.response(code, Some(&bytes));
    rec.stage(&audit, "ResponseComplete");
    http::Response::from_parts(parts, Body::from(bytes))
}

/// A path's segments after its leading `/`, percent-decoded (a trailing `/` left out).
fn segments(path: &str) -> Vec<String> {
    path.trim_end_matches('/').split('/').skip(1).map(percent_decode).collect()
}

fn text(code: StatusCode, body: &str) -> http::Response<Body> {
    http::Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(Body::from(body.to_string()))
        .expect("a response")
}

fn doc(value: &impl serde::Serialize, content_type: &str) -> http::Response<Body> {
    http::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(status::go_json(value)))
        .expect("a response")
}

/// JSON indented as Go's `MarshalIndent` writes it (kube's `/version`), no trailing newline.
fn pretty(value: &impl serde::Serialize) -> http::Response<Body> {
    let body = serde_json::to_vec_pretty(value).expect("a value encodes");
    http::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a response")
}

/// Aggregated discovery, with the headers kube sends with it.
fn aggregated(all: &[&'static resources::Resource], core: bool) -> http::Response<Body> {
    http::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, discovery::AGGREGATED)
        .header(header::VARY, "Accept")
        .header(header::CACHE_CONTROL, "public")
        .body(Body::from(status::go_json(&discovery::aggregated(all, core))))
        .expect("a response")
}

/// `/healthz` and `/readyz`: ok while the store answers (kube's `etcd` check).
async fn health(State(s): State<Arc<Shared>>) -> http::Response<Body> {
    let key = format!("{}/health", s.api.prefix);
    let probe = s.api.storage.get(&key);
    match tokio::time::timeout(HEALTH_TIMEOUT, probe).await {
        Ok(Ok(_)) => text(StatusCode::OK, "ok"),
        _ => text(StatusCode::INTERNAL_SERVER_ERROR, "[-]etcd failed: reason withheld\nhealthz check failed\n"),
    }
}

fn query_of(uri: &http::Uri) -> Query {
    let q = uri.query().unwrap_or("");
    form_urlencoded::parse(q.as_bytes()).into_owned().collect()
}

/// Every kube path: discovery documents and resources.
async fn dispatch(State(s): State<Arc<Shared>>, req: Request) -> http::Response<Body> {
    let (parts, body) = req.into_parts();
    let segs = segments(parts.uri.path());
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let read = parts.method == Method::GET;
    // Discovery documents.
    match segs.as_slice() {
        ["api"] if read => {
            return if discovery::wants_aggregated(accept) {
                aggregated(&s.api.served(), true)
            } else {
                doc(&discovery::api(&s.address), "application/json")
            };
        }
        ["apis"] if read => {
            return if discovery::wants_aggregated(accept) {
                aggregated(&s.api.served(), false)
            } else {
                doc(&discovery::api_groups(&s.api.served()), "application/json")
            };
        }
        ["openapi", "v3"] if read => return doc(&crate::openapi::index(&s.api.served()), "application/json"),
        ["openapi", "v3", "api", v] if read => return found(crate::openapi::document(&s.api.served(), "", v)),
        ["openapi", "v3", "apis", g, v] if read => {
            return found(crate::openapi::document(&s.api.served(), g, v));
        }
        ["api", "v1"] if read => return found(discovery::resource_list(&s.api.served(), "", "v1")),
        ["apis", g] if read => return found(discovery::api_group(&s.api.served(), g)),
        ["apis", g, v] if read => return found(discovery::resource_list(&s.api.served(), g, v)),
        _ => {}
    }
    // A node's proxy path reaches the simulated node (its kube-proxy's table) in process.
    if let ["api", "v1", "nodes", node, "proxy", tail @ ..] = segs.as_slice() {
        if !read {
            let gr = status::GroupResource { group: "", resource: "nodes/proxy" };
            return rest::failure(status::method_not_supported(parts.method.as_str(), gr));
        }
        return match crate::control::proxy::answer(&s.api.proxies, node, tail) {
            Ok(v) => doc(&v, "application/json"),
            Err(e) => rest::failure(e),
        };
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return rest::failure(status::no_such_resource()),
    };
    // The old `/watch/` paths: a watch of what follows.
    let (rest, watch_path) = match rest {
        ["watch", tail @ ..] => (tail, true),
        _ => (rest, false),
    };
    let Some((resource, target)) = route(&|plural| s.api.find(group, version, plural), rest) else {
        return rest::failure(status::no_such_resource());
    };

    let body = match axum::body::to_bytes(body, rest::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => return rest::failure(rest::body_too_large()),
    };
    let mut query = query_of(&parts.uri);
    let target = match target {
        // `/watch/.../<name>` watches that one object.
        Target::Object { namespace, name, sub: None } if watch_path => {
            query.insert("fieldSelector".into(), format!("metadata.name={name}"));
            Target::Collection { namespace }
        }
        t => t,
    };
    if watch_path {
        query.insert("watch".into(), "true".into());
    }
    let user = parts
        .extensions
        .get::<Arc<crate::auth::User>>()
        .cloned()
        .unwrap_or_else(|| Arc::new(crate::auth::User::anonymous()));
    rest::serve(&s.api, user, resource, &parts.method, target, &query, &parts.headers, body).await
}

fn found<T: serde::Serialize>(d: Option<T>) -> http::Response<Body> {
    match d {
        Some(d) => doc(&d, "application/json"),
        None => rest::failure(status::no_such_resource()),
    }
}

/// The resource and target of a path under a group-version: `<plural>`, `<plural>/<name>`,
/// `namespaces/<ns>/<plural>`, `namespaces/<ns>/<plural>/<name>`, and a served subresource
/// after an object's name.
fn route(
    find: &dyn Fn(&str) -> Option<&'static resources::Resource>,
    rest: &[&str],
) -> Option<(&'static resources::Resource, Target)> {
    let object = |r: &'static resources::Resource, namespace: Option<String>, tail: &[&str]| match tail {
        [name] => Some((r, Target::Object { namespace, name: name.to_string(), sub: None })),
        [name, sub] => {
            let sub = r.subresource(sub)?;
            Some((r, Target::Object { namespace, name: name.to_string(), sub: Some(sub) }))
        }
        _ => None,
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..] if find(plural).is_some_and(|r| r.namespaced) => {
            let r = find(plural)?;
            let namespace = Some(ns.to_string());
            match tail {
                [] => Some((r, Target::Collection { namespace })),
                tail => object(r, namespace, tail),
            }
        }
        [plural] => Some((find(plural)?, Target::Collection { namespace: None })),
        [plural, tail @ ..] => {
            let r = find(plural)?;
            if r.namespaced {
                return None;
            }
            object(r, None, tail)
        }
        _ => None,
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_as_kube_routes_them() {
        let r = |p: &[&str]| route(&|plural| resources::find("", "v1", plural), p).map(|(r, t)| (r.plural, t));
        let ns = |n: &str| Some(n.to_string());
        assert_eq!(r(&["configmaps"]), Some(("configmaps", Target::Collection { namespace: None })));
        assert_eq!(
            r(&["namespaces", "a", "configmaps"]),
            Some(("configmaps", Target::Collection { namespace: ns("a") }))
        );
        assert_eq!(
            r(&["namespaces", "a", "configmaps", "x"]),
            Some(("configmaps", Target::Object { namespace: ns("a"), name: "x".into(), sub: None }))
        );
        assert_eq!(
            r(&["namespaces", "a"]),
            Some(("namespaces", Target::Object { namespace: None, name: "a".into(), sub: None }))
        );
        assert_eq!(
            r(&["namespaces", "a", "finalize"]),
            Some(("namespaces", Target::Object { namespace: None, name: "a".into(), sub: Some("finalize") }))
        );
        assert_eq!(
            r(&["namespaces", "a", "pods", "x", "status"]),
            Some(("pods", Target::Object { namespace: ns("a"), name: "x".into(), sub: Some("status") }))
        );
        assert_eq!(r(&["namespaces"]), Some(("namespaces", Target::Collection { namespace: None })));
        assert_eq!(r(&["configmaps", "x"]), None, "a namespaced object needs its namespace");
        assert_eq!(r(&["namespaces", "a", "configmaps", "x", "status"]), None);
        assert_eq!(r(&["pods"]), Some(("pods", Target::Collection { namespace: None })));
        assert_eq!(r(&["namespaces", "a", "pods", "x", "exec"]), None, "a subresource not served");
        assert_eq!(r(&["componentstatuses"]), None);
        assert_eq!(r(&["nodes"]), Some(("nodes", Target::Collection { namespace: None })));
    }
}
