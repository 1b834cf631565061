//! Admission webhooks against a real HTTPS webhook server run by the test: a mutating webhook's
//! JSON patch, a validating webhook's denial and warning, namespace and object selectors, a
//! service reference reached through its Endpoints, failure policies for a webhook that cannot
//! be reached or answers too late, dry runs, and kube's validation of the configurations — all
//! through kubectl 1.32.

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{eventually, Kubectl};
use serde_json::{json, Value};

/// What the webhook server was sent, by path.
type Seen = Arc<parking_lot::Mutex<Vec<(String, Value)>>>;

/// A CA and a server certificate it signed for localhost, 127.0.0.1 and the service name.
fn certificates() -> (String, rustls::ServerConfig) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names = vec!["localhost".to_string(), "127.0.0.1".into(), "hooks.gate.svc".into()];
    let leaf = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(keel_store::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    (ca.pem(), server)
}

/// The webhook's answer to a review sent to `path`.
fn answer(path: &str, review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let labels = request.pointer("/object/metadata/labels").cloned().unwrap_or(json!({}));
    let response = match path {
        // Labels every object it sees (adding the labels map when there is none).
        "/mutate" => {
            use base64::Engine as _;
            let patch = if labels.as_object().is_some_and(|l| !l.is_empty()) {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        }
        // Refuses what is labelled deny=true, warns of everything else.
        "/validate" if labels.get("deny") == Some(&json!("true")) => json!({"uid": uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": "no pods labelled deny"}}),
        "/validate" => json!({"uid": uid, "allowed": true, "warnings": ["checked by the test webhook"],
            "auditAnnotations": {"checked": "yes"}}),
        // Answers with another review's uid.
        "/confused" => json!({"uid": "not-the-uid", "allowed": true}),
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Serves the webhooks over HTTPS on a free port; its port, the CA's PEM and what it was sent.
async fn webhook_server() -> (u16, String, Seen) {
    use http_body_util::BodyExt as _;
    let (ca, config) = certificates();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, seen) = (acceptor.clone(), kept.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        seen.lock().push((path.clone(), review.clone()));
                        if path == "/slow" {
                            // Later than the webhook's one-second timeout.
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                        let body = serde_json::to_vec(&answer(&path, &review)).unwrap();
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca, seen)
}

/// A webhook of a configuration: `name`, reached at `client`, for pods in namespaces labelled
/// `webhooks=on`.
fn hook(name: &str, client: Value, ca: &str, extra: Value) -> Value {
    use base64::Engine as _;
    let mut client = client;
    client["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    let mut w = json!({
        "name": name,
        "clientConfig": client,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"webhooks": "on"}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Value::Object(w), Value::Object(e)) = (&mut w, extra) {
        w.extend(e);
    }
    w
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}})
}

/// Creates pods labelled `labels` in `gate` (a new name each try) until one is refused — a
/// configuration takes effect once the watch cache holds it — and gives kubectl's error.
async fn refused(k: &Kubectl, what: &str, labels: Value) -> String {
    let tries = std::sync::atomic::AtomicUsize::new(0);
    eventually(what, || async {
        let name = format!("try-{}", tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let o = k.run(&["create", "-f", &k.file("try.json", pod(&name, labels.clone())), "-n", "gate"]).await;
        if o.ok {
            k.ok(&["delete", "pod", &name, "-n", "gate", "--wait=false"]).await;
            Err(format!("pod {name} created"))
        } else {
            Ok(o.stderr)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_webhooks_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (port, ca, seen) = webhook_server().await;
    let (running, _client) = common::apiserver(dir.path(), &[]).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };
    k.ok(&["create", "namespace", "gate"]).await;
    k.ok(&["label", "namespace", "gate", "webhooks=on"]).await;
    k.ok(&["create", "namespace", "open"]).await;
    let url = |path: &str| json!({"url": format!("https://127.0.0.1:{port}{path}")});

    // kube's validation of the configurations, with its defaults filled in.
    let bad = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{"name": "short", "clientConfig": {"url": "http://example.com/x?y=1"},
            "sideEffects": "Some", "admissionReviewVersions": ["v2"], "timeoutSeconds": 31,
            "matchConditions": [{"name": "broken", "expression": "object.metadata.name =="}],
            "rules": [{"operations": ["*", "CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*", "pods"]}]}]});
    let e = k.fails(&["create", "-f", &k.file("bad.json", bad)]).await;
    for part in [
        r#"webhooks[0].name: Invalid value: "short": should be a domain with at least three segments separated by dots"#,
        r#"webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{"*", "CREATE"}: if '*' is present, must not specify other operations"#,
        r#"webhooks[0].rules[0].resources: Invalid value: []string{"*", "pods"}: if '*' is present, must not specify other resources without subresources"#,
        r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#,
        r#"webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"#,
        r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
        r#"webhooks[0].clientConfig.url: Invalid value: "y=1": query parameters are not permitted in the URL"#,
        r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#,
        r#"webhooks[0].matchConditions[0].expression: Invalid value: "object.metadata.name ==": compilation failed: ERROR: <input>:1:"#,
    ] {
        assert!(e.contains(part), "{part} not in {e}");
    }
    assert!(k.fails(&["get", "validatingwebhookconfiguration", "bad"]).await.contains("NotFound"));

    let mutating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "label-pods"},
        "webhooks": [hook("label.keel.test", url("/mutate"), &ca, json!({"matchConditions": [{"name": "not-opted-out",
            "expression": "!has(object.metadata.labels) || !('nomutate' in object.metadata.labels)"}]}))]});
    k.ok(&["create", "-f", &k.file("mutating.json", mutating)]).await;
    let stored = k.ok(&["get", "mutatingwebhookconfiguration", "label-pods", "-o", "json"]).await;
    let stored: Value = serde_json::from_str(&stored).unwrap();
    let w = &stored["webhooks"][0];
    assert_eq!(
        (
            &w["failurePolicy"],
            &w["matchPolicy"],
            &w["timeoutSeconds"],
            &w["reinvocationPolicy"],
            &w["rules"][0]["scope"]
        ),
        (&json!("Fail"), &json!("Equivalent"), &json!(10), &json!("Never"), &json!("*"))
    );
    assert_eq!(stored["metadata"]["generation"], json!(1));

    // The mutating webhook labels pods in the selected namespace, and only there.
    let labelled = eventually("the mutating webhook to label a pod", || async {
        let name = format!("probe-{}", seen.lock().len());
        k.ok(&["create", "-f", &k.file("probe.json", pod(&name, json!({"app": "probe"}))), "-n", "gate"]).await;
        let got = k.ok(&["get", "pod", &name, "-n", "gate", "-o", "jsonpath={.metadata.labels.mutated}"]).await;
        if got == "yes" {
            Ok(name)
        } else {
            Err(format!("pod {name} unlabelled"))
        }
    })
    .await;
    let review = seen.lock().iter().rev().find(|(p, _)| p == "/mutate").map(|(_, r)| r.clone()).unwrap();
    let request = &review["request"];
    assert_eq!(review["apiVersion"], json!("admission.k8s.io/v1"));
    assert_eq!(request["operation"], json!("CREATE"));
    assert_eq!(request["kind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
    assert_eq!(request["resource"], json!({"group": "", "version": "v1", "resource": "pods"}));
    assert_eq!((&request["namespace"], &request["name"]), (&json!("gate"), &json!(labelled)));
    assert_eq!(request["userInfo"]["username"], json!("kubernetes-admin"));
    assert_eq!(request["options"], json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}));
    assert_eq!((&request["dryRun"], &request["oldObject"]), (&json!(false), &Value::Null));
    assert_eq!(request["object"]["kind"], json!("Pod"));
    k.ok(&["create", "-f", &k.file("elsewhere.json", pod("elsewhere", json!({}))), "-n", "open"]).await;
    let labels = k.ok(&["get", "pod", "elsewhere", "-n", "open", "-o", "jsonpath={.metadata.labels}"]).await;
    assert!(!labels.contains("mutated"), "a namespace the selector leaves out was sent: {labels}");
    // A match condition that is false skips the webhook.
    k.ok(&["create", "-f", &k.file("opted-out.json", pod("opted-out", json!({"nomutate": "yes"}))), "-n", "gate"])
        .await;
    let labels = k.ok(&["get", "pod", "opted-out", "-n", "gate", "-o", "jsonpath={.metadata.labels}"]).await;
    assert!(!labels.contains("mutated"), "a false match condition was called: {labels}");

    // The validating webhook: a denial with the webhook's code and message, nothing stored; a
    // warning otherwise; its objectSelector leaves out what it does not select.
    let validating = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny-pods"},
        "webhooks": [hook("deny.keel.test", url("/validate"), &ca,
            json!({"objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}))]});
    k.ok(&["create", "-f", &k.file("validating.json", validating)]).await;
    let denied = refused(&k, "the validating webhook to deny a pod", json!({"deny": "true"})).await;
    assert!(
        denied.contains(r#"Error from server (Forbidden): error when creating "#)
            && denied.contains(r#"admission webhook "deny.keel.test" denied the request: no pods labelled deny"#),
        "{denied}"
    );
    let o = k.run(&["create", "-f", &k.file("fine.json", pod("fine", json!({}))), "-n", "gate"]).await;
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stderr.contains("Warning: checked by the test webhook"), "{}", o.stderr);
    let skipped = pod("skipped", json!({"deny": "true", "skip": "yes"}));
    k.ok(&["create", "-f", &k.file("skipped.json", skipped), "-n", "gate"]).await;
    // An update goes through both webhooks too, with the old object beside the new.
    k.ok(&["label", "pod", "fine", "-n", "gate", "tier=x"]).await;
    let e = k.fails(&["label", "pod", "fine", "-n", "gate", "deny=true"]).await;
    assert!(e.contains("no pods labelled deny"), "{e}");
    let update = seen.lock().iter().rev().find(|(p, _)| p == "/validate").map(|(_, r)| r.clone()).unwrap();
    assert_eq!(update["request"]["operation"], json!("UPDATE"));
    assert_eq!(update["request"]["oldObject"]["metadata"]["name"], json!("fine"));
    assert_eq!(update["request"]["options"]["kind"], json!("UpdateOptions"));

    // A dry run reaches webhooks without side effects, and says so.
    let before = seen.lock().len();
    k.ok(&["create", "-f", &k.file("dry.json", pod("dry", json!({}))), "-n", "gate", "--dry-run=server"]).await;
    let dry: Vec<Value> = seen.lock()[before..].iter().map(|(_, r)| r["request"]["dryRun"].clone()).collect();
    assert!(!dry.is_empty() && dry.iter().all(|d| d == &json!(true)), "{dry:?}");
    assert!(k.fails(&["get", "pod", "dry", "-n", "gate"]).await.contains("NotFound"));
    k.ok(&["delete", "validatingwebhookconfiguration", "deny-pods"]).await;

    // A webhook that cannot be reached: the write fails with failurePolicy Fail, goes on with
    // Ignore.
    let closed = common::port();
    let unreachable = |policy: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": format!("unreachable-{}", policy.to_lowercase())},
            "webhooks": [hook("down.keel.test", json!({"url": format!("https://127.0.0.1:{closed}/validate")}), &ca,
                json!({"failurePolicy": policy, "objectSelector": {"matchLabels": {"probe": policy}}}))]})
    };
    k.ok(&["create", "-f", &k.file("fail.json", unreachable("Fail"))]).await;
    k.ok(&["create", "-f", &k.file("ignore.json", unreachable("Ignore"))]).await;
    let e = refused(&k, "a write to fail on an unreachable webhook", json!({"probe": "Fail"})).await;
    let expected = format!(
        r#"Internal error occurred: failed calling webhook "down.keel.test": failed to call webhook: Post "https://127.0.0.1:{closed}/validate?timeout=10s": dial tcp 127.0.0.1:{closed}: connect: connection refused"#
    );
    assert!(e.contains(&expected), "{e}");
    k.ok(&["create", "-f", &k.file("ignored.json", pod("ignored", json!({"probe": "Ignore"}))), "-n", "gate"]).await;

    // A webhook slower than its timeout.
    let slow = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "slow"},
        "webhooks": [hook("slow.keel.test", url("/slow"), &ca,
            json!({"timeoutSeconds": 1, "objectSelector": {"matchLabels": {"probe": "slow"}}}))]});
    k.ok(&["create", "-f", &k.file("slow.json", slow)]).await;
    let e = refused(&k, "a write to time out on a slow webhook", json!({"probe": "slow"})).await;
    assert!(
        e.contains(&format!(
            r#"failed calling webhook "slow.keel.test": failed to call webhook: Post "https://127.0.0.1:{port}/slow?timeout=1s": context deadline exceeded"#
        )),
        "{e}"
    );

    // A webhook answering another review's uid is a failed call.
    let confused = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "confused"},
        "webhooks": [hook("confused.keel.test", url("/confused"), &ca,
            json!({"objectSelector": {"matchLabels": {"probe": "confused"}}}))]});
    k.ok(&["create", "-f", &k.file("confused.json", confused)]).await;
    let e = refused(&k, "a write to fail on a wrong uid", json!({"probe": "confused"})).await;
    assert!(e.contains(r#"received invalid webhook response: expected response.uid="#), "{e}");

    // A service reference is reached through the service's Endpoints (keel's cluster IPs are not
    // routed), with TLS for the service's DNS name; kube refuses loopback endpoints, so here the
    // service has none and the call fails as kube's does.
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks", "namespace": "gate"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}});
    k.ok(&["create", "-f", &k.file("svc.json", service)]).await;
    let by_service = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "by-service"},
        "webhooks": [hook("svc.keel.test", json!({"service": {"name": "hooks", "namespace": "gate", "path": "/validate/"}}), &ca,
            json!({"objectSelector": {"matchLabels": {"probe": "service"}}}))]});
    k.ok(&["create", "-f", &k.file("by-service.json", by_service)]).await;
    let e = refused(&k, "the webhook behind a service to be called", json!({"probe": "service"})).await;
    assert!(
        e.contains(r#"failed calling webhook "svc.keel.test": failed to call webhook: Post "https://hooks.gate.svc:443/validate?timeout=10s": no endpoints available for service "hooks""#),
        "{e}"
    );

    // The configurations themselves are never sent to webhooks: a broken one can be removed.
    for name in ["unreachable-fail", "unreachable-ignore", "slow", "confused", "by-service"] {
        k.ok(&["delete", "validatingwebhookconfiguration", name]).await;
    }
    k.ok(&["delete", "mutatingwebhookconfiguration", "label-pods"]).await;
    running.stop().await;
}
