//! kube-apiserver's table printers (`pkg/printers/internalversion/printers.go`, kube 1.33): the
//! columns `kubectl get` shows for each built-in kind, and how kube computes one object's row.
//!
//! kube-apiserver always prints wide (its table convertor asks for `Wide: true`), so a row has a
//! cell for every column, priority-1 columns included; `kubectl` hides those without `-o wide`.
//! Cells are the JSON values kube emits: strings, integers where kube's cell is an `int64`, and
//! booleans where it is a Go `bool` (whatever the column's declared type). A printer reads the v1
//! JSON form of its kind and takes a missing (or null) field as Go's zero value, as kube's
//! internal types would have it; no input makes it panic.
//!
//! Column descriptions are kube's: the literal strings of `printers.go`, or the SwaggerDoc of the
//! field it names (the `doc` module below, from `k8s.io/api` v0.33), sometimes an older group
//! version's (extensions/v1beta1 for ReplicaSet, DaemonSet, Deployment and NetworkPolicy).
//!
//! Kinds kube serves with no printer, so with its default table (`Name`, and `Created At` of type
//! `date`); [`printer`] answers `None` for them:
//! - core `LimitRange`
//! - `rbac.authorization.k8s.io` `Role`
//! - `rbac.authorization.k8s.io` `ClusterRole`

use std::collections::BTreeSet;

use serde_json::Value;

use crate::table::{age_secs, human_duration, AGE_DOC, NAME_DOC};

/// One column of a Table (kube's `metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ty: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: i32,
}

/// A resource's columns and how one object's row is computed (cells in column order, JSON values
/// as kube emits them: strings, integers, or for "date"-typed columns the RFC3339 string).
pub struct Printer {
    pub columns: &'static [Column],
    pub cells: fn(&Value) -> Vec<Value>,
}

/// The printer kube uses for `group`'s `kind` (group "" = core), if kube has one among those
/// written here.
pub fn printer(group: &str, kind: &str) -> Option<&'static Printer> {
    Some(match (group, kind) {
        ("", "Node") => &NODE,
        ("", "Service") => &SERVICE,
        ("", "Endpoints") => &ENDPOINTS,
        ("", "Event") => &EVENT,
        ("", "ReplicationController") => &REPLICATION_CONTROLLER,
        ("", "ResourceQuota") => &RESOURCE_QUOTA,
        ("", "PersistentVolume") => &PERSISTENT_VOLUME,
        ("", "PersistentVolumeClaim") => &PERSISTENT_VOLUME_CLAIM,
        ("apps", "Deployment") => &DEPLOYMENT,
        ("apps", "ReplicaSet") => &REPLICA_SET,
        ("apps", "StatefulSet") => &STATEFUL_SET,
        ("apps", "DaemonSet") => &DAEMON_SET,
        ("apps", "ControllerRevision") => &CONTROLLER_REVISION,
        ("batch", "Job") => &JOB,
        ("batch", "CronJob") => &CRON_JOB,
        ("discovery.k8s.io", "EndpointSlice") => &ENDPOINT_SLICE,
        ("coordination.k8s.io", "Lease") => &LEASE,
        ("rbac.authorization.k8s.io", "RoleBinding") => &ROLE_BINDING,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => &CLUSTER_ROLE_BINDING,
        ("events.k8s.io", "Event") => &EVENTS_EVENT,
        ("policy", "PodDisruptionBudget") => &POD_DISRUPTION_BUDGET,
        ("networking.k8s.io", "Ingress") => &INGRESS,
        ("networking.k8s.io", "IngressClass") => &INGRESS_CLASS,
        ("networking.k8s.io", "NetworkPolicy") => &NETWORK_POLICY,
        ("scheduling.k8s.io", "PriorityClass") => &PRIORITY_CLASS,
        ("storage.k8s.io", "StorageClass") => &STORAGE_CLASS,
        _ => return None,
    })
}

// ---- Columns ----

const NAME: Column = Column { name: "Name", ty: "string", format: "name", description: NAME_DOC, priority: 0 };
const AGE: Column = col("Age", AGE_DOC);
const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide("Images", "Images referenced by each container in the template.");

/// A string column shown by default.
const fn col(name: &'static str, description: &'static str) -> Column {
    Column { name, ty: "string", format: "", description, priority: 0 }
}

/// An integer column shown by default.
const fn int_col(name: &'static str, description: &'static str) -> Column {
    Column { name, ty: "integer", format: "", description, priority: 0 }
}

/// A boolean column shown by default.
const fn bool_col(name: &'static str, description: &'static str) -> Column {
    Column { name, ty: "boolean", format: "", description, priority: 0 }
}

/// A string column `kubectl` shows only with `-o wide` (priority 1).
const fn wide(name: &'static str, description: &'static str) -> Column {
    Column { name, ty: "string", format: "", description, priority: 1 }
}

// ---- Printers, in kube's order of `AddHandlers` ----

static POD_DISRUPTION_BUDGET: Printer = Printer {
    columns: &[
        NAME,
        col("Min Available", "The minimum number of pods that must be available."),
        col("Max Unavailable", "The maximum number of pods that may be unavailable."),
        int_col("Allowed Disruptions", "Calculated number of pods that may be disrupted at this time."),
        AGE,
    ],
    cells: pod_disruption_budget,
};

static REPLICATION_CONTROLLER: Printer = Printer {
    columns: &[
        NAME,
        int_col("Desired", doc::RC_SPEC_REPLICAS),
        int_col("Current", doc::RC_STATUS_REPLICAS),
        int_col("Ready", doc::RC_READY),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::RC_SELECTOR),
    ],
    cells: replication_controller,
};

static REPLICA_SET: Printer = Printer {
    columns: &[
        NAME,
        int_col("Desired", doc::RS_SPEC_REPLICAS),
        int_col("Current", doc::RS_STATUS_REPLICAS),
        int_col("Ready", doc::RS_READY),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::RS_SELECTOR),
    ],
    cells: replica_set,
};

static DAEMON_SET: Printer = Printer {
    columns: &[
        NAME,
        int_col("Desired", doc::DS_DESIRED),
        int_col("Current", doc::DS_CURRENT),
        int_col("Ready", doc::DS_READY),
        int_col("Up-to-date", doc::DS_UPDATED),
        int_col("Available", doc::DS_AVAILABLE),
        col("Node Selector", doc::POD_NODE_SELECTOR),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::DS_SELECTOR),
    ],
    cells: daemon_set,
};

static JOB: Printer = Printer {
    columns: &[
        NAME,
        col("Status", "Status of the job."),
        col("Completions", doc::JOB_SUCCEEDED),
        col("Duration", "Time required to complete the job."),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::JOB_SELECTOR),
    ],
    cells: job,
};

static CRON_JOB: Printer = Printer {
    columns: &[
        NAME,
        col("Schedule", doc::CRONJOB_SCHEDULE),
        col("Timezone", doc::CRONJOB_TIMEZONE),
        bool_col("Suspend", doc::CRONJOB_SUSPEND),
        int_col("Active", doc::CRONJOB_ACTIVE),
        col("Last Schedule", doc::CRONJOB_LAST_SCHEDULE),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::JOB_SELECTOR),
    ],
    cells: cron_job,
};

static SERVICE: Printer = Printer {
    columns: &[
        NAME,
        col("Type", doc::SVC_TYPE),
        col("Cluster-IP", doc::SVC_CLUSTER_IP),
        col("External-IP", doc::SVC_EXTERNAL_IPS),
        col("Port(s)", doc::SVC_PORTS),
        AGE,
        wide("Selector", doc::SVC_SELECTOR),
    ],
    cells: service,
};

static INGRESS: Printer = Printer {
    columns: &[
        NAME,
        col("Class", "The name of the IngressClass resource that should be used for additional configuration"),
        col("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
        col("Address", "Address is a list containing ingress points for the load-balancer"),
        col("Ports", "Ports of TLS configurations that open"),
        AGE,
    ],
    cells: ingress,
};

static INGRESS_CLASS: Printer = Printer {
    columns: &[
        NAME,
        col("Controller", "Controller that is responsible for handling this class"),
        col("Parameters", "A reference to a resource with additional parameters"),
        AGE,
    ],
    cells: ingress_class,
};

static STATEFUL_SET: Printer = Printer {
    columns: &[NAME, col("Ready", "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES],
    cells: stateful_set,
};

static ENDPOINTS: Printer =
    Printer { columns: &[NAME, col("Endpoints", doc::ENDPOINTS_SUBSETS), AGE], cells: endpoints };

static NODE: Printer = Printer {
    columns: &[
        NAME,
        col("Status", "The status of the node"),
        col("Roles", "The roles of the node"),
        AGE,
        col("Version", doc::NODE_KUBELET),
        wide("Internal-IP", doc::NODE_ADDRESSES),
        wide("External-IP", doc::NODE_ADDRESSES),
        wide("OS-Image", doc::NODE_OS_IMAGE),
        wide("Kernel-Version", doc::NODE_KERNEL),
        wide("Container-Runtime", doc::NODE_RUNTIME),
    ],
    cells: node,
};

const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen", doc::EVENT_LAST),
    col("Type", doc::EVENT_TYPE),
    col("Reason", doc::EVENT_REASON),
    col("Object", doc::EVENT_OBJECT),
    wide("Subobject", doc::EVENT_SUBOBJECT),
    wide("Source", doc::EVENT_SOURCE),
    col("Message", doc::EVENT_MESSAGE),
    wide("First Seen", doc::EVENT_FIRST),
    wide("Count", doc::EVENT_COUNT),
    Column { priority: 1, ..NAME },
];

static EVENT: Printer = Printer { columns: EVENT_COLUMNS, cells: core_event };

/// events.k8s.io serves Events from the core Event storage, so with the core printer, reading
/// the fields the events.k8s.io form renames.
static EVENTS_EVENT: Printer = Printer { columns: EVENT_COLUMNS, cells: events_event };

static PERSISTENT_VOLUME: Printer = Printer {
    columns: &[
        NAME,
        col("Capacity", doc::PV_CAPACITY),
        col("Access Modes", doc::PV_ACCESS_MODES),
        col("Reclaim Policy", doc::PV_RECLAIM),
        col("Status", doc::PV_PHASE),
        col("Claim", doc::PV_CLAIM),
        col("StorageClass", "StorageClass of the pv"),
        col("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
        col("Reason", doc::PV_REASON),
        AGE,
        wide("VolumeMode", doc::PV_VOLUME_MODE),
    ],
    cells: persistent_volume,
};

static PERSISTENT_VOLUME_CLAIM: Printer = Printer {
    columns: &[
        NAME,
        col("Status", doc::PVC_PHASE),
        col("Volume", doc::PVC_VOLUME),
        col("Capacity", doc::PVC_CAPACITY),
        col("Access Modes", doc::PVC_ACCESS_MODES),
        col("StorageClass", "StorageClass of the pvc"),
        col("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
        AGE,
        wide("VolumeMode", doc::PVC_VOLUME_MODE),
    ],
    cells: persistent_volume_claim,
};

static DEPLOYMENT: Printer = Printer {
    columns: &[
        NAME,
        col("Ready", "Number of the pod with ready state"),
        col("Up-to-date", doc::DEPLOY_UPDATED),
        col("Available", doc::DEPLOY_AVAILABLE),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", doc::DEPLOY_SELECTOR),
    ],
    cells: deployment,
};

static NETWORK_POLICY: Printer =
    Printer { columns: &[NAME, col("Pod-Selector", doc::NETPOL_POD_SELECTOR), AGE], cells: network_policy };

static ROLE_BINDING: Printer = Printer {
    columns: &[
        NAME,
        col("Role", doc::ROLEBINDING_ROLE),
        AGE,
        wide("Users", "Users in the roleBinding"),
        wide("Groups", "Groups in the roleBinding"),
        wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
    ],
    cells: role_binding,
};

static CLUSTER_ROLE_BINDING: Printer = Printer {
    columns: &[
        NAME,
        col("Role", doc::CLUSTERROLEBINDING_ROLE),
        AGE,
        wide("Users", "Users in the clusterRoleBinding"),
        wide("Groups", "Groups in the clusterRoleBinding"),
        wide("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding"),
    ],
    cells: role_binding,
};

static LEASE: Printer = Printer { columns: &[NAME, col("Holder", doc::LEASE_HOLDER), AGE], cells: lease };

static STORAGE_CLASS: Printer = Printer {
    columns: &[
        NAME,
        col("Provisioner", doc::SC_PROVISIONER),
        col("ReclaimPolicy", doc::SC_RECLAIM),
        col("VolumeBindingMode", doc::SC_BINDING_MODE),
        col("AllowVolumeExpansion", doc::SC_EXPANSION),
        AGE,
    ],
    cells: storage_class,
};

static CONTROLLER_REVISION: Printer = Printer {
    columns: &[NAME, col("Controller", "Controller of the object"), col("Revision", doc::REVISION), AGE],
    cells: controller_revision,
};

static RESOURCE_QUOTA: Printer = Printer {
    columns: &[
        NAME,
        col("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
        col(
            "Limit",
            "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
        ),
        AGE,
    ],
    cells: resource_quota,
};

static PRIORITY_CLASS: Printer = Printer {
    columns: &[
        NAME,
        int_col("Value", doc::PC_VALUE),
        bool_col("Global-Default", doc::PC_GLOBAL_DEFAULT),
        AGE,
        col("PreemptionPolicy", doc::PC_PREEMPTION),
    ],
    cells: priority_class,
};

static ENDPOINT_SLICE: Printer = Printer {
    columns: &[
        NAME,
        col("AddressType", doc::SLICE_ADDRESS_TYPE),
        col("Ports", doc::SLICE_PORTS),
        col("Endpoints", doc::SLICE_ENDPOINTS),
        AGE,
    ],
    cells: endpoint_slice,
};

// ---- Rows ----

fn pod_disruption_budget(o: &Value) -> Vec<Value> {
    vec![
        name(o),
        int_or_string(at(o, "/spec/minAvailable")).into(),
        int_or_string(at(o, "/spec/maxUnavailable")).into(),
        int_at(o, "/status/disruptionsAllowed").into(),
        age(o),
    ]
}

fn replication_controller(o: &Value) -> Vec<Value> {
    replicas(o, format_labels(at(o, "/spec/selector")))
}

fn replica_set(o: &Value) -> Vec<Value> {
    replicas(o, format_selector(at(o, "/spec/selector")))
}

/// A ReplicationController's or ReplicaSet's row (they differ in how a selector is written).
fn replicas(o: &Value, selector: String) -> Vec<Value> {
    let [names, images] = containers(o, "/spec/template/spec/containers");
    vec![
        name(o),
        int_at(o, "/spec/replicas").into(),
        int_at(o, "/status/replicas").into(),
        int_at(o, "/status/readyReplicas").into(),
        age(o),
        names,
        images,
        selector.into(),
    ]
}

fn daemon_set(o: &Value) -> Vec<Value> {
    let [names, images] = containers(o, "/spec/template/spec/containers");
    vec![
        name(o),
        int_at(o, "/status/desiredNumberScheduled").into(),
        int_at(o, "/status/currentNumberScheduled").into(),
        int_at(o, "/status/numberReady").into(),
        int_at(o, "/status/updatedNumberScheduled").into(),
        int_at(o, "/status/numberAvailable").into(),
        format_labels(at(o, "/spec/template/spec/nodeSelector")).into(),
        age(o),
        names,
        images,
        format_selector(at(o, "/spec/selector")).into(),
    ]
}

/// STATUS is the first of Complete, Failed, Terminating (being deleted), Suspended, FailureTarget
/// that holds, else Running; COMPLETIONS counts against `completions`, or against one (of
/// `parallelism` when above one); DURATION runs from `startTime` to `completionTime`, or to now.
fn job(o: &Value) -> Vec<Value> {
    let succeeded = int_at(o, "/status/succeeded");
    let completions = match at(o, "/spec/completions").and_then(Value::as_i64) {
        Some(n) => format!("{succeeded}/{n}"),
        None => match int_at(o, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (str_of(at(o, "/status/startTime")), str_of(at(o, "/status/completionTime"))) {
        (None, _) => String::new(),
        (Some(start), None) => age_secs(start).map(human_duration).unwrap_or_default(),
        (Some(start), Some(end)) => match (epoch(start), epoch(end)) {
            (Some(start), Some(end)) => human_duration(end - start),
            _ => String::new(),
        },
    };
    let holds = |ty: &str| {
        items(o, "/status/conditions")
            .iter()
            .find(|c| str_at(c, "/type") == ty)
            .is_some_and(|c| str_at(c, "/status") == "True")
    };
    let status = if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if deleting(o) {
        "Terminating"
    } else if holds("Suspended") {
        "Suspended"
    } else if holds("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let [names, images] = containers(o, "/spec/template/spec/containers");
    vec![
        name(o),
        status.into(),
        completions.into(),
        duration.into(),
        age(o),
        names,
        images,
        format_selector(at(o, "/spec/selector")).into(),
    ]
}

fn cron_job(o: &Value) -> Vec<Value> {
    let last = at(o, "/status/lastScheduleTime").map_or_else(|| "<none>".to_string(), |t| since(Some(t)));
    let suspend = match at(o, "/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let [names, images] = containers(o, "/spec/jobTemplate/spec/template/spec/containers");
    vec![
        name(o),
        str_at(o, "/spec/schedule").into(),
        str_of(at(o, "/spec/timeZone")).unwrap_or("<none>").into(),
        suspend.into(),
        (items(o, "/status/active").len() as i64).into(),
        last.into(),
        age(o),
        names,
        images,
        format_selector(at(o, "/spec/jobTemplate/spec/selector")).into(),
    ]
}

/// CLUSTER-IP is the first of `clusterIPs`; EXTERNAL-IP depends on the type: `externalIPs` (or
/// `<none>`) for ClusterIP and NodePort, the load balancer's addresses then `externalIPs` (or
/// `<pending>`) for LoadBalancer, `externalName` for ExternalName, `<unknown>` otherwise.
fn service(o: &Value) -> Vec<Value> {
    let ty = str_at(o, "/spec/type");
    let cluster_ip = items(o, "/spec/clusterIPs").first().map_or("<none>", |ip| ip.as_str().unwrap_or(""));
    let external_ips = strings(items(o, "/spec/externalIPs"));
    let external = match ty {
        "ClusterIP" | "NodePort" if external_ips.is_empty() => "<none>".to_string(),
        "ClusterIP" | "NodePort" => external_ips.join(","),
        "LoadBalancer" => {
            let balancer = load_balancer(items(o, "/status/loadBalancer/ingress"));
            if !external_ips.is_empty() {
                let mut all: Vec<&str> = if balancer.is_empty() { Vec::new() } else { balancer.split(',').collect() };
                all.extend(&external_ips);
                all.join(",")
            } else if !balancer.is_empty() {
                balancer
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_at(o, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = items(o, "/spec/ports")
        .iter()
        .map(|p| {
            let (port, node_port, protocol) = (int_at(p, "/port"), int_at(p, "/nodePort"), str_at(p, "/protocol"));
            if node_port > 0 {
                format!("{port}:{node_port}/{protocol}")
            } else {
                format!("{port}/{protocol}")
            }
        })
        .collect();
    let ports = if ports.is_empty() { "<none>".to_string() } else { ports.join(",") };
    vec![
        name(o),
        ty.into(),
        cluster_ip.into(),
        external.into(),
        ports.into(),
        age(o),
        format_labels(at(o, "/spec/selector")).into(),
    ]
}

fn ingress(o: &Value) -> Vec<Value> {
    let ports = if items(o, "/spec/tls").is_empty() { "80" } else { "80, 443" };
    vec![
        name(o),
        str_of(at(o, "/spec/ingressClassName")).unwrap_or("<none>").into(),
        ingress_hosts(items(o, "/spec/rules")).into(),
        load_balancer(items(o, "/status/loadBalancer/ingress")).into(),
        ports.into(),
        age(o),
    ]
}

/// kube's `formatHosts`: the first three rules' hosts (a rule without one counts but prints
/// nothing), then how many rules more; `*` when none has a host.
fn ingress_hosts(rules: &[Value]) -> String {
    let (mut hosts, mut more) = (Vec::new(), false);
    for rule in rules {
        if hosts.len() == MAX_LISTED {
            more = true;
        }
        let host = str_at(rule, "/host");
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return "*".into();
    }
    let listed = hosts.join(",");
    if more {
        format!("{listed} + {} more...", rules.len() - MAX_LISTED)
    } else {
        listed
    }
}

/// PARAMETERS is `Kind[.apiGroup]/name`.
fn ingress_class(o: &Value) -> Vec<Value> {
    let parameters = match at(o, "/spec/parameters") {
        None => "<none>".to_string(),
        Some(p) => match str_of(at(p, "/apiGroup")) {
            Some(group) => format!("{}.{group}/{}", str_at(p, "/kind"), str_at(p, "/name")),
            None => format!("{}/{}", str_at(p, "/kind"), str_at(p, "/name")),
        },
    };
    vec![name(o), str_at(o, "/spec/controller").into(), parameters.into(), age(o)]
}

fn stateful_set(o: &Value) -> Vec<Value> {
    let ready = format!("{}/{}", int_at(o, "/status/readyReplicas"), int_at(o, "/spec/replicas"));
    let [names, images] = containers(o, "/spec/template/spec/containers");
    vec![name(o), ready.into(), age(o), names, images]
}

fn endpoints(o: &Value) -> Vec<Value> {
    vec![name(o), format_endpoints(o).into(), age(o)]
}

/// kube's `formatEndpoints`: the first three `ip:port`s (each address at each port of each
/// subset; bare IPs for a subset without ports), then how many more; `<none>` without subsets.
fn format_endpoints(o: &Value) -> String {
    let subsets = items(o, "/subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    let (mut listed, mut more, mut count) = (Vec::new(), false, 0);
    for subset in subsets {
        let addresses = items(subset, "/addresses");
        let ports = items(subset, "/ports");
        if ports.is_empty() {
            count += addresses.len();
            for address in addresses {
                if listed.len() == MAX_LISTED {
                    more = true;
                    break;
                }
                listed.push(str_at(address, "/ip").to_string());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for address in addresses {
                if listed.len() == MAX_LISTED {
                    more = true;
                    break;
                }
                listed.push(host_port(str_at(address, "/ip"), int_at(port, "/port")));
            }
        }
    }
    let joined = listed.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX_LISTED)
    } else {
        joined
    }
}

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
fn host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// STATUS is Ready, NotReady or Unknown by the Ready condition, plus SchedulingDisabled when
/// cordoned; ROLES come from `node-role.kubernetes.io/<role>` label keys and the
/// `kubernetes.io/role` label's value.
fn node(o: &Value) -> Vec<Value> {
    let ready = items(o, "/status/conditions").iter().rev().find(|c| str_at(c, "/type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, "/status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if bool_at(o, "/spec/unschedulable") {
        status.push("SchedulingDisabled");
    }
    let mut roles = BTreeSet::new();
    for (key, value) in at(o, "/metadata/labels").and_then(Value::as_object).into_iter().flatten() {
        if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role);
            }
        } else if key == "kubernetes.io/role" {
            if let Some(role) = value.as_str().filter(|r| !r.is_empty()) {
                roles.insert(role);
            }
        }
    }
    let roles = if roles.is_empty() { "<none>".to_string() } else { roles.into_iter().collect::<Vec<_>>().join(",") };
    vec![
        name(o),
        status.join(",").into(),
        roles.into(),
        age(o),
        str_at(o, "/status/nodeInfo/kubeletVersion").into(),
        node_address(o, "InternalIP").into(),
        node_address(o, "ExternalIP").into(),
        or_unknown(str_at(o, "/status/nodeInfo/osImage")).into(),
        or_unknown(str_at(o, "/status/nodeInfo/kernelVersion")).into(),
        or_unknown(str_at(o, "/status/nodeInfo/containerRuntimeVersion")).into(),
    ]
}

/// A node's first address of type `ty`, or `<none>`.
fn node_address<'a>(o: &'a Value, ty: &str) -> &'a str {
    items(o, "/status/addresses").iter().find(|a| str_at(a, "/type") == ty).map_or("<none>", |a| str_at(a, "/address"))
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "<unknown>"
    } else {
        s
    }
}

/// Where an Event form keeps the fields the printer reads.
struct EventFields {
    object: &'static str,
    message: &'static str,
    source: &'static str,
    first: &'static str,
    last: &'static str,
    count: &'static str,
    reporting_controller: &'static str,
}

fn core_event(o: &Value) -> Vec<Value> {
    event(
        o,
        &EventFields {
            object: "/involvedObject",
            message: "/message",
            source: "/source",
            first: "/firstTimestamp",
            last: "/lastTimestamp",
            count: "/count",
            reporting_controller: "/reportingComponent",
        },
    )
}

fn events_event(o: &Value) -> Vec<Value> {
    event(
        o,
        &EventFields {
            object: "/regarding",
            message: "/note",
            source: "/deprecatedSource",
            first: "/deprecatedFirstTimestamp",
            last: "/deprecatedLastTimestamp",
            count: "/deprecatedCount",
            reporting_controller: "/reportingController",
        },
    )
}

/// FIRST SEEN falls back to `eventTime`, LAST SEEN to FIRST SEEN; a series gives LAST SEEN and
/// COUNT; a count of 0 outside a series is 1. OBJECT is `kind/name` in lower case; SOURCE is the
/// source's component and host, each falling back to the reporting controller and instance.
fn event(o: &Value, f: &EventFields) -> Vec<Value> {
    let first = match at(o, f.first) {
        Some(t) => since(Some(t)),
        None => since(at(o, "/eventTime")),
    };
    let mut last = match at(o, f.last) {
        Some(t) => since(Some(t)),
        None => first.clone(),
    };
    let mut count = int_at(o, f.count);
    if let Some(series) = at(o, "/series") {
        last = since(at(series, "/lastObservedTime"));
        count = int_at(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let object = at(o, f.object).unwrap_or(&Value::Null);
    let kind = str_at(object, "/kind").to_lowercase();
    let target = match str_at(object, "/name") {
        "" => kind,
        object_name => format!("{kind}/{object_name}"),
    };
    let component = match str_at(o, &format!("{}/component", f.source)) {
        "" => str_at(o, f.reporting_controller),
        component => component,
    };
    let instance = match str_at(o, &format!("{}/host", f.source)) {
        "" => str_at(o, "/reportingInstance"),
        host => host,
    };
    let source = if instance.is_empty() { component.to_string() } else { format!("{component}, {instance}") };
    vec![
        last.into(),
        str_at(o, "/type").into(),
        str_at(o, "/reason").into(),
        target.into(),
        str_at(object, "/fieldPath").into(),
        source.into(),
        str_at(o, f.message).trim().into(),
        first.into(),
        count.into(),
        name(o),
    ]
}

/// CLAIM is the claim's `namespace/name`; STATUS is Terminating once deletion began.
fn persistent_volume(o: &Value) -> Vec<Value> {
    let claim = at(o, "/spec/claimRef")
        .map_or(String::new(), |c| format!("{}/{}", str_at(c, "/namespace"), str_at(c, "/name")));
    let phase = if deleting(o) { "Terminating" } else { str_at(o, "/status/phase") };
    let class = annotation(o, BETA_STORAGE_CLASS).unwrap_or(str_at(o, "/spec/storageClassName"));
    vec![
        name(o),
        quantity_at(at(o, "/spec/capacity/storage")).into(),
        access_modes(items(o, "/spec/accessModes")).into(),
        str_at(o, "/spec/persistentVolumeReclaimPolicy").into(),
        phase.into(),
        claim.into(),
        class.into(),
        or_unset(at(o, "/spec/volumeAttributesClassName")).into(),
        str_at(o, "/status/reason").into(),
        age(o),
        or_unset(at(o, "/spec/volumeMode")).into(),
    ]
}

/// CAPACITY and ACCESS MODES are the bound volume's (empty until bound).
fn persistent_volume_claim(o: &Value) -> Vec<Value> {
    let phase = if deleting(o) { "Terminating" } else { str_at(o, "/status/phase") };
    let volume = str_at(o, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (quantity_at(at(o, "/status/capacity/storage")), access_modes(items(o, "/status/accessModes")))
    };
    let class = annotation(o, BETA_STORAGE_CLASS).unwrap_or(str_at(o, "/spec/storageClassName"));
    vec![
        name(o),
        phase.into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        class.into(),
        or_unset(at(o, "/spec/volumeAttributesClassName")).into(),
        age(o),
        or_unset(at(o, "/spec/volumeMode")).into(),
    ]
}

/// The annotation that, when present, names a volume's or claim's class instead of the spec.
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// kube's `GetAccessModesAsString`: RWO, ROX, RWX, RWOP, in that order, each at most once.
fn access_modes(modes: &[Value]) -> String {
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(mode, _)| modes.iter().any(|m| m.as_str() == Some(mode)))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

fn or_unset(v: Option<&Value>) -> &str {
    str_of(v).unwrap_or("<unset>")
}

/// READY is `readyReplicas/replicas`; SELECTOR is empty for no selector, `<invalid>` for one kube
/// cannot read.
fn deployment(o: &Value) -> Vec<Value> {
    let ready = format!("{}/{}", int_at(o, "/status/readyReplicas"), int_at(o, "/spec/replicas"));
    let [names, images] = containers(o, "/spec/template/spec/containers");
    vec![
        name(o),
        ready.into(),
        int_at(o, "/status/updatedReplicas").into(),
        int_at(o, "/status/availableReplicas").into(),
        age(o),
        names,
        images,
        selector(at(o, "/spec/selector")).unwrap_or_else(|| "<invalid>".into()).into(),
    ]
}

fn network_policy(o: &Value) -> Vec<Value> {
    vec![name(o), format_selector(at(o, "/spec/podSelector")).into(), age(o)]
}

/// ROLE is `Kind/name`; users, groups and service accounts (`namespace/name`) are joined with ", ".
fn role_binding(o: &Value) -> Vec<Value> {
    let role = format!("{}/{}", str_at(o, "/roleRef/kind"), str_at(o, "/roleRef/name"));
    let (mut users, mut groups, mut service_accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in items(o, "/subjects") {
        let subject_name = str_at(subject, "/name");
        match str_at(subject, "/kind") {
            "User" => users.push(subject_name.to_string()),
            "Group" => groups.push(subject_name.to_string()),
            "ServiceAccount" => service_accounts.push(format!("{}/{subject_name}", str_at(subject, "/namespace"))),
            _ => {}
        }
    }
    vec![
        name(o),
        role.into(),
        age(o),
        users.join(", ").into(),
        groups.join(", ").into(),
        service_accounts.join(", ").into(),
    ]
}

fn lease(o: &Value) -> Vec<Value> {
    vec![name(o), str_at(o, "/spec/holderIdentity").into(), age(o)]
}

/// NAME gains ` (default)` for the class annotated default; RECLAIMPOLICY defaults to Delete and
/// VOLUMEBINDINGMODE to Immediate.
fn storage_class(o: &Value) -> Vec<Value> {
    let default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|key| annotation(o, key) == Some("true"));
    let class = str_at(o, "/metadata/name");
    let class = if default { format!("{class} (default)") } else { class.to_string() };
    vec![
        class.into(),
        str_at(o, "/provisioner").into(),
        str_of(at(o, "/reclaimPolicy")).unwrap_or("Delete").into(),
        str_of(at(o, "/volumeBindingMode")).unwrap_or("Immediate").into(),
        bool_at(o, "/allowVolumeExpansion").into(),
        age(o),
    ]
}

/// CONTROLLER is the controlling owner as `kind.group/name` in lower case (`kind/name` for the
/// core group).
fn controller_revision(o: &Value) -> Vec<Value> {
    let owner = items(o, "/metadata/ownerReferences").iter().find(|r| bool_at(r, "/controller"));
    let controller = match owner {
        None => "<none>".to_string(),
        Some(r) => {
            // kube's ParseGroupVersion; an apiVersion with more slashes cannot pass validation.
            let group = str_at(r, "/apiVersion").split_once('/').map_or("", |(group, _)| group);
            let (kind, owner_name) = (str_at(r, "/kind"), str_at(r, "/name"));
            match (group, kind) {
                ("", "") => owner_name.to_string(),
                ("", kind) => format!("{}/{owner_name}", kind.to_lowercase()),
                (group, kind) => format!("{}/{owner_name}", format!("{kind}.{group}").to_lowercase()),
            }
        }
    };
    vec![name(o), controller.into(), int_at(o, "/revision").into(), age(o)]
}

/// REQUEST and LIMIT list `resource: used/hard` for every hard limit, sorted by resource, those
/// named `limits.*` under LIMIT.
fn resource_quota(o: &Value) -> Vec<Value> {
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    if let Some(hard) = at(o, "/status/hard").and_then(Value::as_object) {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort();
        let used = at(o, "/status/used");
        for resource in resources {
            let line = format!(
                "{resource}: {}/{}",
                quantity_at(used.and_then(|u| u.get(resource.as_str())).filter(|v| !v.is_null())),
                quantity_at(hard.get(resource.as_str()).filter(|v| !v.is_null())),
            );
            match resource.split_once('.') {
                Some(("limits", _)) => limits.push(line),
                _ => requests.push(line),
            }
        }
    }
    vec![name(o), requests.join(", ").into(), limits.join(", ").into(), age(o)]
}

fn priority_class(o: &Value) -> Vec<Value> {
    vec![
        name(o),
        int_at(o, "/value").into(),
        bool_at(o, "/globalDefault").into(),
        age(o),
        str_at(o, "/preemptionPolicy").into(),
    ]
}

fn endpoint_slice(o: &Value) -> Vec<Value> {
    vec![
        name(o),
        str_at(o, "/addressType").into(),
        slice_ports(items(o, "/ports")).into(),
        slice_endpoints(items(o, "/endpoints")).into(),
        age(o),
    ]
}

/// kube's `formatDiscoveryPorts`: the first three ports (number, else name, else `*`), then how
/// many more.
fn slice_ports(ports: &[Value]) -> String {
    let listed =
        ports.iter().take(MAX_LISTED).map(|p| match (at(p, "/port").and_then(Value::as_i64), str_of(at(p, "/name"))) {
            (Some(port), _) => port.to_string(),
            (None, Some(port_name)) => port_name.to_string(),
            (None, None) => "*".to_string(),
        });
    with_more(listed.collect(), ports.len())
}

/// kube's `formatDiscoveryEndpoints`: the first three addresses of all endpoints, then how many
/// more.
fn slice_endpoints(endpoints: &[Value]) -> String {
    let addresses: Vec<&Value> = endpoints.iter().flat_map(|e| items(e, "/addresses")).collect();
    let listed = addresses.iter().take(MAX_LISTED).map(|a| a.as_str().unwrap_or("").to_string());
    with_more(listed.collect(), addresses.len())
}

/// kube's `listWithMoreString`: `listed` joined with commas, `+ N more...` for those past the
/// first three of `count`, `<unset>` for none.
fn with_more(listed: Vec<String>, count: usize) -> String {
    let joined = listed.join(",");
    if count > MAX_LISTED {
        format!("{joined} + {} more...", count - MAX_LISTED)
    } else if joined.is_empty() {
        "<unset>".into()
    } else {
        joined
    }
}

/// How many entries kube lists in a cell before `+ N more...`.
const MAX_LISTED: usize = 3;

// ---- Reading the object ----

/// The value at JSON pointer `path`; null counts as missing.
fn at<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    o.pointer(path).filter(|v| !v.is_null())
}

fn str_of(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

/// The string at `path`, or Go's zero value "".
fn str_at<'a>(o: &'a Value, path: &str) -> &'a str {
    str_of(at(o, path)).unwrap_or("")
}

fn int_at(o: &Value, path: &str) -> i64 {
    at(o, path).and_then(Value::as_i64).unwrap_or(0)
}

fn bool_at(o: &Value, path: &str) -> bool {
    at(o, path).and_then(Value::as_bool).unwrap_or(false)
}

fn items<'a>(o: &'a Value, path: &str) -> &'a [Value] {
    at(o, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn strings(values: &[Value]) -> Vec<&str> {
    values.iter().map(|v| v.as_str().unwrap_or("")).collect()
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    at(o, "/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

fn name(o: &Value) -> Value {
    str_at(o, "/metadata/name").into()
}

fn age(o: &Value) -> Value {
    since(at(o, "/metadata/creationTimestamp")).into()
}

fn deleting(o: &Value) -> bool {
    at(o, "/metadata/deletionTimestamp").is_some()
}

/// kube's `translateTimestampSince`: how long ago `t` was, `<unknown>` for no (readable) time.
fn since(t: Option<&Value>) -> String {
    str_of(t).and_then(age_secs).map_or_else(|| "<unknown>".to_string(), human_duration)
}

/// Seconds since the Unix epoch of an RFC 3339 time.
fn epoch(t: &str) -> Option<i64> {
    t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// kube's `layoutContainerCells`: the containers' names and their images, each joined with commas.
fn containers(o: &Value, path: &str) -> [Value; 2] {
    let list = items(o, path);
    let names: Vec<&str> = list.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = list.iter().map(|c| str_at(c, "/image")).collect();
    [names.join(",").into(), images.join(",").into()]
}

/// kube's `loadBalancerStatusStringer` (wide, so never clipped): each ingress point's IP, else its
/// hostname, sorted and without repeats.
fn load_balancer(ingress: &[Value]) -> String {
    let points: BTreeSet<&str> = ingress
        .iter()
        .filter_map(|i| [str_at(i, "/ip"), str_at(i, "/hostname")].into_iter().find(|s| !s.is_empty()))
        .collect();
    points.into_iter().collect::<Vec<_>>().join(",")
}

/// An IntOrString as Go prints it; `N/A` when unset.
fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "N/A".into(),
    }
}

// ---- Labels and selectors ----

/// kube's `labels.FormatLabels`: `key=value` pairs sorted by key, or `<none>`.
fn format_labels(labels: Option<&Value>) -> String {
    let Some(labels) = labels.and_then(Value::as_object).filter(|l| !l.is_empty()) else {
        return "<none>".into();
    };
    let mut pairs: Vec<(&String, &str)> = labels.iter().map(|(k, v)| (k, v.as_str().unwrap_or(""))).collect();
    pairs.sort_by_key(|(k, _)| *k);
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// kube's `metav1.FormatLabelSelector`: the selector's requirements, `<none>` if it has none,
/// `<error>` if kube cannot read it.
fn format_selector(selector_json: Option<&Value>) -> String {
    match selector(selector_json) {
        None => "<error>".into(),
        Some(s) if s.is_empty() => "<none>".into(),
        Some(s) => s,
    }
}

/// kube's `LabelSelectorAsSelector(..).String()`: requirements sorted by key (`k=v`,
/// `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, values sorted), empty for no selector or an empty
/// one; `None` where kube refuses the selector (unknown operator, wrong number of values,
/// invalid key or value).
pub(crate) fn selector(selector_json: Option<&Value>) -> Option<String> {
    let Some(s) = selector_json else { return Some(String::new()) };
    let mut requirements: Vec<(&str, String)> = Vec::new();
    for (key, value) in s.get("matchLabels").and_then(Value::as_object).into_iter().flatten() {
        let value = value.as_str()?;
        if !qualified_name(key) || !label_value(value) {
            return None;
        }
        requirements.push((key, format!("{key}={value}")));
    }
    for expression in items(s, "/matchExpressions") {
        let key = str_at(expression, "/key");
        let mut values = items(expression, "/values").iter().map(Value::as_str).collect::<Option<Vec<_>>>()?;
        let operator = str_at(expression, "/operator");
        let counted = match operator {
            "In" | "NotIn" => !values.is_empty(),
            "Exists" | "DoesNotExist" => values.is_empty(),
            _ => false,
        };
        if !counted || !qualified_name(key) || !values.iter().all(|v| label_value(v)) {
            return None;
        }
        values.sort_unstable();
        let values = values.join(",");
        requirements.push((
            key,
            match operator {
                "In" => format!("{key} in ({values})"),
                "NotIn" => format!("{key} notin ({values})"),
                "Exists" => key.to_string(),
                _ => format!("!{key}"),
            },
        ));
    }
    requirements.sort_by_key(|(key, _)| *key);
    Some(requirements.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(","))
}

/// A label key kube accepts (`IsQualifiedName`).
fn qualified_name(key: &str) -> bool {
    crate::validation::qualified_name_problems(key).is_empty()
}

/// A label value kube accepts (`IsValidLabelValue`).
fn label_value(s: &str) -> bool {
    crate::validation::label_value_problems(s).is_empty()
}

// ---- Quantities ----

/// A quantity cell as kube prints it; "0" when absent.
fn quantity_at(v: Option<&Value>) -> String {
    let text = match v {
        None => return "0".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    quantity(&text).unwrap_or(text)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuantityFormat {
    /// Ki, Mi, Gi, ...
    BinarySi,
    /// n, u, m, k, M, G, ...
    DecimalSi,
    /// e3, E-6, ...
    DecimalExponent,
}

/// How kube prints a resource quantity after parsing it (`resource.ParseQuantity` then
/// `Quantity.String()`): the text itself where kube keeps it (it is then canonical), else the
/// canonical form: the value rounded up to nanounits, in its suffix family, with the largest
/// exponent that keeps an integer mantissa (`1.5Gi` is `1536Mi`, `2000` is `2k`, `0.1` is `100m`).
/// `None` if kube would not parse it, or for values past what this arithmetic holds.
pub(crate) fn quantity(text: &str) -> Option<String> {
    use QuantityFormat::*;
    let s = text.trim();
    if s == "0" {
        return Some(s.into());
    }
    let b = s.as_bytes();
    let negative = b.first() == Some(&b'-');
    let mut pos = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    while b.get(pos) == Some(&b'0') {
        pos += 1;
    }
    if pos == b.len() {
        return if s.is_empty() { None } else { Some("0".into()) };
    }
    let digits_from = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let end = digits_from(pos);
    let num = if end == pos { "0" } else { &s[pos..end] };
    pos = end;
    let mut denom = "";
    if b.get(pos) == Some(&b'.') {
        let end = digits_from(pos + 1);
        denom = &s[pos + 1..end];
        pos = end;
    }
    let suffix = &s[pos..];
    let letters = suffix.bytes().take_while(|c| b"eEinumkKMGTP".contains(c)).count();
    let exponent_digits = suffix[letters..].strip_prefix(['+', '-']).unwrap_or(&suffix[letters..]);
    if !exponent_digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (format, exponent): (QuantityFormat, i32) = match suffix {
        "Ki" => (BinarySi, 10),
        "Mi" => (BinarySi, 20),
        "Gi" => (BinarySi, 30),
        "Ti" => (BinarySi, 40),
        "Pi" => (BinarySi, 50),
        "Ei" => (BinarySi, 60),
        "n" => (DecimalSi, -9),
        "u" => (DecimalSi, -6),
        "m" => (DecimalSi, -3),
        "" => (DecimalSi, 0),
        "k" => (DecimalSi, 3),
        "M" => (DecimalSi, 6),
        "G" => (DecimalSi, 9),
        "T" => (DecimalSi, 12),
        "P" => (DecimalSi, 15),
        "E" => (DecimalSi, 18),
        _ if suffix.len() > 1 && suffix.starts_with(['e', 'E']) => {
            let e: i32 = suffix[1..].parse().ok()?;
            (DecimalExponent, e)
        }
        _ => return None,
    };
    if !(-100..=100).contains(&exponent) {
        return None;
    }
    let shifted = format!("{num}{denom}");

    // kube's fast path keeps the text when it is already canonical.
    let fractional = denom.len() as i32;
    let precision = match format {
        BinarySi if denom.is_empty() => 15 - num.len() as i32 - exponent * 3 / 10 - 1,
        BinarySi => -1,
        _ => 18 - num.len() as i32 - fractional,
    };
    let scale = if format == BinarySi { 0 } else { exponent } - fractional;
    if precision >= 0 && scale >= -9 {
        let value: i64 = shifted.parse().ok()?;
        let mantissa: i64 = if format == BinarySi { 1 << exponent } else { 1 };
        if value.checked_mul(mantissa).is_some() {
            let kept = match format {
                BinarySi => exponent % 10 == 0 && value & 7 != 0,
                _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
            };
            if kept {
                return Some(s.into());
            }
        }
    }

    // The value as unscaled * 10^scale, rounded away from zero to nanounits.
    let mut unscaled: i128 = shifted.parse().ok()?;
    let mut scale = -fractional;
    if format == BinarySi {
        unscaled = unscaled.checked_mul(1i128 << exponent)?;
    } else {
        scale += exponent;
    }
    if negative {
        unscaled = -unscaled;
    }
    if unscaled != 0 && scale < -9 {
        let divisor = 10i128.checked_pow((-9 - scale) as u32)?;
        let rounded = unscaled / divisor;
        unscaled = if unscaled % divisor == 0 { rounded } else { rounded + unscaled.signum() };
        scale = -9;
    }
    if format == BinarySi {
        // kube caps binary quantities at the largest int64.
        let limit = i128::from(i64::MAX).checked_mul(10i128.checked_pow(u32::try_from(-scale).ok()?)?)?;
        if unscaled.abs() > limit {
            unscaled = limit * unscaled.signum();
        }
    }
    canonical(unscaled, scale, format)
}

/// kube's `Quantity.CanonicalizeBytes` for `unscaled * 10^scale`.
fn canonical(unscaled: i128, scale: i32, format: QuantityFormat) -> Option<String> {
    if unscaled == 0 {
        return Some("0".into());
    }
    let mut format = format;
    if format == QuantityFormat::BinarySi {
        // Binary suffixes only for whole values of at least 1024 in magnitude.
        let divisor = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        match (unscaled % divisor == 0).then_some(unscaled / divisor) {
            Some(mut whole) if whole.abs() >= 1024 => {
                let mut power = 0;
                while whole.abs() >= 1024 && whole % 1024 == 0 {
                    whole /= 1024;
                    power += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(power).copied().unwrap_or("");
                return Some(format!("{whole}{suffix}"));
            }
            _ => format = QuantityFormat::DecimalSi,
        }
    }
    let (mut mantissa, mut exponent) = (unscaled, scale);
    while mantissa.abs() >= 10 && mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    while exponent % 3 != 0 {
        mantissa = mantissa.checked_mul(10)?;
        exponent -= 1;
    }
    let suffix = match (format, exponent) {
        (QuantityFormat::DecimalExponent, 0) => String::new(),
        (QuantityFormat::DecimalExponent, e) => format!("e{e}"),
        (_, -9) => "n".into(),
        (_, -6) => "u".into(),
        (_, -3) => "m".into(),
        (_, 3) => "k".into(),
        (_, 6) => "M".into(),
        (_, 9) => "G".into(),
        (_, 12) => "T".into(),
        (_, 15) => "P".into(),
        (_, 18) => "E".into(),
        _ => String::new(),
    };
    Some(format!("{mantissa}{suffix}"))
}

/// kube's SwaggerDoc strings for the fields its columns describe (`k8s.io/api` v0.33,
/// `types_swagger_doc_generated.go` of core/v1, extensions/v1beta1, batch/v1, batch/v1beta1,
/// rbac/v1beta1, coordination/v1, storage/v1, apps/v1beta1, scheduling/v1, discovery/v1beta1).
mod doc {
    pub const RC_SPEC_REPLICAS: &str = "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller";
    pub const RC_SELECTOR: &str = "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const RC_STATUS_REPLICAS: &str = "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller";
    pub const RC_READY: &str = "The number of ready replicas for this replication controller.";
    pub const POD_NODE_SELECTOR: &str = "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/";
    pub const SVC_TYPE: &str = "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types";
    pub const SVC_CLUSTER_IP: &str = "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SVC_EXTERNAL_IPS: &str = "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.";
    pub const SVC_PORTS: &str = "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SVC_SELECTOR: &str = "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/";
    pub const ENDPOINTS_SUBSETS: &str = "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.";
    pub const NODE_KUBELET: &str = "Kubelet Version reported by the node.";
    pub const NODE_OS_IMAGE: &str =
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).";
    pub const NODE_KERNEL: &str = "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).";
    pub const NODE_RUNTIME: &str =
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";
    pub const NODE_ADDRESSES: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";
    pub const EVENT_LAST: &str = "The time at which the most recent occurrence of this event was recorded.";
    pub const EVENT_TYPE: &str = "Type of this event (Normal, Warning), new types could be added in the future";
    pub const EVENT_REASON: &str = "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.";
    pub const EVENT_OBJECT: &str = "The object that this event is about.";
    pub const EVENT_SUBOBJECT: &str = "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.";
    pub const EVENT_SOURCE: &str =
        "The component reporting this event. Should be a short machine understandable string.";
    pub const EVENT_MESSAGE: &str = "A human-readable description of the status of this operation.";
    pub const EVENT_FIRST: &str =
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)";
    pub const EVENT_COUNT: &str = "The number of times this event has occurred.";
    pub const PV_CAPACITY: &str = "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity";
    pub const PV_ACCESS_MODES: &str = "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes";
    pub const PV_RECLAIM: &str = "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming";
    pub const PV_PHASE: &str = "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase";
    pub const PV_CLAIM: &str = "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding";
    pub const PV_REASON: &str = "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.";
    pub const PV_VOLUME_MODE: &str = "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec.";
    pub const PVC_PHASE: &str = "phase represents the current phase of PersistentVolumeClaim.";
    pub const PVC_VOLUME: &str = "volumeName is the binding reference to the PersistentVolume backing this claim.";
    pub const PVC_CAPACITY: &str = "capacity represents the actual resources of the underlying volume.";
    pub const PVC_ACCESS_MODES: &str = "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1";
    pub const PVC_VOLUME_MODE: &str = "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.";
    pub const RS_SPEC_REPLICAS: &str = "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset";
    pub const RS_STATUS_REPLICAS: &str = "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset";
    pub const RS_READY: &str = "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.";
    pub const RS_SELECTOR: &str = "Selector is a label query over pods that should match the replica count. If the selector is empty, it is defaulted to the labels present on the pod template. Label keys and values that must match in order to be controlled by this replica set. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const DS_DESIRED: &str = "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DS_CURRENT: &str = "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DS_READY: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.";
    pub const DS_UPDATED: &str = "The total number of nodes that are running updated daemon pod";
    pub const DS_AVAILABLE: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)";
    pub const DS_SELECTOR: &str = "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const DEPLOY_UPDATED: &str =
        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.";
    pub const DEPLOY_AVAILABLE: &str = "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.";
    pub const DEPLOY_SELECTOR: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";
    pub const NETPOL_POD_SELECTOR: &str = "Selects the pods to which this NetworkPolicy object applies.  The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods.  In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.";
    pub const JOB_SUCCEEDED: &str = "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.";
    pub const JOB_SELECTOR: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const CRONJOB_SCHEDULE: &str = "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.";
    pub const CRONJOB_TIMEZONE: &str = "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones";
    pub const CRONJOB_SUSPEND: &str = "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.";
    pub const CRONJOB_ACTIVE: &str = "A list of pointers to currently running jobs.";
    pub const CRONJOB_LAST_SCHEDULE: &str = "Information when was the last time the job was successfully scheduled.";
    pub const ROLEBINDING_ROLE: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
    pub const CLUSTERROLEBINDING_ROLE: &str = "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
    pub const LEASE_HOLDER: &str = "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.";
    pub const SC_PROVISIONER: &str = "provisioner indicates the type of the provisioner.";
    pub const SC_RECLAIM: &str = "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.";
    pub const SC_BINDING_MODE: &str = "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.";
    pub const SC_EXPANSION: &str = "allowVolumeExpansion shows whether the storage class allow volume expand.";
    pub const REVISION: &str = "revision indicates the revision of the state represented by Data.";
    pub const PC_VALUE: &str = "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.";
    pub const PC_GLOBAL_DEFAULT: &str = "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.";
    pub const PC_PREEMPTION: &str = "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.";
    pub const SLICE_ADDRESS_TYPE: &str = "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.";
    pub const SLICE_PORTS: &str = "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.";
    pub const SLICE_ENDPOINTS: &str =
        "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.";
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use serde_json::json;

    use super::*;

    const H: i64 = 3600;
    const D: i64 = 24 * H;

    /// An RFC 3339 time `secs` ago (ages are picked so a second's drift prints the same).
    fn ago(secs: i64) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        k8s_openapi::jiff::Timestamp::from_second(now - secs).unwrap().to_string()
    }

    fn row(group: &str, kind: &str, object: Value) -> Vec<Value> {
        let p = printer(group, kind).unwrap_or_else(|| panic!("no printer for {group}/{kind}"));
        let cells = (p.cells)(&object);
        assert_eq!(cells.len(), p.columns.len(), "{group}/{kind}: one cell per column");
        cells
    }

    const KINDS: &[(&str, &str)] = &[
        ("", "Node"),
        ("", "Service"),
        ("", "Endpoints"),
        ("", "Event"),
        ("", "ReplicationController"),
        ("", "ResourceQuota"),
        ("", "PersistentVolume"),
        ("", "PersistentVolumeClaim"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ControllerRevision"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("coordination.k8s.io", "Lease"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("events.k8s.io", "Event"),
        ("policy", "PodDisruptionBudget"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "StorageClass"),
    ];

    #[test]
    fn every_printer_has_a_cell_per_column_even_for_an_empty_object() {
        for (group, kind) in KINDS {
            let p = printer(group, kind).unwrap_or_else(|| panic!("no printer for {group}/{kind}"));
            for object in [json!({}), json!(null), json!({"metadata": null, "spec": 3, "status": "x"})] {
                assert_eq!((p.cells)(&object).len(), p.columns.len(), "{group}/{kind} on {object}");
            }
            assert!(p.columns.iter().any(|c| c.name == "Name" && c.format == "name"), "{group}/{kind}");
        }
    }

    #[test]
    fn kinds_kube_does_not_print_get_the_default_table() {
        assert!(printer("", "LimitRange").is_none());
        assert!(printer("rbac.authorization.k8s.io", "Role").is_none());
        assert!(printer("rbac.authorization.k8s.io", "ClusterRole").is_none());
        assert!(printer("apps", "Node").is_none());
    }

    #[test]
    fn columns_are_kubes() {
        let names = |group, kind| -> Vec<(&str, &str, i32)> {
            printer(group, kind).unwrap().columns.iter().map(|c| (c.name, c.ty, c.priority)).collect()
        };
        assert_eq!(
            names("apps", "Deployment"),
            [
                ("Name", "string", 0),
                ("Ready", "string", 0),
                ("Up-to-date", "string", 0),
                ("Available", "string", 0),
                ("Age", "string", 0),
                ("Containers", "string", 1),
                ("Images", "string", 1),
                ("Selector", "string", 1),
            ]
        );
        assert_eq!(
            names("", "Event"),
            [
                ("Last Seen", "string", 0),
                ("Type", "string", 0),
                ("Reason", "string", 0),
                ("Object", "string", 0),
                ("Subobject", "string", 1),
                ("Source", "string", 1),
                ("Message", "string", 0),
                ("First Seen", "string", 1),
                ("Count", "string", 1),
                ("Name", "string", 1),
            ]
        );
        assert_eq!(
            names("batch", "CronJob")[..6],
            [
                ("Name", "string", 0),
                ("Schedule", "string", 0),
                ("Timezone", "string", 0),
                ("Suspend", "boolean", 0),
                ("Active", "integer", 0),
                ("Last Schedule", "string", 0),
            ]
        );
        let deployment = printer("apps", "Deployment").unwrap();
        assert_eq!(deployment.columns[0].description, NAME_DOC);
        assert_eq!(deployment.columns[4].description, AGE_DOC);
        assert!(deployment.columns[2].description.starts_with(
            "Total number of non-terminating pods targeted by this deployment that have the desired template spec"
        ));
        assert_eq!(printer("", "Service").unwrap().columns[3].description, doc::SVC_EXTERNAL_IPS);
        assert!(doc::LEASE_HOLDER.starts_with("holderIdentity contains the identity of the holder of a current lease."));
    }

    #[test]
    fn nodes_print_status_roles_and_addresses() {
        let node = json!({
            "metadata": {"name": "node-1", "creationTimestamp": ago(3 * H), "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/etcd": "true",
                "node-role.kubernetes.io/": "ignored",
                "kubernetes.io/role": "worker",
                "kubernetes.io/hostname": "node-1",
            }},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}],
                "addresses": [{"type": "Hostname", "address": "node-1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Ubuntu 24.04 LTS", "containerRuntimeVersion": "containerd://2.0.5"},
            },
        });
        assert_eq!(
            row("", "Node", node),
            json!([
                "node-1",
                "NotReady,SchedulingDisabled",
                "control-plane,etcd,worker",
                "3h",
                "v1.33.1",
                "10.0.0.5",
                "<none>",
                "Ubuntu 24.04 LTS",
                "<unknown>",
                "containerd://2.0.5"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        // kube's TestPrintNodeStatus.
        let status = |node: Value| row("", "Node", node)[1].clone();
        assert_eq!(status(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})), "Ready");
        assert_eq!(
            status(
                json!({"spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
            ),
            "Ready,SchedulingDisabled"
        );
        assert_eq!(
            status(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "True"}]}})
            ),
            "Ready"
        );
        assert_eq!(status(json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})), "NotReady");
        assert_eq!(status(json!({"status": {}})), "Unknown");
        assert_eq!(status(json!({"spec": {"unschedulable": true}})), "Unknown,SchedulingDisabled");
        let minimal = row("", "Node", json!({"metadata": {"name": "foo1"}}));
        assert_eq!(minimal[2], "<none>");
        assert_eq!(minimal[3], "<unknown>");
        assert_eq!(minimal[4], "");
        assert_eq!(minimal[5], "<none>");
    }

    #[test]
    fn services_print_ips_and_ports_by_type() {
        // kube's TestPrintServiceLoadBalancer, wide.
        let lb = json!({
            "metadata": {"name": "service4", "creationTimestamp": ago(2 * D)},
            "spec": {"type": "LoadBalancer", "clusterIPs": ["1.5.6.7"], "selector": {"foo": "bar"}, "ports": [
                {"port": 80, "protocol": "TCP"}, {"port": 8090, "protocol": "UDP"}, {"port": 8000, "protocol": "TCP"}
            ]},
            "status": {"loadBalancer": {"ingress": [{"ip": "2.3.4.5"}, {"ip": "3.4.5.6"}, {"ip": "5.6.7.8", "hostname": "host5678"}]}},
        });
        assert_eq!(
            row("", "Service", lb),
            [
                json!("service4"),
                json!("LoadBalancer"),
                json!("1.5.6.7"),
                json!("2.3.4.5,3.4.5.6,5.6.7.8"),
                json!("80/TCP,8090/UDP,8000/TCP"),
                json!("2d"),
                json!("foo=bar")
            ]
        );
        let pending = json!({"spec": {"type": "LoadBalancer", "clusterIPs": ["1.3.4.5"], "ports": [
            {"port": 80, "protocol": "TCP"}, {"port": 7777, "protocol": "SCTP"}
        ]}});
        assert_eq!(
            row("", "Service", pending)[2..5],
            [json!("1.3.4.5"), json!("<pending>"), json!("80/TCP,7777/SCTP")]
        );
        let lb_and_external = json!({"spec": {"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "2.3.4.5"}]}}});
        assert_eq!(row("", "Service", lb_and_external)[3], "2.3.4.5,lb.example.com,9.9.9.9");
        let node_port = json!({
            "metadata": {"name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00::20"],
                "selector": {"tier": "frontend", "app": "web"},
                "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]},
        });
        assert_eq!(
            row("", "Service", node_port),
            [
                json!("web"),
                json!("NodePort"),
                json!("10.96.0.20"),
                json!("<none>"),
                json!("80:30080/TCP,443:30443/TCP"),
                json!("<unknown>"),
                json!("app=web,tier=frontend")
            ]
        );
        let cluster_ip =
            json!({"spec": {"type": "ClusterIP", "clusterIPs": ["None"], "externalIPs": ["1.1.1.1", "2.2.2.2"]}});
        assert_eq!(row("", "Service", cluster_ip)[2..5], [json!("None"), json!("1.1.1.1,2.2.2.2"), json!("<none>")]);
        let external_name = json!({"spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        assert_eq!(
            row("", "Service", external_name)[1..],
            [
                json!("ExternalName"),
                json!("<none>"),
                json!("db.example.com"),
                json!("<none>"),
                json!("<unknown>"),
                json!("<none>")
            ]
        );
        assert_eq!(row("", "Service", json!({}))[3], "<unknown>");
    }

    #[test]
    fn endpoints_list_three_addresses_then_how_many_more() {
        let endpoints =
            |subsets: Value| row("", "Endpoints", json!({"metadata": {"name": "e"}, "subsets": subsets}))[1].clone();
        assert_eq!(
            endpoints(
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}])
            ),
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more..."
        );
        assert_eq!(
            endpoints(
                json!([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 8080}]}, {"addresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 53}]}])
            ),
            "[fd00::1]:8080,10.0.0.9:53"
        );
        assert_eq!(endpoints(json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}])), "10.0.0.1,10.0.0.2");
        assert_eq!(
            endpoints(json!([
                {"addresses": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}, {"ip": "3.3.3.3"}, {"ip": "4.4.4.4"}]},
                {"addresses": [{"ip": "5.5.5.5"}], "ports": [{"port": 80}]}
            ])),
            "1.1.1.1,2.2.2.2,3.3.3.3 + 2 more..."
        );
        assert_eq!(endpoints(json!([{"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}])), "");
        assert_eq!(endpoints(json!([])), "<none>");
        assert_eq!(
            row("", "Endpoints", json!({"metadata": {"name": "kubernetes", "creationTimestamp": ago(3 * H)}})),
            ["kubernetes", "<none>", "3h"]
        );
    }

    #[test]
    fn events_print_as_kube_tests_them() {
        // kube's TestPrintEvent, wide.
        let event = json!({
            "metadata": {"name": "event2"},
            "source": {"component": "kubelet", "host": "Node1"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "reason": "Event Reason",
            "message": "Message Data",
            "firstTimestamp": ago(3 * D),
            "lastTimestamp": ago(2 * D),
            "count": 6,
            "type": "Warning",
        });
        let expected = json!([
            "2d",
            "Warning",
            "Event Reason",
            "deployment/Deployment Name",
            "spec.containers{foo}",
            "kubelet, Node1",
            "Message Data",
            "3d",
            6,
            "event2"
        ]);
        assert_eq!(Value::from(row("", "Event", event)), expected);
        let series = json!({
            "metadata": {"name": "event6"},
            "source": {"component": "kubelet", "host": "Node1"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "series": {"count": 2, "lastObservedTime": ago(2 * D)},
            "reason": "Event Reason",
            "message": "Message Data",
            "eventTime": ago(3 * D),
            "type": "Warning",
        });
        let expected = json!([
            "2d",
            "Warning",
            "Event Reason",
            "deployment/Deployment Name",
            "spec.containers{foo}",
            "kubelet, Node1",
            "Message Data",
            "3d",
            2,
            "event6"
        ]);
        assert_eq!(Value::from(row("", "Event", series)), expected);
        let singleton = json!({
            "metadata": {"name": "event7"},
            "reportingComponent": "kubelet",
            "reportingInstance": "test",
            "involvedObject": {"kind": "Node"},
            "message": "  Starting kubelet.\n",
            "eventTime": ago(3 * D),
            "type": "Normal",
        });
        let expected = json!(["3d", "Normal", "", "node", "", "kubelet, test", "Starting kubelet.", "3d", 1, "event7"]);
        assert_eq!(Value::from(row("", "Event", singleton)), expected);
        let unknown = row("", "Event", json!({"source": {"component": "kubelet"}}));
        assert_eq!(unknown[0], "<unknown>");
        assert_eq!(unknown[5], "kubelet");
        assert_eq!(unknown[7], "<unknown>");
    }

    #[test]
    fn events_k8s_io_events_print_through_the_core_printer() {
        let event = json!({
            "metadata": {"name": "web-0.17f3"},
            "eventTime": ago(3 * D),
            "series": {"count": 4, "lastObservedTime": ago(2 * D)},
            "reportingController": "default-scheduler",
            "reportingInstance": "default-scheduler-cp-1",
            "action": "Binding",
            "reason": "Scheduled",
            "regarding": {"kind": "Pod", "namespace": "default", "name": "web-0", "fieldPath": "spec.containers{web}"},
            "note": "Successfully assigned default/web-0 to node-1",
            "type": "Normal",
        });
        let expected = json!([
            "2d",
            "Normal",
            "Scheduled",
            "pod/web-0",
            "spec.containers{web}",
            "default-scheduler, default-scheduler-cp-1",
            "Successfully assigned default/web-0 to node-1",
            "3d",
            4,
            "web-0.17f3"
        ]);
        assert_eq!(Value::from(row("events.k8s.io", "Event", event)), expected);
        let deprecated = json!({
            "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"},
            "note": "Pulled",
            "deprecatedSource": {"component": "kubelet", "host": "node-1"},
            "deprecatedFirstTimestamp": ago(3 * D),
            "deprecatedLastTimestamp": ago(2 * D),
            "deprecatedCount": 5,
            "type": "Normal",
        });
        let expected = json!(["2d", "Normal", "", "pod/p", "", "kubelet, node-1", "Pulled", "3d", 5, "e"]);
        assert_eq!(Value::from(row("events.k8s.io", "Event", deprecated)), expected);
    }

    #[test]
    fn replication_controllers_print_counts_containers_and_selector() {
        let rc = json!({
            "metadata": {"name": "nginx", "creationTimestamp": ago(3 * H)},
            "spec": {"replicas": 3, "selector": {"tier": "web", "app": "nginx"}, "template": {"spec": {"containers": [
                {"name": "nginx", "image": "nginx:1.27"}, {"name": "sidecar", "image": "busybox"}
            ]}}},
            "status": {"replicas": 3, "readyReplicas": 2},
        });
        assert_eq!(
            Value::from(row("", "ReplicationController", rc)),
            json!(["nginx", 3, 3, 2, "3h", "nginx,sidecar", "nginx:1.27,busybox", "app=nginx,tier=web"])
        );
        assert_eq!(
            Value::from(row("", "ReplicationController", json!({"metadata": {"name": "x"}}))),
            json!(["x", 0, 0, 0, "<unknown>", "", "", "<none>"])
        );
    }

    #[test]
    fn resource_quotas_split_requests_and_limits() {
        let quota = json!({
            "metadata": {"name": "compute", "creationTimestamp": ago(2 * D)},
            "status": {
                "hard": {"requests.memory": "1Gi", "pods": "10", "limits.cpu": "2", "requests.cpu": "1", "limits.memory": "2Gi"},
                "used": {"requests.memory": "1024Mi", "pods": "3", "requests.cpu": "500m", "limits.cpu": "1"},
            },
        });
        assert_eq!(
            Value::from(row("", "ResourceQuota", quota)),
            json!([
                "compute",
                "pods: 3/10, requests.cpu: 500m/1, requests.memory: 1Gi/1Gi",
                "limits.cpu: 1/2, limits.memory: 0/2Gi",
                "2d"
            ])
        );
        assert_eq!(
            Value::from(row("", "ResourceQuota", json!({"metadata": {"name": "q"}}))),
            json!(["q", "", "", "<unknown>"])
        );
    }

    #[test]
    fn persistent_volumes_and_claims_print_as_kube() {
        let pv = json!({
            "metadata": {"name": "pv-1", "creationTimestamp": ago(3 * H)},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": "default", "name": "data"},
                "storageClassName": "standard", "volumeMode": "Filesystem"},
            "status": {"phase": "Bound"},
        });
        assert_eq!(
            Value::from(row("", "PersistentVolume", pv)),
            json!([
                "pv-1",
                "5Gi",
                "RWO,RWX",
                "Retain",
                "Bound",
                "default/data",
                "standard",
                "<unset>",
                "",
                "3h",
                "Filesystem"
            ])
        );
        let releasing = json!({
            "metadata": {"name": "pv-2", "deletionTimestamp": ago(60), "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
            "spec": {"capacity": {"storage": "1.5Gi"}, "accessModes": ["ReadWriteOncePod", "ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "ignored", "volumeAttributesClassName": "gold"},
            "status": {"phase": "Failed", "reason": "VolumeFailedDelete"},
        });
        assert_eq!(
            Value::from(row("", "PersistentVolume", releasing)),
            json!([
                "pv-2",
                "1536Mi",
                "ROX,RWOP",
                "Delete",
                "Terminating",
                "",
                "beta",
                "gold",
                "VolumeFailedDelete",
                "<unknown>",
                "<unset>"
            ])
        );
        let bound = json!({
            "metadata": {"name": "data", "creationTimestamp": ago(2 * D)},
            "spec": {"volumeName": "pv-1", "storageClassName": "fast", "volumeAttributesClassName": "gold",
                "volumeMode": "Block", "resources": {"requests": {"storage": "8Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]},
        });
        assert_eq!(
            Value::from(row("", "PersistentVolumeClaim", bound)),
            json!(["data", "Bound", "pv-1", "10Gi", "RWO", "fast", "gold", "2d", "Block"])
        );
        let pending = json!({"metadata": {"name": "p"}, "spec": {"resources": {"requests": {"storage": "8Gi"}}}, "status": {"phase": "Pending"}});
        assert_eq!(
            Value::from(row("", "PersistentVolumeClaim", pending)),
            json!(["p", "Pending", "", "", "", "", "<unset>", "<unknown>", "<unset>"])
        );
        let bound_without_status =
            json!({"metadata": {"name": "b", "deletionTimestamp": ago(1)}, "spec": {"volumeName": "pv-9"}});
        assert_eq!(
            row("", "PersistentVolumeClaim", bound_without_status)[1..5],
            [json!("Terminating"), json!("pv-9"), json!("0"), json!("")]
        );
    }

    #[test]
    fn deployments_print_ready_over_desired() {
        let deployment = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(3 * H)},
            "spec": {"replicas": 3,
                "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "backend"]}]},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}},
            "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2},
        });
        assert_eq!(
            Value::from(row("apps", "Deployment", deployment)),
            json!(["web", "2/3", 3, 2, "3h", "nginx", "nginx:1.27", "app=web,tier in (backend,frontend)"])
        );
        assert_eq!(
            Value::from(row("apps", "Deployment", json!({}))),
            json!(["", "0/0", 0, 0, "<unknown>", "", "", ""])
        );
        let bad =
            json!({"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}});
        assert_eq!(row("apps", "Deployment", bad)[7], "<invalid>");
    }

    #[test]
    fn replica_sets_stateful_sets_and_daemon_sets_print_counts() {
        let rs = json!({
            "metadata": {"name": "web-5d8f9c", "creationTimestamp": ago(2 * D)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"pod-template-hash": "5d8f9c", "app": "web"}},
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}, {"name": "log", "image": "fluent-bit:3"}]}}},
            "status": {"replicas": 3, "readyReplicas": 1},
        });
        assert_eq!(
            Value::from(row("apps", "ReplicaSet", rs)),
            json!(["web-5d8f9c", 3, 3, 1, "2d", "web,log", "nginx,fluent-bit:3", "app=web,pod-template-hash=5d8f9c"])
        );
        assert_eq!(row("apps", "ReplicaSet", json!({}))[7], "<none>");
        let sts = json!({
            "metadata": {"name": "db", "creationTimestamp": ago(3 * H)},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "postgres", "image": "postgres:16"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1},
        });
        assert_eq!(Value::from(row("apps", "StatefulSet", sts)), json!(["db", "1/3", "3h", "postgres", "postgres:16"]));
        let ds = json!({
            "metadata": {"name": "kube-proxy", "creationTimestamp": ago(2 * D)},
            "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}}, "template": {"spec": {
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "containers": [{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.33.0"}]}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2},
        });
        assert_eq!(
            Value::from(row("apps", "DaemonSet", ds)),
            json!([
                "kube-proxy",
                3,
                3,
                2,
                3,
                2,
                "kubernetes.io/os=linux",
                "2d",
                "kube-proxy",
                "registry.k8s.io/kube-proxy:v1.33.0",
                "k8s-app=kube-proxy"
            ])
        );
    }

    #[test]
    fn controller_revisions_name_their_controller() {
        let revision = |owners: Value| {
            row(
                "apps",
                "ControllerRevision",
                json!({"metadata": {"name": "web-7b9c", "creationTimestamp": ago(3 * H), "ownerReferences": owners}, "revision": 2}),
            )
        };
        assert_eq!(
            Value::from(revision(json!([
                {"apiVersion": "v1", "kind": "Pod", "name": "not-controller"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}
            ]))),
            json!(["web-7b9c", "statefulset.apps/web", 2, "3h"])
        );
        assert_eq!(revision(json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": true}]))[1], "pod/p");
        assert_eq!(
            revision(json!([{"apiVersion": "example.COM/v1", "kind": "Thing", "name": "t", "controller": true}]))[1],
            "thing.example.com/t"
        );
        assert_eq!(revision(json!([{"name": "bare", "controller": true}]))[1], "bare");
        assert_eq!(revision(json!([]))[1], "<none>");
    }

    #[test]
    fn jobs_print_status_completions_and_duration() {
        let complete = json!({
            "metadata": {"name": "pi", "creationTimestamp": ago(2 * D)},
            "spec": {"completions": 3, "parallelism": 2, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "6f2c"}},
                "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}}},
            "status": {"succeeded": 3, "startTime": "2025-01-01T00:00:00Z", "completionTime": "2025-01-01T00:02:05Z",
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]},
        });
        assert_eq!(
            Value::from(row("batch", "Job", complete)),
            json!([
                "pi",
                "Complete",
                "3/3",
                "2m5s",
                "2d",
                "pi",
                "perl:5.34",
                "batch.kubernetes.io/controller-uid=6f2c"
            ])
        );
        let running = json!({"metadata": {"name": "w"}, "spec": {"parallelism": 2}, "status": {"active": 2, "startTime": ago(20 * 60)}});
        assert_eq!(
            Value::from(row("batch", "Job", running)),
            json!(["w", "Running", "0/1 of 2", "20m", "<unknown>", "", "", "<none>"])
        );
        let status = |job: Value| row("batch", "Job", job)[1].clone();
        assert_eq!(status(json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}})), "Failed");
        assert_eq!(
            status(
                json!({"metadata": {"deletionTimestamp": ago(5)}, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}})
            ),
            "Terminating"
        );
        assert_eq!(status(json!({"status": {"conditions": [{"type": "Suspended", "status": "True"}]}})), "Suspended");
        assert_eq!(
            status(json!({"status": {"conditions": [{"type": "FailureTarget", "status": "True"}]}})),
            "FailureTarget"
        );
        assert_eq!(
            status(
                json!({"status": {"conditions": [{"type": "Complete", "status": "False"}, {"type": "Complete", "status": "True"}]}})
            ),
            "Running"
        );
        let one = row("batch", "Job", json!({"spec": {"parallelism": 1}, "status": {"succeeded": 1}}));
        assert_eq!(one[2..4], [json!("1/1"), json!("")]);
    }

    #[test]
    fn cron_jobs_print_schedule_and_last_run() {
        let cron = json!({
            "metadata": {"name": "hello", "creationTimestamp": ago(2 * D)},
            "spec": {"schedule": "*/5 * * * *", "suspend": false, "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "hello", "image": "busybox:1.36"}]}}}}},
            "status": {"active": [{"name": "hello-29000000"}], "lastScheduleTime": ago(3 * H)},
        });
        assert_eq!(
            Value::from(row("batch", "CronJob", cron)),
            json!(["hello", "*/5 * * * *", "<none>", "False", 1, "3h", "2d", "hello", "busybox:1.36", "<none>"])
        );
        let zoned = json!({"spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "suspend": true}});
        assert_eq!(
            row("batch", "CronJob", zoned)[1..6],
            [json!("0 3 * * *"), json!("Etc/UTC"), json!("True"), json!(0), json!("<none>")]
        );
        assert_eq!(row("batch", "CronJob", json!({}))[3], "<unset>");
    }

    #[test]
    fn endpoint_slices_list_ports_and_addresses() {
        let slice = json!({
            "metadata": {"name": "web-abc12", "creationTimestamp": ago(3 * H)},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "https"}, {}, {"port": 9090}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"], "conditions": {"ready": true}}],
        });
        assert_eq!(
            Value::from(row("discovery.k8s.io", "EndpointSlice", slice)),
            json!(["web-abc12", "IPv4", "80,https,* + 1 more...", "10.0.0.1,10.0.0.2,10.0.0.3", "3h"])
        );
        let more =
            json!({"endpoints": [{"addresses": ["a", "b"]}, {"addresses": ["c", "d", "e"]}], "ports": [{"port": 53}]});
        assert_eq!(row("discovery.k8s.io", "EndpointSlice", more)[2..4], [json!("53"), json!("a,b,c + 2 more...")]);
        assert_eq!(row("discovery.k8s.io", "EndpointSlice", json!({}))[2..4], [json!("<unset>"), json!("<unset>")]);
    }

    #[test]
    fn leases_and_bindings_print_holders_and_roles() {
        let lease = json!({"metadata": {"name": "kube-scheduler", "creationTimestamp": ago(2 * D)}, "spec": {"holderIdentity": "cp-1_5f2a"}});
        assert_eq!(
            Value::from(row("coordination.k8s.io", "Lease", lease)),
            json!(["kube-scheduler", "cp-1_5f2a", "2d"])
        );
        assert_eq!(row("coordination.k8s.io", "Lease", json!({"spec": {}}))[1], "");
        let binding = json!({
            "metadata": {"name": "admins", "creationTimestamp": ago(3 * H)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "namespace": "kube-system", "name": "default"},
                {"kind": "User", "name": "bob"},
                {"kind": "Robot", "name": "r2"},
            ],
        });
        let expected = json!(["admins", "ClusterRole/admin", "3h", "alice, bob", "devs", "kube-system/default"]);
        assert_eq!(Value::from(row("rbac.authorization.k8s.io", "RoleBinding", binding.clone())), expected);
        assert_eq!(Value::from(row("rbac.authorization.k8s.io", "ClusterRoleBinding", binding)), expected);
    }

    #[test]
    fn disruption_budgets_print_int_or_percent() {
        let pdb = json!({"metadata": {"name": "web", "creationTimestamp": ago(3 * H)}, "spec": {"minAvailable": 2}, "status": {"disruptionsAllowed": 1}});
        assert_eq!(Value::from(row("policy", "PodDisruptionBudget", pdb)), json!(["web", "2", "N/A", 1, "3h"]));
        let percent = json!({"spec": {"maxUnavailable": "25%"}});
        assert_eq!(row("policy", "PodDisruptionBudget", percent)[1..4], [json!("N/A"), json!("25%"), json!(0)]);
    }

    #[test]
    fn ingresses_print_class_hosts_address_and_ports() {
        let ingress = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(2 * D)},
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}], "rules": [
                {"host": "a.example.com"}, {"http": {}}, {"host": "b.example.com"}, {"host": "c.example.com"}, {"host": "d.example.com"}
            ]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}, {"hostname": "lb.example.com"}, {"ip": "203.0.113.10"}]}},
        });
        assert_eq!(
            Value::from(row("networking.k8s.io", "Ingress", ingress)),
            json!([
                "web",
                "nginx",
                "a.example.com,b.example.com,c.example.com + 2 more...",
                "203.0.113.10,lb.example.com",
                "80, 443",
                "2d"
            ])
        );
        // kube's TestPrintIngress: a default backend and no rules.
        let backend = json!({"spec": {"defaultBackend": {"service": {"name": "svc", "port": {"number": 93}}}},
            "status": {"loadBalancer": {"ingress": [{"ip": "2.3.4.5", "hostname": "localhost.localdomain"}]}}});
        assert_eq!(
            row("networking.k8s.io", "Ingress", backend)[1..5],
            [json!("<none>"), json!("*"), json!("2.3.4.5"), json!("80")]
        );
        // kube's TestPrintIngressClass.
        let class = |spec: Value| {
            row("networking.k8s.io", "IngressClass", json!({"metadata": {"name": "test1"}, "spec": spec}))
        };
        assert_eq!(
            Value::from(class(
                json!({"controller": "example.com/controller", "parameters": {"apiGroup": "example.com", "kind": "customgroup", "name": "example"}})
            )),
            json!(["test1", "example.com/controller", "customgroup.example.com/example", "<unknown>"])
        );
        assert_eq!(class(json!({"controller": "example.com/controller2"}))[2], "<none>");
        assert_eq!(
            class(json!({"parameters": {"kind": "ConfigMap", "name": "cfg", "scope": "Namespace", "namespace": "x"}}))
                [2],
            "ConfigMap/cfg"
        );
    }

    #[test]
    fn network_policies_print_their_pod_selector() {
        let policy = |selector: Value| {
            row(
                "networking.k8s.io",
                "NetworkPolicy",
                json!({"metadata": {"name": "np"}, "spec": {"podSelector": selector}}),
            )[1]
            .clone()
        };
        assert_eq!(policy(json!({})), "<none>");
        assert_eq!(policy(json!({"matchLabels": {"role": "db"}})), "role=db");
        assert_eq!(
            policy(json!({"matchLabels": {"role": "db"}, "matchExpressions": [
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team.example.com/owner", "operator": "Exists"}
            ]})),
            "env notin (prod),!legacy,role=db,team.example.com/owner"
        );
        assert_eq!(policy(json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})), "<error>");
        assert_eq!(policy(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})), "<error>");
        assert_eq!(policy(json!({"matchLabels": {"bad key": "x"}})), "<error>");
        assert_eq!(policy(json!({"matchLabels": {"Example.com/x": "y"}})), "<error>");
        assert_eq!(policy(json!({"matchLabels": {"a": "-b"}})), "<error>");
        assert_eq!(row("networking.k8s.io", "NetworkPolicy", json!({"spec": {}}))[1], "<none>");
    }

    #[test]
    fn priority_and_storage_classes_print_booleans_as_booleans() {
        let pc = json!({"metadata": {"name": "high", "creationTimestamp": ago(3 * H)}, "value": 1000000, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            Value::from(row("scheduling.k8s.io", "PriorityClass", pc)),
            json!(["high", 1000000, false, "3h", "PreemptLowerPriority"])
        );
        let critical =
            json!({"metadata": {"name": "system-node-critical"}, "value": 2000001000, "globalDefault": true});
        assert_eq!(
            Value::from(row("scheduling.k8s.io", "PriorityClass", critical)),
            json!(["system-node-critical", 2000001000, true, "<unknown>", ""])
        );
        let sc = json!({
            "metadata": {"name": "local-path", "creationTimestamp": ago(2 * D), "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true,
        });
        assert_eq!(
            Value::from(row("storage.k8s.io", "StorageClass", sc)),
            json!(["local-path (default)", "rancher.io/local-path", "Delete", "WaitForFirstConsumer", true, "2d"])
        );
        let beta = json!({"metadata": {"name": "old", "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}}, "reclaimPolicy": "Retain"});
        assert_eq!(
            row("storage.k8s.io", "StorageClass", beta)[..5],
            [json!("old (default)"), json!(""), json!("Retain"), json!("Immediate"), json!(false)]
        );
        let not_default =
            json!({"metadata": {"name": "x", "annotations": {"storageclass.kubernetes.io/is-default-class": "false"}}});
        assert_eq!(row("storage.k8s.io", "StorageClass", not_default)[0], "x");
    }

    #[test]
    fn quantities_print_canonically_as_kube() {
        // kube's TestQuantityParseEmit, and its negatives.
        for (given, printed) in [
            ("1Ki", "1Ki"),
            ("1Mi", "1Mi"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000M", "1G"),
            (".001Ki", "1024m"),
            (".000001Ki", "1024u"),
            (".000000001Ki", "1024n"),
            (".000000000001Ki", "2n"),
        ] {
            assert_eq!(quantity(given).as_deref(), Some(printed), "{given}");
            assert_eq!(quantity(&format!("-{given}")), Some(format!("-{printed}")), "-{given}");
        }
        for (given, printed) in [
            ("0", "0"),
            ("0Gi", "0"),
            ("-0", "0"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("0.5Ki", "512"),
            ("1025Ki", "1025Ki"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1500m", "1500m"),
            ("1e3", "1e3"),
            ("1.1E3", "1100"),
            ("12e6", "12e6"),
            ("1000e3", "1e6"),
            ("5", "5"),
            ("+5", "+5"),
            ("0.0000000001", "1n"),
            (" 10Gi ", "10Gi"),
            ("500Mi", "500Mi"),
            ("100000Gi", "100000Gi"),
            ("7Ei", "7Ei"),
            ("8Ei", "9223372036854775807"),
        ] {
            assert_eq!(quantity(given).as_deref(), Some(printed), "{given}");
        }
        for bad in ["", "Gi", "1Gb", "1.2.3", "1e", "1k3", "abc", "1 Gi"] {
            if bad == "Gi" {
                // No digits before a suffix is zero to kube.
                assert_eq!(quantity(bad).as_deref(), Some("0"));
                continue;
            }
            assert_eq!(quantity(bad), None, "{bad:?}");
        }
        assert_eq!(quantity_at(None), "0");
        assert_eq!(quantity_at(Some(&json!(2))), "2");
        assert_eq!(quantity_at(Some(&json!("junk"))), "junk");
    }
}
