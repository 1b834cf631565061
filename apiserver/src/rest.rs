//! The generic registry: every verb of every resource in the table (`resources`), with
//! kube-apiserver's semantics (`k8s.io/apiserver/pkg/registry/generic/registry/store.go` and the
//! endpoint handlers): what each verb checks, changes and answers, and its errors.

use std::collections::HashMap;

use axum::body::Body;
use bytes::Bytes;
use http::{header, HeaderMap, Method, StatusCode};
use serde_json::{Map, Value};

use crate::deletion::{Options as DeleteOptions, Plan};
use crate::meta;
use crate::resources::{Deleted, Generation, Resource, Strategy};
use crate::selector::{field_of, FieldSelector, LabelSelector};
use crate::status::{self, Details, FieldError, FieldErrorType, GroupKind, GroupResource, Status};
use crate::storage::{keys, At, ListOptions, Storage, StorageError, Stored};
use crate::table;
use crate::workloads::Workload;

/// kube-apiserver's limit on a request body (`MaxRequestBodyBytes`), enforced where the body is
/// read (`server`).
pub const MAX_BODY_BYTES: usize = 3 << 20;

/// kube's 413 for a body past [`MAX_BODY_BYTES`].
pub fn body_too_large() -> Status {
    status::too_large(&format!("limit is {MAX_BODY_BYTES}"))
}

/// What a request names under a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The collection, in a namespace or across all of them.
    Collection { namespace: Option<String> },
    /// One object, or one of its subresources (`status`, a namespace's `finalize`).
    Object { namespace: Option<String>, name: String, sub: Option<&'static str> },
}

/// The object a write names, and which part of it the write changes.
#[derive(Debug, Clone, Copy)]
struct Named<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
    part: Part,
}

/// What an update changes: the object (all but what its subresources own), or one subresource's
/// part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Main,
    /// `status`: only the status; everything else stays as it is (kube's status strategies and
    /// `ResetObjectMetaForStatus`).
    Status,
    /// A namespace's `finalize`: only `spec.finalizers`.
    Finalizers,
    /// A workload's `scale`: its replicas, written as the object's own update (the strategy
    /// runs, the generation moves) and admitted as the subresource.
    Scale,
}

impl Part {
    /// The subresource's name (empty for the object itself).
    fn name(self) -> &'static str {
        match self {
            Part::Main => "",
            Part::Status => "status",
            Part::Finalizers => "finalize",
            Part::Scale => "scale",
        }
    }

    fn of(sub: Option<&str>) -> Part {
        match sub {
            Some("status") => Part::Status,
            Some("finalize") => Part::Finalizers,
            _ => Part::Main,
        }
    }

    /// `old` with this part taken from `new`.
    fn applied(self, old: &Value, new: &Value) -> Value {
        let mut out = old.clone();
        let (from, field) = match self {
            Part::Main | Part::Scale => return new.clone(),
            Part::Status => (new.get("status"), "status"),
            Part::Finalizers => {
                // An empty list is left out, as Go's `omitempty` leaves it.
                let finalizers =
                    new.pointer("/spec/finalizers").cloned().filter(|f| f.as_array().is_none_or(|a| !a.is_empty()));
                let spec =
                    out.as_object_mut().expect("an object").entry("spec").or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(spec) = spec {
                    match finalizers {
                        Some(f) => spec.insert("finalizers".into(), f),
                        None => spec.remove("finalizers"),
                    };
                }
                return out;
            }
        };
        let o = out.as_object_mut().expect("an object");
        match from {
            Some(v) => o.insert(field.into(), v.clone()),
            None => o.remove(field),
        };
        out
    }
}

/// The store and where objects live in it.
#[derive(Clone)]
pub struct Api {
    pub storage: Storage,
    /// `--etcd-prefix`.
    pub prefix: String,
    /// The watch caches, which serve watches and the reads `reads` sends them.
    pub caches: crate::cache::Caches,
    /// The ranges services' cluster IPs and node ports come from.
    pub ranges: std::sync::Arc<crate::services::Ranges>,
    /// The leases events expire with (`--event-ttl`).
    pub events: std::sync::Arc<crate::storage::Leases>,
    /// The kube-proxies of the nodes this process simulates (`--simulated-nodes`).
    pub proxies: crate::control::proxy::Proxies,
    /// Authentication, authorization and the tokens this server signs.
    pub auth: std::sync::Arc<crate::auth::Auth>,
    /// The admission plugins enabled.
    pub admission: std::sync::Arc<crate::admission::Chain>,
    /// The custom resources served (`crate::crd`).
    pub crds: crate::crd::Registry,
}

impl Api {
    /// The resource served at `group`/`version` under `plural`: a built-in or a custom one.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        crate::resources::find(group, version, plural).or_else(|| self.crds.find(group, version, plural))
    }

    /// Every resource served now: the built-ins, then the custom resources' versions.
    pub fn served(&self) -> Vec<&'static Resource> {
        crate::resources::RESOURCES.iter().chain(self.crds.all()).collect()
    }

    /// The object of `r` named `name` (in `namespace`), as its watch cache holds it now.
    pub fn cached(
        &self,
        r: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<std::sync::Arc<crate::cache::Object>> {
        self.caches.of(r)?.get(&key(self, r, namespace, name)).1
    }

    /// Every object of `r` (in `namespace`), as its watch cache holds them now.
    pub fn cached_list(&self, r: &Resource, namespace: Option<&str>) -> Vec<std::sync::Arc<crate::cache::Object>> {
        let Some(cache) = self.caches.of(r) else { return Vec::new() };
        cache.list(&collection(self, r, namespace), &Selectors::everything(), 0).items
    }

    /// The lease an object of `r` is written with: events expire (`--event-ttl`), nothing else.
    async fn lease(&self, r: &Resource, name: &str) -> Result<i64, Status> {
        if r.kind != "Event" {
            return Ok(0);
        }
        self.events.get(&self.storage).await.map_err(|e| storage_error(r, name, e))
    }
}

/// An answer: a status code and a JSON body.
pub fn json(code: StatusCode, body: Vec<u8>) -> http::Response<Body> {
    http::Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a response")
}

/// An answer in the form negotiated: kube's protobuf when the client asked for it and the type
/// has a message, else JSON.
pub fn encoded(code: StatusCode, shape: table::Shape, v: &Value) -> http::Response<Body> {
    if shape == table::Shape::Protobuf {
        if let Some(body) = crate::proto::encode(v) {
            return http::Response::builder()
                .status(code)
                .header(header::CONTENT_TYPE, crate::proto::MEDIA_TYPE)
                .body(Body::from(body))
                .expect("a response");
        }
    }
    json(code, status::go_json(v))
}

/// A kube Status as the answer (with `Retry-After` when it asks the client to retry, as kube
/// writes it).
pub fn failure(s: Status) -> http::Response<Body> {
    let mut answer = json(StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), s.to_json());
    if let Some(after) = s.details.as_ref().and_then(|d| d.retry_after_seconds) {
        answer.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from(after));
    }
    answer
}

/// kube's wrapping of an error that is not a Status (`newErrWatcher`, `InternalError` without
/// details).
pub fn internal_error(message: impl Into<String>) -> Status {
    Status::failure(500, "InternalError", message, None)
}

/// kube's answer to an error it did not expect (`InternalError`).
pub fn internal(message: impl std::fmt::Display) -> Status {
    let cause = message.to_string();
    let message = format!("Internal error occurred: {cause}");
    let details = Details {
        causes: vec![status::Cause { reason: "", message: cause, field: String::new() }],
        ..Default::default()
    };
    Status::failure(500, "InternalError", message, Some(details))
}

impl Resource {
    fn gr(&self) -> GroupResource<'static> {
        GroupResource { group: self.group, resource: self.plural }
    }

    fn gk(&self) -> GroupKind<'static> {
        GroupKind { group: self.group, kind: self.kind }
    }

    /// The fields its field selectors may name.
    pub(crate) fn selectable(&self) -> &'static [&'static str] {
        self.fields
    }
}

fn storage_error(r: &Resource, name: &str, e: StorageError) -> Status {
    match e {
        StorageError::NotFound => status::not_found(r.gr(), name),
        StorageError::AlreadyExists => status::already_exists(r.gr(), name),
        StorageError::Conflict { .. } => status::conflict(r.gr(), name, status::OPTIMISTIC_LOCK),
        StorageError::InvalidContinue(m) => status::bad_request(m),
        StorageError::Expired { restart } => {
            let mut s = status::expired(crate::storage::EXPIRED_CONTINUE);
            s.metadata.continue_token = restart;
            s
        }
        StorageError::Compacted(_) => status::expired("The resourceVersion for the provided list is too old."),
        StorageError::Store(s) => internal(s.message()),
    }
}

/// A stored object's JSON, as stored.
fn parsed(stored: &Stored) -> Result<Value, Status> {
    serde_json::from_slice(&stored.value).map_err(|e| internal(format!("decoding a stored object: {e}")))
}

/// A stored object's JSON in `r`'s form (an `events.k8s.io` event is stored as a core one).
fn parsed_as(r: &Resource, stored: &Stored) -> Result<Value, Status> {
    let v = parsed(stored)?;
    Ok(if r.strategy == Strategy::EventV1 { crate::events::from_storage(v) } else { v })
}

/// The object at `k` (named `name`), or kube's NotFound.
pub(crate) async fn read(api: &Api, r: &Resource, k: &str, name: &str) -> Result<Stored, Status> {
    let found = api.storage.get(k).await.map_err(|e| storage_error(r, name, e))?;
    found.ok_or_else(|| status::not_found(r.gr(), name))
}

/// A stored object as clients see it: `kind`, `apiVersion`, and its resourceVersion.
pub fn shown(r: &Resource, stored: &Stored) -> Result<Value, Status> {
    let mut v = parsed_as(r, stored)?;
    meta::set(&mut v, "resourceVersion", &stored.rev.to_string());
    let Value::Object(m) = v else { return Err(internal("a stored object is not a JSON object")) };
    Ok(r.with_type(m))
}

/// An object of `r` as stored: canonical, in the stored form, without its resourceVersion (the
/// store's revision is).
pub(crate) fn stored_bytes(r: &Resource, mut v: Value) -> Vec<u8> {
    if r.strategy == Strategy::EventV1 {
        v = crate::events::to_storage(v);
        v["kind"] = Value::from("Event");
        v["apiVersion"] = Value::from("v1");
    }
    meta::set(&mut v, "resourceVersion", "");
    serde_json::to_vec(&v).expect("a value encodes")
}

pub(crate) fn key(api: &Api, r: &Resource, namespace: Option<&str>, name: &str) -> String {
    keys::object(&api.prefix, &r.key_prefix(), namespace.filter(|_| r.namespaced), name)
}

/// The media type of a request's body (without its parameters); JSON when none is given.
fn media_type(headers: &HeaderMap) -> &str {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    ct.split(';').next().unwrap_or("").trim()
}

/// Decodes a request body into an object of `r`: JSON, YAML or kube's protobuf, its
/// `apiVersion`/`kind`, when given, those of the endpoint; a JSON body's duplicate fields are
/// reported with its unknown ones, in the order they come, as kube's strict decoding does.
fn decode(r: &Resource, headers: &HeaderMap, body: &Bytes, check: &mut Check) -> Result<Value, Status> {
    let v = body_value(headers, body, &r.api_version(), r.kind)?;
    let json = matches!(media_type(headers), "application/json" | "*/*" | "");
    typed(r, v, if json { keys(body) } else { Vec::new() }, check)
}

/// Every key of a JSON body, in the order it comes, by path (`metadata.name`,
/// `spec.containers[0].image`), and whether its object gave it already.
fn keys(body: &[u8]) -> Vec<(String, bool)> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<(String, bool)>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let path = if self.path.is_empty() { k.clone() } else { format!("{}.{k}", self.path) };
                self.out.push((path.clone(), !seen.insert(k)));
                m.next_value_seed(Walk { path, out: &mut *self.out })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
            let mut i = 0;
            while s.next_element_seed(Walk { path: format!("{}[{i}]", self.path), out: &mut *self.out })?.is_some() {
                i += 1;
            }
            Ok(())
        }
    }

    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    // A body that is not JSON has been refused already.
    let _ = Walk { path: String::new(), out: &mut out }.deserialize(&mut de);
    out
}

/// A request body as JSON, from JSON, YAML or kube's protobuf (then of `kind` of `api_version`
/// unless its envelope says otherwise); kube's 415 for another media type.
pub(crate) fn body_value(headers: &HeaderMap, body: &Bytes, api_version: &str, kind: &str) -> Result<Value, Status> {
    match media_type(headers) {
        "application/json" | "*/*" | "" => serde_json::from_slice(body).map_err(|e| status::bad_request(e.to_string())),
        "application/yaml" => serde_yaml_ng::from_slice(body)
            .map_err(|e| status::bad_request(format!("error converting YAML to JSON: yaml: {e}"))),
        crate::proto::MEDIA_TYPE => crate::proto::decode_as(api_version, kind, body),
        _ => Err(unsupported_media()),
    }
}

/// kube's 415 for a body in a format it does not decode.
fn unsupported_media() -> Status {
    let message = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf";
    Status::failure(415, "UnsupportedMediaType", message, None)
}

/// An object of `r`: its `apiVersion`/`kind`, when given, those of the endpoint; decoded into the
/// resource's type and encoded back.
fn typed(r: &Resource, v: Value, keys: Vec<(String, bool)>, check: &mut Check) -> Result<Value, Status> {
    let Value::Object(m) = &v else {
        return Err(status::bad_request("Object 'Kind' is missing in the request body"));
    };
    let given = |f: &str| m.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let (api_version, kind) = (given("apiVersion"), given("kind"));
    if !api_version.is_empty() && api_version != r.api_version() {
        return Err(status::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            r.api_version()
        )));
    }
    if !kind.is_empty() && kind != r.kind {
        return Err(status::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            r.kind
        )));
    }
    let typed = match r.custom {
        Some(c) => crate::crd::canonical(c, v.clone()),
        None => (r.canonical)(v.clone()).map_err(|e| e.to_string()),
    }
    .map_err(|e| status::bad_request(format!("{} in body is invalid: {e}", r.kind)))?;
    let mut unknown = Vec::new();
    unknown_fields(&v, &typed, "", &mut unknown);
    check.strict(r, unknown, keys)?;
    Ok(typed)
}

/// The fields of `given` its typed form `typed` does not have (kube's strict decoding errors),
/// as dotted paths with list positions.
fn unknown_fields(given: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    let at = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match (given, typed) {
        (Value::Object(g), Value::Object(t)) => {
            for (k, gv) in g {
                if path.is_empty() && (k == "kind" || k == "apiVersion") {
                    continue;
                }
                match t.get(k) {
                    Some(tv) => unknown_fields(gv, tv, &at(k), out),
                    None if gv.is_null() => {}
                    None => out.push(at(k)),
                }
            }
        }
        (Value::Array(g), Value::Array(t)) => {
            for (i, (gv, tv)) in g.iter().zip(t).enumerate() {
                unknown_fields(gv, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// kube's `fieldValidation`: what a body's unknown fields do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    Ignore,
    Warn,
    Strict,
}

/// A write request's options (field validation, dry run) and the warnings it collects for the
/// answer.
pub struct Check {
    pub validation: Validation,
    /// `dryRun=All`: everything but the store's write.
    pub dry_run: bool,
    pub warnings: Vec<String>,
    /// `force=true` on a server-side apply: conflicting fields are taken over.
    pub force: bool,
}

impl Check {
    /// The directive of `query` (kube's default is Warn); `options` names the request's options
    /// kind in the error for a value kube does not know.
    pub fn of(query: &Query, options: &str) -> Result<Check, Status> {
        let unsupported = |field: &str, value: &str, supported: &str| {
            let e = FieldError::new(FieldErrorType::NotSupported, field, Some(Value::String(value.into())), supported);
            status::invalid(GroupKind { group: "meta.k8s.io", kind: options }, "", &[e])
        };
        let dry_run = match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => return Err(unsupported("dryRun", other, "supported values: \"All\"")),
        };
        let validation = match query.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Validation::Warn,
            Some("Ignore") => Validation::Ignore,
            Some("Strict") => Validation::Strict,
            Some(_) if options == "DeleteOptions" => Validation::Ignore,
            Some(other) => {
                return Err(unsupported("fieldValidation", other, "supported values: \"Ignore\", \"Strict\", \"Warn\""))
            }
        };
        Ok(Check { validation, dry_run, warnings: Vec::new(), force: false })
    }

    /// Unknown and duplicate fields: refused (Strict), warned of (Warn) or let through (Ignore).
    /// `keys` are the body's, in order (none if it was not JSON): a key given twice is a
    /// duplicate unless it is unknown, which is said once.
    fn strict(&mut self, r: &Resource, unknown: Vec<String>, keys: Vec<(String, bool)>) -> Result<(), Status> {
        let mut said = Vec::new();
        let mut found = Vec::new();
        for (path, repeated) in keys {
            if unknown.contains(&path) {
                if !said.contains(&path) {
                    found.push(format!("unknown field {}", status::go_quote(&path)));
                    said.push(path);
                }
            } else if repeated {
                found.push(format!("duplicate field {}", status::go_quote(&path)));
            }
        }
        found.extend(
            unknown.iter().filter(|f| !said.contains(f)).map(|f| format!("unknown field {}", status::go_quote(f))),
        );
        if found.is_empty() {
            return Ok(());
        }
        let each = found.into_iter();
        match self.validation {
            Validation::Ignore => Ok(()),
            Validation::Warn => {
                self.warnings.extend(each);
                Ok(())
            }
            Validation::Strict => Err(status::bad_request(format!(
                "{kind} in version {} cannot be handled as a {kind}: strict decoding error: {}",
                status::go_quote(r.version),
                each.collect::<Vec<_>>().join(", "),
                kind = r.kind,
            ))),
        }
    }
}

/// Query parameters (the last value of each).
pub type Query = HashMap<String, String>;

/// Serves one request for resource `r`; its errors in kube's protobuf when the client asked for
/// protobuf first, as kube negotiates an error's encoding like any answer's.
/// One request of `user` (authorized already) for resource `r`.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    api: &Api,
    user: std::sync::Arc<crate::auth::User>,
    r: &'static Resource,
    method: &Method,
    target: Target,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> http::Response<Body> {
    let manager = crate::managers::manager_of(query, headers);
    // Boxed: a request's future is deep (its create, update and apply paths), and a control-plane
    // client awaits it inside its own task's future.
    let work = crate::managers::writing(manager, Box::pin(answer(api, r, method, target, query, headers, body)));
    let work = crate::auth::acting_as(user, work);
    let (mut answer, mut notes) = crate::admission::collecting(work).await;
    warn(&mut answer, std::mem::take(&mut notes.warnings));
    if !notes.annotations.is_empty() {
        answer.extensions_mut().insert(notes);
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if answer.status().as_u16() >= 400 && table::negotiate(accept) == Ok(table::Shape::Protobuf) {
        return in_protobuf(answer).await;
    }
    answer
}

/// An answer whose body is a JSON Status, re-encoded in kube's protobuf.
async fn in_protobuf(answer: http::Response<Body>) -> http::Response<Body> {
    let (mut parts, body) = answer.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return failure(internal_error("an error answer could not be read back"));
    };
    match serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| crate::proto::encode(&v)) {
        Some(pb) => {
            parts.headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static(crate::proto::MEDIA_TYPE));
            http::Response::from_parts(parts, Body::from(pb))
        }
        None => http::Response::from_parts(parts, Body::from(bytes)),
    }
}

/// The answer to one request for resource `r`.
async fn answer(
    api: &Api,
    r: &'static Resource,
    method: &Method,
    target: Target,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> http::Response<Body> {
    let verb = match (method, &target) {
        (&Method::GET, Target::Collection { .. }) if is_true(query.get("watch")) => "watch",
        (&Method::GET, Target::Collection { .. }) => "list",
        (&Method::POST, Target::Collection { .. }) => "create",
        (&Method::POST, Target::Object { sub: Some(_), .. }) => "create",
        (&Method::DELETE, Target::Collection { .. }) => "deletecollection",
        (&Method::GET, Target::Object { .. }) => "get",
        (&Method::PUT, Target::Object { .. }) => "update",
        (&Method::PATCH, Target::Object { .. }) => "patch",
        (&Method::DELETE, Target::Object { sub: None, .. }) => "delete",
        _ => return failure(status::method_not_supported(method.as_str(), r.gr())),
    };
    let served = match &target {
        Target::Object { sub: Some(sub), .. } => r.subresource_verbs(sub).contains(&verb),
        _ => r.serves(verb),
    };
    if !served {
        return failure(status::method_not_supported(verb, r.gr()));
    }
    if let Some(c) = r.custom {
        if verb == "create" && c.terminating() {
            let mut s = status::method_not_supported(verb, r.gr());
            s.message = format!("{verb} not allowed while custom resource definition is terminating");
            return failure(s);
        }
        if let Some(w) = &c.deprecation {
            crate::admission::warn(w.clone());
        }
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let shape = match table::negotiate(accept) {
        Ok(s) => s,
        Err(s) => return failure(s),
    };
    // Writes' options (reads ignore them, as kube does).
    let options = match verb {
        "create" => Some("CreateOptions"),
        "update" => Some("UpdateOptions"),
        "patch" => Some("PatchOptions"),
        "delete" | "deletecollection" => Some("DeleteOptions"),
        _ => None,
    };
    let checked = match options {
        Some(o) => Check::of(query, o),
        None => Ok(Check { validation: Validation::Ignore, dry_run: false, warnings: Vec::new(), force: false }),
    };
    let mut check = match checked {
        Ok(c) => c,
        Err(s) => return failure(s),
    };
    let applying = verb == "patch" && media_type(headers) == APPLY_PATCH;
    if let Some(o) = options.filter(|_| matches!(verb, "create" | "update" | "patch")) {
        if let Err(s) = crate::managers::option_errors(query, o, applying) {
            return failure(s);
        }
    }
    check.force = applying && is_true(query.get("force"));
    let done = match target {
        Target::Collection { namespace } if verb == "watch" => {
            return crate::watch::serve(api, r, namespace.as_deref(), query, shape).await;
        }
        Target::Collection { namespace } => match verb {
            "list" => return list_answer(api, r, namespace.as_deref(), query, shape).await,
            "deletecollection" => match delete_options(headers, &body, query, &mut check) {
                Ok(opts) => delete_collection(api, r, namespace.as_deref(), query, check.dry_run, &opts).await,
                Err(s) => Err(s),
            },
            _ if !r.stored() => {
                let user = crate::auth::current();
                crate::auth::reviews::create(api, &user, r, namespace.as_deref(), headers, &body)
            }
            _ => create(api, r, namespace.as_deref(), headers, &body, &mut check).await,
        },
        Target::Object { namespace, name, sub: Some("scale") } => {
            let at = Named { namespace: namespace.as_deref(), name: &name, part: Part::Main };
            return match scale(api, r, at, verb, headers, &body, &mut check).await {
                Ok((code, v)) => json(code, status::go_json(&v)),
                Err(s) => failure(s),
            };
        }
        Target::Object { namespace, name, sub: Some("token") } => {
            let ns = namespace.as_deref().unwrap_or("");
            crate::auth::reviews::token_request(api, ns, &name, headers, &body, check.dry_run, &mut check.warnings)
                .await
        }
        Target::Object { namespace, name, sub: Some(sub @ ("binding" | "eviction")) } => {
            let req = crate::bindings::PodRequest {
                api,
                r,
                namespace: namespace.as_deref(),
                name: &name,
                headers,
                body: &body,
            };
            match sub {
                "binding" => crate::bindings::bind(req, check.dry_run).await,
                _ => crate::evictions::evict(req, query, check.dry_run).await,
            }
        }
        Target::Object { namespace, name, sub } => match verb {
            "get" => get(api, r, namespace.as_deref(), &name, query).await,
            "update" => {
                let at = Named { namespace: namespace.as_deref(), name: &name, part: Part::of(sub) };
                update(api, r, at, headers, &body, &mut check).await
            }
            "patch" => {
                let at = Named { namespace: namespace.as_deref(), name: &name, part: Part::of(sub) };
                patch(api, r, at, headers, &body, &mut check).await
            }
            _ => match delete_options(headers, &body, query, &mut check) {
                Ok(opts) => delete(api, r, namespace.as_deref(), &name, check.dry_run, &opts).await,
                Err(s) => Err(s),
            },
        },
    };
    // Reads answer in the form the client asked for (a Table for kubectl get).
    let done = match done {
        Ok((code, v)) if matches!(verb, "get" | "list") => {
            table::render(shape, r, v, query.get("includeObject").map(String::as_str)).map(|v| (code, v))
        }
        other => other,
    };
    let mut answer = match done {
        Ok((code, v)) => encoded(code, shape, &v),
        Err(s) => failure(s),
    };
    warn(&mut answer, check.warnings);
    answer
}

/// kube's warnings: `299 - "<text>"`, one header each.
fn warn(answer: &mut http::Response<Body>, warnings: Vec<String>) {
    for w in warnings {
        if let Ok(h) = http::HeaderValue::from_str(&format!("299 - {}", status::go_quote(&w))) {
            answer.headers_mut().append(header::WARNING, h);
        }
    }
}

fn is_true(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}

pub(crate) type Answer = Result<(StatusCode, Value), Status>;

async fn get(api: &Api, r: &Resource, namespace: Option<&str>, name: &str, query: &Query) -> Answer {
    let k = key(api, r, namespace, name);
    if let Some(cache) = crate::reads::get_source(api, r, query).await? {
        let (_, found) = cache.get(&k);
        return found.map(|o| (StatusCode::OK, o.value(r))).ok_or_else(|| status::not_found(r.gr(), name));
    }
    let stored = read(api, r, &k, name).await?;
    Ok((StatusCode::OK, shown(r, &stored)?))
}

/// Defaults a new object as `r`'s strategy does.
fn prepare_create(r: &Resource, v: &mut Value) {
    match r.strategy {
        Strategy::Plain => crate::validation::defaults(r.group, r.kind, v),
        Strategy::EventV1 | Strategy::Role(_) | Strategy::Binding(_) | Strategy::Review => {}
        Strategy::Namespace => {
            let name = meta::get(v, "name").to_string();
            let labels = meta::metadata(v).entry("labels").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(l) = labels {
                l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
            }
            let o = v.as_object_mut().expect("an object");
            o.insert("spec".into(), serde_json::json!({"finalizers": ["kubernetes"]}));
            o.insert("status".into(), serde_json::json!({"phase": "Active"}));
        }
        Strategy::Secret => secret_defaults(v),
        Strategy::Pod => {
            crate::pods::defaults(v);
            crate::pods::new_status(v);
        }
        Strategy::Workload(w) => {
            crate::workloads::defaults(w, v);
            if w == Workload::Job {
                crate::workloads::job_selector(v);
            }
        }
        Strategy::Service => crate::services::defaults(v),
        Strategy::Crd => {
            crate::crd::validation::defaults(v);
            let stored = crate::crd::validation::stored_versions(None, v).unwrap_or_default();
            v["status"] = serde_json::json!({"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": stored});
        }
        // The status is the status subresource's to write, from the first.
        Strategy::Custom if r.custom.is_some_and(|c| c.status) => {
            v.as_object_mut().expect("an object").remove("status");
        }
        Strategy::Custom => {}
    }
    if let Some(status) = r.new_status {
        v["status"] = serde_json::from_str(status).expect("a descriptor's status is JSON");
    }
    if r.generation != Generation::None {
        meta::metadata(v).insert("generation".into(), Value::from(1));
    }
}

/// What `r`'s validation refuses in an object about to be stored (beyond its name); `old` is
/// the object an update replaces.
fn validate(r: &Resource, v: &Value, old: Option<&Value>) -> Vec<FieldError> {
    match r.strategy {
        Strategy::Crd => match old {
            Some(old) => crate::crd::validation::update_errors(old, v),
            None => crate::crd::validation::errors(v),
        },
        Strategy::Custom => crate::crd::errors(r, v, old),
        Strategy::Pod => crate::pods::validate(v),
        Strategy::Workload(w) => crate::workloads::validate(w, v),
        Strategy::Service => crate::services::validate(v),
        Strategy::Role(namespaced) => crate::rbac::rule_errors(v, namespaced),
        Strategy::Binding(namespaced) => crate::rbac::binding_errors(v, namespaced),
        Strategy::Plain | Strategy::EventV1 => crate::validation::errors(r.group, r.kind, v),
        Strategy::Namespace | Strategy::Secret | Strategy::Review => Vec::new(),
    }
}

/// A secret's `type` defaults to Opaque; `stringData` goes into `data` (base64) and is dropped.
fn secret_defaults(v: &mut Value) {
    use base64::Engine as _;
    let o = v.as_object_mut().expect("an object");
    if o.get("type").and_then(Value::as_str).unwrap_or("").is_empty() {
        o.insert("type".into(), Value::String("Opaque".into()));
    }
    if let Some(Value::Object(sd)) = o.remove("stringData") {
        let data = o.entry("data").or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        let data = data.as_object_mut().expect("an object");
        for (k, s) in sd {
            let text = s.as_str().unwrap_or("").to_string();
            data.insert(k, Value::String(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

/// Checks a new object's namespace against the request's (kube's `rest.BeforeCreate`): taken
/// from the path when empty, refused when different; cleared for cluster-scoped resources.
fn namespace_of_new(r: &Resource, v: &mut Value, namespace: Option<&str>) -> Result<(), Status> {
    if !r.namespaced {
        meta::set(v, "namespace", "");
        return Ok(());
    }
    let ns = namespace.unwrap_or("");
    let given = meta::get(v, "namespace").to_string();
    if given.is_empty() {
        meta::set(v, "namespace", ns);
    } else if given != ns {
        return Err(status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

async fn create(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
    check: &mut Check,
) -> Answer {
    let v = decode(r, headers, body, check)?;
    create_object(api, r, namespace, v, check).await
}

/// Creates `v` (decoded, typed) in `namespace`.
async fn create_object(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    mut v: Value,
    check: &mut Check,
) -> Answer {
    namespace_of_new(r, &mut v, namespace)?;
    if meta::get(&v, "name").is_empty() && !meta::get(&v, "generateName").is_empty() {
        let name = meta::generate_name(meta::get(&v, "generateName"));
        meta::set(&mut v, "name", &name);
    }
    let name = meta::get(&v, "name").to_string();
    // Mutating admission (the namespace first), then the strategy, then validating admission.
    let user = crate::auth::current();
    let dry_run = check.dry_run;
    let admitted =
        |object| crate::admission::Attributes::create(r, namespace.unwrap_or(""), &name, object, dry_run, &user);
    let mut mutated = v.clone();
    crate::admission::mutate(api, &admitted(None), &mut mutated).await?;
    let mut v = mutated;
    if !meta::get(&v, "resourceVersion").is_empty() {
        return Err(internal("resourceVersion should not be set on objects to be created"));
    }
    meta::set(&mut v, "uid", &meta::uid());
    meta::set(&mut v, "creationTimestamp", &meta::now());
    for system in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta::metadata(&mut v).remove(system);
    }
    prepare_create(r, &mut v);
    let mut v = crate::managers::track(r, "", None, v);
    let mut errors = meta::name_errors(r.names, &v);
    errors.extend(crate::validation::metadata_errors(&v));
    errors.extend(validate(r, &v, None));
    if !errors.is_empty() {
        return Err(status::invalid(r.gk(), &name, &errors));
    }
    crate::auth::authz::guard_rbac_write(api, r, &v, None)?;
    let mut charges = crate::admission::validate(
        api,
        &crate::admission::Attributes::create(r, namespace.unwrap_or(""), &name, Some(&v), dry_run, &user),
    )
    .await?;
    // A service's cluster IP and node ports, given back if the create does not happen.
    let taken = match r.strategy {
        Strategy::Service if !check.dry_run => crate::services::allocate(api, &api.ranges, None, &mut v)
            .await
            .map_err(|e| status::invalid(r.gk(), &name, &e))?,
        _ => crate::services::Taken::default(),
    };
    if check.dry_run {
        // What the create would store, unstored: no resourceVersion (kube's dry run).
        if api.storage.get(&key(api, r, namespace, &name)).await.map_err(|e| storage_error(r, &name, e))?.is_some() {
            return Err(status::already_exists(r.gr(), &name));
        }
        let Value::Object(m) = v else { return Err(internal("an object is a JSON object")) };
        return Ok((StatusCode::CREATED, r.with_type(m)));
    }
    let value = stored_bytes(r, v.clone());
    let lease = api.lease(r, &name).await?;
    // Stored with its quota charges, or not at all; a quota that moved meanwhile is charged anew.
    let mut attempt = 0;
    let rev = loop {
        attempt += 1;
        let writes: Vec<_> = charges.iter().map(|c| c.write()).collect();
        match api.storage.create_with(&key(api, r, namespace, &name), value.clone(), lease, &writes).await {
            Ok(rev) => break rev,
            Err(StorageError::Conflict { .. }) if attempt < QUOTA_ATTEMPTS => {
                match crate::admission::charges(
                    api,
                    &crate::admission::Attributes::create(r, namespace.unwrap_or(""), &name, Some(&v), dry_run, &user),
                )
                .await
                {
                    Ok(c) => charges = c,
                    Err(s) => {
                        crate::services::release(api, &api.ranges, taken).await;
                        return Err(s);
                    }
                }
            }
            Err(e) => {
                crate::services::release(api, &api.ranges, taken).await;
                return Err(storage_error(r, &name, e));
            }
        }
    };
    Ok((StatusCode::CREATED, shown(r, &Stored { value, rev })?))
}

async fn update(
    api: &Api,
    r: &'static Resource,
    at: Named<'_>,
    headers: &HeaderMap,
    body: &Bytes,
    check: &mut Check,
) -> Answer {
    let v = decode(r, headers, body, check)?;
    update_object(api, r, at, v, check.dry_run).await
}

/// How often a create is tried again when a quota it is charged to changed under it.
const QUOTA_ATTEMPTS: usize = 100;

/// How often a patch (or a delete) is made again when the object changed under it.
pub(crate) const PATCH_ATTEMPTS: usize = 5;

/// PATCH: the patch applied to the current object — or, for a server-side apply
/// (`crate::managers`), the configuration (YAML or JSON) merged into it by its schema and the
/// fields' ownership settled (a conflict is kube's 409 unless forced) — written as an update of
/// the version it was applied to (again on a newer version if the object changed meanwhile,
/// unless the patch named the resourceVersion it applies to). An apply to an object that does
/// not exist creates it.
async fn patch(
    api: &Api,
    r: &'static Resource,
    at: Named<'_>,
    headers: &HeaderMap,
    body: &Bytes,
    check: &mut Check,
) -> Answer {
    let Named { namespace, name, .. } = at;
    enum Change {
        Apply(Value),
        Patch(crate::patch::Kind),
    }
    let change = match media_type(headers) {
        APPLY_PATCH => {
            let c: Value = serde_yaml_ng::from_slice(body)
                .map_err(|e| status::bad_request(format!("error decoding YAML: {e}")))?;
            if !c.is_object() {
                return Err(status::bad_request("error decoding YAML: the configuration is not an object"));
            }
            Change::Apply(c)
        }
        media => Change::Patch(crate::patch::kind_of(media, r.custom.is_some())?),
    };
    let root = crate::proto::Node::of(&r.api_version(), r.kind);
    let k = key(api, r, namespace, name);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let old = match (read(api, r, &k, name).await, &change) {
            (Ok(old), _) => old,
            (Err(s), Change::Apply(config)) if s.code == 404 && at.part == Part::Main => {
                let v = crate::managers::apply(r, "", None, config, check.force)?;
                check.warnings.clear();
                let mut v = typed(r, v, Vec::new(), check)?;
                same_object(r, &mut v, namespace, name)?;
                return Box::pin(create_object(api, r, namespace, v, check)).await;
            }
            (Err(s), _) => return Err(s),
        };
        let live = shown(r, &old)?;
        let patched = match &change {
            Change::Apply(config) => crate::managers::apply(r, at.part.name(), Some(&live), config, check.force)?,
            Change::Patch(kind) => crate::patch::apply(*kind, root, &live, body)?,
        };
        let pinned = meta::get(&patched, "resourceVersion") != old.rev.to_string();
        check.warnings.clear();
        let mut v = typed(r, patched, Vec::new(), check)?;
        same_object(r, &mut v, namespace, name)?;
        match Box::pin(update_from(api, r, &k, at, v, old, check.dry_run)).await {
            Err(s) if s.reason == "Conflict" && !pinned && attempt < PATCH_ATTEMPTS => continue,
            done => return done,
        }
    }
}

/// Server-side apply's media type.
const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// The `scale` subresource of a workload: its `autoscaling/v1` Scale (GET), or a Scale sent
/// (PUT) or patched (PATCH) whose replicas become the object's, through the object's own update
/// (so its generation moves and its validation holds); the answer is the Scale after it.
async fn scale(
    api: &Api,
    r: &'static Resource,
    at: Named<'_>,
    verb: &str,
    headers: &HeaderMap,
    body: &Bytes,
    check: &mut Check,
) -> Answer {
    let scaled = match (r.strategy, r.custom.and_then(|c| c.scale.as_ref())) {
        (Strategy::Workload(w), _) => Scaled::Workload(w),
        (_, Some(paths)) => Scaled::Custom(paths),
        _ => return Err(status::no_such_resource()),
    };
    let k = key(api, r, at.namespace, at.name);
    let scale_kind = GroupKind { group: "autoscaling", kind: "Scale" };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let old = read(api, r, &k, at.name).await?;
        let current = shown(r, &old)?;
        let now = scaled.of(&current);
        let wanted = match verb {
            "get" => return Ok((StatusCode::OK, now)),
            "update" => body_value(headers, body, "autoscaling/v1", "Scale")?,
            _ => {
                let root = crate::proto::Node::of("autoscaling/v1", "Scale");
                crate::patch::apply(crate::patch::kind_of(media_type(headers), false)?, root, &now, body)?
            }
        };
        let given = |f: &str| wanted.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        if !given("kind").is_empty() && given("kind") != "Scale" {
            return Err(status::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind (Scale)",
                given("kind")
            )));
        }
        let wanted = serde_json::from_value::<k8s_openapi::api::autoscaling::v1::Scale>(wanted.clone())
            .map(|_| wanted)
            .map_err(|e| status::bad_request(format!("Scale in body is invalid: {e}")))?;
        let errors = crate::workloads::scale_errors(&wanted);
        if !errors.is_empty() {
            return Err(status::invalid(scale_kind, at.name, &errors));
        }
        let rv = meta::get(&wanted, "resourceVersion").to_string();
        let pinned = !rv.is_empty() && rv != old.rev.to_string();
        let mut v = current;
        scaled.set(&mut v, wanted.pointer("/spec/replicas").cloned().unwrap_or(Value::from(0)));
        meta::set(&mut v, "resourceVersion", &rv);
        let at = Named { part: Part::Scale, ..at };
        match update_from(api, r, &k, at, v, old, check.dry_run).await {
            Err(s) if s.reason == "Conflict" && !pinned && verb == "patch" && attempt < PATCH_ATTEMPTS => continue,
            done => return done.map(|(code, obj)| (code, scaled.of(&obj))),
        }
    }
}

/// What a `scale` subresource scales: a built-in workload, or a custom resource by the paths
/// its definition names.
#[derive(Clone, Copy)]
enum Scaled {
    Workload(Workload),
    Custom(&'static crate::crd::ScalePaths),
}

impl Scaled {
    /// The object's `autoscaling/v1` Scale.
    fn of(self, v: &Value) -> Value {
        match self {
            Scaled::Workload(w) => crate::workloads::scale_of(w, v),
            Scaled::Custom(paths) => crate::crd::scale_of(paths, v),
        }
    }

    /// Sets the object's desired replicas.
    fn set(self, v: &mut Value, replicas: Value) {
        match self {
            Scaled::Workload(_) => v["spec"]["replicas"] = replicas,
            Scaled::Custom(paths) => crate::crd::set_path(v, &paths.spec_replicas, replicas),
        }
    }
}

/// A body sent to update the object at the path: its name that of the URL, its namespace the
/// path's (taken when empty).
fn same_object(r: &Resource, v: &mut Value, namespace: Option<&str>, name: &str) -> Result<(), Status> {
    let given = meta::get(v, "name");
    if given != name {
        return Err(status::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    namespace_of_new(r, v, namespace)
}

async fn update_object(api: &Api, r: &'static Resource, at: Named<'_>, mut v: Value, dry_run: bool) -> Answer {
    same_object(r, &mut v, at.namespace, at.name)?;
    let k = key(api, r, at.namespace, at.name);
    let old = read(api, r, &k, at.name).await?;
    update_from(api, r, &k, at, v, old, dry_run).await
}

/// An update of `old` (the object at `k`) to `v` (or of `part` of it), with kube's rules for what
/// a client may change.
async fn update_from(
    api: &Api,
    r: &'static Resource,
    k: &str,
    at: Named<'_>,
    mut v: Value,
    old: Stored,
    dry_run: bool,
) -> Answer {
    let Named { name, part, .. } = at;
    let old_v = parsed_as(r, &old)?;
    // The resourceVersion the client read, if it gave one: the update applies to that version
    // only. Without one, to the current version (the resources here allow unconditional updates).
    let expected = match meta::get(&v, "resourceVersion") {
        "" => old.rev,
        rv => rv.parse::<i64>().map_err(|_| {
            status::invalid(
                r.gk(),
                name,
                &[FieldError::new(
                    FieldErrorType::Invalid,
                    "metadata.resourceVersion",
                    Some(Value::String(rv.into())),
                    "must be specified for an update",
                )],
            )
        })?,
    };
    if expected != old.rev {
        return Err(status::conflict(r.gr(), name, status::OPTIMISTIC_LOCK));
    }
    let user = crate::auth::current();
    let admitted = |object, subresource| crate::admission::Attributes {
        operation: "UPDATE",
        r,
        subresource,
        namespace: at.namespace.unwrap_or(""),
        name,
        object,
        old: Some(&old_v),
        dry_run,
        user: &user,
    };
    if matches!(part, Part::Status | Part::Finalizers) {
        // A subresource's update: its part of the object, the rest as it was.
        let mut applied = part.applied(&old_v, &v);
        if crate::managers::applied() {
            // A server-side apply of the subresource settled its managed fields already.
            let managed = v.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null);
            meta::metadata(&mut applied).insert("managedFields".into(), managed);
        }
        let mut v = applied;
        crate::admission::mutate(api, &admitted(None, part.name()), &mut v).await?;
        let v = crate::managers::track(r, part.name(), Some(&old_v), v);
        if v == old_v {
            return Ok((StatusCode::OK, shown(r, &old)?));
        }
        if r.strategy == Strategy::Custom {
            let errors = validate(r, &v, Some(&old_v));
            if !errors.is_empty() {
                return Err(status::invalid(r.gk(), name, &errors));
            }
        }
        crate::admission::validate(api, &admitted(Some(&v), part.name())).await?;
        return write_or_remove(api, r, k, name, v, &old, dry_run).await;
    }
    crate::admission::mutate(api, &admitted(None, part.name()), &mut v).await?;
    // What the server owns: the uid (taken when not given, refused when changed), the creation
    // and deletion timestamps, and what the strategy keeps.
    let mut errors = Vec::new();
    let old_uid = meta::get(&old_v, "uid").to_string();
    match meta::get(&v, "uid") {
        "" => meta::set(&mut v, "uid", &old_uid),
        u if u != old_uid => errors.push(FieldError::new(
            FieldErrorType::Invalid,
            "metadata.uid",
            Some(Value::String(u.into())),
            "field is immutable",
        )),
        _ => {}
    }
    for kept in ["creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        let m = meta::metadata(&mut v);
        match old_v.get("metadata").and_then(|om| om.get(kept)) {
            Some(x) => m.insert(kept.into(), x.clone()),
            None => m.remove(kept),
        };
    }
    // The status is the status subresource's to change (and a namespace's finalizers the
    // finalize subresource's).
    let kept: &[&str] = match r.strategy {
        Strategy::Namespace => &["spec", "status"],
        _ if r.subresource("status").is_some() => &["status"],
        _ => &[],
    };
    let o = v.as_object_mut().expect("an object");
    for part in kept {
        match old_v.get(*part) {
            Some(x) => o.insert((*part).into(), x.clone()),
            None => o.remove(*part),
        };
    }
    match r.strategy {
        Strategy::Secret => secret_defaults(&mut v),
        // A pod's spec changes only as kube allows.
        Strategy::Pod => {
            crate::pods::defaults(&mut v);
            errors.extend(crate::pods::update_errors(&old_v, &v));
        }
        Strategy::Workload(w) => {
            crate::workloads::defaults(w, &mut v);
            errors.extend(crate::workloads::update_errors(w, &old_v, &v));
        }
        Strategy::Service => {
            crate::services::defaults(&mut v);
            crate::services::keep_allocated(&old_v, &mut v);
            errors.extend(crate::services::update_errors(&old_v, &v));
        }
        Strategy::Binding(_) => errors.extend(crate::rbac::binding_update_errors(&old_v, &v)),
        Strategy::Plain | Strategy::EventV1 => {
            crate::validation::defaults(r.group, r.kind, &mut v);
            errors.extend(crate::validation::update_errors(r.group, r.kind, &old_v, &v))
        }
        Strategy::Crd => {
            crate::crd::validation::defaults(&mut v);
            // The storage version is recorded as one objects may be stored in.
            if let Some(stored) = crate::crd::validation::stored_versions(Some(&old_v), &v) {
                v["status"]["storedVersions"] = serde_json::json!(stored);
            }
        }
        Strategy::Namespace | Strategy::Role(_) | Strategy::Review | Strategy::Custom => {}
    }
    generation(r, &old_v, &mut v);
    let mut v = crate::managers::track(r, part.name(), Some(&old_v), v);
    errors.extend(crate::deletion::finalizer_errors(&old_v, &v));
    errors.extend(meta::name_errors(r.names, &v));
    errors.extend(crate::validation::metadata_errors(&v));
    errors.extend(validate(r, &v, Some(&old_v)));
    if !errors.is_empty() {
        return Err(status::invalid(r.gk(), name, &errors));
    }
    crate::auth::authz::guard_rbac_write(api, r, &v, Some(&old_v))?;
    crate::admission::validate(api, &admitted(Some(&v), part.name())).await?;
    if stored_bytes(r, v.clone()) == old.value && !api.storage.stale(k).await.unwrap_or(false) {
        // Nothing changed: kube writes nothing and answers the object as it is.
        return Ok((StatusCode::OK, shown(r, &old)?));
    }
    if crate::deletion::done(r, &v) {
        return write_or_remove(api, r, k, name, v, &old, dry_run).await;
    }
    if r.strategy == Strategy::Service && !dry_run {
        // What the service needs now and did not hold is taken first; what it no longer holds
        // is given back once the update is stored.
        let taken = crate::services::allocate(api, &api.ranges, Some(&old_v), &mut v)
            .await
            .map_err(|e| status::invalid(r.gk(), name, &e))?;
        let dropped = crate::services::dropped(&old_v, &v);
        return match write_over(api, r, k, name, v, old.rev, dry_run).await {
            Ok(done) => {
                crate::services::release(api, &api.ranges, dropped).await;
                Ok(done)
            }
            Err(e) => {
                crate::services::release(api, &api.ranges, taken).await;
                Err(e)
            }
        };
    }
    write_over(api, r, k, name, v, old.rev, dry_run).await
}

/// An updated object's generation: a client cannot set it; the old one, bumped when the
/// resource tracks changes of what changed.
fn generation(r: &Resource, old: &Value, v: &mut Value) {
    let old_gen = old.pointer("/metadata/generation").cloned();
    let changed = match r.generation {
        Generation::None => false,
        Generation::Spec => old.get("spec") != v.get("spec"),
        Generation::Webhooks => old.get("webhooks") != v.get("webhooks"),
        Generation::Content => {
            let content = |o: &Value| {
                let mut o = o.clone();
                if let Value::Object(m) = &mut o {
                    m.remove("metadata");
                    if r.subresource("status").is_some() {
                        m.remove("status");
                    }
                }
                o
            };
            content(old) != content(v)
        }
        Generation::SpecAndAnnotations => {
            old.get("spec") != v.get("spec")
                || old.pointer("/metadata/annotations") != v.pointer("/metadata/annotations")
        }
    };
    let m = meta::metadata(v);
    match old_gen {
        Some(g) if changed => m.insert("generation".into(), Value::from(g.as_i64().unwrap_or(0) + 1)),
        Some(g) => m.insert("generation".into(), g),
        None => m.remove("generation"),
    };
}

/// An update of `old` to `v`: written, or, when it leaves an object being deleted without
/// finalizers, the object removed (kube's delete during update; the answer is the object as it
/// was last stored).
async fn write_or_remove(
    api: &Api,
    r: &Resource,
    k: &str,
    name: &str,
    v: Value,
    old: &Stored,
    dry_run: bool,
) -> Answer {
    if !crate::deletion::done(r, &v) {
        return write_over(api, r, k, name, v, old.rev, dry_run).await;
    }
    if !dry_run {
        remove(api, r, k, name, Some(old.rev)).await?;
    }
    Ok((StatusCode::OK, shown(r, old)?))
}

/// Writes `v` over the object at `k` as it was at `rev`, and answers it; a dry run answers what
/// would be written.
pub(crate) async fn write_over(
    api: &Api,
    r: &Resource,
    k: &str,
    name: &str,
    v: Value,
    rev: i64,
    dry_run: bool,
) -> Answer {
    let value = stored_bytes(r, v);
    let rev = match dry_run {
        true => rev,
        false => {
            let lease = api.lease(r, name).await?;
            api.storage.update_with_lease(k, value.clone(), rev, lease).await.map_err(|e| storage_error(r, name, e))?
        }
    };
    Ok((StatusCode::OK, shown(r, &Stored { value, rev })?))
}

/// A DELETE's options: its body (`DeleteOptions`, JSON or kube's protobuf) and query; a dry run
/// goes into the request's `Check`.
fn delete_options(
    headers: &HeaderMap,
    body: &Bytes,
    query: &Query,
    check: &mut Check,
) -> Result<DeleteOptions, Status> {
    let v: Option<Value> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(body_value(headers, body, "meta.k8s.io/v1", "DeleteOptions")?)
    };
    let dry_run = v.as_ref().and_then(|v| v.get("dryRun")).and_then(Value::as_array).cloned().unwrap_or_default();
    for d in dry_run {
        match d.as_str() {
            Some("All") => check.dry_run = true,
            other => {
                let e = FieldError::not_supported("dryRun", other.unwrap_or(""), &["All"]);
                return Err(status::invalid(GroupKind { group: "meta.k8s.io", kind: "DeleteOptions" }, "", &[e]));
            }
        }
    }
    DeleteOptions::of(v.as_ref(), query)
}

/// kube's precondition check of a delete against the object as stored at `rev`.
pub(crate) fn preconditions(
    opts: &DeleteOptions,
    r: &Resource,
    name: &str,
    obj: &Value,
    rev: i64,
) -> Result<(), Status> {
    let failed = |what: &str, want: &str, have: &str| {
        let why = format!("Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}");
        Err(status::conflict(r.gr(), name, &why))
    };
    if let Some(uid) = &opts.uid {
        if uid != meta::get(obj, "uid") {
            return failed("UID", uid, meta::get(obj, "uid"));
        }
    }
    if let Some(rv) = &opts.resource_version {
        if *rv != rev.to_string() {
            return failed("ResourceVersion", rv, &rev.to_string());
        }
    }
    Ok(())
}

/// Removes the object at `k` (at revision `at`, if given) and gives back what it held; what was
/// removed.
async fn remove(api: &Api, r: &Resource, k: &str, name: &str, at: Option<i64>) -> Result<Stored, Status> {
    let gone = api.storage.delete(k, at).await.map_err(|e| storage_error(r, name, e))?;
    if r.strategy == Strategy::Service {
        let v: Value = serde_json::from_slice(&gone.value).unwrap_or_default();
        crate::services::release(api, &api.ranges, crate::services::held(&v)).await;
    }
    Ok(gone)
}

/// DELETE: the object removed, or marked and kept (graceful deletion, finalizers); done again
/// on the newer version when the object changed meanwhile, unless the client's preconditions
/// named the version.
pub(crate) async fn delete(
    api: &Api,
    r: &Resource,
    namespace: Option<&str>,
    name: &str,
    dry_run: bool,
    opts: &DeleteOptions,
) -> Answer {
    let pinned = opts.uid.is_some() || opts.resource_version.is_some();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match delete_once(api, r, (namespace, name), dry_run, opts).await {
            Err(s) if s.reason == "Conflict" && !pinned && attempt < PATCH_ATTEMPTS => continue,
            done => return done,
        }
    }
}

/// One try of a DELETE of the object `at` (namespace, name).
async fn delete_once(api: &Api, r: &Resource, at: (Option<&str>, &str), dry_run: bool, opts: &DeleteOptions) -> Answer {
    let (namespace, name) = at;
    let k = key(api, r, namespace, name);
    // The object as it is, for preconditions (and the namespace's own path below).
    let current = read(api, r, &k, name).await?;
    let mut v = parsed_as(r, &current)?;
    preconditions(opts, r, name, &v, current.rev)?;
    let user = crate::auth::current();
    let deleting = crate::admission::Attributes {
        operation: "DELETE",
        r,
        subresource: "",
        namespace: namespace.unwrap_or(""),
        name,
        object: None,
        old: Some(&v),
        dry_run,
        user: &user,
    };
    crate::admission::mutate(api, &deleting, &mut Value::Null).await?;
    crate::admission::validate(api, &deleting).await?;
    // A namespace with finalizers is marked Terminating and kept until they are gone (the
    // namespace controller's work).
    let finalizers = v.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    if r.strategy == Strategy::Namespace && finalizers {
        if !meta::get(&v, "deletionTimestamp").is_empty() {
            return Ok((StatusCode::OK, shown(r, &current)?));
        }
        meta::set(&mut v, "deletionTimestamp", &meta::now());
        meta::metadata(&mut v).insert("deletionGracePeriodSeconds".into(), Value::from(0));
        v["status"] = serde_json::json!({"phase": "Terminating"});
        return write_over(api, r, &k, name, v, current.rev, dry_run).await;
    }
    // A definition is marked Terminating and kept, with the finalizer that removes its objects
    // first (kube's CRD storage), the first time it is deleted.
    if r.strategy == Strategy::Crd && meta::get(&v, "deletionTimestamp").is_empty() {
        meta::set(&mut v, "deletionTimestamp", &meta::now());
        meta::metadata(&mut v).insert("deletionGracePeriodSeconds".into(), Value::from(0));
        let finalizers = meta::metadata(&mut v).entry("finalizers").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(f) = finalizers {
            if !f.iter().any(|x| x == crate::crd::CLEANUP_FINALIZER) {
                f.push(Value::from(crate::crd::CLEANUP_FINALIZER));
            }
        }
        let status = v.as_object_mut().expect("an object").entry("status").or_insert_with(|| serde_json::json!({}));
        crate::crd::set_condition(
            status,
            serde_json::json!({
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": meta::now(),
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; instance deletion will begin soon",
            }),
        );
        return write_over(api, r, &k, name, v, current.rev, dry_run).await;
    }
    // A graceful deletion, or finalizers, keep the object (marked) for now.
    match crate::deletion::plan(r, &v, opts) {
        Plan::Pending => return Ok((StatusCode::OK, shown(r, &current)?)),
        Plan::Keep(marked) => return write_over(api, r, &k, name, marked, current.rev, dry_run).await,
        Plan::Remove => {}
    }
    let gone = if dry_run {
        current
    } else {
        // At the version the plan (and any preconditions) were made against.
        remove(api, r, &k, name, Some(current.rev)).await?
    };
    match r.deleted {
        Deleted::Object => Ok((StatusCode::OK, shown(r, &gone)?)),
        Deleted::Status => {
            let v: Value = serde_json::from_slice(&gone.value).unwrap_or_default();
            let details = Details {
                name: name.into(),
                group: r.group.into(),
                kind: r.plural.into(),
                uid: meta::get(&v, "uid").into(),
                ..Default::default()
            };
            Ok((StatusCode::OK, serde_json::to_value(Status::success(details)).expect("a status encodes")))
        }
    }
}

/// A request's label and field selectors.
#[derive(Clone)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn of(r: &Resource, query: &Query) -> Result<Selectors, Status> {
        let labels = query.get("labelSelector").map(String::as_str).unwrap_or("");
        let labels = LabelSelector::parse(labels)
            .map_err(|e| status::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = query.get("fieldSelector").map(String::as_str).unwrap_or("");
        let fields = FieldSelector::parse(fields, r.selectable()).map_err(status::bad_request)?;
        Ok(Selectors { labels, fields })
    }

    /// Selectors that select everything.
    pub fn everything() -> Selectors {
        Selectors { labels: LabelSelector::default(), fields: FieldSelector::default() }
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether an object (as shown to clients) is selected.
    pub fn matches(&self, v: &Value) -> bool {
        self.matches_parts(v.get("metadata").and_then(|m| m.get("labels")), |f| field_of(v, f))
    }

    /// Whether an object with `labels` whose selectable fields read as `field` gives them is
    /// selected.
    pub fn matches_parts(&self, labels: Option<&Value>, field: impl Fn(&str) -> String) -> bool {
        self.labels.matches(labels) && self.fields.matches(field)
    }
}

/// The key prefix of a collection of `r` (in `namespace`, or all of them).
pub fn collection(api: &Api, r: &Resource, namespace: Option<&str>) -> String {
    keys::collection(&api.prefix, &r.key_prefix(), namespace.filter(|_| r.namespaced))
}

/// kube's `ValidateListOptions`: how `resourceVersionMatch` may combine with the rest; errors are
/// 422 on `ListOptions.meta.k8s.io`.
fn list_options(query: &Query) -> Result<(), Status> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or("");
    let (rv, matching, cont) = (get("resourceVersion"), get("resourceVersionMatch"), get("continue"));
    let mut errors = Vec::new();
    let forbidden = |why: &str| FieldError::new(FieldErrorType::Forbidden, "resourceVersionMatch", None, why);
    if !matching.is_empty() {
        if rv.is_empty() {
            errors.push(forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        }
        if !cont.is_empty() {
            errors.push(forbidden("resourceVersionMatch is forbidden when continue is provided"));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            errors.push(FieldError::new(
                FieldErrorType::NotSupported,
                "resourceVersionMatch",
                Some(Value::String(matching.into())),
                "supported values: \"Exact\", \"NotOlderThan\", \"\"",
            ));
        }
        if matching == "Exact" && rv == "0" {
            errors.push(forbidden("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
        }
    }
    if !get("sendInitialEvents").is_empty() {
        errors.push(FieldError::new(
            FieldErrorType::Forbidden,
            "sendInitialEvents",
            None,
            "sendInitialEvents is forbidden for list",
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(status::invalid(GroupKind { group: "meta.k8s.io", kind: "ListOptions" }, "", &errors))
    }
}

/// DELETE of a collection: what a LIST with the same options finds, deleted one by one (an
/// object gone meanwhile is skipped); the answer is that list, as kube's `DeleteCollection`.
async fn delete_collection(
    api: &Api,
    r: &Resource,
    namespace: Option<&str>,
    query: &Query,
    dry_run: bool,
    opts: &DeleteOptions,
) -> Answer {
    let (code, mut listed) = list(api, r, namespace, query).await?;
    let mut deleted = Vec::new();
    for item in listed["items"].as_array().cloned().unwrap_or_default() {
        let ns = Some(meta::get(&item, "namespace")).filter(|n| !n.is_empty());
        match delete(api, r, ns, meta::get(&item, "name"), dry_run, opts).await {
            Ok(_) => deleted.push(item),
            Err(s) if s.code == 404 => {}
            Err(s) => return Err(s),
        }
    }
    listed["items"] = Value::Array(deleted);
    Ok((code, listed))
}

/// A LIST's selectors and limit, once its options are checked as kube checks them.
fn list_request(r: &Resource, query: &Query) -> Result<(Selectors, i64), Status> {
    let sel = Selectors::of(r, query)?;
    let limit: i64 = match query.get("limit") {
        None => 0,
        Some(l) => l.parse().map_err(|_| status::bad_request(format!("invalid limit: {l}")))?,
    };
    list_options(query)?;
    Ok((sel, limit))
}

/// Answers a LIST from the watch cache or the store (`reads` decides), in `shape`: the cache's
/// JSON as it is, anything else rendered.
async fn list_answer(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    query: &Query,
    shape: table::Shape,
) -> http::Response<Body> {
    let include = query.get("includeObject").map(String::as_str);
    let answered = async {
        let (sel, limit) = list_request(r, query)?;
        let Some((cache, limit)) = crate::reads::list_source(api, r, query, limit).await? else {
            let (_, v) = list(api, r, namespace, query).await?;
            return Ok(Err(table::render(shape, r, v, include)?));
        };
        let listed = cache.list(&collection(api, r, namespace), &sel, limit);
        match shape {
            table::Shape::Object => Ok(Ok(crate::reads::list_json(r, &listed))),
            _ => Ok(Err(table::render(shape, r, crate::reads::list_value(r, &listed), include)?)),
        }
    };
    match answered.await {
        Ok(Ok(body)) => json(StatusCode::OK, body),
        Ok(Err(v)) => encoded(StatusCode::OK, shape, &v),
        Err(s) => failure(s),
    }
}

/// A LIST answered from the store, encoded in `shape`.
pub async fn list_from_store(
    api: &Api,
    r: &Resource,
    namespace: Option<&str>,
    query: &Query,
    shape: table::Shape,
) -> Result<Vec<u8>, Status> {
    let (_, v) = list(api, r, namespace, query).await?;
    Ok(status::go_json(&table::render(shape, r, v, query.get("includeObject").map(String::as_str))?))
}

/// A list of `r` as kube encodes it.
pub(crate) fn list_of(r: &Resource, metadata: Map<String, Value>, items: Vec<Value>) -> Value {
    let mut list = Map::new();
    let kind = r.custom.map_or_else(|| format!("{}List", r.kind), |c| c.list_kind.to_string());
    list.insert("kind".into(), Value::String(kind));
    list.insert("apiVersion".into(), Value::String(r.api_version()));
    list.insert("metadata".into(), Value::Object(metadata));
    list.insert("items".into(), Value::Array(items));
    Value::Object(list)
}

/// A LIST from the store.
pub(crate) async fn list(api: &Api, r: &Resource, namespace: Option<&str>, query: &Query) -> Answer {
    let (sel, limit) = list_request(r, query)?;
    let at = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => At::Latest,
        Some(rv) => match query.get("resourceVersionMatch").map(String::as_str) {
            Some("Exact") => {
                At::Exact(rv.parse().map_err(|_| status::bad_request(format!("invalid resource version: {rv}")))?)
            }
            _ => At::Latest,
        },
    };
    let prefix = collection(api, r, namespace);
    let mut opts = ListOptions { limit: limit.max(0), continue_token: query.get("continue").cloned(), at };
    let mut items = Vec::new();
    // With selectors, pages are refilled until `limit` objects match or the list ends, as kube's
    // store does; the continue token then points after the last object looked at.
    let (rev, cont, remaining) = loop {
        let page = api.storage.list(&prefix, &opts).await.map_err(|e| storage_error(r, "", e))?;
        for (_, stored) in &page.items {
            let v = shown(r, stored)?;
            if sel.matches(&v) {
                let Value::Object(mut m) = v else { continue };
                m.remove("kind");
                m.remove("apiVersion");
                items.push(Value::Object(m));
            }
        }
        let full = limit > 0 && items.len() as i64 >= limit;
        match page.continue_token {
            Some(t) if !full && !sel.is_empty() => {
                opts = ListOptions { limit: opts.limit, continue_token: Some(t), at: opts.at };
            }
            t => break (page.rev, t, page.remaining.filter(|_| sel.is_empty())),
        }
    };
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(rev.to_string()));
    if let Some(c) = cont {
        metadata.insert("continue".into(), Value::String(c));
    }
    if let Some(n) = remaining {
        metadata.insert("remainingItemCount".into(), Value::from(n));
    }
    Ok((StatusCode::OK, list_of(r, metadata, items)))
}

/// Creates namespace `name` unless it exists (the namespaces kube-apiserver makes at start).
pub async fn ensure_namespace(api: &Api, name: &str) -> Result<(), Status> {
    ensure(api, "namespaces", None, serde_json::json!({"metadata": {"name": name}})).await
}

/// Creates `object` of core/v1 `plural` (in `namespace`) unless one of its name exists: what
/// kube-apiserver makes at start.
pub async fn ensure(api: &Api, plural: &str, namespace: Option<&str>, object: Value) -> Result<(), Status> {
    keep(api, plural, namespace, object, false).await
}

/// Creates `object` of core/v1 `plural` (in `namespace`), or makes the one there hold its fields
/// (all but metadata): what kube-apiserver's reconcilers keep (the `kubernetes` service and its
/// endpoints, which follow the serving address and port).
pub async fn reconcile(api: &Api, plural: &str, namespace: Option<&str>, object: Value) -> Result<(), Status> {
    keep(api, plural, namespace, object, true).await
}

async fn keep(api: &Api, plural: &str, namespace: Option<&str>, object: Value, update: bool) -> Result<(), Status> {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let r = crate::resources::find(group, version, plural).expect("a served resource");
    let name = meta::get(&object, "name").to_string();
    if let Ok(current) = read(api, r, &key(api, r, namespace, &name), &name).await {
        if !update {
            return Ok(());
        }
        let mut v = shown(r, &current)?;
        if let (Value::Object(o), Value::Object(want)) = (&mut v, &object) {
            o.extend(
                want.iter()
                    .filter(|(k, _)| *k != "metadata" && *k != "kind" && *k != "apiVersion")
                    .map(|(k, x)| (k.clone(), x.clone())),
            );
        }
        let mut check = Check { validation: Validation::Strict, dry_run: false, warnings: Vec::new(), force: false };
        let v = typed(r, v, Vec::new(), &mut check)?;
        let at = Named { namespace, name: &name, part: Part::Main };
        return update_object(api, r, at, v, false).await.map(|_| ());
    }
    let body = Bytes::from(serde_json::to_vec(&object).expect("a body"));
    let mut check = Check { validation: Validation::Strict, dry_run: false, warnings: Vec::new(), force: false };
    match create(api, r, namespace, &HeaderMap::new(), &body, &mut check).await {
        Ok(_) => Ok(()),
        Err(s) if s.reason == "AlreadyExists" => Ok(()),
        Err(s) => Err(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's strict decoding error, from its own test of a Deployment body with both.
    #[test]
    fn unknown_and_duplicate_fields_in_the_order_they_come() {
        let body = br#"{"metadata":{"name":"a","unknownMeta":1,"name":"a"},"spec":{"unknown1":1,"unknownDupe":1,"unknownDupe":2,"paused":true,"paused":false,"template":{"spec":{"containers":[{"name":"c","unknownNested":1,"imagePullPolicy":"Always","imagePullPolicy":"Never"}]}}}}"#;
        let unknown = [
            "metadata.unknownMeta",
            "spec.unknown1",
            "spec.unknownDupe",
            "spec.template.spec.containers[0].unknownNested",
        ]
        .map(String::from)
        .to_vec();
        let r = crate::resources::find("apps", "v1", "deployments").unwrap();
        let mut check = Check { validation: Validation::Strict, dry_run: false, warnings: Vec::new(), force: false };
        let err = check.strict(r, unknown, keys(body)).unwrap_err();
        assert_eq!(
            err.message,
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "metadata.unknownMeta", duplicate field "metadata.name", unknown field "spec.unknown1", unknown field "spec.unknownDupe", duplicate field "spec.paused", unknown field "spec.template.spec.containers[0].unknownNested", duplicate field "spec.template.spec.containers[0].imagePullPolicy""#
        );
    }

    #[test]
    fn list_options_are_checked_as_kube_checks_them() {
        let q =
            |pairs: &[(&str, &str)]| -> Query { pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
        assert!(list_options(&q(&[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")])).is_ok());
        let e = list_options(&q(&[("resourceVersionMatch", "Exact")])).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(e.message, "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided");
        let e = list_options(&q(&[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")])).unwrap_err();
        assert!(e.message.ends_with("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""), "{}", e.message);
        let e = list_options(&q(&[("resourceVersion", "1"), ("resourceVersionMatch", "Newest")])).unwrap_err();
        assert!(e.message.ends_with("resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""), "{}", e.message);
    }
}
