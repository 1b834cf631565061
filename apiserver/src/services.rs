//! Services, as kube-apiserver 1.33 serves them (`pkg/apis/core/v1/defaults.go`,
//! `pkg/apis/core/validation`, `pkg/registry/core/service/storage`): their defaults, validation,
//! and the cluster IP and node ports each is given.
//!
//! Allocations live in the store, where every apiserver on it sees them, so several apiservers
//! never hand out one address or port twice: a cluster IP is an `IPAddress` object
//! (`networking.k8s.io/v1`, key `<prefix>/ipaddresses/<ip>`, created only if absent — kube 1.33's
//! allocator), node ports are the bitmap kube keeps in the `RangeAllocation` at
//! `<prefix>/ranges/servicenodeports`, changed by compare-and-swap on its revision.

use std::net::Ipv4Addr;

use serde_json::{json, Value};

use crate::meta;
use crate::pods::set_default;
use crate::rest::Api;
use crate::status::{FieldError, FieldErrorType};
use crate::storage::{keys, StorageError};

/// The service ranges (`--service-cluster-ip-range`, `--service-node-port-range`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranges {
    /// The IPv4 network and its prefix length.
    net: u32,
    bits: u8,
    /// The node port range, inclusive.
    ports: (u16, u16),
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges::parse("10.0.0.0/24", "30000-32767").expect("kube's defaults parse")
    }
}

impl Ranges {
    /// The ranges of the flags' values: an IPv4 CIDR (IPv6 and dual-stack are not served yet)
    /// of at least 8 addresses, and `<low>-<high>` ports.
    pub fn parse(cidr: &str, ports: &str) -> Result<Ranges, String> {
        let (ip, bits) = cidr.split_once('/').ok_or_else(|| format!("invalid CIDR address: {cidr}"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("invalid CIDR address: {cidr} (only IPv4 is served)"))?;
        let bits: u8 = bits.parse().ok().filter(|b| *b <= 29).ok_or_else(|| format!("invalid CIDR address: {cidr}"))?;
        let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
        let (lo, hi) = ports.split_once('-').ok_or_else(|| format!("invalid port range: {ports}"))?;
        let lo: u16 = lo.trim().parse().map_err(|_| format!("invalid port range: {ports}"))?;
        let hi: u16 = hi.trim().parse().map_err(|_| format!("invalid port range: {ports}"))?;
        if lo == 0 || hi < lo {
            return Err(format!("invalid port range: {ports}"));
        }
        Ok(Ranges { net: u32::from(ip) & mask, bits, ports: (lo, hi) })
    }

    fn cidr(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.net), self.bits)
    }

    fn size(&self) -> u32 {
        1 << (32 - u32::from(self.bits))
    }

    /// The first address services get: the `kubernetes` service's.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.net + 1)
    }

    /// Whether `ip` may be a service's: in the range, neither its network nor broadcast address.
    fn holds(&self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        n > self.net && n < self.net + self.size() - 1
    }

    fn port_range(&self) -> String {
        format!("{}-{}", self.ports.0, self.ports.1)
    }
}

fn spec_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("spec").and_then(|s| s.get(field)).and_then(Value::as_str).unwrap_or("")
}

/// The service's type (ClusterIP when unset).
fn kind(v: &Value) -> &str {
    match spec_str(v, "type") {
        "" => "ClusterIP",
        t => t,
    }
}

fn needs_node_ports(v: &Value) -> bool {
    match kind(v) {
        "NodePort" => true,
        "LoadBalancer" => v.pointer("/spec/allocateLoadBalancerNodePorts") != Some(&json!(false)),
        _ => false,
    }
}

fn needs_ip(v: &Value) -> bool {
    kind(v) != "ExternalName" && spec_str(v, "clusterIP") != "None"
}

/// kube's defaults for a service (`SetDefaults_Service`), and the IP family fields its REST
/// create fills (single-stack IPv4).
pub fn defaults(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_default(spec, "sessionAffinity", json!("None"));
    if spec.get("sessionAffinity") == Some(&json!("None")) {
        spec.remove("sessionAffinityConfig");
    } else if spec.get("sessionAffinity") == Some(&json!("ClientIP"))
        && spec.get("sessionAffinityConfig").and_then(|c| c.pointer("/clientIP/timeoutSeconds")).is_none()
    {
        spec.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
    }
    set_default(spec, "type", json!("ClusterIP"));
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    for p in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten().filter_map(Value::as_object_mut)
    {
        set_default(p, "protocol", json!("TCP"));
        if p.get("targetPort").is_none_or(|t| t == &json!(0) || t == &json!("") || t.is_null()) {
            let port = p.get("port").cloned().unwrap_or(json!(0));
            p.insert("targetPort".into(), port);
        }
    }
    let external = matches!(ty.as_str(), "NodePort" | "LoadBalancer")
        || (ty == "ClusterIP" && spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    if external {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if ty != "ExternalName" {
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        if spec.get("ipFamilies").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
        }
    }
}

/// What kube's `ValidateService` refuses (the part keel checks: type, ports, names, protocols,
/// an ExternalName's name, session affinity).
pub fn validate(v: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    let ty = kind(v);
    if !TYPES.contains(&ty) {
        errors.push(FieldError::not_supported("spec.type", ty, TYPES));
    }
    let ports = v.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    if ports.is_empty() && ty != "ExternalName" && spec_str(v, "clusterIP") != "None" {
        errors.push(FieldError::required("spec.ports"));
    }
    if ty == "ExternalName" && spec_str(v, "externalName").is_empty() {
        errors.push(FieldError::required("spec.externalName"));
    }
    let mut names = std::collections::HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            errors.push(FieldError::required(&at("name")));
        } else if !name.is_empty() && !names.insert(name) {
            errors.push(FieldError::new(FieldErrorType::Duplicate, &at("name"), Some(json!(name)), ""));
        }
        errors.extend(crate::validation::port_number(&at("port"), p.get("port").and_then(Value::as_i64).unwrap_or(0)));
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("");
        if !["SCTP", "TCP", "UDP"].contains(&protocol) {
            errors.push(FieldError::not_supported(&at("protocol"), protocol, &["SCTP", "TCP", "UDP"]));
        }
        if let Some(n) = p.get("nodePort").and_then(Value::as_i64).filter(|n| *n != 0) {
            if !needs_node_ports(v) && ty != "LoadBalancer" {
                errors.push(FieldError::new(
                    FieldErrorType::Forbidden,
                    &at("nodePort"),
                    None,
                    "may not be used when `type` is 'ClusterIP'",
                ));
            } else {
                errors.extend(crate::validation::port_number(&at("nodePort"), n));
            }
        }
    }
    const AFFINITIES: &[&str] = &["ClientIP", "None"];
    let affinity = spec_str(v, "sessionAffinity");
    if !AFFINITIES.contains(&affinity) {
        errors.push(FieldError::not_supported("spec.sessionAffinity", affinity, AFFINITIES));
    }
    if let Some(ip) = v.pointer("/spec/clusterIP").and_then(Value::as_str).filter(|ip| !ip.is_empty() && *ip != "None")
    {
        if ip.parse::<Ipv4Addr>().is_err() {
            errors.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                json!(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    errors
}

/// An update keeps what was allocated where the new object leaves it out (kube's
/// `patchAllocatedValues`): the cluster IPs, and each node port of a port that stays.
pub fn keep_allocated(old: &Value, new: &mut Value) {
    if needs_ip(old) && needs_ip(new) && spec_str(new, "clusterIP").is_empty() {
        let spec = new.get_mut("spec").and_then(Value::as_object_mut);
        if let Some(spec) = spec {
            for f in ["clusterIP", "clusterIPs"] {
                if let Some(x) = old.pointer(&format!("/spec/{f}")) {
                    spec.insert(f.into(), x.clone());
                }
            }
        }
    }
    if needs_node_ports(old) && needs_node_ports(new) {
        let old_ports = old.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
        for p in new.pointer_mut("/spec/ports").and_then(Value::as_array_mut).into_iter().flatten() {
            if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                continue;
            }
            let same =
                old_ports.iter().find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"));
            if let Some(n) = same.and_then(|o| o.get("nodePort")) {
                p["nodePort"] = n.clone();
            }
        }
    }
}

/// What kube refuses in an update beyond `validate`: a cluster IP changed once set.
pub fn update_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    let (was, is) = (spec_str(old, "clusterIP"), spec_str(new, "clusterIP"));
    if needs_ip(old) && needs_ip(new) && was != is {
        let ips = new.pointer("/spec/clusterIPs").cloned().unwrap_or(json!([]));
        let go = go_value(&ips);
        return vec![FieldError::verbatim(
            FieldErrorType::Invalid,
            "spec.clusterIPs[0]",
            go,
            "may not change once set",
        )];
    }
    Vec::new()
}

/// What a write took from the ranges, to give back if the write does not happen.
#[derive(Debug, Default)]
pub struct Taken {
    ip: Option<String>,
    ports: Vec<u16>,
}

fn ip_key(api: &Api, ip: &str) -> String {
    keys::object(&api.prefix, "ipaddresses", None, ip)
}

fn ports_key(api: &Api) -> String {
    format!("{}/ranges/servicenodeports", api.prefix)
}

/// kube's `IPAddress` object that holds `ip` for a service.
fn ip_address(ip: &str, namespace: &str, name: &str) -> Vec<u8> {
    let v = json!({
        "kind": "IPAddress",
        "apiVersion": "networking.k8s.io/v1",
        "metadata": {
            "name": ip,
            "uid": meta::uid(),
            "creationTimestamp": meta::now(),
            "labels": {
                "ipaddress.kubernetes.io/ip-family": "IPv4",
                "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
            },
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": name}},
    });
    serde_json::to_vec(&v).expect("a value encodes")
}

/// An allocation failure as kube words it, on the field it concerns.
fn failed(field: &str, value: Value, why: &str) -> FieldError {
    FieldError::verbatim(FieldErrorType::Invalid, field, go_value(&value), why)
}

/// Go's `%#v` of a value kube's allocation errors show: a `[]string`, a string, a number.
fn go_value(v: &Value) -> String {
    match v {
        Value::Array(a) => crate::status::go_strings(a.iter().map(|i| i.as_str().unwrap_or(""))),
        Value::String(s) => crate::status::go_quote(s),
        other => other.to_string(),
    }
}

/// Reserves `ip` (in the store) for the service `namespace/name`.
async fn reserve_ip(api: &Api, ip: &str, namespace: &str, name: &str) -> Result<bool, StorageError> {
    match api.storage.create(&ip_key(api, ip), ip_address(ip, namespace, name), 0).await {
        Ok(_) => Ok(true),
        Err(StorageError::AlreadyExists) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The node port bitmap (kube's `RangeAllocation` data: bit `i` is port `low + i`, as the
/// big-endian bytes of a big integer) and its revision (0 if it is not stored yet).
async fn read_ports(api: &Api) -> Result<(Vec<u8>, i64), StorageError> {
    use base64::Engine as _;
    let Some(stored) = api.storage.get(&ports_key(api)).await? else { return Ok((Vec::new(), 0)) };
    let v: Value = serde_json::from_slice(&stored.value).unwrap_or_default();
    let data = v.get("data").and_then(Value::as_str).unwrap_or("");
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_default();
    Ok((bytes, stored.rev))
}

fn bit(bitmap: &[u8], i: usize) -> bool {
    let byte = i / 8;
    byte < bitmap.len() && bitmap[bitmap.len() - 1 - byte] & (1 << (i % 8)) != 0
}

/// `bitmap` with bit `i` set to `on`, in minimal big-endian form.
fn with_bit(bitmap: &[u8], i: usize, on: bool) -> Vec<u8> {
    let mut le: Vec<u8> = bitmap.iter().rev().copied().collect();
    if le.len() <= i / 8 {
        le.resize(i / 8 + 1, 0);
    }
    if on {
        le[i / 8] |= 1 << (i % 8);
    } else {
        le[i / 8] &= !(1 << (i % 8));
    }
    while le.last() == Some(&0) {
        le.pop();
    }
    le.into_iter().rev().collect()
}

/// Writes the bitmap at the revision it was read at; `false` if it changed meanwhile.
async fn write_ports(api: &Api, ranges: &Ranges, bitmap: &[u8], rev: i64) -> Result<bool, StorageError> {
    use base64::Engine as _;
    let v = json!({
        "kind": "RangeAllocation",
        "apiVersion": "v1",
        "metadata": {"creationTimestamp": meta::now()},
        "range": ranges.port_range(),
        "data": base64::engine::general_purpose::STANDARD.encode(bitmap),
    });
    let value = serde_json::to_vec(&v).expect("a value encodes");
    let done = match rev {
        0 => api.storage.create(&ports_key(api), value, 0).await.map(|_| ()),
        rev => api.storage.update(&ports_key(api), value, rev).await.map(|_| ()),
    };
    match done {
        Ok(()) => Ok(true),
        Err(StorageError::AlreadyExists | StorageError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Changes the node port bitmap: `take` are set (each must be free, or the answer is the first
/// that is not), `give` cleared, and `fresh` free ports chosen and set; the ports chosen.
async fn change_ports(
    api: &Api,
    ranges: &Ranges,
    take: &[u16],
    give: &[u16],
    fresh: usize,
) -> Result<Result<Vec<u16>, u16>, StorageError> {
    let size = usize::from(ranges.ports.1 - ranges.ports.0) + 1;
    loop {
        let (mut bitmap, rev) = read_ports(api).await?;
        for p in give {
            bitmap = with_bit(&bitmap, usize::from(p - ranges.ports.0), false);
        }
        for p in take {
            let i = usize::from(p - ranges.ports.0);
            if bit(&bitmap, i) {
                return Ok(Err(*p));
            }
            bitmap = with_bit(&bitmap, i, true);
        }
        let mut chosen = Vec::new();
        let start = rand::random_range(0..size);
        for k in 0..size {
            if chosen.len() == fresh {
                break;
            }
            let i = (start + k) % size;
            if !bit(&bitmap, i) {
                bitmap = with_bit(&bitmap, i, true);
                chosen.push(ranges.ports.0 + i as u16);
            }
        }
        if chosen.len() < fresh {
            return Ok(Err(0));
        }
        if write_ports(api, ranges, &bitmap, rev).await? {
            return Ok(Ok(chosen));
        }
    }
}

/// Gives back what a write took (it failed, or the service is gone).
pub async fn release(api: &Api, ranges: &Ranges, taken: Taken) {
    if let Some(ip) = taken.ip {
        let _ = api.storage.delete(&ip_key(api, &ip), None).await;
    }
    if !taken.ports.is_empty() {
        let _ = change_ports(api, ranges, &[], &taken.ports, 0).await;
    }
}

/// What a stored service holds: its cluster IP and node ports.
pub fn held(v: &Value) -> Taken {
    let ip = Some(spec_str(v, "clusterIP").to_string()).filter(|ip| !ip.is_empty() && ip != "None");
    let ports = v
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
        .collect();
    Taken { ip, ports }
}

/// Gives `v` (a service being created, or replacing `old`) the cluster IP and node ports it
/// needs and does not have from `old`: the ones it names if free and in range, else chosen.
/// `Err` holds kube's field errors; nothing is kept taken then.
pub async fn allocate(
    api: &Api,
    ranges: &Ranges,
    old: Option<&Value>,
    v: &mut Value,
) -> Result<Taken, Vec<FieldError>> {
    let namespace = meta::get(v, "namespace").to_string();
    let name = meta::get(v, "name").to_string();
    let had = old.map(held).unwrap_or_default();
    let mut taken = Taken::default();
    let store_error = |e: StorageError| vec![FieldError::new(FieldErrorType::Internal, "spec", None, &e.to_string())];
    if needs_ip(v) {
        let wanted = spec_str(v, "clusterIP").to_string();
        if had.ip.as_deref() != Some(wanted.as_str()) || wanted.is_empty() {
            let ip = if wanted.is_empty() {
                let size = ranges.size();
                let start = rand::random_range(1..size - 1);
                let mut found = None;
                for k in 0..size - 2 {
                    let ip = Ipv4Addr::from(ranges.net + 1 + (start - 1 + k) % (size - 2)).to_string();
                    if reserve_ip(api, &ip, &namespace, &name).await.map_err(store_error)? {
                        found = Some(ip);
                        break;
                    }
                }
                found.ok_or_else(|| {
                    vec![FieldError::new(
                        FieldErrorType::Internal,
                        "spec.clusterIPs",
                        None,
                        "failed to allocate a serviceIP: range is full",
                    )]
                })?
            } else {
                let field = "spec.clusterIPs";
                let ips = json!([wanted]);
                let Ok(parsed) = wanted.parse::<Ipv4Addr>() else {
                    return Err(vec![failed(field, ips, &format!("failed to allocate IP {wanted}: invalid IP"))]);
                };
                if !ranges.holds(parsed) {
                    let why = format!(
                        "failed to allocate IP {wanted}: the provided IP ({wanted}) is not in the valid range. The range of valid IPs is {}",
                        ranges.cidr()
                    );
                    return Err(vec![failed(field, ips, &why)]);
                }
                if !reserve_ip(api, &wanted, &namespace, &name).await.map_err(store_error)? {
                    let why = format!("failed to allocate IP {wanted}: provided IP is already allocated");
                    return Err(vec![failed(field, ips, &why)]);
                }
                wanted
            };
            let spec = v["spec"].as_object_mut().expect("a spec");
            spec.insert("clusterIP".into(), json!(ip));
            spec.insert("clusterIPs".into(), json!([ip]));
            taken.ip = Some(ip);
        }
    } else if spec_str(v, "clusterIP") == "None" {
        v["spec"]["clusterIPs"] = json!(["None"]);
    }
    if needs_node_ports(v) {
        let ports = v.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut take = Vec::new();
        let mut errors = Vec::new();
        let mut missing = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            match p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) {
                0 => missing.push(i),
                n if had.ports.contains(&(n as u16)) => {}
                n if n < i64::from(ranges.ports.0) || n > i64::from(ranges.ports.1) => errors.push(failed(
                    &format!("spec.ports[{i}].nodePort"),
                    json!(n),
                    &format!(
                        "provided port is not in the valid range. The range of valid ports is {}",
                        ranges.port_range()
                    ),
                )),
                n if !take.contains(&(n as u16)) => take.push(n as u16),
                _ => {}
            }
        }
        if !errors.is_empty() {
            release(api, ranges, taken).await;
            return Err(errors);
        }
        match change_ports(api, ranges, &take, &[], missing.len()).await {
            Err(e) => {
                release(api, ranges, taken).await;
                return Err(store_error(e));
            }
            Ok(Err(busy)) => {
                release(api, ranges, taken).await;
                let (i, why) = match ports.iter().position(|p| p.get("nodePort") == Some(&json!(busy))) {
                    Some(i) if busy != 0 => (i, "provided port is already allocated".to_string()),
                    _ => (missing.first().copied().unwrap_or(0), "failed to allocate a nodePort: range is full".into()),
                };
                return Err(vec![failed(&format!("spec.ports[{i}].nodePort"), json!(busy), &why)]);
            }
            Ok(Ok(chosen)) => {
                let list = v.pointer_mut("/spec/ports").and_then(Value::as_array_mut).expect("ports");
                for (i, port) in missing.iter().zip(&chosen) {
                    list[*i]["nodePort"] = json!(port);
                }
                taken.ports = take.into_iter().chain(chosen).collect();
            }
        }
    }
    Ok(taken)
}

/// What `old` held that `new` does not: to give back once the update is stored.
pub fn dropped(old: &Value, new: &Value) -> Taken {
    let (was, is) = (held(old), held(new));
    Taken {
        ip: was.ip.filter(|ip| is.ip.as_ref() != Some(ip)),
        ports: was.ports.into_iter().filter(|p| !is.ports.contains(p)).collect(),
    }
}

/// The `kubernetes` service kube-apiserver keeps in `default`: the range's first address,
/// port 443 (`https`) to the apiserver's secure port.
pub fn kubernetes_service(ranges: &Ranges, secure_port: u16) -> Value {
    let ip = ranges.first().to_string();
    json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": secure_port}],
            "clusterIP": ip,
            "clusterIPs": [ip],
            "type": "ClusterIP",
            "sessionAffinity": "None",
        },
    })
}

/// The `kubernetes` service's Endpoints: the apiserver's address and secure port, as kube's
/// endpoint reconciler writes them (not mirrored into an EndpointSlice by the mirroring
/// controller).
pub fn kubernetes_endpoints(address: &str, secure_port: u16) -> Value {
    json!({
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
        },
        "subsets": [{
            "addresses": [{"ip": address}],
            "ports": [{"name": "https", "port": secure_port, "protocol": "TCP"}],
        }],
    })
}

/// The `kubernetes` service's EndpointSlice, as kube-apiserver's endpoints adapter writes it
/// beside the Endpoints: the same address (IPv4) and port.
pub fn kubernetes_endpoint_slice(address: &str, secure_port: u16) -> Value {
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": secure_port, "protocol": "TCP"}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_kube_s_flags() {
        let r = Ranges::default();
        assert_eq!(r.cidr(), "10.0.0.0/24");
        assert_eq!(r.first(), Ipv4Addr::new(10, 0, 0, 1));
        assert!(r.holds(Ipv4Addr::new(10, 0, 0, 254)) && !r.holds(Ipv4Addr::new(10, 0, 0, 255)));
        assert!(!r.holds(Ipv4Addr::new(10, 0, 0, 0)) && !r.holds(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!(Ranges::parse("10.96.3.7/12", "30000-30010").unwrap().cidr(), "10.96.0.0/12");
        assert!(Ranges::parse("fd00::/108", "30000-32767").is_err());
        assert!(Ranges::parse("10.0.0.0/24", "32767-30000").is_err());
    }

    #[test]
    fn services_get_kube_s_defaults() {
        let mut s = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "type": "NodePort"}});
        defaults(&mut s);
        assert_eq!(s["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert_eq!(s["spec"]["sessionAffinity"], "None");
        assert_eq!(s["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(s["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
        assert!(validate(&s).is_empty());
        let mut e = json!({"spec": {"type": "ExternalName"}});
        defaults(&mut e);
        assert!(e["spec"].get("ipFamilies").is_none());
        let errors: Vec<String> = validate(&e).iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["spec.externalName: Required value"]);
    }

    #[test]
    fn validation_words_errors_as_kube() {
        let mut s = json!({"spec": {"ports": [{"port": 0, "protocol": "HTTP"}, {"port": 80}], "type": "Bogus"}});
        defaults(&mut s);
        let errors: Vec<String> = validate(&s).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "spec.type: Unsupported value: \"Bogus\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
                "spec.ports[0].name: Required value",
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.ports[1].name: Required value",
            ]
        );
    }

    #[test]
    fn updates_keep_what_was_allocated() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 81, "protocol": "TCP", "nodePort": 30081}]}});
        let mut new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}});
        keep_allocated(&old, &mut new);
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.7");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        assert!(update_errors(&old, &new).is_empty());
        let gone = dropped(&old, &new);
        assert_eq!((gone.ip, gone.ports), (None, vec![30081]));
        new["spec"]["clusterIP"] = json!("10.0.0.9");
        new["spec"]["clusterIPs"] = json!(["10.0.0.9"]);
        let errors: Vec<String> = update_errors(&old, &new).iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.9\"}: may not change once set"]);
    }

    #[test]
    fn bitmaps_are_big_endian_integers() {
        let b = with_bit(&[], 0, true);
        assert_eq!(b, [1]);
        let b = with_bit(&b, 9, true);
        assert_eq!(b, [2, 1]);
        assert!(bit(&b, 9) && bit(&b, 0) && !bit(&b, 8) && !bit(&b, 100));
        assert_eq!(with_bit(&with_bit(&b, 9, false), 0, false), Vec::<u8>::new());
    }
}
