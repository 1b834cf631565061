//! Durability: keel is killed with SIGKILL in the middle of a concurrent write load and restarted
//! on the same data dir. Every acknowledged write must be there; nothing that was never written
//! may appear; per-key values never go back behind the last acknowledged one.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Kind, Server};
use keel_proto::etcdserverpb::{PutRequest, RangeRequest};
use parking_lot::Mutex;

/// Writers running at once.
const WRITERS: usize = 8;
/// Acknowledged writes to wait for before the kill.
const ACKED_BEFORE_KILL: usize = 400;

#[derive(Default)]
struct Ledger {
    /// key -> every value ever sent (acknowledged or not), in order.
    sent: BTreeMap<String, Vec<u64>>,
    /// key -> highest acknowledged value.
    acked: BTreeMap<String, u64>,
    acks: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let mut server = Server::start(Kind::Keel).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut kv = server.kv().await;
        let ledger = ledger.clone();
        writers.push(tokio::spawn(async move {
            // Each writer owns 5 keys and overwrites them with increasing values; one fresh key
            // per round as well, so both overwrites and creates are checked.
            for round in 0u64.. {
                for key in [format!("w{w}/k{}", round % 5), format!("w{w}/fresh{round}")] {
                    ledger.lock().sent.entry(key.clone()).or_default().push(round);
                    let req = PutRequest {
                        key: Bytes::from(key.clone()),
                        value: Bytes::from(round.to_string()),
                        ..Default::default()
                    };
                    if kv.put(req).await.is_err() {
                        return; // the server is gone
                    }
                    let mut l = ledger.lock();
                    l.acked.insert(key, round);
                    l.acks += 1;
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while ledger.lock().acks < ACKED_BEFORE_KILL {
        assert!(Instant::now() < deadline, "only {} writes acknowledged in 60 s", ledger.lock().acks);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9();
    for w in writers {
        w.await.unwrap();
    }
    let (sent, acked) = {
        let l = ledger.lock();
        (l.sent.clone(), l.acked.clone())
    };
    server.respawn().await;

    let mut kv = server.kv().await;
    let all = kv
        .range(RangeRequest {
            key: Bytes::from_static(b"w"),
            range_end: Bytes::from_static(b"x"),
            ..Default::default()
        })
        .await
        .expect("range after restart")
        .into_inner();
    let stored: BTreeMap<String, u64> = all
        .kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8(kv.key.to_vec()).unwrap(),
                String::from_utf8(kv.value.to_vec()).unwrap().parse().unwrap(),
            )
        })
        .collect();
    for (key, last_acked) in &acked {
        let got = stored.get(key).unwrap_or_else(|| panic!("acknowledged key {key} (value {last_acked}) lost"));
        assert!(got >= last_acked, "{key}: stored value {got} is behind the acknowledged {last_acked}");
    }
    for (key, value) in &stored {
        let values = sent.get(key).unwrap_or_else(|| panic!("{key} appeared but was never written"));
        assert!(values.contains(value), "{key}={value} was never written (sent {values:?})");
    }
    assert!(acked.len() >= ACKED_BEFORE_KILL / 4, "the load acknowledged too little to test anything");
}
