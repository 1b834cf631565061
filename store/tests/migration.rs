//! Moving between etcd and keel, with every revision:
//!
//! - etcd 3.4 goes through a seeded history (puts and overwrites, single and range deletes, a
//!   transaction, leases with keys, a revoked lease, a compaction, more writes, auth on), and
//!   `etcdctl snapshot save` fetches its snapshot. `keel snapshot restore` restores it into a
//!   3-member keel cluster, which must answer every read of [`reads`] through etcdctl exactly as
//!   the etcd did: all keys at every revision from 1 to one past the current one (compacted
//!   ones refused, the future one too), leases and their TTLs, users, roles and auth checks.
//! - The way back: `etcdctl snapshot save` against keel, `etcdctl snapshot status` of that file,
//!   etcd's own `etcdctl snapshot restore` of it into a new etcd, and `keel snapshot restore` of
//!   it into a new keel; both answer the same reads as the first etcd.
//! - Files that must be refused (a changed byte, a missing hash, a truncation, not a snapshot)
//!   are, with etcd's messages, and leave no data directory.
//! - `keel migrate --from` copies a running etcd and follows it while it takes more writes
//!   (including a lease revoked and a compaction), until stopped; keel started on the result
//!   answers the reads as etcd does.
//!
//! Run: `cargo test --workspace --test migration`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::etcdctl::run as etcdctl;
use common::{poll_until, start_prepared, unstarted_cluster, Kind, Server};
use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::request_op::Request;
use keel_proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest, RequestOp,
    TxnRequest,
};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);
const ROOT: &str = "--user=root:rootpw";

/// Seeds `etcd` with a history; returns the leases still granted.
async fn seed(etcd: &Server) -> Vec<i64> {
    let mut kv = etcd.kv().await;
    let mut leases = LeaseClient::new(etcd.channel().await);
    let put = |key: &str, value: String, lease: i64| PutRequest {
        key: key.as_bytes().to_vec().into(),
        value: value.into_bytes().into(),
        lease,
        ..Default::default()
    };
    for i in 0..40 {
        kv.put(put(&format!("k/{}", i % 12), format!("v{i}"), 0)).await.expect("put");
    }
    let mut granted = Vec::new();
    for ttl in [600, 900, 300] {
        granted.push(leases.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await.expect("grant").into_inner().id);
    }
    for (name, lease) in ["a", "b", "c"].iter().zip(&granted) {
        kv.put(put(&format!("leased/{name}"), "x".into(), *lease)).await.expect("put on a lease");
    }
    kv.delete_range(DeleteRangeRequest { key: b"k/3".to_vec().into(), ..Default::default() }).await.expect("delete");
    let range =
        DeleteRangeRequest { key: b"k/1".to_vec().into(), range_end: b"k/2".to_vec().into(), ..Default::default() };
    kv.delete_range(range).await.expect("delete a range");
    let op = |r: Request| RequestOp { request: Some(r) };
    let txn = TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Greater as i32,
            target: CompareTarget::Version as i32,
            key: b"k/2".to_vec().into(),
            target_union: Some(TargetUnion::Version(0)),
            ..Default::default()
        }],
        success: vec![
            op(Request::RequestPut(put("t/1", "one".into(), 0))),
            op(Request::RequestPut(put("t/2", "two".into(), granted[0]))),
            op(Request::RequestDeleteRange(DeleteRangeRequest { key: b"k/4".to_vec().into(), ..Default::default() })),
            op(Request::RequestPut(put("k/5", "in a txn".into(), 0))),
        ],
        failure: vec![op(Request::RequestPut(put("never", "".into(), 0)))],
    };
    assert!(kv.txn(txn).await.expect("txn").into_inner().succeeded);
    leases.lease_revoke(LeaseRevokeRequest { id: granted[2] }).await.expect("revoke");
    let rev = kv.put(put("k/6", "before the compaction".into(), 0)).await.expect("put").into_inner();
    let rev = rev.header.expect("header").revision;
    kv.compact(CompactionRequest { revision: rev - 15, physical: true }).await.expect("compact");
    for i in 0..10 {
        kv.put(put(&format!("after/{i}"), format!("a{i}"), 0)).await.expect("put");
    }
    kv.put(put("k/3", "again".into(), 0)).await.expect("put");
    for args in [
        "user add root:rootpw",
        "user add alice:alicepw",
        "role add reader",
        "role grant-permission reader read k/ --prefix=true",
        "user grant-role alice reader",
        "user grant-role root root",
        "auth enable",
    ] {
        let (code, out, err) = etcdctl(etcd, &args.split(' ').collect::<Vec<_>>(), DEADLINE).await;
        assert_eq!(code, Some(0), "etcdctl {args}: {out}{err}");
    }
    granted.truncate(2);
    granted
}

/// etcd's current revision (with auth on).
async fn revision(server: &Server) -> i64 {
    let out = ok(server, &[ROOT, "endpoint", "status", "-w", "json"]).await;
    let status: Value = serde_json::from_str(&out).expect("endpoint status json");
    status[0]["Status"]["header"]["revision"].as_i64().expect("revision")
}

async fn ok(server: &Server, args: &[&str]) -> String {
    let (code, out, err) = etcdctl(server, args, DEADLINE).await;
    assert_eq!(code, Some(0), "etcdctl {args:?} against {}: {out}{err}", server.kind().name());
    out
}

/// Every read the two servers must answer alike, for a store at revision `rev` holding `leases`.
fn reads(rev: i64, leases: &[i64]) -> Vec<Vec<String>> {
    let mut all: Vec<Vec<String>> = Vec::new();
    let mut add = |args: &str| all.push(args.split(' ').map(String::from).collect());
    for r in 1..=rev + 1 {
        add(&format!("{ROOT} get k --prefix=true -w json --rev={r}"));
        add(&format!("{ROOT} get --from-key=true a -w json --rev={r}"));
    }
    add(&format!("{ROOT} get --from-key=true a -w json"));
    add(&format!("{ROOT} get k/2 -w fields"));
    add(&format!("{ROOT} lease list"));
    for l in leases {
        add(&format!("{ROOT} lease timetolive {l:x} --keys=true -w json"));
    }
    add(&format!("{ROOT} user list"));
    add(&format!("{ROOT} role list"));
    add(&format!("{ROOT} user get alice"));
    add(&format!("{ROOT} role get reader"));
    add(&format!("{ROOT} user get root"));
    add("--user=alice:alicepw get k/2");
    add("--user=alice:alicepw get t/1");
    add("--user=alice:wrong get k/2");
    add("get k/2");
    all
}

/// What is compared of one etcdctl answer: the exit code, stdout (JSON with the fields that
/// name a member, cluster or Raft term dropped, and a remaining TTL checked then dropped; lists
/// of leases sorted) and the last line of stderr (the lines before carry timestamps).
fn normalise(code: Option<i32>, out: &str, err: &str) -> String {
    let out = match serde_json::from_str::<Value>(out) {
        Ok(mut v) => {
            strip(&mut v);
            v.to_string()
        }
        Err(_) => {
            // `-w fields` names the cluster, member and term.
            let named = ["\"ClusterID\" : ", "\"MemberID\" : ", "\"RaftTerm\" : "];
            let mut lines: Vec<&str> = out.lines().filter(|l| !named.iter().any(|n| l.starts_with(n))).collect();
            lines.sort();
            lines.join("\n")
        }
    };
    let err = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    format!("exit {code:?}\n{out}\n{err}")
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in ["cluster_id", "member_id", "raft_term"] {
                m.remove(k);
            }
            if let (Some(ttl), Some(granted)) =
                (m.get("ttl").and_then(Value::as_i64), m.get("granted-ttl").and_then(Value::as_i64))
            {
                assert!((0..=granted).contains(&ttl), "remaining TTL {ttl} of {granted}");
                m.remove("ttl");
            }
            // etcd lists a lease's keys in map order.
            if let Some(Value::Array(keys)) = m.get_mut("keys") {
                keys.sort_by_key(Value::to_string);
            }
            m.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Runs every read on both servers and fails with every difference.
async fn same_reads(etcd: &Server, other: &Server, rev: i64, leases: &[i64]) {
    let mut differences = Vec::new();
    for args in reads(rev, leases) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = etcdctl(etcd, &args, DEADLINE).await;
        let want = normalise(code, &out, &err);
        let (code, out, err) = etcdctl(other, &args, DEADLINE).await;
        let got = normalise(code, &out, &err);
        if want != got {
            differences.push(format!(
                "etcdctl {}\n--- etcd\n{want}\n--- {}\n{got}",
                args.join(" "),
                other.kind().name()
            ));
        }
    }
    assert!(differences.is_empty(), "{} reads differ:\n{}", differences.len(), differences.join("\n\n"));
}

/// `keel snapshot restore` (or, for etcd, `etcdctl snapshot restore`) of `file` into `member`'s
/// data directory, with etcd's restore flags; returns the exit code and stderr.
fn restore(kind: Kind, file: &Path, member: &Server, extra: &[&str]) -> (Option<i32>, String) {
    let mut cmd = match kind {
        Kind::Keel => {
            let mut c = Command::new(Kind::Keel.program());
            c.args(["snapshot", "restore"]);
            c
        }
        Kind::Etcd => {
            let mut c = Command::new("etcdctl");
            c.env("ETCDCTL_API", "3").args(["snapshot", "restore"]);
            c
        }
    };
    cmd.arg(file)
        .args(["--name", member.name(), "--data-dir"])
        .arg(member.data_dir())
        .args(["--initial-cluster", &member.initial_cluster(), "--initial-cluster-token", "etcd-cluster"])
        .args(["--initial-advertise-peer-urls", &member.peer_url()])
        .args(extra)
        .stdin(Stdio::null());
    let out = cmd.output().expect("run restore");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn restored(kind: Kind, file: &Path, member: &Server) {
    let (code, err) = restore(kind, file, member, &[]);
    assert_eq!(code, Some(0), "{} restore of {}: {err}", kind.name(), file.display());
}

#[tokio::test]
async fn etcd_history_moves_to_keel_and_back() {
    let etcd = Server::start(Kind::Etcd).await;
    let leases = seed(&etcd).await;
    let rev = revision(&etcd).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let from_etcd = dir.path().join("etcd.db");
    ok(&etcd, &[ROOT, "snapshot", "save", from_etcd.to_str().unwrap()]).await;

    // Into a 3-member keel cluster, each member restoring the same file.
    let mut keel = unstarted_cluster(Kind::Keel, 3, &[]);
    for m in &keel {
        restored(Kind::Keel, &from_etcd, m);
    }
    start_prepared(&mut keel).await;
    same_reads(&etcd, &keel[0], rev, &leases).await;
    same_reads(&etcd, &keel[2], rev, &leases).await;

    // Back: keel's snapshot is etcd's file.
    let from_keel = dir.path().join("keel.db");
    ok(&keel[1], &[ROOT, "snapshot", "save", from_keel.to_str().unwrap()]).await;
    let status = ok(&keel[1], &["snapshot", "status", from_keel.to_str().unwrap(), "-w", "json"]).await;
    let status: Value = serde_json::from_str(&status).expect("snapshot status json");
    assert_eq!(status["revision"].as_i64(), Some(rev), "{status}");
    assert!(status["totalKey"].as_i64().unwrap_or(0) > 40, "{status}");

    let mut etcd2 = unstarted_cluster(Kind::Etcd, 1, &[]);
    restored(Kind::Etcd, &from_keel, &etcd2[0]);
    start_prepared(&mut etcd2).await;
    same_reads(&etcd, &etcd2[0], rev, &leases).await;

    let mut keel2 = unstarted_cluster(Kind::Keel, 1, &[]);
    restored(Kind::Keel, &from_keel, &keel2[0]);
    start_prepared(&mut keel2).await;
    same_reads(&etcd, &keel2[0], rev, &leases).await;
}

#[tokio::test]
async fn bad_snapshot_files_are_refused_and_leave_nothing() {
    let etcd = Server::start(Kind::Etcd).await;
    let mut kv = etcd.kv().await;
    for i in 0..50 {
        let put = PutRequest {
            key: format!("k{i}").into_bytes().into(),
            value: vec![b'v'; 100].into(),
            ..Default::default()
        };
        kv.put(put).await.expect("put");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.db");
    ok(&etcd, &["snapshot", "save", good.to_str().unwrap()]).await;
    let bytes = std::fs::read(&good).expect("read snapshot");
    let write = |name: &str, b: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, b).expect("write file");
        p
    };
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x40;
    let cases: Vec<(std::path::PathBuf, &[&str], &str)> = vec![
        (write("flipped.db", &flipped), &[], "expected sha256 ["),
        (write("no-hash.db", &bytes[..bytes.len() - 32]), &[], "snapshot missing hash but --skip-hash-check=false"),
        (write("truncated.db", &bytes[..bytes.len() / 2]), &["--skip-hash-check"], ""),
        (write("noise.db", &[7u8; 10_000]), &[], "not a snapshot file"),
        (dir.path().join("absent.db"), &[], "No such file"),
    ];
    for (file, flags, says) in &cases {
        let member = &unstarted_cluster(Kind::Keel, 1, &[])[0];
        let (code, err) = restore(Kind::Keel, file, member, flags);
        assert_eq!(code, Some(1), "{}: {err}", file.display());
        assert!(err.starts_with("Error: ") && err.contains(says), "{}: {err}", file.display());
        assert!(!member.data_dir().exists(), "{}: a data directory was left behind", file.display());
    }
    // etcd's own rule: without its hash, a file restores with --skip-hash-check.
    let mut members = unstarted_cluster(Kind::Keel, 1, &[]);
    let (code, err) =
        restore(Kind::Keel, &write("raw.db", &bytes[..bytes.len() - 32]), &members[0], &["--skip-hash-check"]);
    assert_eq!(code, Some(0), "{err}");
    start_prepared(&mut members).await;
    let out = ok(&members[0], &["get", "k", "--prefix=true", "--keys-only=true", "-w", "json"]).await;
    let got: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(got["count"].as_i64(), Some(50), "{out}");
}

#[tokio::test]
async fn keel_migrate_follows_a_running_etcd() {
    let etcd = Server::start(Kind::Etcd).await;
    let mut leases = seed(&etcd).await;
    let mut keel = unstarted_cluster(Kind::Keel, 1, &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("migrate.log");
    let mut cmd = Command::new(Kind::Keel.program());
    cmd.args(["migrate", "--from", &etcd.endpoint(), "--user", "root:rootpw", "--follow"])
        .args(["--name", keel[0].name(), "--data-dir"])
        .arg(keel[0].data_dir())
        .args(["--initial-cluster", &keel[0].initial_cluster(), "--initial-advertise-peer-urls", &keel[0].peer_url()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    common::die_with_parent(&mut cmd);
    let mut child = Reaped(cmd.spawn().expect("spawn keel migrate"));
    let said = |what: &str| std::fs::read_to_string(&log).unwrap_or_default().contains(what);
    assert!(
        poll_until(DEADLINE, Duration::from_millis(50), || said("copied etcd's snapshot")).await,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // More writes while it follows: puts, a transaction, a delete, a new lease with a key, a
    // lease revoked (deleting its key), and a compaction.
    let lease = ok(&etcd, &[ROOT, "lease", "grant", "500"]).await;
    let lease = lease.split_whitespace().nth(1).expect("lease id").to_string();
    for args in [
        vec![ROOT, "put", "k/7", "followed"],
        vec![ROOT, "put", "k/8", "on a new lease", "--lease", &lease],
        vec![ROOT, "del", "k/2"],
        vec![ROOT, "del", "after/", "--prefix=true"],
        vec![ROOT, "put", "k/9", "x"],
    ] {
        ok(&etcd, &args).await;
    }
    let script = "\nput t/3 three\nput t/4 four\ndel t/1\n\n\n";
    let mut txn = common::etcdctl::Etcdctl::spawn(&etcd, &[ROOT.into(), "txn".into()], Some(script));
    poll_until(DEADLINE, Duration::from_millis(10), || txn.exited()).await;
    let (code, out, err) = txn.finish();
    assert_eq!(code, Some(0), "txn: {out}{err}");
    ok(&etcd, &[ROOT, "lease", "revoke", &format!("{:x}", leases.remove(1))]).await;
    let before = revision(&etcd).await;
    ok(&etcd, &[ROOT, "compact", &(before - 3).to_string()]).await;
    ok(&etcd, &[ROOT, "put", "k/10", "last"]).await;
    leases.push(i64::from_str_radix(&lease, 16).expect("hex lease id"));
    let rev = revision(&etcd).await;
    let caught_up = format!("caught up with etcd at revision {rev}");
    assert!(
        poll_until(DEADLINE, Duration::from_millis(50), || said(&caught_up)).await,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let mut status = None;
    poll_until(DEADLINE, Duration::from_millis(20), || {
        status = child.0.try_wait().expect("wait");
        status.is_some()
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.is_some_and(|s| s.success()), "keel migrate: {status:?}\n{text}");
    assert!(text.contains(&format!("stopped at revision {rev}")), "{text}");

    start_prepared(&mut keel).await;
    same_reads(&etcd, &keel[0], rev, &leases).await;
}

/// A child process killed and reaped when dropped.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
