//! Answers in kube's protobuf: the JSON the registry holds, written by the same table the
//! decoder reads, by its rules turned around (the module's essay): an absent or `null` field is
//! not written; a present pointer field is, whatever its value; maps are written in key order;
//! fields in tag order, as gogo's marshallers write them.

use base64::Engine as _;
use serde_json::Value;

use super::{lookup, table, Card, Shape, Ty, MAGIC, MAX_DEPTH};

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, tag: u8, wire: u8) {
    varint(out, (u64::from(tag) << 3) | u64::from(wire));
}

fn len(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    key(out, tag, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn int(out: &mut Vec<u8>, tag: u8, v: i64) {
    key(out, tag, 0);
    // Negative int32s too are ten bytes: Go writes them sign-extended.
    varint(out, v as u64);
}

/// `raw`, an encoded message of `kind` in `api_version`, in kube's envelope: `k8s\0` and a
/// `runtime.Unknown` naming its type.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    len(&mut type_meta, 1, api_version.as_bytes());
    len(&mut type_meta, 2, kind.as_bytes());
    let mut out = MAGIC.to_vec();
    len(&mut out, 1, &type_meta);
    len(&mut out, 2, raw);
    len(&mut out, 3, b"");
    len(&mut out, 4, b"");
    out
}

/// An object (its own `apiVersion` and `kind` name its type) in kube's protobuf, enveloped;
/// `None` for a type with no message.
pub fn encode(v: &Value) -> Option<Vec<u8>> {
    let api_version = v.get("apiVersion")?.as_str()?;
    let kind = v.get("kind")?.as_str()?;
    let i = lookup(api_version, kind)?;
    Some(envelope(api_version, kind, &message(i, v, 0)))
}

/// One event of a protobuf watch: a `WatchEvent` of the watched group-version holding the
/// enveloped object, enveloped in turn and framed by its length (4 bytes, big-endian).
pub fn watch_frame(api_version: &str, event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut raw_extension = Vec::new();
    len(&mut raw_extension, 1, object);
    let mut event = Vec::new();
    len(&mut event, 1, event_type.as_bytes());
    len(&mut event, 2, &raw_extension);
    let body = envelope(api_version, "WatchEvent", &event);
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// Go's `time.ParseDuration` of what `go_duration` writes: nanoseconds.
fn parse_duration(s: &str) -> Option<i64> {
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[u..];
        total += number * unit;
    }
    Some(if negative { -total } else { total }.round() as i64)
}

/// Message `i` holding `v`.
fn message(i: u16, v: &Value, depth: usize) -> Vec<u8> {
    let msg = &table::MESSAGES[usize::from(i)];
    let mut out = Vec::new();
    if depth > MAX_DEPTH {
        return out;
    }
    match msg.shape {
        Shape::Object => fields(i, v, &mut out, depth),
        Shape::List => {
            for item in v.as_array().into_iter().flatten() {
                one(&mut out, msg.fields[0].tag, msg.fields[0].ty, item, depth);
            }
        }
        Shape::Time | Shape::MicroTime => {
            if let Some(ts) = v.as_str().and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok()) {
                int(&mut out, 1, ts.as_second());
                if ts.subsec_nanosecond() != 0 {
                    int(&mut out, 2, i64::from(ts.subsec_nanosecond()));
                }
            }
        }
        Shape::Duration => {
            if let Some(ns) = v.as_str().and_then(parse_duration) {
                int(&mut out, 1, ns);
            }
        }
        Shape::IntOrString => match v {
            Value::String(s) => {
                int(&mut out, 1, 1);
                len(&mut out, 3, s.as_bytes());
            }
            other => {
                int(&mut out, 1, 0);
                int(&mut out, 2, other.as_i64().unwrap_or(0));
            }
        },
        Shape::Quantity => match v {
            Value::String(s) => len(&mut out, 1, s.as_bytes()),
            Value::Null => {}
            other => len(&mut out, 1, other.to_string().as_bytes()),
        },
        Shape::Json => {
            if !v.is_null() {
                len(&mut out, 1, &serde_json::to_vec(v).expect("a value encodes"));
            }
        }
        // The JSON schema's "or" types: which form the value has says which field holds it.
        Shape::SchemaOrArray | Shape::SchemaOrBool | Shape::SchemaOrStringArray => {
            let held = match (msg.shape, v) {
                (Shape::SchemaOrArray, Value::Array(_)) => serde_json::json!({"jSONSchemas": v}),
                (Shape::SchemaOrBool, Value::Bool(b)) => serde_json::json!({"allows": b}),
                (Shape::SchemaOrBool, _) => serde_json::json!({"allows": true, "schema": v}),
                (Shape::SchemaOrStringArray, Value::Array(_)) => serde_json::json!({"property": v}),
                _ => serde_json::json!({"schema": v}),
            };
            fields(i, &held, &mut out, depth);
        }
    }
    out
}

/// The fields of message `i` (an object's) taken from `v`, in tag order.
fn fields(i: u16, v: &Value, out: &mut Vec<u8>, depth: usize) {
    let msg = &table::MESSAGES[usize::from(i)];
    let mut order: Vec<_> = msg.fields.iter().collect();
    order.sort_by_key(|f| f.tag);
    for f in order {
        match f.card {
            // An inlined struct's fields are the object's own.
            Card::I => {
                if let Ty::Msg(j) = f.ty {
                    len(out, f.tag, &message(j, v, depth + 1));
                }
            }
            Card::R => {
                for item in v.get(f.json).and_then(Value::as_array).into_iter().flatten() {
                    one(out, f.tag, f.ty, item, depth);
                }
            }
            Card::K => {
                let Some(map) = v.get(f.json).and_then(Value::as_object) else { continue };
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (k, value) in entries {
                    let mut entry = Vec::new();
                    len(&mut entry, 1, k.as_bytes());
                    one(&mut entry, 2, f.ty, value, depth);
                    len(out, f.tag, &entry);
                }
            }
            Card::V | Card::P => {
                if let Some(value) = v.get(f.json).filter(|x| !x.is_null()) {
                    one(out, f.tag, f.ty, value, depth);
                }
            }
        }
    }
}

/// One value of type `ty` as field `tag`.
fn one(out: &mut Vec<u8>, tag: u8, ty: Ty, v: &Value, depth: usize) {
    match ty {
        Ty::Str => match v {
            Value::String(s) => len(out, tag, s.as_bytes()),
            other => len(out, tag, other.to_string().as_bytes()),
        },
        Ty::Bytes => {
            let raw = v.as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
            len(out, tag, &raw.unwrap_or_default());
        }
        Ty::Int32 | Ty::Int64 => int(out, tag, v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)).unwrap_or(0)),
        Ty::Bool => int(out, tag, i64::from(v.as_bool().unwrap_or(false))),
        Ty::Double => {
            key(out, tag, 1);
            out.extend_from_slice(&v.as_f64().unwrap_or(0.0).to_le_bytes());
        }
        Ty::Msg(j) => len(out, tag, &message(j, v, depth + 1)),
    }
}

#[cfg(test)]
mod tests {
    use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    use prost::Message as _;
    use serde_json::json;

    use super::*;

    fn unwrap(body: &[u8]) -> Unknown {
        Unknown::decode(body.strip_prefix(MAGIC).expect("the magic")).expect("an Unknown")
    }

    /// An answer that k8s-pb's own types read as kube's, and that this module's decoder turns back
    /// into the same JSON.
    #[test]
    fn answers_are_kubes_protobuf() {
        let d = json!({
            "kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
                "generation": 2, "creationTimestamp": "2026-12-07T04:00:00Z", "labels": {"b": "2", "a": "1"},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}}, "time": "2026-12-07T04:00:00Z"}]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{
                    "name": "nginx", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m"}},
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 10},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 8080}}}],
                    "terminationGracePeriodSeconds": -1}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}},
            "status": {}
        });
        let body = encode(&d).unwrap();
        let u = unwrap(&body);
        let tm = u.type_meta.unwrap();
        assert_eq!((tm.api_version.as_deref(), tm.kind.as_deref()), (Some("apps/v1"), Some("Deployment")));
        let pb = k8s_pb::api::apps::v1::Deployment::decode(u.raw.unwrap().as_slice()).unwrap();
        let m = pb.metadata.unwrap();
        assert_eq!((m.name.as_deref(), m.generation), (Some("web"), Some(2)));
        assert_eq!(m.creation_timestamp.unwrap().seconds, Some(1_796_616_000));
        assert_eq!(m.labels.keys().collect::<Vec<_>>(), ["a", "b"]);
        let spec = pb.spec.unwrap();
        assert_eq!(spec.replicas, Some(0), "a pointer field is written even when zero");
        let surge = spec.strategy.unwrap().rolling_update.unwrap().max_surge.unwrap();
        assert_eq!((surge.r#type, surge.str_val.as_deref()), (Some(1), Some("25%")));
        let pod = spec.template.unwrap().spec.unwrap();
        assert_eq!(pod.termination_grace_period_seconds, Some(-1));
        let c = &pod.containers[0];
        assert_eq!(c.resources.as_ref().unwrap().limits["cpu"].string.as_deref(), Some("500m"));
        assert_eq!(
            c.liveness_probe
                .as_ref()
                .unwrap()
                .handler
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .port
                .as_ref()
                .unwrap()
                .int_val,
            Some(8080)
        );
        // Back to the same JSON (an empty struct aside: Go writes it, and the decoder leaves it out).
        let mut without_status = d.clone();
        without_status.as_object_mut().unwrap().remove("status");
        assert_eq!(super::super::decode_as("apps/v1", "Deployment", &body).unwrap(), without_status);
    }

    #[test]
    fn watch_events_are_framed_watch_events() {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (11)", "reason": "Expired", "code": 410});
        let frame = watch_frame("apps/v1", "ERROR", &encode(&status).unwrap());
        let n = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(n, frame.len() - 4);
        let u = unwrap(&frame[4..]);
        assert_eq!(u.type_meta.unwrap().kind.as_deref(), Some("WatchEvent"));
        let e = WatchEvent::decode(u.raw.unwrap().as_slice()).unwrap();
        assert_eq!(e.r#type.as_deref(), Some("ERROR"));
        let inner = e.object.unwrap().raw.unwrap();
        let mut without_metadata = status.clone();
        without_metadata.as_object_mut().unwrap().remove("metadata");
        assert_eq!(super::super::decode_as("v1", "Status", &inner).unwrap(), without_metadata);
    }

    #[test]
    fn durations_parse_as_go_writes_them() {
        for (text, ns) in [("1m30s", 90_000_000_000), ("1.5ms", 1_500_000), ("0s", 0), ("-2h0m0s", -7_200_000_000_000)]
        {
            assert_eq!(parse_duration(text), Some(ns), "{text}");
            assert_eq!(super::super::go_duration(ns), text);
        }
    }
}
