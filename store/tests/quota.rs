//! The space quota, run the same way against etcd 3.4 and keel: with a small
//! `--quota-backend-bytes`, writes fill the backend until a put is refused with etcd's
//! `etcdserver: mvcc: database space exceeded` and the NOSPACE alarm is raised; every acknowledged
//! write is still readable, deletes still work, puts stay refused; after compaction, defragment and
//! disarming the alarm, writes are accepted again.
//!
//! Run: `cargo test --workspace --test quota -- --nocapture`.

mod common;

use common::{Kind, Server};
use keel_proto::etcdserverpb::alarm_request::AlarmAction;
use keel_proto::etcdserverpb::{
    AlarmRequest, AlarmType, CompactionRequest, DefragmentRequest, DeleteRangeRequest, PutRequest, RangeRequest,
    StatusRequest,
};

const QUOTA: &str = "4000000";
const VALUE_BYTES: usize = 100_000;
/// Keys overwritten in turn: compaction then frees all but their last values.
const KEYS: usize = 5;

fn put(key: usize, round: usize) -> PutRequest {
    let mut value = format!("{round:08}").into_bytes();
    value.resize(VALUE_BYTES, b'x');
    PutRequest { key: format!("q/{key}").into_bytes().into(), value: value.into(), ..Default::default() }
}

async fn fill_until_refused_then_recover(kind: Kind) {
    let server = Server::start_with(kind, &["--quota-backend-bytes", QUOTA]).await;
    let mut kv = server.kv().await;
    let mut mt = server.maintenance().await;

    // Fill: the last acknowledged round of each key.
    let mut last = [None; KEYS];
    let mut refusal = None;
    for round in 0..1000 {
        let key = round % KEYS;
        match kv.put(put(key, round)).await {
            Ok(_) => last[key] = Some(round),
            Err(s) => {
                refusal = Some((s, key, round));
                break;
            }
        }
    }
    let (s, refused_key, refused_round) =
        refusal.unwrap_or_else(|| panic!("{}: 1000 puts of 100 kB never hit a 4 MB quota", kind.name()));
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{}: {s}", kind.name());
    assert_eq!(s.message(), "etcdserver: mvcc: database space exceeded", "{}", kind.name());

    let get = AlarmRequest { action: AlarmAction::Get as i32, member_id: 0, alarm: AlarmType::None as i32 };
    let alarms = mt.alarm(get).await.expect("alarm list").into_inner().alarms;
    assert_eq!(alarms.len(), 1, "{}: {alarms:?}", kind.name());
    assert_eq!(alarms[0].alarm, AlarmType::Nospace as i32);
    let status = mt.status(StatusRequest {}).await.expect("status").into_inner();
    assert!(status.errors.iter().any(|e| e.contains("NOSPACE")), "{}: status errors {:?}", kind.name(), status.errors);

    // Nothing acknowledged is lost; reads and deletes still work; puts stay refused. The refused
    // put itself may have been applied: etcd's quota applier applies the put that crosses the
    // quota and then answers NOSPACE (when the check before proposing did not refuse it first).
    for (key, round) in last.iter().enumerate() {
        let Some(round) = round else { continue };
        let r = RangeRequest { key: format!("q/{key}").into_bytes().into(), ..Default::default() };
        let kvs = kv.range(r).await.expect("range under NOSPACE").into_inner().kvs;
        let acknowledged = kvs[0].value == put(key, *round).value;
        let refused_but_applied = key == refused_key && kvs[0].value == put(key, refused_round).value;
        assert!(acknowledged || refused_but_applied, "{}: q/{key} holds its last acknowledged value", kind.name());
    }
    let d = DeleteRangeRequest { key: "q/0".into(), ..Default::default() };
    kv.delete_range(d).await.expect("delete under NOSPACE");
    let s = kv.put(put(1, 9999)).await.expect_err("put while NOSPACE is raised");
    assert_eq!(s.message(), "etcdserver: mvcc: database space exceeded");

    // Compact, defragment, disarm: writes come back.
    let rev = kv.range(RangeRequest { key: "q/1".into(), ..Default::default() }).await.unwrap().into_inner();
    let rev = rev.header.expect("header").revision;
    kv.compact(CompactionRequest { revision: rev, physical: true }).await.expect("compact");
    mt.defragment(DefragmentRequest {}).await.expect("defragment");
    for a in alarms {
        let disarm = AlarmRequest { action: AlarmAction::Deactivate as i32, member_id: a.member_id, alarm: a.alarm };
        mt.alarm(disarm).await.expect("disarm");
    }
    kv.put(put(1, 10_000)).await.unwrap_or_else(|s| panic!("{}: put after disarm: {s}", kind.name()));
}

#[tokio::test]
async fn etcd_quota() {
    fill_until_refused_then_recover(Kind::Etcd).await;
}

#[tokio::test]
async fn keel_quota() {
    fill_until_refused_then_recover(Kind::under_test()).await;
}
