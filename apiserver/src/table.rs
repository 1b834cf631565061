//! What a GET or LIST answers besides the object itself, as the client's `Accept` asks:
//! `meta.k8s.io` Tables with kube's columns for each resource (`kubectl get` prints them) and
//! PartialObjectMetadata(List) (metadata only), negotiated as kube negotiates them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::printers::Column;
use crate::resources::{Resource, Strategy};
use crate::status::{self, Status};

/// The form of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Object,
    /// The object in kube's protobuf (JSON for a type that has none).
    Protobuf,
    /// A Table of `meta.k8s.io/<version>`.
    Table(&'static str),
    /// PartialObjectMetadata(List) of `meta.k8s.io/<version>`.
    Metadata(&'static str),
}

/// The first form in `accept` this server can answer; kube's 406 if there is none.
pub fn negotiate(accept: &str) -> Result<Shape, Status> {
    if accept.trim().is_empty() {
        return Ok(Shape::Object);
    }
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let kind = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        if kind == crate::proto::MEDIA_TYPE {
            // The object itself (a watch asks with `stream=watch`); Tables and metadata are JSON.
            if param("as").is_none() {
                return Ok(Shape::Protobuf);
            }
            continue;
        }
        if !matches!(kind, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let version = match param("v") {
            Some("v1") => "v1",
            Some("v1beta1") => "v1beta1",
            None => "",
            Some(_) => continue,
        };
        match (param("as"), param("g")) {
            (None, _) => return Ok(Shape::Object),
            (Some("Table"), Some("meta.k8s.io")) if !version.is_empty() => return Ok(Shape::Table(version)),
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io"))
                if !version.is_empty() =>
            {
                return Ok(Shape::Metadata(version))
            }
            _ => continue,
        }
    }
    Err(Status::failure(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf",
        None,
    ))
}

/// kube's `duration.HumanDuration`: how `kubectl get` prints an age.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let (m, h) = (s / 60, s / 3600);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        let (y, d) = (h / 24 / 365, (h / 24) % 365);
        if d == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{d}d")
        }
    } else {
        format!("{}y", h / 24 / 365)
    }
}

/// Seconds since an RFC 3339 time (`2026-12-06T23:00:00Z`); `None` if it does not parse.
pub(crate) fn age_secs(rfc3339: &str) -> Option<i64> {
    let ts: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    Some(now - ts.as_second())
}

pub(crate) const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
pub(crate) const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const CONFIGMAP_DATA_DOC: &str = "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.";
const SERVICEACCOUNT_SECRETS_DOC: &str = "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret";
const SECRET_TYPE_DOC: &str = "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types";
const SECRET_DATA_DOC: &str = "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4";

const POD_READY_DOC: &str = "The aggregate readiness state of this pod for accepting traffic.";
const POD_STATUS_DOC: &str = "The aggregate status of the containers in this pod.";
const POD_RESTARTS_DOC: &str = "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.";
const POD_IP_DOC: &str =
    "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.";
const POD_NODE_DOC: &str = "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename";
const POD_NOMINATED_DOC: &str = "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.";
const POD_GATES_DOC: &str = "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates";

/// A column of priority 0 (shown by `kubectl get`).
const fn column(name: &'static str, ty: &'static str, format: &'static str, description: &'static str) -> Column {
    Column { name, ty, format, description, priority: 0 }
}

/// kube's printer columns for `r` (`pkg/printers/internalversion/printers.go`): those written
/// here, else `crate::printers`', else kube's default (Name, Created At).
fn columns(r: &Resource) -> Vec<Column> {
    let name = column("Name", "string", "name", NAME_DOC);
    let age = column("Age", "string", "", AGE_DOC);
    let wide = |c: Column| Column { priority: 1, ..c };
    if let Some(c) = r.custom {
        return custom_columns(c, name);
    }
    match (r.strategy, r.kind) {
        (Strategy::Namespace, _) => vec![name, column("Status", "string", "", "The status of the namespace"), age],
        (Strategy::Secret, _) => {
            vec![
                name,
                column("Type", "string", "", SECRET_TYPE_DOC),
                column("Data", "string", "", SECRET_DATA_DOC),
                age,
            ]
        }
        (Strategy::Pod, _) => vec![
            name,
            column("Ready", "string", "", POD_READY_DOC),
            column("Status", "string", "", POD_STATUS_DOC),
            column("Restarts", "string", "", POD_RESTARTS_DOC),
            age,
            wide(column("IP", "string", "", POD_IP_DOC)),
            wide(column("Node", "string", "", POD_NODE_DOC)),
            wide(column("Nominated Node", "string", "", POD_NOMINATED_DOC)),
            wide(column("Readiness Gates", "string", "", POD_GATES_DOC)),
        ],
        (_, "ConfigMap") => vec![name, column("Data", "string", "", CONFIGMAP_DATA_DOC), age],
        (_, "ServiceAccount") => vec![name, column("Secrets", "string", "", SERVICEACCOUNT_SECRETS_DOC), age],
        _ => match crate::printers::printer(r.group, r.kind) {
            Some(p) => p.columns.to_vec(),
            None => vec![name, column("Created At", "date", "", AGE_DOC)],
        },
    }
}

fn cells(r: &Resource, obj: &Value) -> Vec<Value> {
    let meta = obj.get("metadata");
    let name = meta.and_then(|m| m.get("name")).cloned().unwrap_or(Value::String(String::new()));
    let created = meta.and_then(|m| m.get("creationTimestamp")).and_then(Value::as_str).unwrap_or("");
    let age = Value::String(age_secs(created).map(human_duration).unwrap_or_else(|| "<unknown>".into()));
    let count = |field: &str| {
        let n = obj.get(field).and_then(Value::as_object).map_or(0, Map::len);
        let binary =
            if field == "data" { obj.get("binaryData").and_then(Value::as_object).map_or(0, Map::len) } else { 0 };
        Value::from(n + binary)
    };
    match (r.strategy, r.kind) {
        _ if r.custom.is_some() => custom_cells(r.custom.expect("a custom resource"), obj, name),
        (Strategy::Namespace, _) => vec![name, obj.pointer("/status/phase").cloned().unwrap_or(Value::from("")), age],
        (Strategy::Pod, _) => crate::pods::cells(obj, name, age, |t| age_secs(t).map(human_duration)),
        (Strategy::Secret, _) => {
            let data = obj.get("data").and_then(Value::as_object).map_or(0, Map::len);
            vec![name, obj.get("type").cloned().unwrap_or(Value::from("")), Value::from(data), age]
        }
        (_, "ConfigMap") => vec![name, count("data"), age],
        (_, "ServiceAccount") => {
            let secrets = obj.get("secrets").and_then(Value::as_array).map_or(0, Vec::len);
            vec![name, Value::from(secrets), age]
        }
        _ => match crate::printers::printer(r.group, r.kind) {
            Some(p) => (p.cells)(obj),
            None => vec![name, Value::String(created.into())],
        },
    }
}

/// A custom resource's columns (kube's CRD table convertor): Name, then the definition's
/// `additionalPrinterColumns`, or an Age column when it gives none.
fn custom_columns(c: &'static crate::crd::Custom, name: Column) -> Vec<Column> {
    if c.columns.is_empty() {
        return vec![name, column("Age", "date", "", AGE_DOC)];
    }
    let mut out = vec![name];
    out.extend(c.columns.iter().map(|col| Column {
        name: &col.name,
        ty: &col.kind,
        format: &col.format,
        description: &col.description,
        priority: i32::try_from(col.priority).unwrap_or(0),
    }));
    out
}

/// A custom object's row: each column's JSON path's first result as its type has it (`date`s
/// as ages), null where the path finds nothing.
fn custom_cells(c: &crate::crd::Custom, obj: &Value, name: Value) -> Vec<Value> {
    let date = |v: Option<Value>| match v {
        Some(Value::String(t)) => Value::String(age_secs(&t).map(human_duration).unwrap_or_else(|| "<invalid>".into())),
        _ => Value::Null,
    };
    if c.columns.is_empty() {
        return vec![name, date(obj.pointer("/metadata/creationTimestamp").cloned())];
    }
    let mut out = vec![name];
    for col in &c.columns {
        let found = crate::crd::json_path(obj, &col.json_path);
        out.push(match (col.kind.as_str(), found) {
            (_, None | Some(Value::Null)) => Value::Null,
            ("date", v) => date(v),
            ("integer", Some(Value::Number(n))) => {
                n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).map_or(Value::Null, Value::from)
            }
            ("number", Some(Value::Number(n))) => n.as_f64().map_or(Value::Null, Value::from),
            ("boolean", Some(Value::Bool(b))) => Value::Bool(b),
            ("string", Some(Value::String(t))) => Value::String(t),
            ("string", Some(other)) => Value::String(other.to_string()),
            _ => Value::Null,
        });
    }
    out
}

/// An object's metadata as a PartialObjectMetadata of `meta.k8s.io/<version>`.
fn partial(version: &str, obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// `answer` (an object of `r`, or its list) in `shape`.
pub fn render(shape: Shape, r: &Resource, answer: Value, include_object: Option<&str>) -> Result<Value, Status> {
    let is_list = answer.get("items").is_some();
    let items: Vec<&Value> = match answer.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None => vec![&answer],
    };
    let list_meta = || -> Value {
        let m = answer.get("metadata").cloned().unwrap_or_else(|| json!({}));
        if is_list {
            m
        } else {
            let rv = m.get("resourceVersion").cloned().unwrap_or(Value::from(""));
            json!({"resourceVersion": rv})
        }
    };
    match shape {
        Shape::Object | Shape::Protobuf => Ok(answer),
        Shape::Metadata(v) if is_list => Ok(json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": format!("meta.k8s.io/{v}"),
            "metadata": list_meta(),
            "items": items.iter().map(|o| partial(v, o)["metadata"].clone()).map(|m| json!({"metadata": m})).collect::<Vec<_>>(),
        })),
        Shape::Metadata(v) => Ok(partial(v, &answer)),
        Shape::Table(v) => {
            let include = include_object.unwrap_or("Metadata");
            if !matches!(include, "None" | "Metadata" | "Object") {
                return Err(status::bad_request(format!(
                    "includeObject: Unsupported value: \"{include}\": supported values: \"Metadata\", \"None\", \"Object\""
                )));
            }
            let defs: Vec<Value> = columns(r)
                .into_iter()
                .map(|c| {
                    json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
                })
                .collect();
            let rows: Vec<Value> = items
                .iter()
                .map(|o| {
                    let mut row = Map::new();
                    row.insert("cells".into(), Value::Array(cells(r, o)));
                    match include {
                        "Object" => {
                            row.insert("object".into(), r.with_type(o.as_object().cloned().unwrap_or_default()));
                        }
                        "Metadata" => {
                            row.insert("object".into(), partial("v1", o));
                        }
                        _ => {}
                    }
                    Value::Object(row)
                })
                .collect();
            Ok(json!({
                "kind": "Table",
                "apiVersion": format!("meta.k8s.io/{v}"),
                "metadata": list_meta(),
                "columnDefinitions": defs,
                "rows": rows,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400, "2y"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs} s");
        }
    }

    #[test]
    fn accept_headers_pick_the_first_form_served() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(kubectl).unwrap(), Shape::Table("v1"));
        assert_eq!(negotiate("application/json, */*").unwrap(), Shape::Object);
        assert_eq!(negotiate("application/vnd.kubernetes.protobuf,application/json").unwrap(), Shape::Protobuf);
        assert_eq!(negotiate("application/vnd.kubernetes.protobuf;stream=watch").unwrap(), Shape::Protobuf);
        assert_eq!(
            negotiate("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json").unwrap(),
            Shape::Object
        );
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io").unwrap(),
            Shape::Metadata("v1")
        );
        assert_eq!(negotiate("application/yaml").unwrap_err().code, 406);
    }

    #[test]
    fn namespaces_tabulate_with_status() {
        let r = crate::resources::find("", "v1", "namespaces").unwrap();
        let list = json!({"kind": "NamespaceList", "metadata": {"resourceVersion": "7"}, "items": [
            {"metadata": {"name": "a", "creationTimestamp": "2010-01-01T00:00:00Z"}, "status": {"phase": "Active"}}
        ]});
        let t = render(Shape::Table("v1"), r, list, None).unwrap();
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        let names: Vec<&str> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Name", "Status", "Age"]);
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], "Active");
        assert!(t["rows"][0]["cells"][2].as_str().unwrap().ends_with('y'));
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
