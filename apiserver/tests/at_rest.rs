//! Secrets encrypted in the store (`--encryption-provider-config`), checked through the store
//! itself: keel-apiserver on etcd 3.4, `etcdctl get` shows kube's `k8s:enc:` prefix and no
//! plaintext while kubectl reads the Secret back; a new key put first reads the old objects, and
//! a re-write (`kubectl replace`) moves them under itself (kube's rotation).

use std::path::Path;

mod common;

use common::Kubectl;

const KEY1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXowMTIzNDU=";

fn config(dir: &Path, name: &str, keys: &[(&str, &str)]) -> String {
    let keys: String = keys.iter().map(|(n, s)| format!("      - name: {n}\n        secret: {s}\n")).collect();
    let yaml = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n{keys}  - identity: {{}}\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

/// What `etcdctl get` prints for `key` on the etcd at `url`.
fn etcdctl_get(url: &str, key: &str) -> Vec<u8> {
    let out = std::process::Command::new("etcdctl")
        .args(["--endpoints", url, "get", key, "--print-value-only"])
        .env("ETCDCTL_API", "3")
        .output()
        .expect("etcdctl on PATH (scripts/deps.sh installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_encrypted_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = common::etcd();
    let on_etcd = format!("--etcd-servers={}", etcd.url);
    let first = config(dir.path(), "first.yaml", &[("key1", KEY1)]);
    let flags = [on_etcd.clone(), format!("--encryption-provider-config={first}"), "--controllers=".into()];
    let running = common::started(dir.path(), &flags).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };
    k.ok(&["create", "secret", "generic", "db", "--from-literal=password=hunter2-plaintext"]).await;
    k.ok(&["create", "configmap", "settings", "--from-literal=color=blue-plaintext"]).await;
    let stored = etcdctl_get(&etcd.url, "/registry/secrets/default/db");
    assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:key1:"), "{}", String::from_utf8_lossy(&stored));
    let plain = b"hunter2";
    let b64 = b"aHVudGVyMi1wbGFpbnRleHQ"; // the value as base64, as a Secret holds it
    assert!(!stored.windows(plain.len()).any(|w| w == plain) && !stored.windows(b64.len()).any(|w| w == b64));
    assert_eq!(k.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]).await, "aHVudGVyMi1wbGFpbnRleHQ=");
    // Other resources stay as they were.
    assert!(String::from_utf8_lossy(&etcdctl_get(&etcd.url, "/registry/configmaps/default/settings"))
        .contains("blue-plaintext"));
    running.stop().await;

    // Rotation: key2 first, key1 still read; a re-write moves the Secret to key2.
    let second = config(dir.path(), "second.yaml", &[("key2", KEY2), ("key1", KEY1)]);
    let flags = [on_etcd, format!("--encryption-provider-config={second}"), "--controllers=".into()];
    let running = common::started(dir.path(), &flags).await;
    assert_eq!(k.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]).await, "aHVudGVyMi1wbGFpbnRleHQ=");
    let db = k.ok(&["get", "secret", "db", "-o", "json"]).await;
    let file = dir.path().join("db.json");
    std::fs::write(&file, db).unwrap();
    k.ok(&["replace", "-f", file.to_str().unwrap()]).await;
    assert!(etcdctl_get(&etcd.url, "/registry/secrets/default/db").starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    assert_eq!(k.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]).await, "aHVudGVyMi1wbGFpbnRleHQ=");
    running.stop().await;
}
