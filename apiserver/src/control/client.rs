//! How the control plane writes: each controller through the same request path as any client
//! (`rest::serve`: decoding, defaulting, validation, admission, storage), under its own identity,
//! and reads through the watch caches.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::auth::User;
use crate::cache::{Cache, Object};
use crate::resources::{self, Resource};
use crate::rest::{Api, Query, Target};

/// A refused request: kube's Status code, reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct Failure {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl Failure {
    pub fn is(&self, reason: &str) -> bool {
        self.reason == reason
    }

    /// A failure the controller itself found (not the server's answer).
    pub fn local(message: impl Into<String>) -> Failure {
        Failure { code: 500, reason: "InternalError".into(), message: message.into() }
    }
}

/// One identity's handle on the API, in process.
#[derive(Clone)]
pub struct Client {
    pub api: Api,
    /// Who writes (`system:kube-scheduler`, a controller's service account,
    /// `system:node:<name>`): the requests' user, authorized as any client's, and their user
    /// agent.
    pub user: Arc<User>,
}

/// A built-in resource by group, version and plural (one of the table's).
pub fn resource(group: &str, version: &str, plural: &str) -> &'static Resource {
    resources::find(group, version, plural).unwrap_or_else(|| panic!("{group}/{version} {plural} is a served resource"))
}

impl Client {
    pub fn new(api: Api, user: &str) -> Client {
        Client { api, user: Arc::new(User::internal(user)) }
    }

    /// The same API as another identity.
    pub fn as_user(&self, user: &str) -> Client {
        Client::new(self.api.clone(), user)
    }

    /// The watch cache of `r`.
    pub fn cache(&self, r: &Resource) -> Arc<Cache> {
        self.api.caches.of(r).expect("every resource of the table has a cache")
    }

    /// The object of `r` named `name` (in `namespace`), as the cache holds it now.
    pub fn cached(&self, r: &Resource, namespace: Option<&str>, name: &str) -> Option<Arc<Object>> {
        self.api.cached(r, namespace, name)
    }

    /// Every object of `r` (in `namespace`), as the cache holds them now.
    pub fn cached_list(&self, r: &Resource, namespace: Option<&str>) -> Vec<Arc<Object>> {
        self.api.cached_list(r, namespace)
    }

    /// One request, its answer's JSON or the Status it was refused with.
    pub async fn call(
        &self,
        r: &'static Resource,
        method: Method,
        target: Target,
        query: &[(&str, &str)],
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<Value, Failure> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        if let Ok(ua) = HeaderValue::from_str(&user_agent(&self.user.name)) {
            headers.insert(header::USER_AGENT, ua);
        }
        let body = match body {
            Some((ct, b)) => {
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                Bytes::from(b)
            }
            None => Bytes::new(),
        };
        let query: Query = query.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let request = crate::auth::Request::of_target(&method, r, &target, &query);
        if let Err(s) = self.api.auth.authz.authorize(&self.api, &self.user, &request) {
            tracing::warn!(user = %self.user.name, "{}", s.message);
            return Err(Failure { code: s.code, reason: s.reason.to_string(), message: s.message });
        }
        let answer = crate::rest::serve(&self.api, self.user.clone(), r, &method, target, &query, &headers, body).await;
        let code = answer.status().as_u16();
        let bytes = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .map_err(|e| Failure::local(format!("reading an answer: {e}")))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if code >= 400 {
            let text = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            return Err(Failure { code, reason: text("reason"), message: text("message") });
        }
        Ok(v)
    }

    fn object(namespace: Option<&str>, name: &str, sub: Option<&'static str>) -> Target {
        Target::Object { namespace: namespace.map(str::to_string), name: name.to_string(), sub }
    }

    /// Creates `object` of `r` in `namespace`.
    pub async fn create<T: Serialize>(
        &self,
        r: &'static Resource,
        namespace: Option<&str>,
        object: &T,
    ) -> Result<Value, Failure> {
        let target = Target::Collection { namespace: namespace.map(str::to_string) };
        self.call(r, Method::POST, target, &[], Some(("application/json", json_body(object)))).await
    }

    /// Replaces the object (`sub`: a subresource's part of it, `status`), its resourceVersion
    /// the precondition.
    pub async fn update<T: Serialize>(
        &self,
        r: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        sub: Option<&'static str>,
        object: &T,
    ) -> Result<Value, Failure> {
        let target = Self::object(namespace, name, sub);
        self.call(r, Method::PUT, target, &[], Some(("application/json", json_body(object)))).await
    }

    /// A JSON merge patch (RFC 7386) of the object or its `sub`resource.
    pub async fn merge_patch(
        &self,
        r: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        sub: Option<&'static str>,
        patch: &Value,
    ) -> Result<Value, Failure> {
        let target = Self::object(namespace, name, sub);
        self.call(r, Method::PATCH, target, &[], Some(("application/merge-patch+json", json_body(patch)))).await
    }

    /// Deletes the object with DeleteOptions `options` (`{}`: the defaults).
    pub async fn delete(
        &self,
        r: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        options: &Value,
    ) -> Result<Value, Failure> {
        let target = Self::object(namespace, name, None);
        self.call(r, Method::DELETE, target, &[], Some(("application/json", json_body(options)))).await
    }

    /// Makes `status` the object's status through its `status` subresource (the object's
    /// resourceVersion the precondition), unless it already is; an object gone meanwhile is no
    /// error.
    pub async fn put_status(&self, r: &'static Resource, object: &Value, status: Value) -> Result<(), Failure> {
        if object.get("status").cloned().unwrap_or_else(|| serde_json::json!({})) == status {
            return Ok(());
        }
        let mut updated = object.clone();
        updated["status"] = status;
        let ns = Some(crate::meta::get(object, "namespace")).filter(|n| !n.is_empty());
        match self.update(r, ns, crate::meta::get(object, "name"), Some("status"), &updated).await {
            Err(e) if !e.is("NotFound") => Err(e),
            _ => Ok(()),
        }
    }

    /// Posts to a subresource of the object (`binding`, `eviction`).
    pub async fn post_sub<T: Serialize>(
        &self,
        r: &'static Resource,
        namespace: Option<&str>,
        name: &str,
        sub: &'static str,
        body: &T,
    ) -> Result<Value, Failure> {
        let target = Self::object(namespace, name, Some(sub));
        self.call(r, Method::POST, target, &[], Some(("application/json", json_body(body)))).await
    }
}

/// The User-Agent of a control-plane component writing as `user`, in the form kube's binaries
/// send (`kube-controller-manager/v1.33.0 (linux/amd64) kubernetes/keel/<user>`), whose first
/// part names the field manager of its writes, as it does in kube.
fn user_agent(user: &str) -> String {
    let binary = match user {
        u if u.starts_with("system:node:") => "kubelet",
        "system:kube-scheduler" => "kube-scheduler",
        "system:apiserver" => "kube-apiserver",
        _ => "kube-controller-manager",
    };
    let arch = if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH };
    format!("{binary}/{} ({}/{arch}) kubernetes/keel/{user}", crate::discovery::GIT_VERSION, std::env::consts::OS)
}

fn json_body<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("an object encodes")
}

/// A typed view of a value (an answer, a cached object's JSON).
pub fn decode<T: DeserializeOwned>(v: Value) -> Result<T, Failure> {
    serde_json::from_value(v).map_err(|e| Failure::local(format!("decoding an object: {e}")))
}
