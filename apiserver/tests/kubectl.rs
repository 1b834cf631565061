//! kubectl 1.32 against keel-apiserver over HTTPS with the kubeconfig it writes: on its embedded
//! keel member and on etcd 3.4. What kubectl prints is what it prints against kube-apiserver
//! for the same requests (the served slice: namespaces, configmaps and secrets; get, list,
//! create, update, delete).

use std::path::Path;

mod common;

use common::{Kubectl, DEADLINE, KUBECTL};
use keel_apiserver::run::{start, Flags, Running};

async fn serve(dir: &Path, etcd: Option<&str>) -> Running {
    let mut args = vec![
        "keel-apiserver".to_string(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--data-dir={}", dir.join("apiserver").display()),
        // The API alone, as kube-apiserver is without a controller manager: what these scenarios
        // write (statuses, finalizers) stays as written. `tests/control.rs` runs the controllers.
        "--controllers=".into(),
        // No `default` service accounts without their controller (see tests/common).
        "--disable-admission-plugins=ServiceAccount".into(),
    ];
    if let Some(url) = etcd {
        args.push(format!("--etcd-servers={url}"));
    }
    let flags = <Flags as clap::Parser>::parse_from(args);
    start(&flags).await.expect("keel-apiserver starts")
}

/// The scenario, against a started server.
async fn scenario(running: &Running, dir: &Path, progress_trusted: bool) {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let k = Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.join("cache"), files };

    // Discovery and the namespaces kube makes at start.
    let ns = k.ok(&["get", "namespaces", "-o", "name"]).await;
    for n in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(ns.contains(&format!("namespace/{n}\n")), "{ns}");
    }
    // kubectl get prints the server's Table: kube's columns for each resource.
    let table = |out: String| -> Vec<Vec<String>> {
        out.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
    };
    let ns = table(k.ok(&["get", "ns", "default"]).await);
    assert_eq!(
        (ns[0].join(" "), &ns[1][..2]),
        ("NAME STATUS AGE".to_string(), &["default".to_string(), "Active".to_string()][..])
    );
    let resources = k.ok(&["api-resources", "--no-headers"]).await;
    let rows: Vec<Vec<&str>> = resources.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec!["configmaps", "cm", "v1", "true", "ConfigMap"]), "{resources}");
    assert!(rows.contains(&vec!["namespaces", "ns", "v1", "false", "Namespace"]), "{resources}");
    assert!(rows.contains(&vec!["secrets", "v1", "true", "Secret"]), "{resources}");
    assert!(rows.contains(&vec!["serviceaccounts", "sa", "v1", "true", "ServiceAccount"]), "{resources}");
    let version = k.ok(&["version", "-o", "json"]).await;
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["serverVersion"]["minor"], "33", "{version}");

    // Create, get, conflict, replace, list with selectors, delete.
    let cm = |color: &str, rv: Option<&str>| {
        let mut m = serde_json::json!({"name": "app-config", "labels": {"tier": "web"}});
        if let Some(rv) = rv {
            m["resourceVersion"] = rv.into();
        }
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"color": color}})
    };
    let blue = k.file("blue.json", cm("blue", None));
    assert_eq!(k.ok(&["create", "--validate=false", "-f", &blue]).await, "configmap/app-config created\n");
    assert_eq!(k.ok(&["get", "configmap", "app-config", "-o", "jsonpath={.data.color}"]).await, "blue");
    let again = k.fails(&["create", "--validate=false", "-f", &blue]).await;
    assert_eq!(
        again,
        format!("Error from server (AlreadyExists): error when creating \"{blue}\": configmaps \"app-config\" already exists\n")
    );
    let missing = k.fails(&["get", "cm", "missing"]).await;
    assert_eq!(missing, "Error from server (NotFound): configmaps \"missing\" not found\n");
    let rv = k.ok(&["get", "cm", "app-config", "-o", "jsonpath={.metadata.resourceVersion}"]).await;
    let red = k.file("red.json", cm("red", Some(&rv)));
    assert_eq!(k.ok(&["replace", "--validate=false", "-f", &red]).await, "configmap/app-config replaced\n");
    let stale = k.fails(&["replace", "--validate=false", "-f", &red]).await;
    assert_eq!(
        stale,
        format!("Error from server (Conflict): error when replacing \"{red}\": Operation cannot be fulfilled on configmaps \"app-config\": the object has been modified; please apply your changes to the latest version and try again\n")
    );
    assert_eq!(k.ok(&["get", "cm", "app-config", "-o", "jsonpath={.data.color}"]).await, "red");
    assert_eq!(k.ok(&["get", "cm", "-l", "tier=web", "-o", "name"]).await, "configmap/app-config\n");
    let cms = table(k.ok(&["get", "cm", "-l", "tier=web"]).await);
    assert_eq!(
        (cms[0].join(" "), cms[1][0].as_str(), cms[1][1].as_str()),
        ("NAME DATA AGE".to_string(), "app-config", "1")
    );
    assert_eq!(k.ok(&["get", "cm", "-l", "tier!=web", "-o", "name"]).await, "");
    // Patches: kubectl label and annotate (merge patches), and kubectl patch of each type.
    assert_eq!(k.ok(&["label", "cm", "app-config", "team=blue"]).await, "configmap/app-config labeled\n");
    assert_eq!(k.ok(&["annotate", "cm", "app-config", "note=hi"]).await, "configmap/app-config annotated\n");
    let patched = "configmap/app-config patched\n";
    assert_eq!(k.ok(&["patch", "cm", "app-config", "-p", r#"{"data":{"size":"L"}}"#]).await, patched);
    let json_patch = r#"[{"op":"add","path":"/data/shape","value":"round"}]"#;
    assert_eq!(k.ok(&["patch", "cm", "app-config", "--type=json", "-p", json_patch]).await, patched);
    let merge = r#"{"data":{"size":null,"shape":null}}"#;
    assert_eq!(k.ok(&["patch", "cm", "app-config", "--type=merge", "-p", merge]).await, patched);
    let seen = k
        .ok(&["get", "cm", "app-config", "-o", "jsonpath={.metadata.labels.team} {.metadata.annotations.note} {.data}"])
        .await;
    assert_eq!(seen, r#"blue hi {"color":"red"}"#);
    let failed = k
        .fails(&[
            "patch",
            "cm",
            "app-config",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/color","value":"x"}]"#,
        ])
        .await;
    assert!(failed.starts_with("The request is invalid"), "{failed}");
    assert_eq!(
        k.fails(&["label", "cm", "nope", "a=b"]).await,
        "Error from server (NotFound): configmaps \"nope\" not found\n"
    );

    // kubectl get -w: the objects there, then each change, as it happens; once over HTTP/1.1
    // (Go's HTTP/2 turned off: chunked newline-delimited events) and once over HTTP/2 (Go's
    // default with a server offering `h2`; its frame log shows the stream the events came on).
    for (round, godebug, before, after) in [(1, "http2client=0", "red", "green"), (2, "http2debug=2", "green", "blue")]
    {
        let mut watch = tokio::process::Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .arg("--cache-dir")
            .arg(&k.cache)
            .args([
                "get",
                "cm",
                "-w",
                "--output-watch-events",
                "-o",
                "jsonpath={.type} {.object.metadata.name} {.object.data.color}{\"\\n\"}",
            ])
            .env("HOME", &k.cache)
            .env("GODEBUG", godebug)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
        let stderr = watch.stderr.take().unwrap();
        let frames = tokio::spawn(async move {
            let mut log = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut tokio::io::BufReader::new(stderr), &mut log).await;
            log
        });
        macro_rules! next {
            () => {
                tokio::time::timeout(DEADLINE, lines.next_line())
                    .await
                    .expect("a watch event in time")
                    .unwrap()
                    .expect("the watch goes on")
            };
        }
        assert_eq!(next!(), format!("ADDED app-config {before}"));
        let changed = k.file(&format!("{after}.json"), cm(after, None));
        k.ok(&["replace", "--validate=false", "-f", &changed]).await;
        assert_eq!(next!(), format!("MODIFIED app-config {after}"));
        let name = format!("other{round}");
        let other = k.file(&format!("{name}.json"), serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"color": "grey"}}));
        k.ok(&["create", "--validate=false", "-f", &other]).await;
        assert_eq!(next!(), format!("ADDED {name} grey"));
        k.ok(&["delete", "cm", &name]).await;
        assert_eq!(next!(), format!("DELETED {name} grey"));
        watch.kill().await.unwrap();
        let log = frames.await.unwrap();
        // Go logs each HTTP/2 frame it reads; the watch's events came in DATA frames.
        let h2 = log.contains("http2: Framer") && log.contains("read DATA");
        assert_eq!(h2, round == 2, "round {round} over HTTP/2: {h2}\n{log}");
    }

    // Pods: kube's defaults and status, its columns, field selectors, and what an update may change.
    assert_eq!(k.ok(&["run", "web", "--image=nginx", "--labels=app=web"]).await, "pod/web created\n");
    let pods = k.ok(&["get", "pods"]).await;
    assert!(
        pods.starts_with("NAME   READY   STATUS    RESTARTS   AGE\nweb    0/1     Pending   0          "),
        "{pods}"
    );
    let wide = k.ok(&["get", "pods", "-o", "wide"]).await;
    assert!(
        wide.starts_with(
            "NAME   READY   STATUS    RESTARTS   AGE   IP       NODE     NOMINATED NODE   READINESS GATES\n"
        ),
        "{wide}"
    );
    let fields = "{.spec.restartPolicy} {.spec.schedulerName} {.spec.containers[0].imagePullPolicy} {.status.phase} {.status.qosClass}";
    assert_eq!(
        k.ok(&["get", "pod", "web", "-o", &format!("jsonpath={fields}")]).await,
        "Always default-scheduler Always Pending BestEffort"
    );
    assert_eq!(k.ok(&["get", "pods", "--field-selector=status.phase=Pending", "-o", "name"]).await, "pod/web\n");
    let none = k.run(&["get", "pods", "--field-selector=spec.nodeName=node-1"]).await;
    assert_eq!((none.stdout.as_str(), none.stderr.as_str()), ("", "No resources found in default namespace.\n"));
    k.ok(&["set", "image", "pod/web", "web=nginx:1.27"]).await;
    assert_eq!(k.ok(&["get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}"]).await, "nginx:1.27");
    let forbidden = k.fails(&["patch", "pod", "web", "-p", r#"{"spec":{"restartPolicy":"Never"}}"#]).await;
    assert!(forbidden.starts_with("The Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"), "{forbidden}");
    let invalid = k.fails(&["run", "Bad", "--image=x"]).await;
    assert!(
        invalid.starts_with(
            "The Pod \"Bad\" is invalid: \n* metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain"
        ) && invalid.contains("\n* spec.containers[0].name: Invalid value: \"Bad\": a lowercase RFC 1123 label"),
        "{invalid}"
    );
    // The status subresource changes the status only; the pod itself, everything but it.
    let phase = r#"{"status":{"phase":"Running","podIP":"10.0.0.5"}}"#;
    k.ok(&["patch", "pod", "web", "--subresource=status", "--type=merge", "-p", phase]).await;
    k.ok(&["patch", "pod", "web", "--type=merge", "-p", r#"{"status":{"phase":"Failed"}}"#]).await;
    let status = "{.status.phase} {.status.podIP} {.spec.containers[0].image}";
    assert_eq!(k.ok(&["get", "pod", "web", "-o", &format!("jsonpath={status}")]).await, "Running 10.0.0.5 nginx:1.27");
    let image = r#"{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}"#;
    k.ok(&["patch", "pod", "web", "--subresource=status", "-p", image]).await;
    assert_eq!(k.ok(&["get", "pod", "web", "-o", &format!("jsonpath={status}")]).await, "Running 10.0.0.5 nginx:1.27");
    assert_eq!(k.ok(&["get", "pod", "web", "--subresource=status", "-o", "jsonpath={.status.phase}"]).await, "Running");
    assert_eq!(k.ok(&["delete", "pod", "web"]).await, "pod \"web\" deleted\n");

    // Reads and watches from the watch cache, as kube serves them.
    k.ok(&["create", "configmap", "second", "--from-literal=a=b"]).await;
    let uri = "/api/v1/namespaces/default/configmaps";
    let raw = |q: &str| format!("{uri}?{q}");
    let json = |s: String| -> serde_json::Value { serde_json::from_str(&s).unwrap() };
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
    };
    // At resourceVersion 0 a limit is not applied.
    let at_zero = json(k.ok(&["get", "--raw", &raw("resourceVersion=0&limit=1")]).await);
    assert_eq!(names(&at_zero), ["app-config", "second"]);
    assert!(at_zero["metadata"].get("continue").is_none(), "{at_zero}");
    // A consistent list with a limit continues, the rest from the store at the list's revision.
    let first = json(k.ok(&["get", "--raw", &raw("limit=1")]).await);
    assert_eq!(
        (names(&first), first["metadata"]["remainingItemCount"].as_i64()),
        (vec!["app-config".to_string()], Some(1))
    );
    let token = first["metadata"]["continue"].as_str().unwrap();
    let rest = json(k.ok(&["get", "--raw", &raw(&format!("limit=1&continue={token}"))]).await);
    assert_eq!(names(&rest), ["second"]);
    assert_eq!(rest["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);
    // WatchList: the state as ADDED events, then the bookmark that ends them. Without a
    // resourceVersion it starts at the store's current revision, which needs a store whose
    // progress notifications kube trusts (not etcd 3.4.23: kube's error, as an ERROR event).
    let watch_list =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let consistent = k.ok(&["get", "--raw", &raw(watch_list)]).await;
    let streamed = if progress_trusted {
        consistent
    } else {
        assert_eq!(consistent, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled\",\"reason\":\"InternalError\",\"code\":500}}\n");
        k.ok(&["get", "--raw", &raw(&format!("{watch_list}&resourceVersion=0"))]).await
    };
    let events: Vec<serde_json::Value> = streamed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK"], "{streamed}");
    let end = &events[2]["object"]["metadata"];
    assert_eq!(end["annotations"]["k8s.io/initial-events-end"], "true");
    let end_rv: i64 = end["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(end_rv >= first["metadata"]["resourceVersion"].as_str().unwrap().parse::<i64>().unwrap());
    let refused = k.fails(&["get", "--raw", &raw("watch=1&resourceVersionMatch=NotOlderThan")]).await;
    assert!(
        refused.contains("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),
        "{refused}"
    );
    k.ok(&["delete", "configmap", "second"]).await;

    // Server-side dry runs change nothing.
    let dry = k
        .ok(&[
            "create",
            "configmap",
            "dry",
            "--from-literal=a=1",
            "--dry-run=server",
            "-o",
            "jsonpath={.metadata.name}/{.metadata.resourceVersion}",
        ])
        .await;
    assert_eq!(dry, "dry/");
    assert_eq!(k.fails(&["get", "cm", "dry"]).await, "Error from server (NotFound): configmaps \"dry\" not found\n");
    assert_eq!(
        k.ok(&["label", "cm", "app-config", "dry=run", "--dry-run=server"]).await,
        "configmap/app-config labeled (server dry run)\n"
    );
    assert_eq!(k.ok(&["get", "cm", "app-config", "-o", "jsonpath={.metadata.labels.dry}"]).await, "");
    assert_eq!(
        k.ok(&["delete", "cm", "app-config", "--dry-run=server"]).await,
        "configmap \"app-config\" deleted (server dry run)\n"
    );
    assert_eq!(k.ok(&["get", "cm", "app-config", "-o", "name"]).await, "configmap/app-config\n");
    // A delete whose precondition does not hold changes nothing.
    let uri = "/api/v1/namespaces/default/configmaps/app-config";
    let pre = k.file(
        "pre.json",
        serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-its-uid"}}),
    );
    let refused = k.fails(&["delete", "--raw", uri, "-f", &pre]).await;
    assert!(
        refused.contains("Precondition failed: UID in precondition: not-its-uid, UID in object meta: "),
        "{refused}"
    );
    assert_eq!(k.ok(&["get", "cm", "app-config", "-o", "name"]).await, "configmap/app-config\n");

    let bad = k.file(
        "bad.json",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}),
    );
    let invalid = k.fails(&["create", "--validate=false", "-f", &bad]).await;
    assert!(
        invalid.contains("The ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of"),
        "{invalid}"
    );
    assert_eq!(k.ok(&["delete", "cm", "app-config"]).await, "configmap \"app-config\" deleted\n");
    assert_eq!(
        k.fails(&["get", "cm", "app-config"]).await,
        "Error from server (NotFound): configmaps \"app-config\" not found\n"
    );

    // Field validation: unknown fields refused (Strict), warned of (Warn, kube's default).
    let typo = k.file("typo.json", serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo", "labelz": {}}, "dat": {"a": "b"}}));
    let uri = "/api/v1/namespaces/default/configmaps";
    let strict = k.fails(&["create", "--raw", &format!("{uri}?fieldValidation=Strict"), "-f", &typo]).await;
    assert_eq!(
        strict,
        "Error from server (BadRequest): ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dat\", unknown field \"metadata.labelz\"\n"
    );
    let warned = k.run(&["create", "--raw", uri, "-f", &typo]).await;
    assert!(warned.ok, "{}", warned.stderr);
    assert_eq!(warned.stderr, "Warning: unknown field \"dat\"\nWarning: unknown field \"metadata.labelz\"\n");
    let bad_directive = k.fails(&["create", "--raw", &format!("{uri}?fieldValidation=Loose"), "-f", &typo]).await;
    assert!(
        bad_directive.contains(
            "fieldValidation: Unsupported value: \"Loose\": supported values: \"Ignore\", \"Strict\", \"Warn\""
        ),
        "{bad_directive}"
    );

    // DELETE of a collection, by selector: the deleted objects answer.
    for (n, tier) in [("c1", "x"), ("c2", "x"), ("c3", "y")] {
        let f = k.file(&format!("{n}.json"), serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "labels": {"tier": tier}}}));
        k.ok(&["create", "--validate=false", "-f", &f]).await;
    }
    let gone = k.ok(&["delete", "--raw", "/api/v1/namespaces/default/configmaps?labelSelector=tier%3Dx"]).await;
    let gone: serde_json::Value = serde_json::from_str(&gone).unwrap();
    let names: Vec<&str> =
        gone["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!((gone["kind"].as_str(), names), (Some("ConfigMapList"), vec!["c1", "c2"]));
    assert_eq!(k.ok(&["get", "cm", "-l", "tier in (x,y)", "-o", "name"]).await, "configmap/c3\n");
    let ns_collection = k.fails(&["delete", "--raw", "/api/v1/namespaces"]).await;
    assert!(ns_collection.contains("(MethodNotAllowed)"), "{ns_collection}");

    // OpenAPI v3: kubectl explain, and create/apply validated by the server (Strict).
    let explained = k.ok(&["explain", "configmap.data"]).await;
    assert!(
        explained.contains("FIELD: data <map[string]string>")
            && explained.contains("Data contains the configuration data."),
        "{explained}"
    );
    let applied = |color: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"color": color, "size": "M"}});
    let first = k.file("applied.json", applied("blue"));
    assert_eq!(k.ok(&["apply", "-f", &first]).await, "configmap/applied created\n");
    let second = k.file("applied2.json", applied("green"));
    assert_eq!(k.ok(&["apply", "-f", &second]).await, "configmap/applied configured\n");
    assert_eq!(k.ok(&["apply", "-f", &second]).await, "configmap/applied unchanged\n");
    assert_eq!(k.ok(&["get", "cm", "applied", "-o", "jsonpath={.data.color} {.data.size}"]).await, "green M");
    let typo_yaml = k.file(
        "typo2.json",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo2"}, "dat": {}}),
    );
    assert_eq!(
        k.fails(&["create", "-f", &typo_yaml]).await,
        format!("Error from server (BadRequest): error when creating \"{typo_yaml}\": ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dat\"\n")
    );

    // kubectl's own generators send protobuf bodies.
    assert_eq!(k.ok(&["create", "namespace", "made-by-kubectl"]).await, "namespace/made-by-kubectl created\n");
    assert_eq!(k.ok(&["get", "ns", "made-by-kubectl", "-o", "jsonpath={.status.phase}"]).await, "Active");
    let made = k
        .ok(&["create", "configmap", "gen", "-n", "made-by-kubectl", "--from-literal=a=1", "--from-literal=b=2"])
        .await;
    assert_eq!(made, "configmap/gen created\n");
    assert_eq!(
        k.ok(&["get", "cm", "gen", "-n", "made-by-kubectl", "-o", "jsonpath={.data}"]).await,
        r#"{"a":"1","b":"2"}"#
    );
    assert_eq!(k.ok(&["create", "secret", "generic", "tok", "--from-literal=t=xyz"]).await, "secret/tok created\n");
    assert_eq!(k.ok(&["get", "secret", "tok", "-o", "jsonpath={.type} {.data.t}"]).await, "Opaque eHl6");
    assert_eq!(k.ok(&["create", "serviceaccount", "robot"]).await, "serviceaccount/robot created\n");
    let sas = table(k.ok(&["get", "sa"]).await);
    assert_eq!(
        (sas[0].join(" "), &sas[1][..2]),
        ("NAME SECRETS AGE".to_string(), &["robot".to_string(), "0".to_string()][..])
    );
    let deleted = k.ok(&["delete", "--raw", "/api/v1/namespaces/default/serviceaccounts/robot"]).await;
    let deleted: serde_json::Value = serde_json::from_str(&deleted).unwrap();
    assert_eq!(
        (deleted["kind"].as_str(), deleted["metadata"]["name"].as_str()),
        (Some("ServiceAccount"), Some("robot")),
        "a deleted service account answers itself"
    );
    let dup = k.fails(&["create", "namespace", "made-by-kubectl"]).await;
    assert_eq!(dup, "Error from server (AlreadyExists): namespaces \"made-by-kubectl\" already exists\n");

    // A secret's stringData becomes base64 data.
    let secret = k.file(
        "secret.json",
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"password": "s3cret"}}),
    );
    assert_eq!(k.ok(&["create", "--validate=false", "-f", &secret]).await, "secret/db created\n");
    assert_eq!(k.ok(&["get", "secret", "db", "-o", "jsonpath={.type} {.data.password}"]).await, "Opaque czNjcmV0");
    let secrets = table(k.ok(&["get", "secrets"]).await);
    assert_eq!(
        (secrets[0].join(" "), &secrets[1][..3]),
        ("NAME TYPE DATA AGE".to_string(), &["db".to_string(), "Opaque".to_string(), "1".to_string()][..])
    );

    // Namespaces: objects need theirs to exist and not be terminating.
    let in_ns = |ns: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}});
    let nowhere = k.file("nowhere.json", in_ns("nowhere"));
    let no_ns = k.fails(&["create", "--validate=false", "-f", &nowhere]).await;
    assert_eq!(
        no_ns,
        format!("Error from server (NotFound): error when creating \"{nowhere}\": namespaces \"nowhere\" not found\n")
    );
    let team =
        k.file("team.json", serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    assert_eq!(k.ok(&["create", "--validate=false", "-f", &team]).await, "namespace/team created\n");
    assert_eq!(k.ok(&["get", "ns", "team", "-o", "jsonpath={.status.phase}"]).await, "Active");
    assert_eq!(k.ok(&["delete", "ns", "team", "--wait=false"]).await, "namespace \"team\" deleted\n");
    assert_eq!(k.ok(&["get", "ns", "team", "-o", "jsonpath={.status.phase}"]).await, "Terminating");
    let in_team = k.file("in-team.json", in_ns("team"));
    let terminating = k.fails(&["create", "--validate=false", "-f", &in_team]).await;
    assert_eq!(
        terminating,
        format!("Error from server (Forbidden): error when creating \"{in_team}\": configmaps \"c\" is forbidden: unable to create new content in namespace team because it is being terminated\n")
    );

    // The finalize subresource (the namespace controller's): once the finalizers are gone, a
    // delete removes the namespace.
    let mut ns: serde_json::Value = serde_json::from_str(&k.ok(&["get", "ns", "team", "-o", "json"]).await).unwrap();
    ns["spec"]["finalizers"] = serde_json::json!([]);
    let finalized = k.file("team-finalized.json", ns);
    k.ok(&["replace", "--raw", "/api/v1/namespaces/team/finalize", "-f", &finalized]).await;
    assert_eq!(k.fails(&["get", "ns", "team"]).await, "Error from server (NotFound): namespaces \"team\" not found\n");

    workloads(&k).await;
    services(&k).await;
    validation(&k).await;

    // A client without the admin certificate gets nowhere.
    let config = std::fs::read_to_string(&running.kubeconfig).unwrap();
    let anonymous: String = config
        .lines()
        .filter(|l| !l.contains("client-certificate-data") && !l.contains("client-key-data"))
        .collect::<Vec<_>>()
        .join("\n");
    let anonymous = anonymous.replace("  user:\n", "  user: {}\n");
    let path = dir.join("anonymous");
    std::fs::write(&path, anonymous).unwrap();
    let k2 = Kubectl { kubeconfig: path, cache: dir.join("cache2"), files: dir.to_path_buf() };
    assert!(!k2.run(&["get", "ns"]).await.ok, "a client without a certificate was served");
}

/// Deployments and their kin: applied from YAML with kube's defaults, their generation, the
/// scale subresource (`kubectl scale`), status kept apart from spec, and kube's validation.
async fn workloads(k: &Kubectl) {
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: nginx\n        image: nginx:1.27\n        ports:\n        - containerPort: 80\n";
    let path = k.files.join("web.yaml");
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap();
    assert_eq!(k.ok(&["apply", "-f", path]).await, "deployment.apps/web created\n");
    let fields = "jsonpath={.metadata.generation} {.spec.replicas} {.spec.strategy.rollingUpdate.maxSurge} {.spec.revisionHistoryLimit} {.spec.template.spec.containers[0].imagePullPolicy}";
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", fields]).await, "1 1 25% 10 IfNotPresent");
    let rows = k.ok(&["get", "deployments"]).await;
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(&rows[1][..4], ["web", "0/1", "0", "0"]);

    // kubectl scale patches the scale subresource; the spec changes, so the generation moves.
    assert_eq!(k.ok(&["scale", "deploy", "web", "--replicas=3"]).await, "deployment.apps/web scaled\n");
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation} {.spec.replicas}"]).await, "2 3");
    let scale: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale"]).await)
            .unwrap();
    assert_eq!((&scale["kind"], &scale["apiVersion"]), (&"Scale".into(), &"autoscaling/v1".into()));
    assert_eq!((&scale["spec"]["replicas"], &scale["status"]["selector"]), (&3.into(), &"app=web".into()));
    let negative = k.fails(&["scale", "deploy", "web", "--replicas=-1"]).await;
    assert!(negative.contains("--replicas=COUNT"), "{negative}");

    // The status is the status subresource's: a patch of the object leaves it, a patch of the
    // subresource changes only it (and not the generation).
    let status = r#"{"status":{"replicas":3,"readyReplicas":2,"availableReplicas":2,"updatedReplicas":3}}"#;
    assert_eq!(
        k.ok(&["patch", "deploy", "web", "--type=merge", "-p", status]).await,
        "deployment.apps/web patched (no change)\n"
    );
    k.ok(&["patch", "deploy", "web", "--subresource=status", "--type=merge", "-p", status]).await;
    let rows = k.ok(&["get", "deploy", "web", "--no-headers"]).await;
    assert_eq!(&rows.split_whitespace().collect::<Vec<_>>()[..4], ["web", "2/3", "3", "2"]);
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation}"]).await, "2");
    // A label is not the spec; an annotation is, for a Deployment (kube copies them on).
    k.ok(&["label", "deploy", "web", "tier=front"]).await;
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation}"]).await, "2");
    k.ok(&["annotate", "deploy", "web", "note=x"]).await;
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.generation}"]).await, "3");

    // A second apply patches by the merge keys the OpenAPI documents give kubectl: the container
    // is matched by name, so what another writer added to it (an env var) stays.
    k.ok(&["set", "env", "deploy/web", "MODE=blue"]).await;
    std::fs::write(path, yaml.replace("nginx:1.27", "nginx:1.28")).unwrap();
    assert_eq!(k.ok(&["apply", "-f", path]).await, "deployment.apps/web configured\n");
    let container = "jsonpath={.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].env}";
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", container]).await,
        r#"nginx:1.28 [{"name":"MODE","value":"blue"}]"#
    );

    // Validation as kube words it.
    let immutable = k
        .fails(&[
            "patch",
            "deploy",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"selector":{"matchLabels":{"app":"x"}}}}"#,
        ])
        .await;
    assert!(
        immutable.contains("spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"x\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"),
        "{immutable}"
    );
    let bad = yaml
        .replace("name: web\n  labels", "name: bad\n  labels")
        .replace("        app: web\n    spec", "        app: other\n    spec");
    let bad_path = k.files.join("bad.yaml");
    std::fs::write(&bad_path, bad).unwrap();
    let bad = k.fails(&["apply", "-f", bad_path.to_str().unwrap()]).await;
    assert!(
        bad.contains("The Deployment \"bad\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"),
        "{bad}"
    );

    // kubectl's own generators send protobuf bodies.
    assert_eq!(
        k.ok(&["create", "deployment", "gen", "--image=nginx:1.27", "--replicas=0"]).await,
        "deployment.apps/gen created\n"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "gen",
            "-o",
            "jsonpath={.spec.replicas} {.spec.selector.matchLabels.app} {.spec.template.spec.containers[0].name}"
        ])
        .await,
        "0 gen nginx"
    );
    assert_eq!(
        k.ok(&["create", "job", "pi", "--image=perl:5.34", "--", "perl", "-e", "print 1"]).await,
        "job.batch/pi created\n"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "job",
            "pi",
            "-o",
            "jsonpath={.spec.template.spec.restartPolicy} {.spec.backoffLimit} {.metadata.labels.job-name}"
        ])
        .await,
        "Never 6 pi"
    );
    assert_eq!(
        k.ok(&["create", "role", "reader", "--verb=get,list", "--resource=pods"]).await,
        "role.rbac.authorization.k8s.io/reader created\n"
    );
    assert_eq!(k.ok(&["get", "role", "reader", "-o", "jsonpath={.rules[0].verbs}"]).await, r#"["get","list"]"#);
    // RBAC objects: names may hold colons; rules and bindings are validated as kube does.
    assert_eq!(
        k.ok(&["create", "clusterrole", "system:probe", "--verb=get", "--non-resource-url=/healthz"]).await,
        "clusterrole.rbac.authorization.k8s.io/system:probe created\n"
    );
    assert_eq!(
        k.ok(&["create", "rolebinding", "read-jane", "--role=reader", "--user=jane"]).await,
        "rolebinding.rbac.authorization.k8s.io/read-jane created\n"
    );
    let moved =
        k.fails(&["patch", "rolebinding", "read-jane", "--type=merge", "-p", r#"{"roleRef":{"name":"writer"}}"#]).await;
    assert!(moved.contains("roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"writer\"}: cannot change roleRef"), "{moved}");
    let urls = k.file("role-urls.json", serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "urls"}, "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}));
    let refused = k.fails(&["create", "-f", &urls]).await;
    assert!(refused.contains("The Role \"urls\" is invalid: rules[0].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs"), "{refused}");

    // Deletion: a foreground delete leaves the object marked with the collector's finalizer
    // until it is removed; then the object goes.
    k.ok(&["delete", "deploy", "gen", "--cascade=foreground", "--wait=false"]).await;
    let marked = k
        .ok(&["get", "deploy", "gen", "-o", "jsonpath={.metadata.finalizers} {.metadata.deletionGracePeriodSeconds}"])
        .await;
    assert_eq!(marked, r#"["foregroundDeletion"] 0"#);
    k.ok(&["patch", "deploy", "gen", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#]).await;
    assert!(k.fails(&["get", "deploy", "gen"]).await.contains("NotFound"));
    // Any finalizer keeps an object; none may be added once it is being deleted.
    let kept = k.file("kept.json", serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "finalizers": ["example.com/keep"]}}));
    k.ok(&["create", "-f", &kept]).await;
    assert_eq!(k.ok(&["delete", "cm", "kept", "--wait=false"]).await, "configmap \"kept\" deleted\n");
    assert!(!k.ok(&["get", "cm", "kept", "-o", "jsonpath={.metadata.deletionTimestamp}"]).await.is_empty());
    let added = k
        .fails(&[
            "patch",
            "cm",
            "kept",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/more"}]"#,
        ])
        .await;
    assert!(added.contains("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"), "{added}");
    k.ok(&["patch", "cm", "kept", "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]).await;
    assert!(k.fails(&["get", "cm", "kept"]).await.contains("NotFound"));
    // A pod on a node is deleted gracefully: Terminating until its kubelet (or a forced delete)
    // removes it.
    let bound = k.file("bound.json", serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound"}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx:1.27"}]}}));
    k.ok(&["create", "-f", &bound]).await;
    k.ok(&["delete", "pod", "bound", "--wait=false"]).await;
    let terminating = k.ok(&["get", "pod", "bound", "--no-headers"]).await;
    assert_eq!(terminating.split_whitespace().nth(2), Some("Terminating"), "{terminating}");
    assert_eq!(k.ok(&["get", "pod", "bound", "-o", "jsonpath={.metadata.deletionGracePeriodSeconds}"]).await, "30");
    let forced = k.run(&["delete", "pod", "bound", "--grace-period=0", "--force"]).await;
    assert!(forced.ok && forced.stdout == "pod \"bound\" force deleted\n", "{}{}", forced.stdout, forced.stderr);
    assert!(k.fails(&["get", "pod", "bound"]).await.contains("NotFound"));

    // kubectl get all: the category lists every workload kind served.
    let all = k.ok(&["get", "all", "-o", "name"]).await;
    assert!(all.contains("deployment.apps/web\n"), "{all}");
    assert_eq!(k.ok(&["delete", "deploy", "web"]).await, "deployment.apps \"web\" deleted\n");
}

/// Services: the `kubernetes` service on the range's first address, cluster IPs and node ports
/// given without duplicates (held as IPAddress objects and kube's node port bitmap in the store),
/// kube's allocation errors, and what a deleted service held given back.
/// The kinds validated by `keel_apiserver::validation`, and every object's labels, refused as
/// kube refuses them; a StorageClass defaulted as kube defaults it.
async fn validation(k: &Kubectl) {
    let pvc = k.file(
        "pvc.json",
        serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"]}}),
    );
    assert_eq!(
        k.fails(&["create", "-f", &pvc]).await,
        format!("The PersistentVolumeClaim \"data\" is invalid: spec.resources[storage]: Required value\n")
    );
    let labelled = k.file(
        "labelled.json",
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "labelled", "labels": {"tier": "-front"}}}),
    );
    let refused = k.fails(&["create", "-f", &labelled]).await;
    assert!(
        refused.starts_with("The ConfigMap \"labelled\" is invalid: metadata.labels: Invalid value: \"-front\": a valid label must be an empty string"),
        "{refused}"
    );
    let class = k.file(
        "class.json",
        serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"}, "provisioner": "example.com/disk"}),
    );
    k.ok(&["create", "-f", &class]).await;
    assert_eq!(
        k.ok(&["get", "storageclass", "fast", "-o", "jsonpath={.reclaimPolicy} {.volumeBindingMode}"]).await,
        "Delete Immediate"
    );
    let changed =
        k.fails(&["patch", "storageclass", "fast", "--type=merge", "-p", r#"{"parameters":{"type":"ssd"}}"#]).await;
    assert_eq!(
        changed,
        "The StorageClass \"fast\" is invalid: parameters: Forbidden: updates to parameters are forbidden.\n"
    );
}

async fn services(k: &Kubectl) {
    assert_eq!(k.ok(&["get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]).await, "10.0.0.1");
    // Its endpoints are this apiserver: the address and port kubectl reaches it at.
    let port = k.ok(&["get", "svc", "kubernetes", "-o", "jsonpath={.spec.ports[0].targetPort}"]).await;
    let config = std::fs::read_to_string(&k.kubeconfig).unwrap();
    assert!(config.contains(&format!("server: https://127.0.0.1:{port}\n")), "{port}: {config}");
    assert_eq!(
        k.ok(&[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets[0].addresses[0].ip} {.subsets[0].ports[0].name} {.subsets[0].ports[0].port}"
        ])
        .await,
        format!("127.0.0.1 https {port}")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "endpointslices",
            "kubernetes",
            "-o",
            "jsonpath={.addressType} {.endpoints[0].addresses[0]} {.ports[0].port} {.metadata.labels.kubernetes\\.io/service-name}"
        ])
        .await,
        format!("IPv4 127.0.0.1 {port} kubernetes")
    );
    let svc = |name: &str, spec: serde_json::Value| serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    let web = k.file(
        "svc-web.json",
        svc("web", serde_json::json!({"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]})),
    );
    assert_eq!(k.ok(&["create", "-f", &web]).await, "service/web created\n");
    let got = k
        .ok(&[
            "get",
            "svc",
            "web",
            "-o",
            "jsonpath={.spec.clusterIP} {.spec.ports[0].nodePort} {.spec.ports[0].targetPort}",
        ])
        .await;
    let got: Vec<&str> = got.split(' ').collect();
    let (ip, node_port) = (got[0].to_string(), got[1].parse::<u16>().unwrap());
    assert!(ip.starts_with("10.0.0.") && ip != "10.0.0.1", "{ip}");
    assert!((30000..=32767).contains(&node_port) && got[2] == "80", "{got:?}");
    let rows = k.ok(&["get", "svc", "web"]).await;
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]);
    assert_eq!(&rows[1][..5], ["web", "NodePort", &ip, "<none>", &format!("80:{node_port}/TCP")]);
    assert!(k.ok(&["get", "ipaddresses", "-o", "name"]).await.contains(&format!("ipaddress.networking.k8s.io/{ip}\n")));

    // What one service holds, another cannot have.
    let same_ip =
        k.file("svc-same-ip.json", svc("other", serde_json::json!({"clusterIP": ip, "ports": [{"port": 80}]})));
    assert!(k.fails(&["create", "-f", &same_ip]).await.contains(&format!(
        "The Service \"other\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"
    )));
    let same_port = k.file(
        "svc-same-port.json",
        svc("other", serde_json::json!({"type": "NodePort", "ports": [{"port": 81, "nodePort": node_port}]})),
    );
    assert!(k.fails(&["create", "-f", &same_port]).await.contains(&format!(
        "The Service \"other\" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated"
    )));
    let outside = k.file(
        "svc-outside.json",
        svc("other", serde_json::json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]})),
    );
    assert!(k.fails(&["create", "-f", &outside]).await.contains("failed to allocate IP 10.96.0.10: the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 10.0.0.0/24"));
    let bad_name = k.file("svc-bad-name.json", svc("1web", serde_json::json!({"ports": [{"port": 80}]})));
    assert!(k.fails(&["create", "-f", &bad_name]).await.contains("metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character"));
    // The failed creates held nothing; a replace keeps the address and port.
    let replaced = k.file(
        "svc-web-2.json",
        svc("web", serde_json::json!({"type": "NodePort", "selector": {"app": "web2"}, "ports": [{"port": 80}]})),
    );
    k.ok(&["replace", "-f", &replaced]).await;
    assert_eq!(
        k.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].nodePort}"]).await,
        format!("{ip} {node_port}")
    );
    // Deleted, its address and port are free again.
    assert_eq!(k.ok(&["delete", "svc", "web"]).await, "service \"web\" deleted\n");
    let reuse = k.file(
        "svc-reuse.json",
        svc(
            "other",
            serde_json::json!({"type": "NodePort", "clusterIP": ip, "ports": [{"port": 80, "nodePort": node_port}]}),
        ),
    );
    assert_eq!(k.ok(&["create", "-f", &reuse]).await, "service/other created\n");
    k.ok(&["delete", "svc", "other"]).await;
    // kubectl create service sends protobuf.
    assert_eq!(k.ok(&["create", "service", "clusterip", "gen", "--tcp=80:8080"]).await, "service/gen created\n");
    assert_eq!(
        k.ok(&["get", "svc", "gen", "-o", "jsonpath={.spec.ports[0].targetPort} {.spec.selector.app}"]).await,
        "8080 gen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let running = serve(dir.path(), None).await;
    scenario(&running, dir.path(), true).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_on_etcd() {
    let etcd = common::etcd();
    let dir = tempfile::tempdir().unwrap();
    let running = serve(dir.path(), Some(&etcd.url)).await;
    scenario(&running, dir.path(), false).await;
    running.stop().await;
}
