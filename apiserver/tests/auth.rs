//! Who may do what, through kubectl 1.32 with several identities: the admin's certificate
//! (`system:masters`), a client certificate the CA signed for `alice` (group `dev`), a static
//! token (`bob`), service account tokens (TokenRequest, bound to a pod; legacy Secret tokens),
//! anonymous requests and impersonation — against RBAC objects, with kube's answers and
//! messages; bad credentials refused with 401; escalation refused.

use std::path::Path;

mod common;

use common::{eventually, Kubectl};
use keel_apiserver::run::Running;

/// The server and CA of the admin's kubeconfig.
fn cluster_of(kubeconfig: &Path) -> (String, String) {
    let v: serde_json::Value = serde_yaml_ng::from_slice(&std::fs::read(kubeconfig).unwrap()).unwrap();
    let c = &v["clusters"][0]["cluster"];
    (c["server"].as_str().unwrap().into(), c["certificate-authority-data"].as_str().unwrap().into())
}

/// kubectl with a kubeconfig of its own whose user is `user` (YAML lines under `user:`).
fn identity(dir: &Path, admin: &Path, name: &str, user: &str) -> Kubectl {
    let (server, ca) = cluster_of(admin);
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n{user}\ncontexts:\n- name: keel\n  context:\n    cluster: keel\n    user: {name}\ncurrent-context: keel\n"
    );
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("kubeconfig"), config).unwrap();
    Kubectl { kubeconfig: d.join("kubeconfig"), cache: d.join("cache"), files: d }
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A client certificate for `cn` in `orgs`, signed by `ca` (PEM cert and key); cert and key PEM.
fn client_cert(ca: (&str, &str), cn: &str, orgs: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    for o in orgs {
        p.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
    }
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let ca_key = rcgen::KeyPair::from_pem(ca.1).unwrap();
    let issuer = rcgen::CertificateParams::from_ca_cert_pem(ca.0).unwrap().self_signed(&ca_key).unwrap();
    (p.signed_by(&key, &issuer, &ca_key).unwrap().pem(), key.serialize_pem())
}

fn cert_user(cert: &(String, String)) -> String {
    format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&cert.0), b64(&cert.1))
}

async fn serve(dir: &Path) -> Running {
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "bob-token,bob,1001,\"ops,oncall\"\n").unwrap();
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: None\n  nonResourceURLs: [\"/api*\", \"/version\", \"/openapi*\"]\n- level: RequestResponse\n  resources:\n  - group: \"\"\n    resources: [configmaps]\n- level: Metadata\n",
    )
    .unwrap();
    let flags = [
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        format!("--token-auth-file={}", tokens.display()),
        "--controllers=serviceaccount,serviceaccount-token,clusterrole-aggregation".into(),
    ];
    common::started(dir, &flags).await
}

/// Waits until `k`'s credentials are refused (401).
async fn refused_soon(k: &Kubectl, what: &str) {
    eventually(what, || async {
        let o = k.run(&["get", "--raw", "/version"]).await;
        if o.stderr == UNAUTHORIZED {
            Ok(())
        } else {
            Err(format!("{}{}", o.stdout, o.stderr))
        }
    })
    .await
}

const FORBIDDEN: &str = "Error from server (Forbidden): ";
const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permissions_matrix_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let running = serve(dir.path()).await;
    let admin =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };
    let pki = dir.path().join("apiserver").join("pki");
    let ca =
        (std::fs::read_to_string(pki.join("ca.crt")).unwrap(), std::fs::read_to_string(pki.join("ca.key")).unwrap());
    let alice =
        identity(dir.path(), &running.kubeconfig, "alice", &cert_user(&client_cert((&ca.0, &ca.1), "alice", &["dev"])));
    let bob = identity(dir.path(), &running.kubeconfig, "bob", "    token: bob-token");
    // No credential kube reads (kubectl prompts for one when a user has none at all; basic
    // auth is not a credential kube-apiserver takes).
    let anonymous = identity(dir.path(), &running.kubeconfig, "anonymous", "    username: nobody");
    // A CA of the same name as the cluster's, not the cluster's: kubectl presents its
    // certificate, which does not verify.
    let fake = {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, "keel-apiserver-ca");
        (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
    };
    let stranger = identity(
        dir.path(),
        &running.kubeconfig,
        "stranger",
        &cert_user(&client_cert((&fake.0, &fake.1), "mallory", &["system:masters"])),
    );
    let forger = identity(dir.path(), &running.kubeconfig, "forger", "    token: not-a-token");

    // The RBAC objects: alice reads pods in `team`, bob administers `team`, the `reader`
    // service account views it.
    admin.ok(&["create", "namespace", "team"]).await;
    admin.ok(&["create", "role", "pod-reader", "-n", "team", "--verb=get,list,watch", "--resource=pods"]).await;
    admin.ok(&["create", "rolebinding", "alice-reads", "-n", "team", "--role=pod-reader", "--user=alice"]).await;
    admin.ok(&["create", "rolebinding", "bob-admin", "-n", "team", "--clusterrole=admin", "--user=bob"]).await;
    admin.ok(&["create", "serviceaccount", "reader", "-n", "team"]).await;
    admin
        .ok(&[
            "create",
            "rolebinding",
            "reader-views",
            "-n",
            "team",
            "--clusterrole=view",
            "--serviceaccount=team:reader",
        ])
        .await;
    admin
        .ok(&[
            "run",
            "web",
            "-n",
            "team",
            "--image=nginx",
            "--overrides={\"spec\":{\"serviceAccountName\":\"reader\"}}",
        ])
        .await;

    // Who each one is.
    let whoami =
        alice.ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"]).await;
    assert_eq!(whoami, "alice [\"dev\",\"system:authenticated\"]");
    let whoami = bob
        .ok(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}",
        ])
        .await;
    assert_eq!(whoami, "bob 1001 [\"ops\",\"oncall\",\"system:authenticated\"]");

    // alice: pods in team, nothing else.
    assert!(alice.ok(&["get", "pods", "-n", "team", "-o", "name"]).await.contains("pod/web"));
    assert_eq!(
        alice.fails(&["get", "pods", "-n", "default"]).await,
        format!("{FORBIDDEN}pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"\n")
    );
    assert_eq!(
        alice.fails(&["delete", "pod", "web", "-n", "team"]).await,
        format!("{FORBIDDEN}pods \"web\" is forbidden: User \"alice\" cannot delete resource \"pods\" in API group \"\" in the namespace \"team\"\n")
    );
    assert_eq!(
        alice.fails(&["get", "nodes"]).await,
        format!("{FORBIDDEN}nodes is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope\n")
    );
    assert_eq!(alice.ok(&["auth", "can-i", "watch", "pods", "-n", "team"]).await, "yes\n");
    let no = alice.run(&["auth", "can-i", "create", "pods", "-n", "team"]).await;
    assert_eq!((no.ok, no.stdout.as_str()), (false, "no\n"));
    assert_eq!(
        alice.run(&["auth", "can-i", "get", "pods", "--subresource=log", "-n", "team"]).await.stdout,
        "no\n",
        "a subresource is its own"
    );
    let list = alice.ok(&["auth", "can-i", "--list", "-n", "team"]).await;
    assert!(list.lines().any(|l| l.starts_with("pods ") && l.ends_with("[get list watch]")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("selfsubjectaccessreviews.authorization.k8s.io ")), "{list}");

    // bob administers team: configmaps (a protobuf create), roles within what he holds; not
    // what he does not hold, not beyond the namespace.
    bob.ok(&["create", "configmap", "settings", "-n", "team", "--from-literal=a=1"]).await;
    bob.ok(&["create", "role", "deleter", "-n", "team", "--verb=delete", "--resource=pods"]).await;
    let refused = bob.fails(&["create", "role", "node-lister", "-n", "team", "--verb=list", "--resource=nodes"]).await;
    assert_eq!(
        refused,
        format!("{FORBIDDEN}roles.rbac.authorization.k8s.io \"node-lister\" is forbidden: user \"bob\" (groups=[\"ops\" \"oncall\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"list\"]}}\n")
    );
    let refused = bob
        .fails(&["create", "rolebinding", "all-mine", "-n", "team", "--clusterrole=cluster-admin", "--user=bob"])
        .await;
    assert!(
        refused.contains("rolebindings.rbac.authorization.k8s.io \"all-mine\" is forbidden: user \"bob\""),
        "{refused}"
    );
    assert!(refused.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"), "{refused}");
    bob.ok(&["create", "rolebinding", "alice-deletes", "-n", "team", "--role=deleter", "--user=alice"]).await;
    eventually("alice to delete pods once bound", || async {
        match alice.run(&["auth", "can-i", "delete", "pods", "-n", "team"]).await.stdout.as_str() {
            "yes\n" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;
    assert!(bob
        .fails(&["get", "configmaps", "-n", "default"])
        .await
        .contains("User \"bob\" cannot list resource \"configmaps\""));

    // Impersonation: the admin may act as anyone; bob may not.
    assert!(admin.ok(&["get", "pods", "-n", "team", "--as=alice", "-o", "name"]).await.contains("pod/web"));
    assert!(admin
        .fails(&["get", "secrets", "-n", "team", "--as=alice"])
        .await
        .contains("User \"alice\" cannot list resource \"secrets\""));
    let as_group = admin
        .ok(&[
            "auth",
            "whoami",
            "--as=carol",
            "--as-group=dev",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
        ])
        .await;
    assert_eq!(as_group, "carol [\"dev\",\"system:authenticated\"]");
    assert_eq!(
        bob.fails(&["get", "pods", "-n", "team", "--as=alice"]).await,
        format!("{FORBIDDEN}users \"alice\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope\n")
    );

    // Service account tokens: a TokenRequest's token is the account's; bound to a pod, it dies
    // with the pod.
    let token = admin.ok(&["create", "token", "reader", "-n", "team"]).await;
    let reader = identity(dir.path(), &running.kubeconfig, "reader", &format!("    token: {}", token.trim()));
    assert!(reader.ok(&["get", "pods", "-n", "team", "-o", "name"]).await.contains("pod/web"));
    assert_eq!(
        reader.fails(&["delete", "pod", "web", "-n", "team"]).await,
        format!("{FORBIDDEN}pods \"web\" is forbidden: User \"system:serviceaccount:team:reader\" cannot delete resource \"pods\" in API group \"\" in the namespace \"team\"\n")
    );
    let whoami = reader.ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"]).await;
    assert_eq!(whoami, "[\"system:serviceaccounts\",\"system:serviceaccounts:team\",\"system:authenticated\"]");
    let bound = admin
        .ok(&["create", "token", "reader", "-n", "team", "--bound-object-kind=Pod", "--bound-object-name=web"])
        .await;
    let pod_reader = identity(dir.path(), &running.kubeconfig, "pod-reader", &format!("    token: {}", bound.trim()));
    let pod_name = pod_reader
        .ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.extra.authentication\\.kubernetes\\.io/pod-name}"])
        .await;
    assert_eq!(pod_name, "[\"web\"]");
    admin.ok(&["delete", "pod", "web", "-n", "team", "--grace-period=0", "--force"]).await;
    refused_soon(&pod_reader, "the pod-bound token to be refused").await;
    let refused = admin.fails(&["create", "token", "reader", "-n", "team", "--duration=1m"]).await;
    assert!(refused.contains("may not specify a duration less than 10 minutes"), "{refused}");
    assert!(admin
        .fails(&["create", "token", "nobody", "-n", "team"])
        .await
        .contains("serviceaccounts \"nobody\" not found"));

    // A legacy token Secret: filled by the token controller, good while the Secret stands.
    let secret = admin.file(
        "secret.json",
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "reader-token", "namespace": "team", "annotations": {"kubernetes.io/service-account.name": "reader"}}}),
    );
    admin.ok(&["create", "-f", &secret]).await;
    let legacy = eventually("the token controller to fill the Secret", || async {
        let t = admin.ok(&["get", "secret", "reader-token", "-n", "team", "-o", "jsonpath={.data.token}"]).await;
        if t.is_empty() {
            Err("no token yet".to_string())
        } else {
            use base64::Engine as _;
            Ok(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(t).unwrap()).unwrap())
        }
    })
    .await;
    let legacy_reader = identity(dir.path(), &running.kubeconfig, "legacy", &format!("    token: {legacy}"));
    assert_eq!(
        legacy_reader.ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).await,
        "system:serviceaccount:team:reader"
    );
    admin.ok(&["delete", "secret", "reader-token", "-n", "team"]).await;
    refused_soon(&legacy_reader, "the legacy token to be refused once its Secret is gone").await;

    // Anonymous: public information only. Bad credentials: 401, not anonymous.
    assert!(anonymous.ok(&["get", "--raw", "/version"]).await.contains("\"gitVersion\""));
    assert_eq!(
        anonymous.fails(&["get", "--raw", "/api/v1/namespaces/team/pods"]).await,
        format!("{FORBIDDEN}pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\"\n")
    );
    assert_eq!(
        anonymous.fails(&["get", "--raw", "/apis"]).await,
        format!("{FORBIDDEN}forbidden: User \"system:anonymous\" cannot get path \"/apis\"\n")
    );
    assert_eq!(forger.fails(&["get", "--raw", "/version"]).await, UNAUTHORIZED);
    assert_eq!(stranger.fails(&["get", "--raw", "/version"]).await, UNAUTHORIZED, "a certificate of another CA");
    running.stop().await;

    // The audit log: one line per request the policy keeps, at its level, in kube's Event form.
    let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let events: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events.iter().all(|e| e["kind"] == "Event" && e["apiVersion"] == "audit.k8s.io/v1"));
    assert!(events.iter().all(|e| e["stage"] != "RequestReceived"), "the policy omits RequestReceived");
    assert!(events.iter().all(|e| !e["requestURI"].as_str().unwrap().starts_with("/version")), "level None");
    let refused = events
        .iter()
        .find(|e| e["user"]["username"] == "alice" && e["verb"] == "list" && e["objectRef"]["namespace"] == "default")
        .expect("alice's refused list");
    assert_eq!(refused["level"], "Metadata");
    assert_eq!(refused["stage"], "ResponseComplete");
    assert_eq!(
        refused["objectRef"],
        serde_json::json!({"resource": "pods", "namespace": "default", "apiVersion": "v1"})
    );
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
    assert_eq!(refused["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert!(refused.get("requestObject").is_none());
    let made = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps")
        .expect("bob's configmap");
    assert_eq!(made["level"], "RequestResponse");
    assert_eq!(made["user"]["username"], "bob");
    assert_eq!(made["responseStatus"], serde_json::json!({"metadata": {}, "code": 201}));
    assert_eq!(made["responseObject"]["metadata"]["name"], "settings");
    let impersonating =
        events.iter().find(|e| e["impersonatedUser"]["username"] == "carol").expect("carol, impersonated");
    assert_eq!(impersonating["user"]["username"], "kubernetes-admin");
}
