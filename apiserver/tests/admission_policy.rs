//! ValidatingAdmissionPolicy through kubectl 1.32: policies and bindings checked as kube checks
//! them (CEL that does not compile refused), Deny bindings refusing with kube's message and
//! code, parameters from a ConfigMap (and the refusal when there is none), variables, message
//! expressions, match conditions, and Warn bindings warning.

mod common;

use common::{eventually, Kubectl};
use serde_json::{json, Value};

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": spec})
}

/// Deployments, created and updated.
fn deployments() -> Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
        "resources": ["deployments"]}]})
}

/// Tries `kubectl create deployment` with `replicas` (a new name each try, with `args`) until
/// it is refused; kubectl's error.
async fn refused(k: &Kubectl, what: &str, ns: &str, replicas: u32, args: &[&str]) -> String {
    let tries = std::sync::atomic::AtomicUsize::new(0);
    eventually(what, || async {
        let name = format!("d{}", tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let replicas = format!("--replicas={replicas}");
        let mut cmd = vec!["create", "deployment", &name, "--image=nginx", &replicas, "-n", ns];
        cmd.extend_from_slice(args);
        let o = k.run(&cmd).await;
        if o.ok {
            k.ok(&["delete", "deployment", &name, "-n", ns, "--wait=false"]).await;
            Err(format!("deployment {name} created"))
        } else {
            Ok(o.stderr)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_policies_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _client) = common::apiserver(dir.path(), &[]).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };
    k.ok(&["create", "namespace", "shop"]).await;
    k.ok(&["create", "namespace", "bare"]).await;

    // kube's validation: expressions that do not compile, and a binding's actions.
    let broken = policy(
        "broken",
        json!({"matchConstraints": deployments(),
        "validations": [{"expression": "object.spec.replicas <=", "reason": "Teapot"}, {"expression": "nope > 1"}]}),
    );
    let e = k.fails(&["create", "-f", &k.file("broken.json", broken)]).await;
    for part in [
        r#"spec.validations[0].expression: Invalid value: "object.spec.replicas <=": compilation failed: ERROR: <input>:1:"#,
        r#"spec.validations[0].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge""#,
        r#"spec.validations[1].expression: Invalid value: "nope > 1": compilation failed: ERROR: <input>:1:1: undeclared reference to 'nope' (in container '')"#,
    ] {
        assert!(e.contains(part), "{part} not in {e}");
    }
    let empty = policy("empty", json!({}));
    let e = k.fails(&["create", "-f", &k.file("empty.json", empty)]).await;
    assert!(e.contains("spec.matchConstraints: Required value"), "{e}");
    assert!(
        e.contains("spec.validations: Required value: validations or auditAnnotations must contain at least one item"),
        "{e}"
    );
    let loud = binding("loud", json!({"policyName": "max", "validationActions": ["Deny", "Warn"]}));
    let e = k.fails(&["create", "-f", &k.file("loud.json", loud)]).await;
    assert!(e.contains(r#"spec.validationActions: Invalid value: []admissionregistration.ValidationAction{"Deny", "Warn"}: must not contain both Deny and Warn"#), "{e}");

    // A policy with parameters from each namespace's `limits` ConfigMap, a variable, a message
    // expression and a match condition that lets deployments labelled exempt through.
    let max = policy(
        "max-replicas",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": deployments(),
            "matchConditions": [{"name": "not-exempt",
                "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
            "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
            "validations": [{"expression": "variables.replicas <= int(params.data.max)",
                "messageExpression": "'replicas ' + string(variables.replicas) + ' over ' + params.data.max",
                "reason": "Forbidden"}]}),
    );
    k.ok(&["create", "-f", &k.file("max.json", max)]).await;
    let stored: Value =
        serde_json::from_str(&k.ok(&["get", "validatingadmissionpolicy", "max-replicas", "-o", "json"]).await).unwrap();
    assert_eq!(stored["spec"]["failurePolicy"], json!("Fail"));
    assert_eq!(stored["spec"]["matchConstraints"]["matchPolicy"], json!("Equivalent"));
    let bound = binding(
        "max-replicas-binding",
        json!({"policyName": "max-replicas", "validationActions": ["Deny"],
            "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    );
    k.ok(&["create", "-f", &k.file("bound.json", bound)]).await;
    k.ok(&["create", "configmap", "limits", "-n", "shop", "--from-literal=max=3"]).await;

    let e = refused(&k, "the policy to refuse five replicas", "shop", 5, &[]).await;
    assert!(
        e.contains(r#"deployments.apps "d"#)
            && e.contains(r#"is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: replicas 5 over 3"#),
        "{e}"
    );
    k.ok(&["create", "deployment", "small", "--image=nginx", "--replicas=2", "-n", "shop"]).await;
    // An update is judged too; the scale subresource is another resource, which the policy's
    // rules (`deployments`) leave out, as kube's do.
    let e = k.fails(&["patch", "deployment", "small", "-n", "shop", "-p", r#"{"spec":{"replicas":4}}"#]).await;
    assert!(e.contains("replicas 4 over 3"), "{e}");
    k.ok(&["scale", "deployment", "small", "--replicas=4", "-n", "shop"]).await;
    // The match condition lets an exempt deployment through.
    let exempt = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "exempt", "labels": {"exempt": "yes", "app": "x"}},
        "spec": {"replicas": 9, "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    k.ok(&["create", "-f", &k.file("exempt.json", exempt), "-n", "shop"]).await;
    // Without parameters, the binding's parameterNotFoundAction refuses.
    let e = refused(&k, "a namespace without limits to refuse", "bare", 1, &[]).await;
    assert!(
        e.contains("ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{e}"
    );

    // A Warn binding of a policy without parameters: the write is made, the client warned.
    let named = policy(
        "named-apps",
        json!({"matchConstraints": deployments(),
            "validations": [{"expression": "object.metadata.name.startsWith('app-')"},
                {"expression": "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}),
    );
    k.ok(&["create", "-f", &k.file("named.json", named)]).await;
    let warn = binding(
        "named-apps-warn",
        json!({"policyName": "named-apps", "validationActions": ["Warn"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "bare"}}}}),
    );
    k.ok(&["create", "-f", &k.file("warn.json", warn)]).await;
    k.ok(&["create", "configmap", "limits", "-n", "bare", "--from-literal=max=10"]).await;
    let warned = eventually("the Warn binding to warn", || async {
        let name =
            format!("w{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
        let o = k.run(&["create", "deployment", &name, "--image=nginx", "-n", "bare"]).await;
        if o.stderr.contains("Warning: Validation failed") {
            Ok((o.ok, o.stderr))
        } else {
            Err(o.stderr)
        }
    })
    .await;
    assert!(warned.0, "a Warn binding refused: {}", warned.1);
    assert!(
        warned.1.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'named-apps' with binding 'named-apps-warn': failed expression: object.metadata.name.startsWith('app-')"),
        "{}",
        warned.1
    );
    running.stop().await;
}
