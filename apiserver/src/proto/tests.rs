//! Objects encoded with k8s-pb's prost types, as Go would send them (non-pointer fields written
//! even when zero), against the JSON kube decodes from the same object sent as JSON — written by
//! hand from kube's JSON mapping.

use std::collections::HashMap;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message as _;
use serde_json::json;

use super::*;

/// A body as client-go sends it (Go writes the envelope's empty strings too).
fn wrap(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC.to_vec(), u.encode_to_vec()].concat()
}

fn s(v: &str) -> Option<String> {
    Some(v.into())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn int(i: i32) -> Option<IntOrString> {
    Some(IntOrString { r#type: Some(0), int_val: Some(i), str_val: s("") })
}

fn string(v: &str) -> Option<IntOrString> {
    Some(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s(v) })
}

fn q(v: &str) -> Quantity {
    Quantity { string: s(v) }
}

/// ObjectMeta as Go writes it: every string, `generation: 0`, an empty `creationTimestamp`.
fn meta(name: &str, namespace: &str) -> Option<ObjectMeta> {
    Some(ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(namespace),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(Time::default()),
        ..Default::default()
    })
}

fn resource(group: &str, version: &str, plural: &str) -> &'static Resource {
    crate::resources::find(group, version, plural).expect("a served resource")
}

/// The body kubectl 1.32's `create ns x` sends (docs/apiserver-research.md §2.2).
#[test]
fn kubectls_namespace_body_decodes() {
    let mut body = b"k8s\0".to_vec();
    body.extend([0x0a, 0x0f, 0x0a, 0x02]);
    body.extend(b"v1");
    body.extend([0x12, 0x09]);
    body.extend(b"Namespace");
    body.extend([0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, b'x', 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00]);
    body.extend([0x38, 0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00, 0x1a, 0x00, 0x22, 0x00]);
    let r = resource("", "v1", "namespaces");
    let v = decode(r, &body).unwrap();
    assert_eq!(v, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
}

#[test]
fn malformed_bodies_are_refused_with_kubes_texts() {
    let r = resource("", "v1", "configmaps");
    let e = decode(r, b"{}").unwrap_err();
    assert_eq!(e.code, 400);
    assert_eq!(e.message, "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]");
    let e = decode(r, b"k8s\0\xff\xff").unwrap_err();
    assert_eq!(e.message, "unable to decode the request body as runtime.Unknown protobuf");
    // A field whose length runs past the end; a varint that never ends; a string where an
    // object belongs (spec, tag 2, as a varint).
    for raw in [vec![0x0a, 0x05, 0x0a], vec![0x10, 0xff], vec![0x10, 0x01]] {
        let e = decode_as("apps/v1", "Deployment", &wrap("apps/v1", "Deployment", raw.clone())).unwrap_err();
        assert_eq!(e.message, "unable to decode the request body as Deployment protobuf", "{raw:?}");
    }
    // A body of another kind is refused by name, whatever its type.
    let secret = core::Secret { metadata: meta("c", ""), ..Default::default() };
    let e = decode(r, &wrap("v1", "Secret", secret.encode_to_vec())).unwrap_err();
    assert_eq!(e.message, "the kind in the data (Secret) does not match the expected kind (ConfigMap)");
    // A type with no protobuf message is a media type the endpoint does not take.
    let e = decode_as("example.com/v1", "Widget", &wrap("example.com/v1", "Widget", vec![])).unwrap_err();
    assert_eq!((e.code, e.reason.as_ref()), (415, "UnsupportedMediaType"));
    // Fields kube does not know are skipped, as gogo skips them.
    let v = decode(r, &wrap("v1", "ConfigMap", vec![0xf8, 0x07, 0x01])).unwrap();
    assert_eq!(v, json!({"apiVersion": "v1", "kind": "ConfigMap"}));
}

#[test]
fn the_envelopes_type_falls_back_to_the_endpoints() {
    let cm = core::ConfigMap { metadata: meta("c", ""), ..Default::default() };
    let u = Unknown { raw: Some(cm.encode_to_vec()), ..Default::default() };
    let body = [MAGIC.to_vec(), u.encode_to_vec()].concat();
    let v = decode(resource("", "v1", "configmaps"), &body).unwrap();
    assert_eq!(v, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
}

#[test]
fn configmaps_and_secrets_decode() {
    let cm = core::ConfigMap {
        metadata: meta("c", "d"),
        data: [("k".to_string(), "v".to_string()), ("empty".to_string(), String::new())].into(),
        binary_data: [("b".to_string(), b"\x00\x01".to_vec())].into(),
        immutable: Some(false),
    };
    let v = decode(resource("", "v1", "configmaps"), &wrap("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"},
               "immutable": false, "data": {"k": "v", "empty": ""}, "binaryData": {"b": "AAE="}})
    );
    let secret = core::Secret {
        metadata: meta("s", "d"),
        data: [("p".to_string(), b"hi".to_vec())].into(),
        string_data: [("u".to_string(), "me".to_string())].into(),
        r#type: s("Opaque"),
        immutable: None,
    };
    let v = decode(resource("", "v1", "secrets"), &wrap("v1", "Secret", secret.encode_to_vec())).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "d"},
               "data": {"p": "aGk="}, "stringData": {"u": "me"}, "type": "Opaque"})
    );
}

#[test]
fn service_accounts_decode() {
    let sa = core::ServiceAccount {
        metadata: meta("sa", "ns"),
        secrets: vec![core::ObjectReference {
            kind: s(""),
            namespace: s(""),
            name: s("tok"),
            uid: s(""),
            api_version: s(""),
            resource_version: s(""),
            field_path: s(""),
        }],
        image_pull_secrets: vec![core::LocalObjectReference { name: s("reg") }],
        automount_service_account_token: Some(false),
    };
    let body = wrap("v1", "ServiceAccount", sa.encode_to_vec());
    let v = decode(resource("", "v1", "serviceaccounts"), &body).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "ns"},
               "secrets": [{"name": "tok"}], "imagePullSecrets": [{"name": "reg"}],
               "automountServiceAccountToken": false})
    );
}

/// What `kubectl create deployment` and a typed client send, richer: a pod template with
/// ports, resources, probes of both IntOrString forms, an `emptyDir` volume (inlined, and set
/// though empty) and Go's zero values in non-pointer fields.
#[test]
fn deployments_decode() {
    use k8s_pb::api::apps::v1::{
        Deployment, DeploymentSpec, DeploymentStatus, DeploymentStrategy, RollingUpdateDeployment,
    };
    let labels: std::collections::BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
    let container = core::Container {
        name: s("nginx"),
        image: s("nginx:1.27"),
        working_dir: s(""),
        ports: vec![core::ContainerPort {
            name: s(""),
            host_port: Some(0),
            container_port: Some(80),
            protocol: s("TCP"),
            host_ip: s(""),
        }],
        env: vec![core::EnvVar { name: s("MODE"), value: s("prod"), value_from: None }],
        resources: Some(core::ResourceRequirements {
            limits: [("cpu".to_string(), q("500m")), ("memory".to_string(), q("128Mi"))].into(),
            requests: [("cpu".to_string(), q("250m"))].into(),
            claims: vec![],
        }),
        volume_mounts: vec![core::VolumeMount {
            name: s("cache"),
            read_only: Some(false),
            mount_path: s("/cache"),
            sub_path: s(""),
            sub_path_expr: s(""),
            ..Default::default()
        }],
        liveness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: int(8080),
                    host: s(""),
                    scheme: s("HTTP"),
                    http_headers: vec![],
                }),
                ..Default::default()
            }),
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(1),
            period_seconds: Some(10),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            termination_grace_period_seconds: None,
        }),
        readiness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                tcp_socket: Some(core::TcpSocketAction { port: string("http"), host: s("") }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        termination_message_path: s("/dev/termination-log"),
        termination_message_policy: s(""),
        image_pull_policy: s("IfNotPresent"),
        stdin: Some(false),
        stdin_once: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    let deployment = Deployment {
        metadata: Some(ObjectMeta { labels: labels.clone(), ..meta("web", "default").unwrap() }),
        spec: Some(DeploymentSpec {
            replicas: Some(0),
            selector: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: labels.clone(),
                match_expressions: vec![],
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(ObjectMeta { labels, ..meta("", "").unwrap() }),
                spec: Some(core::PodSpec {
                    volumes: vec![core::Volume {
                        name: s("cache"),
                        volume_source: Some(core::VolumeSource {
                            empty_dir: Some(core::EmptyDirVolumeSource::default()),
                            ..Default::default()
                        }),
                    }],
                    containers: vec![container],
                    restart_policy: s("Always"),
                    termination_grace_period_seconds: Some(30),
                    dns_policy: s("ClusterFirst"),
                    service_account_name: s(""),
                    host_network: Some(false),
                    ..Default::default()
                }),
            }),
            strategy: Some(DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(RollingUpdateDeployment { max_unavailable: int(0), max_surge: string("25%") }),
            }),
            min_ready_seconds: Some(0),
            revision_history_limit: Some(10),
            paused: Some(false),
            progress_deadline_seconds: Some(600),
        }),
        status: Some(DeploymentStatus {
            observed_generation: Some(0),
            replicas: Some(0),
            updated_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            unavailable_replicas: Some(0),
            ..Default::default()
        }),
    };
    let body = wrap("apps/v1", "Deployment", deployment.encode_to_vec());
    let v = decode_as("apps/v1", "Deployment", &body).unwrap();
    let expected = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "MODE", "value": "prod"}],
                        "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m"}},
                        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        "livenessProbe": {
                            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3
                        },
                        "readinessProbe": {"tcpSocket": {"port": "http"}},
                        "terminationMessagePath": "/dev/termination-log",
                        "imagePullPolicy": "IfNotPresent"
                    }],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst"
                }
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600
        }
    });
    assert_eq!(v, expected);
}

#[test]
fn services_decode() {
    let port = |name: &str, port: i32, target: Option<IntOrString>| core::ServicePort {
        name: s(name),
        protocol: s("TCP"),
        app_protocol: None,
        port: Some(port),
        target_port: target,
        node_port: Some(0),
    };
    let svc = core::Service {
        metadata: meta("web", "default"),
        spec: Some(core::ServiceSpec {
            ports: vec![port("http", 80, string("http")), port("metrics", 9090, int(9091)), port("raw", 7000, int(0))],
            selector: [("app".to_string(), "web".to_string())].into(),
            cluster_ip: s(""),
            r#type: s("ClusterIP"),
            session_affinity: s("None"),
            load_balancer_ip: s(""),
            external_name: s(""),
            external_traffic_policy: s(""),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ip_family_policy: s("SingleStack"),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus { load_balancer: Some(Default::default()), conditions: vec![] }),
    };
    let v = decode_as("v1", "Service", &wrap("v1", "Service", svc.encode_to_vec())).unwrap();
    // A targetPort of Go's zero IntOrString is unset (kube then defaults it to the port).
    let expected = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http"},
                {"name": "metrics", "protocol": "TCP", "port": 9090, "targetPort": 9091},
                {"name": "raw", "protocol": "TCP", "port": 7000}
            ],
            "selector": {"app": "web"},
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilyPolicy": "SingleStack"
        }
    });
    assert_eq!(v, expected);
}

/// `kubectl create job`: the pointer fields (`suspend: false`, `ttlSecondsAfterFinished: 0`)
/// stay.
#[test]
fn jobs_decode() {
    use k8s_pb::api::batch::v1::{Job, JobSpec, JobStatus};
    let job = Job {
        metadata: meta("pi", "default"),
        spec: Some(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(4),
            template: Some(core::PodTemplateSpec {
                metadata: meta("", ""),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("pi"),
                        image: s("perl:5.34"),
                        command: strings(&["perl", "-e", "print 1"]),
                        ..Default::default()
                    }],
                    restart_policy: s("Never"),
                    ..Default::default()
                }),
            }),
            ttl_seconds_after_finished: Some(0),
            suspend: Some(false),
            ..Default::default()
        }),
        status: Some(JobStatus { active: Some(0), succeeded: Some(0), failed: Some(0), ..Default::default() }),
    };
    let v = decode_as("batch/v1", "Job", &wrap("batch/v1", "Job", job.encode_to_vec())).unwrap();
    let expected = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default"},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 4,
            "template": {"spec": {
                "containers": [{"name": "pi", "image": "perl:5.34", "command": ["perl", "-e", "print 1"]}],
                "restartPolicy": "Never"
            }},
            "ttlSecondsAfterFinished": 0,
            "suspend": false
        }
    });
    assert_eq!(v, expected);
}

#[test]
fn roles_decode() {
    use k8s_pb::api::rbac::v1::{PolicyRule, Role};
    let role = Role {
        metadata: meta("reader", "default"),
        rules: vec![
            PolicyRule {
                verbs: strings(&["get", "list"]),
                api_groups: strings(&[""]),
                resources: strings(&["pods"]),
                ..Default::default()
            },
            PolicyRule {
                verbs: strings(&["get"]),
                api_groups: strings(&["apps"]),
                resources: strings(&["deployments"]),
                resource_names: strings(&["web"]),
                ..Default::default()
            },
        ],
    };
    let body = wrap("rbac.authorization.k8s.io/v1", "Role", role.encode_to_vec());
    let v = decode_as("rbac.authorization.k8s.io/v1", "Role", &body).unwrap();
    let expected = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "reader", "namespace": "default"},
        "rules": [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]}
        ]
    });
    assert_eq!(v, expected);
}

/// MicroTime keeps six digits (truncated); a pointer string set to `""` stays.
#[test]
fn leases_decode() {
    use k8s_pb::api::coordination::v1::{Lease, LeaseSpec};
    let lease = Lease {
        metadata: meta("node-1", "kube-node-lease"),
        spec: Some(LeaseSpec {
            holder_identity: s(""),
            lease_duration_seconds: Some(40),
            acquire_time: Some(MicroTime { seconds: Some(1_796_612_645), nanos: Some(123_456_789) }),
            renew_time: Some(MicroTime { seconds: Some(1_796_612_645), nanos: Some(0) }),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    let body = wrap("coordination.k8s.io/v1", "Lease", lease.encode_to_vec());
    let v = decode_as("coordination.k8s.io/v1", "Lease", &body).unwrap();
    let expected = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": "",
            "leaseDurationSeconds": 40,
            "acquireTime": "2026-12-07T03:04:05.123456Z",
            "renewTime": "2026-12-07T03:04:05.000000Z",
            "leaseTransitions": 0
        }
    });
    assert_eq!(v, expected);
}

/// Times in whole seconds (before 1970 too), pointer numbers at zero, managed fields' JSON.
#[test]
fn object_meta_decodes() {
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, OwnerReference};
    let time = Time { seconds: Some(1_796_612_645), nanos: Some(999_999_999) };
    let cm = core::ConfigMap {
        metadata: Some(ObjectMeta {
            name: s("c"),
            uid: s("u-1"),
            generation: Some(3),
            creation_timestamp: Some(time),
            deletion_timestamp: Some(Time { seconds: Some(-1), nanos: Some(0) }),
            deletion_grace_period_seconds: Some(0),
            owner_references: vec![OwnerReference {
                api_version: s("apps/v1"),
                kind: s("ReplicaSet"),
                name: s("web-1"),
                uid: s("u-2"),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }],
            finalizers: strings(&["keel.dev/x"]),
            managed_fields: vec![ManagedFieldsEntry {
                manager: s("kubectl"),
                operation: s("Update"),
                api_version: s("v1"),
                time: Some(time),
                fields_type: s("FieldsV1"),
                fields_v1: Some(FieldsV1 { raw: Some(br#"{"f:data":{"f:k":{}}}"#.to_vec()) }),
                subresource: s(""),
            }],
            ..meta("", "").unwrap()
        }),
        ..Default::default()
    };
    let v = decode(resource("", "v1", "configmaps"), &wrap("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
    let expected = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "c", "uid": "u-1", "generation": 3,
            "creationTimestamp": "2026-12-07T03:04:05Z",
            "deletionTimestamp": "1969-12-31T23:59:59Z",
            "deletionGracePeriodSeconds": 0,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u-2",
                                 "controller": true, "blockOwnerDeletion": false}],
            "finalizers": ["keel.dev/x"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-12-07T03:04:05Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:data": {"f:k": {}}}}]
        }
    });
    assert_eq!(v, expected);
}

/// Bodies of a type other than the resource's: a Scale, DeleteOptions as any group version
/// sends them (kube registers them in every one), a SelfSubjectAccessReview.
#[test]
fn other_types_decode_as_asked() {
    use k8s_pb::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
    let scale = Scale {
        metadata: meta("web", "default"),
        spec: Some(ScaleSpec { replicas: Some(3) }),
        status: Some(ScaleStatus { replicas: Some(0), selector: s("") }),
    };
    let v = decode_as("autoscaling/v1", "Scale", &wrap("autoscaling/v1", "Scale", scale.encode_to_vec())).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 3}})
    );

    let options = DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: s("u-1"), resource_version: None }),
        orphan_dependents: None,
        propagation_policy: s("Foreground"),
        dry_run: strings(&["All"]),
        ignore_store_read_error_with_cluster_breaking_potential: None,
    };
    for api_version in ["v1", "apps/v1", "meta.k8s.io/v1"] {
        let body = wrap(api_version, "DeleteOptions", options.encode_to_vec());
        let v = decode_as("meta.k8s.io/v1", "DeleteOptions", &body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": api_version, "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1"}, "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
    }

    use k8s_pb::api::authorization::v1 as authz;
    let review = authz::SelfSubjectAccessReview {
        metadata: meta("", ""),
        spec: Some(authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                namespace: s("default"),
                verb: s("create"),
                group: s("apps"),
                version: s(""),
                resource: s("deployments"),
                subresource: s(""),
                name: s(""),
                ..Default::default()
            }),
            non_resource_attributes: None,
        }),
        status: Some(authz::SubjectAccessReviewStatus {
            allowed: Some(false),
            denied: None,
            reason: s(""),
            evaluation_error: s(""),
        }),
    };
    let body = wrap("authorization.k8s.io/v1", "SelfSubjectAccessReview", review.encode_to_vec());
    let v = decode_as("authorization.k8s.io/v1", "SelfSubjectAccessReview", &body).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "group": "apps",
                                               "resource": "deployments"}}})
    );
}

/// `ExtraValue` (a named Go slice) is an array, even an empty one in a map.
#[test]
fn subject_access_reviews_extra_is_arrays() {
    use k8s_pb::api::authorization::v1 as authz;
    let review = authz::SubjectAccessReview {
        spec: Some(authz::SubjectAccessReviewSpec {
            user: s("jane"),
            groups: strings(&["dev"]),
            extra: [
                ("scopes".to_string(), authz::ExtraValue { items: strings(&["a", "b"]) }),
                ("none".to_string(), authz::ExtraValue { items: vec![] }),
            ]
            .into(),
            uid: s(""),
            ..Default::default()
        }),
        ..Default::default()
    };
    let body = wrap("authorization.k8s.io/v1", "SubjectAccessReview", review.encode_to_vec());
    let v = decode_as("authorization.k8s.io/v1", "SubjectAccessReview", &body).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": "jane", "groups": ["dev"], "extra": {"scopes": ["a", "b"], "none": []}}})
    );
}

/// RawExtension: embedded JSON, or an embedded `k8s\0` object decoded in turn.
#[test]
fn raw_extensions_decode() {
    use k8s_pb::api::apps::v1::ControllerRevision;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
    let revision = ControllerRevision {
        metadata: meta("web-1", "default"),
        data: Some(RawExtension { raw: Some(br#"{"spec":{"template":{"x":1}}}"#.to_vec()) }),
        revision: Some(2),
    };
    let body = wrap("apps/v1", "ControllerRevision", revision.encode_to_vec());
    let v = decode_as("apps/v1", "ControllerRevision", &body).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
               "metadata": {"name": "web-1", "namespace": "default"},
               "data": {"spec": {"template": {"x": 1}}}, "revision": 2})
    );
    let bad = ControllerRevision { data: Some(RawExtension { raw: Some(b"{nope".to_vec()) }), ..revision };
    let e = decode_as("apps/v1", "ControllerRevision", &wrap("apps/v1", "ControllerRevision", bad.encode_to_vec()))
        .unwrap_err();
    assert_eq!(e.message, "unable to decode the request body as ControllerRevision protobuf");

    let cm = core::ConfigMap { metadata: meta("c", ""), ..Default::default() };
    let event = WatchEvent {
        r#type: s("ADDED"),
        object: Some(RawExtension { raw: Some(wrap("v1", "ConfigMap", cm.encode_to_vec())) }),
    };
    let v = decode_as("v1", "WatchEvent", &wrap("v1", "WatchEvent", event.encode_to_vec())).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "WatchEvent", "type": "ADDED",
               "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}})
    );
}

/// A CRD: JSON names that are not the proto's (`$ref`, `x-kubernetes-…`), the schema-or-bool
/// and schema-or-array forms, embedded JSON defaults, `status: {}` (a pointer, set though empty),
/// `preserveUnknownFields: false` (a Go bool in v1: unset).
#[test]
fn custom_resource_definitions_decode() {
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let props = |ty: &str| ext::JsonSchemaProps { r#type: s(ty), ..Default::default() };
    let schema = ext::JsonSchemaProps {
        properties: [
            (
                "spec".to_string(),
                ext::JsonSchemaProps { x_kubernetes_preserve_unknown_fields: Some(true), ..props("object") },
            ),
            (
                "size".to_string(),
                ext::JsonSchemaProps {
                    default: Some(ext::Json { raw: Some(b"3".to_vec()) }),
                    minimum: Some(1.5),
                    exclusive_minimum: Some(false),
                    ..props("integer")
                },
            ),
            (
                "tags".to_string(),
                ext::JsonSchemaProps {
                    items: Some(Box::new(ext::JsonSchemaPropsOrArray {
                        schema: Some(Box::new(props("string"))),
                        j_son_schemas: vec![],
                    })),
                    ..props("array")
                },
            ),
            (
                "labels".to_string(),
                ext::JsonSchemaProps {
                    additional_properties: Some(Box::new(ext::JsonSchemaPropsOrBool {
                        allows: Some(true),
                        schema: Some(Box::new(props("string"))),
                    })),
                    ..props("object")
                },
            ),
            (
                "closed".to_string(),
                ext::JsonSchemaProps {
                    additional_properties: Some(Box::new(ext::JsonSchemaPropsOrBool {
                        allows: Some(false),
                        schema: None,
                    })),
                    r#ref: s("#/x"),
                    ..props("object")
                },
            ),
        ]
        .into(),
        ..props("object")
    };
    let crd = ext::CustomResourceDefinition {
        metadata: meta("widgets.example.com", ""),
        spec: Some(ext::CustomResourceDefinitionSpec {
            group: s("example.com"),
            names: Some(ext::CustomResourceDefinitionNames {
                plural: s("widgets"),
                singular: s("widget"),
                kind: s("Widget"),
                list_kind: s("WidgetList"),
                ..Default::default()
            }),
            scope: s("Namespaced"),
            versions: vec![ext::CustomResourceDefinitionVersion {
                name: s("v1"),
                served: Some(true),
                storage: Some(true),
                deprecated: Some(false),
                schema: Some(ext::CustomResourceValidation { open_apiv3_schema: Some(schema) }),
                subresources: Some(ext::CustomResourceSubresources {
                    status: Some(ext::CustomResourceSubresourceStatus {}),
                    scale: None,
                }),
                ..Default::default()
            }],
            preserve_unknown_fields: Some(false),
            ..Default::default()
        }),
        status: None,
    };
    let body = wrap("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd.encode_to_vec());
    let v = decode_as("apiextensions.k8s.io/v1", "CustomResourceDefinition", &body).unwrap();
    let expected = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "size": {"type": "integer", "default": 3, "minimum": 1.5},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "closed": {"$ref": "#/x", "type": "object", "additionalProperties": false}
                }}},
                "subresources": {"status": {}}
            }]
        }
    });
    assert_eq!(v, expected);
}

/// metrics.k8s.io's window is a `metav1.Duration`: Go's duration string.
#[test]
fn durations_are_gos_strings() {
    use k8s_pb::apimachinery::pkg::apis::meta::v1::Duration;
    use k8s_pb::metrics::pkg::apis::metrics::v1beta1::{ContainerMetrics, PodMetrics};
    let pm = PodMetrics {
        metadata: meta("p", "default"),
        timestamp: Some(Time { seconds: Some(1_796_612_645), nanos: Some(0) }),
        window: Some(Duration { duration: Some(90_000_000_000) }),
        containers: vec![ContainerMetrics { name: s("c"), usage: [("cpu".to_string(), q("10m"))].into() }],
    };
    let body = wrap("metrics.k8s.io/v1beta1", "PodMetrics", pm.encode_to_vec());
    let v = decode_as("metrics.k8s.io/v1beta1", "PodMetrics", &body).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
               "metadata": {"name": "p", "namespace": "default"}, "timestamp": "2026-12-07T03:04:05Z",
               "window": "1m30s", "containers": [{"name": "c", "usage": {"cpu": "10m"}}]})
    );
    let cases = [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (1_500_000_000, "1.5s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_000_000_001, "1h2m3.000000001s"),
        (-2_000_000_000, "-2s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ];
    for (ns, text) in cases {
        assert_eq!(go_duration(ns), text, "{ns}");
    }
}

/// The committed table is k8s-pb's: every message, every field with its tag, type and
/// cardinality. With `$KEEL_K8S_GO` set, it is also exactly what the generator writes.
#[test]
fn table_matches_k8s_pb() {
    use gen::PbCard;
    let pb = gen::pb_dir();
    let messages = gen::pb_messages(&pb);
    let full = |m: &Message| format!("{}.{}", table::PACKAGES[usize::from(m.package)], m.name);
    assert!(table::PACKAGES.windows(2).all(|w| w[0] < w[1]), "PACKAGES sorted");
    assert!(table::GROUPS.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)), "GROUPS sorted");
    assert!(
        table::MESSAGES.windows(2).all(|w| (w[0].package, w[0].name) < (w[1].package, w[1].name)),
        "MESSAGES sorted"
    );
    assert!(table::MARKERS.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)), "MARKERS sorted");
    // k8s-pb's names are prost's UpperCamelCase of the proto's (`JsonSchemaProps`).
    let by_name: HashMap<String, &Message> = table::MESSAGES.iter().map(|m| (full(m).to_lowercase(), m)).collect();
    assert_eq!(by_name.len(), table::MESSAGES.len(), "names that differ only in case");
    assert_eq!(messages.len(), table::MESSAGES.len(), "k8s-pb's messages and the table's");
    let ty_name = |ty: Ty| match ty {
        Ty::Str => "string".to_string(),
        Ty::Bytes => "bytes".to_string(),
        Ty::Int32 => "int32".to_string(),
        Ty::Int64 => "int64".to_string(),
        Ty::Bool => "bool".to_string(),
        Ty::Double => "double".to_string(),
        Ty::Msg(i) => full(&table::MESSAGES[usize::from(i)]).to_lowercase(),
    };
    for pm in &messages {
        let name = format!("{}.{}", pm.package, pm.name);
        let tm = by_name.get(&name.to_lowercase()).unwrap_or_else(|| panic!("{name} is not in the table"));
        let want: Vec<_> = pm
            .fields
            .iter()
            .map(|f| {
                let ty = if f.ty.starts_with("k8s.io.") { f.ty.to_lowercase() } else { f.ty.clone() };
                (f.tag, ty, f.card)
            })
            .collect();
        let got: Vec<_> = tm
            .fields
            .iter()
            .map(|f| {
                let card = match f.card {
                    Card::R => PbCard::Repeated,
                    Card::K => PbCard::Map,
                    Card::V | Card::P | Card::I => PbCard::Single,
                };
                (f.tag, ty_name(f.ty), card)
            })
            .collect();
        assert_eq!(got, want, "{name}'s fields");
        assert!(tm.fields.iter().all(|f| !f.json.is_empty()), "{name}: a field with no JSON name");
    }
    if let Some(go) = std::env::var_os("KEEL_K8S_GO") {
        let text = gen::generate(&pb, std::path::Path::new(&go));
        assert!(text == include_str!("table.rs"), "table.rs is not what the generator writes: regenerate it");
    }
}
