//! Request bodies in kube's protobuf (`application/vnd.kubernetes.protobuf`), as kubectl's
//! `create namespace|configmap|secret` and client-go's typed clients send them: the `k8s\0`
//! envelope around a `runtime.Unknown` (type meta and the object's own encoding), decoded with
//! `k8s-pb`'s generated types and turned into the JSON the registry works on.
//!
//! Go writes every non-pointer field even when empty, so empty strings, zero numbers and empty
//! times are taken as unset. Answers stay JSON: clients that send protobuf also accept JSON.

use base64::Engine as _;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use prost::Message;
use serde_json::{json, Map, Value};

use crate::resources::Resource;
use crate::status::{self, Status};

/// The media type of kube's protobuf.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The prefix of every protobuf-encoded object.
const MAGIC: &[u8] = b"k8s\0";

fn put_str(m: &mut Map<String, Value>, k: &str, v: Option<String>) {
    if let Some(v) = v.filter(|v| !v.is_empty()) {
        m.insert(k.into(), Value::String(v));
    }
}

fn put_map<V: Into<Value>>(m: &mut Map<String, Value>, k: &str, v: impl IntoIterator<Item = (String, V)>) {
    let o: Map<String, Value> = v.into_iter().map(|(k, v)| (k, v.into())).collect();
    if !o.is_empty() {
        m.insert(k.into(), Value::Object(o));
    }
}

/// A `metav1.Time` as kube writes it in JSON (RFC 3339, whole seconds); `None` when unset.
fn time(t: Option<Time>) -> Option<String> {
    let secs = t?.seconds.filter(|s| *s != 0)?;
    let ts = k8s_openapi::jiff::Timestamp::from_second(secs).ok()?;
    Some(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

fn object_meta(m: ObjectMeta) -> Value {
    let mut o = Map::new();
    put_str(&mut o, "name", m.name);
    put_str(&mut o, "generateName", m.generate_name);
    put_str(&mut o, "namespace", m.namespace);
    put_str(&mut o, "uid", m.uid);
    put_str(&mut o, "resourceVersion", m.resource_version);
    if let Some(g) = m.generation.filter(|g| *g != 0) {
        o.insert("generation".into(), g.into());
    }
    put_str(&mut o, "creationTimestamp", time(m.creation_timestamp));
    put_str(&mut o, "deletionTimestamp", time(m.deletion_timestamp));
    put_map(&mut o, "labels", m.labels);
    put_map(&mut o, "annotations", m.annotations);
    let owners: Vec<Value> = m
        .owner_references
        .into_iter()
        .map(|r| {
            let mut x = Map::new();
            put_str(&mut x, "apiVersion", r.api_version);
            put_str(&mut x, "kind", r.kind);
            put_str(&mut x, "name", r.name);
            put_str(&mut x, "uid", r.uid);
            if let Some(c) = r.controller {
                x.insert("controller".into(), c.into());
            }
            if let Some(b) = r.block_owner_deletion {
                x.insert("blockOwnerDeletion".into(), b.into());
            }
            Value::Object(x)
        })
        .collect();
    if !owners.is_empty() {
        o.insert("ownerReferences".into(), owners.into());
    }
    if !m.finalizers.is_empty() {
        o.insert("finalizers".into(), m.finalizers.into());
    }
    Value::Object(o)
}

fn b64(bytes: Vec<u8>) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn bad(what: &str) -> Status {
    status::bad_request(format!("unable to decode the request body as {what} protobuf"))
}

/// Decodes a protobuf request body for `r` into its JSON form; the types keel can take are
/// those of the resources served.
pub fn decode(r: &Resource, body: &[u8]) -> Result<Value, Status> {
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        status::bad_request("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")
    })?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(raw).map_err(|_| bad("runtime.Unknown"))?;
    let tm = unknown.type_meta.unwrap_or_default();
    let (api_version, kind) = (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default());
    let raw = unknown.raw.unwrap_or_default();
    let mut o = Map::new();
    o.insert("apiVersion".into(), Value::String(api_version.clone()));
    o.insert("kind".into(), Value::String(kind.clone()));
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => {
            let c = k8s_pb::api::core::v1::ConfigMap::decode(raw.as_slice()).map_err(|_| bad("ConfigMap"))?;
            o.insert("metadata".into(), object_meta(c.metadata.unwrap_or_default()));
            put_map(&mut o, "data", c.data);
            put_map(&mut o, "binaryData", c.binary_data.into_iter().map(|(k, v)| (k, b64(v))));
            if let Some(i) = c.immutable {
                o.insert("immutable".into(), i.into());
            }
        }
        ("v1", "Secret") => {
            let s = k8s_pb::api::core::v1::Secret::decode(raw.as_slice()).map_err(|_| bad("Secret"))?;
            o.insert("metadata".into(), object_meta(s.metadata.unwrap_or_default()));
            put_map(&mut o, "data", s.data.into_iter().map(|(k, v)| (k, b64(v))));
            put_map(&mut o, "stringData", s.string_data);
            put_str(&mut o, "type", s.r#type);
            if let Some(i) = s.immutable {
                o.insert("immutable".into(), i.into());
            }
        }
        ("v1", "ServiceAccount") => {
            let a = k8s_pb::api::core::v1::ServiceAccount::decode(raw.as_slice()).map_err(|_| bad("ServiceAccount"))?;
            o.insert("metadata".into(), object_meta(a.metadata.unwrap_or_default()));
            let secrets: Vec<Value> = a
                .secrets
                .into_iter()
                .map(|s| {
                    let mut x = Map::new();
                    put_str(&mut x, "kind", s.kind);
                    put_str(&mut x, "namespace", s.namespace);
                    put_str(&mut x, "name", s.name);
                    put_str(&mut x, "uid", s.uid);
                    put_str(&mut x, "apiVersion", s.api_version);
                    put_str(&mut x, "resourceVersion", s.resource_version);
                    put_str(&mut x, "fieldPath", s.field_path);
                    Value::Object(x)
                })
                .collect();
            if !secrets.is_empty() {
                o.insert("secrets".into(), secrets.into());
            }
            let pulls: Vec<Value> =
                a.image_pull_secrets.into_iter().map(|p| json!({"name": p.name.unwrap_or_default()})).collect();
            if !pulls.is_empty() {
                o.insert("imagePullSecrets".into(), pulls.into());
            }
            if let Some(m) = a.automount_service_account_token {
                o.insert("automountServiceAccountToken".into(), m.into());
            }
        }
        ("v1", "Namespace") => {
            let n = k8s_pb::api::core::v1::Namespace::decode(raw.as_slice()).map_err(|_| bad("Namespace"))?;
            o.insert("metadata".into(), object_meta(n.metadata.unwrap_or_default()));
            let finalizers = n.spec.map(|s| s.finalizers).unwrap_or_default();
            if !finalizers.is_empty() {
                o.insert("spec".into(), json!({ "finalizers": finalizers }));
            }
            if let Some(phase) = n.status.and_then(|s| s.phase).filter(|p| !p.is_empty()) {
                o.insert("status".into(), json!({ "phase": phase }));
            }
        }
        _ if kind == r.kind => {
            // A type whose protobuf form keel does not decode yet: its body is of a media type
            // this endpoint does not take.
            let message =
                "the body of the request was in an unknown format - accepted media types include: application/json";
            return Err(Status::failure(415, "UnsupportedMediaType", message, None));
        }
        _ => {
            // kube decodes into the endpoint's type; a body of another type is refused by name.
            return Err(status::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                r.kind
            )));
        }
    }
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body kubectl 1.32's `create ns x` sends (docs/apiserver-research.md §2.2).
    #[test]
    fn kubectls_namespace_body_decodes() {
        let mut body = b"k8s\0".to_vec();
        body.extend([0x0a, 0x0f, 0x0a, 0x02]);
        body.extend(b"v1");
        body.extend([0x12, 0x09]);
        body.extend(b"Namespace");
        body.extend([
            0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, b'x', 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00,
        ]);
        body.extend([0x38, 0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00]);
        let r = crate::resources::find("", "v1", "namespaces").unwrap();
        let v = decode(r, &body).unwrap();
        assert_eq!(v, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
        assert!(decode(r, b"{}").is_err());
        assert!(decode(r, b"k8s\0\xff\xff").is_err());
    }

    #[test]
    fn configmaps_and_secrets_decode() {
        use k8s_pb::api::core::v1::{ConfigMap, Secret};
        let wrap = |kind: &str, raw: Vec<u8>| {
            let u = k8s_pb::apimachinery::pkg::runtime::Unknown {
                type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                    api_version: Some("v1".into()),
                    kind: Some(kind.into()),
                }),
                raw: Some(raw),
                content_encoding: Some(String::new()),
                content_type: Some(String::new()),
            };
            [MAGIC.to_vec(), u.encode_to_vec()].concat()
        };
        let meta = ObjectMeta { name: Some("c".into()), namespace: Some("d".into()), ..Default::default() };
        let cm = ConfigMap {
            metadata: Some(meta.clone()),
            data: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        };
        let r = crate::resources::find("", "v1", "configmaps").unwrap();
        let v = decode(r, &wrap("ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}, "data": {"k": "v"}})
        );
        let s = Secret {
            metadata: Some(meta),
            data: [("p".to_string(), b"hi".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let r = crate::resources::find("", "v1", "secrets").unwrap();
        let v = decode(r, &wrap("Secret", s.encode_to_vec())).unwrap();
        assert_eq!(v["data"]["p"], "aGk=");
        assert_eq!(v["type"], "Opaque");
    }
}
