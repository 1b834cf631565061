//! kube's validation of the kinds that have no strategy module of their own (storage, networking,
//! policy, scheduling, coordination, quotas, endpoints, events.k8s.io), and the checks every kind
//! shares: labels and annotations (`ValidateObjectMeta`), label selectors, qualified names, label
//! values, ports, IPs and CIDRs, with kube's paths and message texts (Kubernetes 1.33's).

use std::net::IpAddr;

use serde_json::{json, Value};

use crate::meta;
use crate::resources::Names;
use crate::status::{FieldError, FieldErrorType};

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";
const IMMUTABLE: &str = "field is immutable";
const NON_NEGATIVE: &str = "must be greater than or equal to 0";
/// kube's `TotalAnnotationSizeLimitB`.
const ANNOTATIONS_MAX: usize = 256 * 1024;

use FieldError as E;

fn required(field: &str, detail: &str) -> FieldError {
    FieldError::new(FieldErrorType::Required, field, None, detail)
}

/// Each problem of a string value as an Invalid error at `field`.
fn each(field: &str, value: &str, problems: Vec<String>) -> Vec<FieldError> {
    problems.into_iter().map(|p| E::invalid(field, json!(value), &p)).collect()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn entries<'a>(v: &'a Value, pointer: &str) -> Vec<(&'a String, &'a Value)> {
    let mut out: Vec<_> = v.pointer(pointer).and_then(Value::as_object).into_iter().flatten().collect();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

fn matches_qualified(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && edge(&b[0])
        && edge(&b[b.len() - 1])
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// kube's `IsQualifiedName`: label keys, annotation keys, finalizers, provisioners.
pub fn qualified_name_problems(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(meta::name_problems(Names::Subdomain, prefix).into_iter().map(|p| format!("prefix part {p}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !matches_qualified(name) {
        out.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    out
}

/// kube's `IsValidLabelValue`.
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !matches_qualified(value) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

/// kube's `ValidateLabels` of the map at `pointer`, reported at `field`.
fn labels(v: &Value, pointer: &str, field: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (k, value) in entries(v, pointer) {
        out.extend(each(field, k, qualified_name_problems(k)));
        let value = value.as_str().unwrap_or("");
        out.extend(each(field, value, label_value_problems(value)));
    }
    out
}

/// What kube's `ValidateObjectMeta` refuses beyond the name: labels and annotations.
pub fn metadata_errors(v: &Value) -> Vec<FieldError> {
    let mut out = labels(v, "/metadata/labels", "metadata.labels");
    let mut size = 0;
    for (k, value) in entries(v, "/metadata/annotations") {
        out.extend(each("metadata.annotations", k, qualified_name_problems(&k.to_lowercase())));
        size += k.len() + value.as_str().map_or(0, str::len);
    }
    if size > ANNOTATIONS_MAX {
        out.push(FieldError::new(
            FieldErrorType::TooLong,
            "metadata.annotations",
            None,
            &format!("may not be more than {ANNOTATIONS_MAX} bytes"),
        ));
    }
    out
}

/// kube's `ValidateLabelSelector` of the selector at `pointer` (none is valid), at `field`.
pub fn selector_errors(v: &Value, pointer: &str, field: &str) -> Vec<FieldError> {
    let mut out = labels(v, &format!("{pointer}/matchLabels"), &format!("{field}.matchLabels"));
    for (i, e) in items(v, &format!("{pointer}/matchExpressions")).iter().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        let values = items(e, "/values");
        match str_at(e, "/operator") {
            "In" | "NotIn" if values.is_empty() => {
                out.push(required(&format!("{at}.values"), "must be specified when `operator` is 'In' or 'NotIn'"))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(E::forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => out.push(E::invalid(&format!("{at}.operator"), json!(op), "not a valid selector operator")),
        }
        let key = str_at(e, "/key");
        out.extend(each(&format!("{at}.key"), key, qualified_name_problems(key)));
        for (j, value) in values.iter().enumerate() {
            let value = value.as_str().unwrap_or("");
            out.extend(each(&format!("{at}.values[{j}]"), value, label_value_problems(value)));
        }
    }
    out
}

/// kube's `IsValidPortName`.
pub fn port_name_problems(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name.len() > 15 {
        out.push("must be no more than 15 characters".to_string());
    }
    if !name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') || name.is_empty() {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)".to_string());
    }
    if name.contains("--") {
        out.push("must not contain consecutive hyphens".to_string());
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("must not begin or end with a hyphen".to_string());
    }
    out
}

/// kube's `IsValidPortNum` of port `n` at `field`.
pub fn port_number(field: &str, n: i64) -> Option<FieldError> {
    (!(1..=65535).contains(&n)).then(|| E::invalid(field, json!(n), PORT_RANGE_MSG))
}

fn ip_ok(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// A CIDR's address and prefix length, if it is one.
fn cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

fn cidr_error(field: &str, s: &str) -> FieldError {
    E::invalid(field, json!(s), "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")
}

/// Whether `inner` (an address and prefix) lies within `outer` with a longer prefix.
fn strict_subset(outer: (IpAddr, u8), inner: (IpAddr, u8)) -> bool {
    let bits = |ip: IpAddr| -> u128 {
        match ip {
            IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
            IpAddr::V6(a) => u128::from(a),
        }
    };
    if outer.0.is_ipv4() != inner.0.is_ipv4() || inner.1 <= outer.1 {
        return false;
    }
    // IPv4 addresses sit in the top 32 bits, so a prefix counts from the top for both families.
    let len = u32::from(outer.1);
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    bits(outer.0) & mask == bits(inner.0) & mask
}

/// kube's `ValidateNonSpecialIP`.
fn special_ip(field: &str, s: &str) -> Option<FieldError> {
    let ip: IpAddr = match s.parse() {
        Ok(ip) => ip,
        Err(_) => return Some(E::invalid(field, json!(s), "must be a valid IP address")),
    };
    let detail = if ip.is_unspecified() {
        format!("may not be unspecified ({ip})")
    } else if ip.is_loopback() {
        "may not be in the loopback range (127.0.0.0/8, ::1/128)".to_string()
    } else if match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    } {
        "may not be in the link-local range (169.254.0.0/16, fe80::/10)".to_string()
    } else if match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] == 0xff02,
    } {
        "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".to_string()
    } else {
        return None;
    };
    Some(E::invalid(field, json!(s), &detail))
}

/// A resource quantity's sign: `Some(-1 | 0 | 1)`, `None` if it is not one.
fn sign(q: &Value) -> Option<i8> {
    let text = match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let canonical = crate::printers::quantity(&text)?;
    Some(if canonical == "0" {
        0
    } else if canonical.starts_with('-') {
        -1
    } else {
        1
    })
}

fn quantity_text(q: &Value) -> String {
    match q {
        Value::String(s) => crate::printers::quantity(s).unwrap_or_else(|| s.clone()),
        other => other.to_string(),
    }
}

fn immutable(old: &Value, new: &Value, pointer: &str, field: &str) -> Option<FieldError> {
    let (o, n) = (old.pointer(pointer), new.pointer(pointer));
    (o != n).then(|| E::invalid(field, n.cloned().unwrap_or(Value::Null), IMMUTABLE))
}

/// An int-or-percent (`ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`).
fn int_or_percent(field: &str, v: Option<&Value>) -> Vec<FieldError> {
    match v {
        Some(Value::String(s)) => {
            let digits = s.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()));
            match digits {
                None => vec![E::invalid(field, json!(s), PERCENT_MSG)],
                Some(d) if d.parse::<u64>().map_or(true, |n| n > 100) => {
                    vec![E::invalid(field, json!(s), "must not be greater than 100%")]
                }
                Some(_) => Vec::new(),
            }
        }
        Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => vec![E::invalid(field, json!(n), NON_NEGATIVE)],
        _ => Vec::new(),
    }
}

/// Sets `field` of the object at `pointer` where it is missing (kube's defaulting of a nil field).
fn default_at(v: &mut Value, pointer: &str, field: &str, value: &str) {
    if let Some(o) = v.pointer_mut(pointer).and_then(Value::as_object_mut) {
        if o.get(field).is_none_or(Value::is_null) {
            o.insert(field.into(), json!(value));
        }
    }
}

/// The number of items of the list at `pointer`.
fn count(v: &Value, pointer: &str) -> usize {
    items(v, pointer).len()
}

/// kube's defaults for the kinds validated here (`SetDefaults_*` of their API versions).
pub fn defaults(group: &str, kind: &str, v: &mut Value) {
    match (group, kind) {
        ("", "Endpoints") => {
            for i in 0..count(v, "/subsets") {
                for k in 0..count(v, &format!("/subsets/{i}/ports")) {
                    default_at(v, &format!("/subsets/{i}/ports/{k}"), "protocol", "TCP");
                }
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            for k in 0..count(v, "/ports") {
                default_at(v, &format!("/ports/{k}"), "name", "");
                default_at(v, &format!("/ports/{k}"), "protocol", "TCP");
            }
        }
        ("", "PersistentVolumeClaim") => default_at(v, "/spec", "volumeMode", "Filesystem"),
        ("", "PersistentVolume") => {
            default_at(v, "/spec", "volumeMode", "Filesystem");
            default_at(v, "/spec", "persistentVolumeReclaimPolicy", "Retain");
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            for dir in ["ingress", "egress"] {
                for i in 0..count(v, &format!("/spec/{dir}")) {
                    for j in 0..count(v, &format!("/spec/{dir}/{i}/ports")) {
                        default_at(v, &format!("/spec/{dir}/{i}/ports/{j}"), "protocol", "TCP");
                    }
                }
            }
            // No policy types: Ingress, and Egress too when there are egress rules.
            if count(v, "/spec/policyTypes") == 0 {
                let egress = v.pointer("/spec/egress").is_some_and(|e| !e.is_null());
                let types = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
                if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("policyTypes".into(), types);
                }
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => default_at(v, "", "preemptionPolicy", "PreemptLowerPriority"),
        ("storage.k8s.io", "StorageClass") => {
            default_at(v, "", "reclaimPolicy", "Delete");
            default_at(v, "", "volumeBindingMode", "Immediate");
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            crate::admission::webhooks::defaults(v, true)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            crate::admission::webhooks::defaults(v, false)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => crate::admission::policy::defaults(v, true),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            crate::admission::policy::defaults(v, false)
        }
        _ => {}
    }
}

/// What kube's validation refuses in an object of `group`/`kind` (those without a strategy of
/// their own), on create and on update.
pub fn errors(group: &str, kind: &str, v: &Value) -> Vec<FieldError> {
    match (group, kind) {
        ("", "PersistentVolumeClaim") => claim(v),
        ("", "PersistentVolume") => volume(v),
        ("", "ResourceQuota") => quota(v),
        ("", "LimitRange") => limit_range(v),
        ("", "Endpoints") => endpoints(v),
        ("discovery.k8s.io", "EndpointSlice") => endpoint_slice(v),
        ("networking.k8s.io", "Ingress") => ingress(v),
        ("networking.k8s.io", "IngressClass") => ingress_class(v),
        ("networking.k8s.io", "NetworkPolicy") => network_policy(v),
        ("policy", "PodDisruptionBudget") => disruption_budget(v),
        ("scheduling.k8s.io", "PriorityClass") => priority_class(v),
        ("storage.k8s.io", "StorageClass") => storage_class(v),
        ("coordination.k8s.io", "Lease") => lease(v),
        ("events.k8s.io", "Event") => event(v),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => crate::admission::webhooks::errors(v, true),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            crate::admission::webhooks::errors(v, false)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => crate::admission::policy::policy_errors(v),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            crate::admission::policy::binding_errors(v)
        }
        _ => Vec::new(),
    }
}

/// What kube's update validation adds for such kinds: the fields they may not change.
pub fn update_errors(group: &str, kind: &str, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    match (group, kind) {
        ("", "PersistentVolumeClaim") => {
            let spec = |v: &Value| {
                let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
                if str_at(new, "/status/phase") == "Bound" {
                    if let Some(r) = s.pointer_mut("/resources/requests").and_then(Value::as_object_mut) {
                        r.remove("storage");
                    }
                    if let Some(o) = s.as_object_mut() {
                        o.remove("volumeAttributesClassName");
                    }
                }
                // The volume may be set once.
                if str_at(old, "/spec/volumeName").is_empty() {
                    if let Some(o) = s.as_object_mut() {
                        o.remove("volumeName");
                    }
                }
                s
            };
            if spec(old) != spec(new) {
                out.push(E::forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                ));
            }
            out.extend(immutable(old, new, "/spec/volumeMode", "volumeMode"));
        }
        ("", "PersistentVolume") => {
            out.extend(immutable(old, new, "/spec/volumeMode", "volumeMode"));
        }
        ("", "ResourceQuota") => {
            let scopes = |v: &Value| {
                let mut s: Vec<String> =
                    items(v, "/spec/scopes").iter().filter_map(Value::as_str).map(str::to_string).collect();
                s.sort();
                s.dedup();
                s
            };
            if scopes(old) != scopes(new) {
                out.push(E::invalid(
                    "spec.scopes",
                    new.pointer("/spec/scopes").cloned().unwrap_or(Value::Null),
                    IMMUTABLE,
                ));
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => out.extend(immutable(old, new, "/addressType", "addressType")),
        ("networking.k8s.io", "IngressClass") => {
            out.extend(immutable(old, new, "/spec/controller", "spec.controller"));
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            if old.get("value") != new.get("value") {
                out.push(E::forbidden("value", "may not be changed in an update."));
            }
            out.extend(immutable(old, new, "/preemptionPolicy", "preemptionPolicy"));
        }
        ("storage.k8s.io", "StorageClass") => {
            for (field, text) in [
                ("parameters", "updates to parameters are forbidden."),
                ("provisioner", "updates to provisioner are forbidden."),
                ("reclaimPolicy", "updates to reclaimPolicy are forbidden."),
            ] {
                if old.get(field) != new.get(field) {
                    out.push(E::forbidden(field, text));
                }
            }
            out.extend(immutable(old, new, "/volumeBindingMode", "volumeBindingMode"));
        }
        ("events.k8s.io", "Event") => {
            let (old, new) = (&crate::events::to_storage(old.clone()), &crate::events::to_storage(new.clone()));
            for f in [
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ] {
                let field = if f == "reportingComponent" { "reportingController" } else { f };
                out.extend(immutable(old, new, &format!("/{f}"), field));
            }
        }
        _ => {}
    }
    out
}

const ACCESS_MODES: [&str; 4] = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];

fn access_modes(v: &Value, detail: &str) -> Vec<FieldError> {
    let modes = items(v, "/spec/accessModes");
    let mut out = Vec::new();
    if modes.is_empty() {
        out.push(required("spec.accessModes", detail));
    }
    let mut known = 0;
    let mut once_pod = false;
    for m in modes {
        let m = m.as_str().unwrap_or("");
        if ACCESS_MODES.contains(&m) {
            known += 1;
            once_pod |= m == "ReadWriteOncePod";
        } else {
            out.push(FieldError::not_supported("spec.accessModes", m, &ACCESS_MODES));
        }
    }
    if once_pod && known > 1 {
        out.push(E::forbidden("spec.accessModes", "may not use ReadWriteOncePod with other access modes"));
    }
    out
}

fn volume_mode(v: &Value) -> Option<FieldError> {
    let m = v.pointer("/spec/volumeMode")?.as_str().unwrap_or("");
    (!matches!(m, "Block" | "Filesystem"))
        .then(|| FieldError::not_supported("spec.volumeMode", m, &["Block", "Filesystem"]))
}

fn storage_class_name(v: &Value) -> Vec<FieldError> {
    let name = str_at(v, "/spec/storageClassName");
    if name.is_empty() {
        return Vec::new();
    }
    each("spec.storageClassName", name, meta::name_problems(Names::Subdomain, name))
}

/// `ValidatePersistentVolumeClaimSpec`.
fn claim(v: &Value) -> Vec<FieldError> {
    let mut out = access_modes(v, "at least 1 access mode is required");
    out.extend(selector_errors(v, "/spec/selector", "spec.selector"));
    match v.pointer("/spec/resources/requests/storage") {
        None => out.push(required("spec.resources[storage]", "")),
        Some(q) if sign(q).is_some_and(|s| s <= 0) => {
            out.push(E::invalid("spec.resources[storage]", json!(quantity_text(q)), "must be greater than zero"))
        }
        Some(_) => {}
    }
    out.extend(storage_class_name(v));
    out.extend(volume_mode(v));
    for (pointer, field) in [("/spec/dataSource", "spec.dataSource"), ("/spec/dataSourceRef", "spec.dataSourceRef")] {
        let Some(ds) = v.pointer(pointer).filter(|d| d.is_object()) else { continue };
        if str_at(ds, "/name").is_empty() {
            out.push(required(&format!("{field}.name"), ""));
        }
        let kind = str_at(ds, "/kind");
        if kind.is_empty() {
            out.push(required(&format!("{field}.kind"), ""));
        }
        let group = str_at(ds, "/apiGroup");
        if group.is_empty() && kind != "PersistentVolumeClaim" {
            out.push(E::invalid(
                field,
                json!(kind),
                "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
            ));
        } else if !group.is_empty() {
            out.extend(each(&format!("{field}.apiGroup"), group, meta::name_problems(Names::Subdomain, group)));
        }
    }
    out
}

/// The volume sources of a PersistentVolume, in the order kube counts them.
const VOLUME_SOURCES: [&str; 22] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

/// `ValidatePersistentVolumeSpec` (the parts keel checks: modes, capacity, reclaim policy, one
/// volume source, a local volume's node affinity, the common sources' required fields).
fn volume(v: &Value) -> Vec<FieldError> {
    let mut out = access_modes(v, "");
    let capacity = entries(v, "/spec/capacity");
    if capacity.is_empty() {
        out.push(required("spec.capacity", ""));
    }
    if capacity.len() != 1 || capacity[0].0 != "storage" {
        let shown = if capacity.is_empty() { Value::Null } else { v.pointer("/spec/capacity").cloned().unwrap() };
        out.push(FieldError::new(
            FieldErrorType::NotSupported,
            "spec.capacity",
            Some(shown),
            "supported values: \"storage\"",
        ));
    }
    for (k, q) in capacity {
        if sign(q).is_some_and(|s| s <= 0) {
            out.push(E::invalid(&format!("spec.capacity[{k}]"), json!(quantity_text(q)), "must be greater than zero"));
        }
    }
    let policy = str_at(v, "/spec/persistentVolumeReclaimPolicy");
    if !policy.is_empty() && !matches!(policy, "Delete" | "Recycle" | "Retain") {
        out.push(FieldError::not_supported(
            "spec.persistentVolumeReclaimPolicy",
            policy,
            &["Delete", "Recycle", "Retain"],
        ));
    }
    let mut sources = 0;
    for s in VOLUME_SOURCES {
        if v.pointer(&format!("/spec/{s}")).is_some_and(|x| !x.is_null()) {
            if sources > 0 && s != "flexVolume" {
                out.push(E::forbidden(&format!("spec.{s}"), "may not specify more than 1 volume type"));
            }
            sources += 1;
        }
    }
    if sources == 0 {
        out.push(required("spec", "must specify a volume type"));
    }
    if v.pointer("/spec/local").is_some() && v.pointer("/spec/nodeAffinity/required").is_none() {
        out.push(required("spec.nodeAffinity", "Local volume requires node affinity"));
    }
    for (pointer, field) in [
        ("/spec/hostPath/path", "spec.hostPath.path"),
        ("/spec/nfs/server", "spec.nfs.server"),
        ("/spec/nfs/path", "spec.nfs.path"),
    ] {
        if v.pointer(pointer.rsplit_once('/').unwrap().0).is_some() && str_at(v, pointer).is_empty() {
            out.push(required(field, ""));
        }
    }
    if v.pointer("/spec/csi").is_some() {
        if str_at(v, "/spec/csi/driver").is_empty() {
            out.push(required("spec.csi.driver", ""));
        }
        if str_at(v, "/spec/csi/volumeHandle").is_empty() {
            out.push(required("spec.csi.volumeHandle", ""));
        }
    }
    out.extend(storage_class_name(v));
    out.extend(volume_mode(v));
    out
}

const QUOTA_RESOURCES: [&str; 19] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];
const QUOTA_SCOPES: [&str; 6] =
    ["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass", "CrossNamespacePodAffinity"];

/// The names of quota resources counted as whole numbers.
fn integer_resource(name: &str) -> bool {
    matches!(
        name,
        "pods"
            | "resourcequotas"
            | "services"
            | "replicationcontrollers"
            | "secrets"
            | "configmaps"
            | "persistentvolumeclaims"
            | "services.nodeports"
            | "services.loadbalancers"
    )
}

/// `ValidateResourceQuota`: resource names, non-negative quantities, scopes.
fn quota(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (map, field) in [("/spec/hard", "spec.hard"), ("/status/hard", "status.hard"), ("/status/used", "status.used")]
    {
        for (k, q) in entries(v, map) {
            let at = format!("{field}[{k}]");
            let problems = qualified_name_problems(k);
            if !problems.is_empty() {
                out.extend(each(&at, k, problems));
            } else if !k.contains('/') {
                let hugepages = k.starts_with("hugepages-") || k.starts_with("requests.hugepages-");
                if !hugepages && !QUOTA_RESOURCES.contains(&k.as_str()) {
                    if k != "storage" {
                        out.push(E::invalid(&at, json!(k), "must be a standard resource type or fully qualified"));
                    }
                    out.push(E::invalid(&at, json!(k), "must be a standard resource for quota"));
                }
            }
            match sign(q) {
                Some(-1) => out.push(E::invalid(&at, json!(quantity_text(q)), NON_NEGATIVE)),
                Some(_) if integer_resource(k) && quantity_text(q).ends_with(['m', 'u', 'n']) => {
                    out.push(E::invalid(&at, json!(quantity_text(q)), "must be an integer"))
                }
                _ => {}
            }
        }
    }
    let scopes: Vec<&str> = items(v, "/spec/scopes").iter().filter_map(Value::as_str).collect();
    if !scopes.is_empty() {
        let shown = v.pointer("/spec/scopes").cloned().unwrap_or(Value::Null);
        if scopes.iter().any(|s| !QUOTA_SCOPES.contains(s)) {
            out.push(E::invalid("spec.scopes", shown.clone(), "unsupported scope"));
        }
        let has = |s: &str| scopes.contains(&s);
        if (has("BestEffort") && has("NotBestEffort")) || (has("Terminating") && has("NotTerminating")) {
            out.push(E::invalid("spec.scopes", shown, "conflicting scopes"));
        }
    }
    out
}

/// `ValidateLimitRange` (types, duplicates, what a Pod limit may not have, min ≤ max).
fn limit_range(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (i, l) in items(v, "/spec/limits").iter().enumerate() {
        let at = format!("spec.limits[{i}]");
        let ty = str_at(l, "/type");
        let problems = qualified_name_problems(ty);
        if !problems.is_empty() {
            out.extend(each(&format!("{at}.type"), ty, problems));
        } else if !ty.contains('/') && !matches!(ty, "Pod" | "Container" | "PersistentVolumeClaim") {
            out.push(E::invalid(&format!("{at}.type"), json!(ty), "must be a standard limit type or fully qualified"));
        }
        if seen.contains(&ty) {
            out.push(FieldError::new(FieldErrorType::Duplicate, &format!("{at}.type"), Some(json!(ty)), ""));
        }
        seen.push(ty);
        if ty == "Pod" {
            for f in ["default", "defaultRequest"] {
                if l.get(f).and_then(Value::as_object).is_some_and(|m| !m.is_empty()) {
                    out.push(E::forbidden(&format!("{at}.{f}"), "may not be specified when `type` is 'Pod'"));
                }
            }
        }
        if ty == "PersistentVolumeClaim" && l.pointer("/min/storage").is_none() && l.pointer("/max/storage").is_none() {
            out.push(required(
                &format!("{at}.limits"),
                "either minimum or maximum storage value is required, but neither was provided",
            ));
        }
    }
    out
}

/// Whether `v` is the `kubernetes` service's own Endpoints or EndpointSlice (`default/kubernetes`,
/// which the apiserver keeps): it may hold a loopback address, as keel serves there when bound to
/// 127.0.0.1, where kube would refuse its own write and log it.
fn own_endpoints(v: &Value) -> bool {
    meta::get(v, "name") == "kubernetes" && meta::get(v, "namespace") == "default"
}

/// `ValidateEndpoints`: each subset's addresses and ports.
fn endpoints(v: &Value) -> Vec<FieldError> {
    let own = own_endpoints(v);
    let mut out = Vec::new();
    for (i, s) in items(v, "/subsets").iter().enumerate() {
        let at = format!("subsets[{i}]");
        if items(s, "/addresses").is_empty() && items(s, "/notReadyAddresses").is_empty() {
            out.push(required(&at, "must specify `addresses` or `notReadyAddresses`"));
        }
        for list in ["addresses", "notReadyAddresses"] {
            for (j, a) in items(s, &format!("/{list}")).iter().enumerate() {
                let field = format!("{at}.{list}[{j}].ip");
                let ip = str_at(a, "/ip");
                if !ip_ok(ip) {
                    out.push(E::invalid(
                        &field,
                        json!(ip),
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    ));
                }
                if !own {
                    out.extend(special_ip(&field, ip));
                }
                let host = str_at(a, "/hostname");
                if !host.is_empty() {
                    out.extend(each(
                        &format!("{at}.{list}[{j}].hostname"),
                        host,
                        meta::name_problems(Names::Label, host),
                    ));
                }
            }
        }
        let ports = items(s, "/ports");
        for (k, p) in ports.iter().enumerate() {
            let pat = format!("{at}.ports[{k}]");
            let name = str_at(p, "/name");
            if name.is_empty() && ports.len() > 1 {
                out.push(required(&format!("{pat}.name"), ""));
            } else if !name.is_empty() {
                out.extend(each(&format!("{pat}.name"), name, meta::name_problems(Names::Label, name)));
            }
            out.extend(port_number(&format!("{pat}.port"), p.get("port").and_then(Value::as_i64).unwrap_or(0)));
            out.extend(protocol(&format!("{pat}.protocol"), p.get("protocol")));
        }
    }
    out
}

fn protocol(field: &str, v: Option<&Value>) -> Option<FieldError> {
    match v.and_then(Value::as_str) {
        None | Some("") => Some(required(field, "")),
        Some("TCP" | "UDP" | "SCTP") => None,
        Some(p) => Some(FieldError::not_supported(field, p, &["SCTP", "TCP", "UDP"])),
    }
}

/// `ValidateEndpointSlice`: the address type, each endpoint's addresses, the ports.
fn endpoint_slice(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let ty = str_at(v, "/addressType");
    match ty {
        "" => out.push(required("addressType", "")),
        "IPv4" | "IPv6" | "FQDN" => {}
        other => out.push(FieldError::not_supported("addressType", other, &["FQDN", "IPv4", "IPv6"])),
    }
    let all = items(v, "/endpoints");
    if all.len() > 1000 {
        out.push(FieldError::new(
            FieldErrorType::TooMany,
            "endpoints",
            Some(json!(all.len())),
            "must have at most 1000 items",
        ));
        return out;
    }
    for (i, e) in all.iter().enumerate() {
        let at = format!("endpoints[{i}]");
        let addresses = items(e, "/addresses");
        if addresses.is_empty() {
            out.push(required(&format!("{at}.addresses"), "must contain at least 1 address"));
        }
        for (j, a) in addresses.iter().enumerate() {
            let field = format!("{at}.addresses[{j}]");
            let a = a.as_str().unwrap_or("");
            let family = match ty {
                "IPv4" => Some((a.parse::<std::net::Ipv4Addr>().is_ok(), "must be a valid IPv4 address")),
                "IPv6" => Some((a.parse::<std::net::Ipv6Addr>().is_ok(), "must be a valid IPv6 address")),
                _ => None,
            };
            if let Some((ok, text)) = family {
                if !ok {
                    out.push(E::invalid(&field, json!(a), text));
                }
                if !own_endpoints(v) {
                    out.extend(special_ip(&field, a));
                }
            }
        }
    }
    let mut names = Vec::new();
    for (k, p) in items(v, "/ports").iter().enumerate() {
        let at = format!("ports[{k}]");
        let name = str_at(p, "/name");
        if !name.is_empty() {
            out.extend(each(&format!("{at}.name"), name, meta::name_problems(Names::Label, name)));
        }
        if names.contains(&name) {
            out.push(FieldError::new(FieldErrorType::Duplicate, &format!("{at}.name"), Some(json!(name)), ""));
        }
        names.push(name);
        out.extend(protocol(&format!("{at}.protocol"), p.get("protocol")));
    }
    out
}

/// `validateIngressBackend`.
fn ingress_backend(b: &Value, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let (resource, service) = (b.get("resource").filter(|x| x.is_object()), b.get("service").filter(|x| x.is_object()));
    match (resource, service) {
        (Some(_), Some(_)) => out.push(E::invalid(at, json!(""), "cannot set both resource and service backends")),
        (Some(r), None) => {
            for f in ["kind", "name"] {
                let x = str_at(r, &format!("/{f}"));
                if x.is_empty() {
                    out.push(required(&format!("{at}.resource.{f}"), ""));
                } else {
                    out.extend(each(&format!("{at}.resource.{f}"), x, meta::path_segment_problems(x)));
                }
            }
        }
        (None, Some(s)) => {
            let name = str_at(s, "/name");
            if name.is_empty() {
                out.push(required(&format!("{at}.service.name"), ""));
            } else {
                out.extend(each(&format!("{at}.service.name"), name, meta::name_problems(Names::Dns1035, name)));
            }
            let port_name = str_at(s, "/port/name");
            let number = s.pointer("/port/number").and_then(Value::as_i64).unwrap_or(0);
            match (port_name.is_empty(), number != 0) {
                (false, true) => out.push(E::invalid(at, json!(""), "cannot set both port name & port number")),
                (false, false) => {
                    out.extend(each(&format!("{at}.service.port.name"), port_name, port_name_problems(port_name)))
                }
                (true, true) => out.extend(port_number(&format!("{at}.service.port.number"), number)),
                (true, false) => out.push(required(at, "port name or number is required")),
            }
        }
        (None, None) => out.push(E::invalid(at, json!(""), "resource or service backend is required")),
    }
    out
}

/// A host of an Ingress rule or TLS entry: a DNS name, perhaps a wildcard one.
fn ingress_host(field: &str, host: &str) -> Vec<FieldError> {
    if let Some(rest) = host.strip_prefix("*.") {
        if meta::name_problems(Names::Subdomain, rest).is_empty() {
            return Vec::new();
        }
    }
    if host.contains('*') {
        return vec![E::invalid(field, json!(host), "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")];
    }
    each(field, host, meta::name_problems(Names::Subdomain, host))
}

/// `ValidateIngressSpec`.
fn ingress(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let rules = items(v, "/spec/rules");
    let default = v.pointer("/spec/defaultBackend").filter(|b| b.is_object());
    if rules.is_empty() && default.is_none() {
        out.push(E::invalid("spec", Value::Null, "either `defaultBackend` or `rules` must be specified"));
    }
    if let Some(b) = default {
        out.extend(ingress_backend(b, "spec.defaultBackend"));
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let host = str_at(rule, "/host");
        if !host.is_empty() {
            if ip_ok(host) {
                out.push(E::invalid(&format!("{at}.host"), json!(host), "must be a DNS name, not an IP address"));
            }
            out.extend(ingress_host(&format!("{at}.host"), host));
        }
        let Some(http) = rule.get("http").filter(|h| h.is_object()) else { continue };
        let paths = items(http, "/paths");
        if paths.is_empty() {
            out.push(required(&format!("{at}.http.paths"), ""));
        }
        for (j, p) in paths.iter().enumerate() {
            let pat = format!("{at}.http.paths[{j}]");
            let path = str_at(p, "/path");
            match p.get("pathType").and_then(Value::as_str) {
                None => {
                    out.push(required(&format!("{pat}.pathType"), "pathType must be specified"));
                    continue;
                }
                Some("Exact" | "Prefix") => {
                    if !path.starts_with('/') {
                        out.push(E::invalid(&format!("{pat}.path"), json!(path), "must be an absolute path"));
                    }
                    if !path.is_empty() {
                        for seq in ["//", "/./", "/../", "%2f", "%2F"] {
                            if path.contains(seq) {
                                out.push(E::invalid(
                                    &format!("{pat}.path"),
                                    json!(path),
                                    &format!("must not contain '{seq}'"),
                                ));
                            }
                        }
                        for suffix in ["/..", "/."] {
                            if path.ends_with(suffix) {
                                out.push(E::invalid(
                                    &format!("{pat}.path"),
                                    json!(path),
                                    &format!("cannot end with '{suffix}'"),
                                ));
                            }
                        }
                    }
                }
                Some("ImplementationSpecific") => {
                    if !path.is_empty() && !path.starts_with('/') {
                        out.push(E::invalid(&format!("{pat}.path"), json!(path), "must be an absolute path"));
                    }
                }
                Some(other) => out.push(FieldError::not_supported(
                    &format!("{pat}.pathType"),
                    other,
                    &["Exact", "ImplementationSpecific", "Prefix"],
                )),
            }
            out.extend(ingress_backend(p.get("backend").unwrap_or(&Value::Null), &format!("{pat}.backend")));
        }
    }
    for (k, tls) in items(v, "/spec/tls").iter().enumerate() {
        for (i, h) in items(tls, "/hosts").iter().enumerate() {
            out.extend(ingress_host(&format!("spec.tls[{k}].hosts[{i}]"), h.as_str().unwrap_or("")));
        }
        let secret = str_at(tls, "/secretName");
        if !secret.is_empty() {
            out.extend(each(
                &format!("spec.tls[{k}].secretName"),
                secret,
                meta::name_problems(Names::Subdomain, secret),
            ));
        }
    }
    let class = str_at(v, "/spec/ingressClassName");
    if !class.is_empty() {
        out.extend(each("spec.ingressClassName", class, meta::name_problems(Names::Subdomain, class)));
    }
    let annotation = str_at(v, "/metadata/annotations/kubernetes.io~1ingress.class");
    if !annotation.is_empty() && !class.is_empty() && annotation != class {
        out.push(E::invalid(
            "annotations.kubernetes.io/ingress.class",
            json!(annotation),
            "must match `ingressClassName` when both are specified",
        ));
    }
    out
}

/// `ValidateIngressClass`: a domain-prefixed controller, its parameters' reference.
fn ingress_class(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let controller = str_at(v, "/spec/controller");
    if controller.is_empty() {
        out.push(required("spec.controller", ""));
    } else {
        if controller.len() > 250 {
            out.push(FieldError::new(
                FieldErrorType::TooLong,
                "spec.controller",
                None,
                "may not be more than 250 bytes",
            ));
        }
        match controller.split_once('/') {
            Some((host, path)) if !host.is_empty() && !path.is_empty() => {
                out.extend(each("spec.controller", host, meta::name_problems(Names::Subdomain, host)));
                let ok = path.bytes().all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
                if !ok {
                    out.push(E::invalid(
                        "spec.controller",
                        json!(path),
                        "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
                    ));
                }
            }
            _ => out.push(E::invalid(
                "spec.controller",
                json!(controller),
                "must be a domain-prefixed path (such as \"acme.io/foo\")",
            )),
        }
    }
    if let Some(p) = v.pointer("/spec/parameters").filter(|p| p.is_object()) {
        for f in ["kind", "name"] {
            let x = str_at(p, &format!("/{f}"));
            if x.is_empty() {
                out.push(required(&format!("spec.parameters.{f}"), ""));
            } else {
                out.extend(each(&format!("spec.parameters.{f}"), x, meta::path_segment_problems(x)));
            }
        }
        match p.get("scope").and_then(Value::as_str) {
            None => out.push(required("spec.parameters.scope", "")),
            Some("Namespace") => {
                let ns = str_at(p, "/namespace");
                if ns.is_empty() {
                    out.push(required("spec.parameters.namespace", "`parameters.scope` is set to 'Namespace'"));
                } else {
                    out.extend(each("spec.parameters.namespace", ns, meta::name_problems(Names::Label, ns)));
                }
            }
            Some("Cluster") => {
                if p.get("namespace").is_some() {
                    out.push(E::forbidden("spec.parameters.namespace", "`parameters.scope` is set to 'Cluster'"));
                }
            }
            Some(other) => {
                out.push(FieldError::not_supported("spec.parameters.scope", other, &["Cluster", "Namespace"]))
            }
        }
    }
    out
}

/// `ValidateNetworkPolicySpec`.
fn network_policy(v: &Value) -> Vec<FieldError> {
    let mut out = selector_errors(v, "/spec/podSelector", "spec.podSelector");
    for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in items(v, &format!("/spec/{dir}")).iter().enumerate() {
            for (j, p) in items(rule, "/ports").iter().enumerate() {
                let at = format!("spec.{dir}[{i}].ports[{j}]");
                if let Some(proto) = p.get("protocol").and_then(Value::as_str) {
                    if !matches!(proto, "TCP" | "UDP" | "SCTP") {
                        out.push(FieldError::not_supported(&format!("{at}.protocol"), proto, &["TCP", "UDP", "SCTP"]));
                    }
                }
                let end = p.get("endPort").and_then(Value::as_i64);
                match p.get("port") {
                    Some(Value::Number(n)) => {
                        let port = n.as_i64().unwrap_or(0);
                        out.extend(port_number(&format!("{at}.port"), port));
                        if let Some(e) = end {
                            if e < port {
                                out.push(E::invalid(
                                    &format!("{at}.endPort"),
                                    json!(e),
                                    "must be greater than or equal to `port`",
                                ));
                            }
                            out.extend(port_number(&format!("{at}.endPort"), e));
                        }
                    }
                    Some(Value::String(name)) => {
                        if let Some(e) = end {
                            out.push(E::invalid(
                                &format!("{at}.endPort"),
                                json!(e),
                                "may not be specified when `port` is non-numeric",
                            ));
                        }
                        out.extend(each(&format!("{at}.port"), name, port_name_problems(name)));
                    }
                    _ => {
                        if let Some(e) = end {
                            out.push(E::invalid(
                                &format!("{at}.endPort"),
                                json!(e),
                                "may not be specified when `port` is not specified",
                            ));
                        }
                    }
                }
            }
            for (j, peer) in items(rule, &format!("/{peers}")).iter().enumerate() {
                let at = format!("spec.{dir}[{i}].{peers}[{j}]");
                let set: Vec<&str> = ["podSelector", "namespaceSelector", "ipBlock"]
                    .into_iter()
                    .filter(|f| peer.get(*f).is_some_and(|x| !x.is_null()))
                    .collect();
                out.extend(selector_errors(peer, "/podSelector", &format!("{at}.podSelector")));
                out.extend(selector_errors(peer, "/namespaceSelector", &format!("{at}.namespaceSelector")));
                if let Some(block) = peer.get("ipBlock").filter(|b| b.is_object()) {
                    out.extend(ip_block(block, &format!("{at}.ipBlock")));
                }
                if set.is_empty() {
                    out.push(required(&at, "must specify a peer"));
                } else if set.len() > 1 && set.contains(&"ipBlock") {
                    out.push(E::forbidden(&at, "may not specify both ipBlock and another peer"));
                }
            }
        }
    }
    let types = items(v, "/spec/policyTypes");
    if types.len() > 2 {
        out.push(E::invalid("spec.policyTypes", json!(types), "may not specify more than two policyTypes"));
    } else {
        for (i, t) in types.iter().enumerate() {
            let t = t.as_str().unwrap_or("");
            if !matches!(t, "Ingress" | "Egress") {
                out.push(FieldError::not_supported(&format!("spec.policyTypes[{i}]"), t, &["Ingress", "Egress"]));
            }
        }
    }
    out
}

/// `ValidateIPBlock`.
fn ip_block(b: &Value, at: &str) -> Vec<FieldError> {
    let c = str_at(b, "/cidr");
    if c.is_empty() {
        return vec![required(&format!("{at}.cidr"), "")];
    }
    let Some(outer) = cidr(c) else { return vec![cidr_error(&format!("{at}.cidr"), c)] };
    let mut out = Vec::new();
    for (i, e) in items(b, "/except").iter().enumerate() {
        let field = format!("{at}.except[{i}]");
        let e = e.as_str().unwrap_or("");
        match cidr(e) {
            None => out.push(cidr_error(&field, e)),
            Some(inner) if !strict_subset(outer, inner) => {
                out.push(E::invalid(&field, json!(e), "must be a strict subset of `cidr`"))
            }
            Some(_) => {}
        }
    }
    out
}

/// `ValidatePodDisruptionBudget`.
fn disruption_budget(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let (min, max) = (v.pointer("/spec/minAvailable"), v.pointer("/spec/maxUnavailable"));
    if min.is_some() && max.is_some() {
        // kube shows its internal struct here (with pointer addresses); keel shows the spec.
        let spec = v.get("spec").cloned().unwrap_or(Value::Null);
        out.push(E::invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"));
    }
    out.extend(int_or_percent("spec.minAvailable", min));
    out.extend(int_or_percent("spec.maxUnavailable", max));
    out.extend(selector_errors(v, "/spec/selector", "spec.selector"));
    if let Some(p) = v.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) {
        if !matches!(p, "IfHealthyBudget" | "AlwaysAllow") {
            out.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }
    out
}

/// kube's highest priority a user's PriorityClass may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// `ValidatePriorityClass`.
fn priority_class(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let name = meta::get(v, "name");
    let value = v.get("value").and_then(Value::as_i64).unwrap_or(0);
    if name.starts_with("system-") {
        let known = match name {
            "system-node-critical" => Some(2 * HIGHEST_USER_PRIORITY + 1000),
            "system-cluster-critical" => Some(2 * HIGHEST_USER_PRIORITY),
            _ => None,
        };
        let why = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some(want) if want != value => Some(format!("value of {name} PriorityClass must be {want}")),
            Some(_) if v.get("globalDefault").and_then(Value::as_bool).unwrap_or(false) => {
                Some(format!("globalDefault of {name} PriorityClass must be false"))
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            out.push(E::forbidden(
                "metadata.name",
                &format!("priority class names with 'system-' prefix are reserved for system use only. error: {why}"),
            ));
        }
    } else if value > HIGHEST_USER_PRIORITY {
        out.push(E::forbidden("value", "maximum allowed value of a user defined priority is 1000000000"));
    }
    match v.get("preemptionPolicy").and_then(Value::as_str) {
        None | Some("PreemptLowerPriority" | "Never") => {}
        Some("") => out.push(required("preemptionPolicy", "")),
        Some(p) => out.push(FieldError::not_supported("preemptionPolicy", p, &["PreemptLowerPriority", "Never"])),
    }
    out
}

/// `ValidateStorageClass`.
fn storage_class(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let provisioner = str_at(v, "/provisioner");
    if provisioner.is_empty() {
        out.push(required("provisioner", ""));
    } else {
        let lower = provisioner.to_lowercase();
        out.extend(each("provisioner", &lower, qualified_name_problems(&lower)));
    }
    let params = entries(v, "/parameters");
    if params.len() > 512 {
        out.push(FieldError::new(FieldErrorType::TooLong, "parameters", None, "may not be more than 512 bytes"));
    } else {
        let mut size = 0;
        for (k, value) in params {
            if k.is_empty() {
                out.push(E::invalid("parameters", json!(""), "field can not be empty."));
            }
            size += k.len() + value.as_str().map_or(0, str::len);
        }
        if size > 256 * 1024 {
            out.push(FieldError::new(FieldErrorType::TooLong, "parameters", None, "may not be more than 262144 bytes"));
        }
    }
    let policy = str_at(v, "/reclaimPolicy");
    if !policy.is_empty() && !matches!(policy, "Delete" | "Retain") {
        out.push(FieldError::not_supported("reclaimPolicy", policy, &["Delete", "Retain"]));
    }
    match v.get("volumeBindingMode").and_then(Value::as_str) {
        None => out.push(required("volumeBindingMode", "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(m) => out.push(FieldError::not_supported("volumeBindingMode", m, &["Immediate", "WaitForFirstConsumer"])),
    }
    out
}

/// `ValidateLeaseSpec`.
fn lease(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(d) = v.pointer("/spec/leaseDurationSeconds").and_then(Value::as_i64) {
        if d <= 0 {
            out.push(E::invalid("spec.leaseDurationSeconds", json!(d), "must be greater than 0"));
        }
    }
    if let Some(t) = v.pointer("/spec/leaseTransitions").and_then(Value::as_i64) {
        if t < 0 {
            out.push(E::invalid("spec.leaseTransitions", json!(t), NON_NEGATIVE));
        }
    }
    let strategy = str_at(v, "/spec/strategy");
    if !strategy.is_empty() {
        if !strategy.contains('/') && strategy != "OldestEmulationVersion" {
            out.push(FieldError::not_supported("spec.strategy.strategy", strategy, &["OldestEmulationVersion"]));
        } else if strategy.contains('/') {
            out.extend(each("spec.strategy.strategy", strategy, qualified_name_problems(strategy)));
        }
    }
    if !str_at(v, "/spec/preferredHolder").is_empty() && strategy.is_empty() {
        out.push(E::forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"));
    }
    out
}

/// `ValidateEventCreate` for `events.k8s.io/v1`, on the core form the event is stored in: kube
/// validates its internal (core) event, so its messages name the core fields.
fn event(v: &Value) -> Vec<FieldError> {
    let v = &crate::events::to_storage(v.clone());
    let mut out = Vec::new();
    let namespace = meta::get(v, "namespace");
    let involved = str_at(v, "/involvedObject/namespace");
    let has_time = !str_at(v, "/eventTime").is_empty();
    let mismatch = if has_time {
        involved.is_empty() && !matches!(namespace, "default" | "kube-system")
    } else {
        (involved.is_empty() && !matches!(namespace, "" | "default")) || (!involved.is_empty() && involved != namespace)
    };
    if mismatch {
        out.push(E::invalid("involvedObject.namespace", json!(involved), "does not match event.namespace"));
    }
    if has_time {
        let controller = str_at(v, "/reportingComponent");
        if controller.is_empty() {
            out.push(required("reportingController", ""));
        }
        out.extend(each("reportingController", controller, qualified_name_problems(controller)));
        for (f, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let x = str_at(v, &format!("/{f}"));
            if x.is_empty() {
                out.push(required(f, ""));
            } else if x.len() > limit {
                out.push(E::invalid(f, json!(""), &format!("can have at most {limit} characters")));
            }
        }
        if str_at(v, "/message").len() > 1024 {
            out.push(E::invalid("message", json!(""), "can have at most 1024 characters"));
        }
    }
    if let Some(series) = v.get("series").filter(|s| s.is_object()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            out.push(E::invalid("series.count", json!(""), "should be at least 2"));
        }
        if str_at(series, "/lastObservedTime").is_empty() {
            out.push(required("series.lastObservedTime", ""));
        }
    }
    if !has_time {
        out.push(required("eventTime", ""));
    }
    let ty = str_at(v, "/type");
    if !matches!(ty, "Normal" | "Warning") {
        out.push(E::invalid("type", json!(""), &format!("has invalid value: {ty}")));
    }
    for f in ["firstTimestamp", "lastTimestamp", "count"] {
        if v.get(f).is_some_and(|x| !x.is_null() && x != &json!(0)) {
            out.push(E::invalid(f, json!(""), "needs to be unset"));
        }
    }
    if !str_at(v, "/source/component").is_empty() || !str_at(v, "/source/host").is_empty() {
        out.push(E::invalid("source", json!(""), "needs to be unset"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn labels_and_annotations_as_kube_words_them() {
        let v = json!({"metadata": {"labels": {"app": "web", "bad key": "x", "ok": "-no"},
            "annotations": {"Example.com/Fine": "yes", "a/b/c": ""}}});
        assert_eq!(
            texts(&metadata_errors(&v)),
            [
                format!("metadata.labels: Invalid value: \"bad key\": name part {QUALIFIED_NAME_MSG}"),
                format!("metadata.labels: Invalid value: \"-no\": {LABEL_VALUE_MSG}"),
                format!("metadata.annotations: Invalid value: \"a/b/c\": a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
            ]
        );
        let big = json!({"metadata": {"annotations": {"a": "x".repeat(ANNOTATIONS_MAX)}}});
        assert_eq!(
            texts(&metadata_errors(&big)),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn selectors_as_kube_words_them() {
        let v = json!({"s": {"matchExpressions": [{"key": "a", "operator": "In"},
            {"key": "b", "operator": "Exists", "values": ["x"]}, {"key": "c", "operator": "Gt", "values": ["1"]}]}});
        assert_eq!(
            texts(&selector_errors(&v, "/s", "spec.selector")),
            [
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "spec.selector.matchExpressions[2].operator: Invalid value: \"Gt\": not a valid selector operator",
            ]
        );
    }

    #[test]
    fn claims_volumes_and_classes() {
        let pvc = json!({"spec": {"accessModes": ["ReadWriteOnce", "Sometimes"], "resources": {"requests": {}}}});
        assert_eq!(
            texts(&errors("", "PersistentVolumeClaim", &pvc)),
            [
                "spec.accessModes: Unsupported value: \"Sometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                "spec.resources[storage]: Required value",
            ]
        );
        let ok = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        assert!(errors("", "PersistentVolumeClaim", &ok).is_empty());
        let mut grown = ok.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(
            texts(&update_errors("", "PersistentVolumeClaim", &ok, &grown)),
            ["spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"]
        );
        grown["status"] = json!({"phase": "Bound"});
        assert!(update_errors("", "PersistentVolumeClaim", &ok, &grown).is_empty());
        let pv = json!({"spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "0"}}});
        assert_eq!(
            texts(&errors("", "PersistentVolume", &pv)),
            [
                "spec.capacity[storage]: Invalid value: \"0\": must be greater than zero",
                "spec: Required value: must specify a volume type"
            ]
        );
        let sc = json!({"provisioner": "x.io/y", "reclaimPolicy": "Recycle", "volumeBindingMode": "Immediate"});
        assert_eq!(
            texts(&errors("storage.k8s.io", "StorageClass", &sc)),
            ["reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\""]
        );
        let mut changed = sc.clone();
        changed["parameters"] = json!({"a": "b"});
        assert_eq!(
            texts(&update_errors("storage.k8s.io", "StorageClass", &sc, &changed)),
            ["parameters: Forbidden: updates to parameters are forbidden."]
        );
    }

    #[test]
    fn defaults_before_validation() {
        let mut sc = json!({"provisioner": "x.io/y"});
        defaults("storage.k8s.io", "StorageClass", &mut sc);
        assert_eq!((&sc["reclaimPolicy"], &sc["volumeBindingMode"]), (&json!("Delete"), &json!("Immediate")));
        assert!(errors("storage.k8s.io", "StorageClass", &sc).is_empty());
        let mut np = json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}});
        defaults("networking.k8s.io", "NetworkPolicy", &mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let mut eps =
            json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"]}], "ports": [{"port": 80}]});
        defaults("discovery.k8s.io", "EndpointSlice", &mut eps);
        assert!(errors("discovery.k8s.io", "EndpointSlice", &eps).is_empty());
        eps["endpoints"][0]["addresses"][0] = json!("127.0.0.1");
        assert_eq!(
            texts(&errors("discovery.k8s.io", "EndpointSlice", &eps)),
            ["endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"]
        );
    }

    #[test]
    fn networking_and_policy() {
        let ing = json!({"spec": {"rules": [{"host": "1.2.3.4", "http": {"paths": [
            {"path": "a", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80, "name": "http"}}}},
            {"path": "/x", "pathType": "Regex", "backend": {"service": {"name": "web"}}}]}}]}});
        assert_eq!(
            texts(&errors("networking.k8s.io", "Ingress", &ing)),
            [
                "spec.rules[0].host: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address",
                "spec.rules[0].http.paths[0].path: Invalid value: \"a\": must be an absolute path",
                "spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both port name & port number",
                "spec.rules[0].http.paths[1].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
                "spec.rules[0].http.paths[1].backend: Required value: port name or number is required",
            ]
        );
        assert_eq!(
            texts(&errors("networking.k8s.io", "Ingress", &json!({"spec": {}}))),
            ["spec: Invalid value: null: either `defaultBackend` or `rules` must be specified"]
        );
        let np = json!({"spec": {"podSelector": {}, "ingress": [{"from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}],
            "ports": [{"port": 90, "endPort": 80}]}], "policyTypes": ["Sideways"]}});
        assert_eq!(
            texts(&errors("networking.k8s.io", "NetworkPolicy", &np)),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to `port`",
                "spec.ingress[0].from[0]: Required value: must specify a peer",
                "spec.ingress[0].from[1].ipBlock.except[0]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`",
                "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\"",
            ]
        );
        let pdb = json!({"spec": {"minAvailable": "150%"}});
        assert_eq!(
            texts(&errors("policy", "PodDisruptionBudget", &pdb)),
            ["spec.minAvailable: Invalid value: \"150%\": must not be greater than 100%"]
        );
        let pc = json!({"metadata": {"name": "system-mine"}, "value": 5});
        assert_eq!(
            texts(&errors("scheduling.k8s.io", "PriorityClass", &pc)),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"]
        );
        let lease = json!({"spec": {"leaseDurationSeconds": 0}});
        assert_eq!(
            texts(&errors("coordination.k8s.io", "Lease", &lease)),
            ["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]
        );
    }
}
