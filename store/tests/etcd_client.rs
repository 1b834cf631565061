//! keel through the Rust `etcd-client` crate, a real etcd client library: the KV API end to end,
//! including etcd's error codes and messages as a client library surfaces them.

mod common;

use common::{Kind, Server};
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, DeleteOptions, Error, GetOptions, PutOptions, SortOrder, SortTarget,
    Txn, TxnOp,
};

async fn client(server: &Server) -> Client {
    Client::connect([server.endpoint()], None).await.expect("connect")
}

fn status_of(e: Error) -> (tonic::Code, String) {
    match e {
        Error::GRpcStatus(s) => (s.code(), s.message().to_string()),
        other => panic!("expected a gRPC status, got {other:?}"),
    }
}

#[tokio::test]
async fn kv_round_trip_through_etcd_client() {
    let server = Server::start(Kind::Keel).await;
    let mut c = client(&server).await;

    let r = c.put("k1", "v1", None).await.unwrap();
    assert_eq!(r.header().unwrap().revision(), 2);
    let r = c.put("k1", "v2", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(r.prev_key().unwrap().value(), b"v1");
    c.put("k2", "v3", None).await.unwrap();
    c.put("other", "x", None).await.unwrap();

    let r = c
        .get("k", Some(GetOptions::new().with_prefix().with_sort(SortTarget::Value, SortOrder::Descend)))
        .await
        .unwrap();
    let values: Vec<_> = r.kvs().iter().map(|kv| kv.value_str().unwrap().to_string()).collect();
    assert_eq!(values, ["v3", "v2"]);
    assert_eq!(r.count(), 2);

    let r = c.get("k", Some(GetOptions::new().with_prefix().with_limit(1))).await.unwrap();
    assert!(r.more());
    assert_eq!(r.kvs().len(), 1);

    let r = c.get("k1", Some(GetOptions::new().with_revision(2))).await.unwrap();
    assert_eq!(r.kvs()[0].value(), b"v1");
    assert_eq!(r.kvs()[0].version(), 1);

    let txn = Txn::new()
        .when([Compare::value("k1", CompareOp::Equal, "v2"), Compare::version("k2", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("k3", "v4", None),
            TxnOp::delete("other", None),
            TxnOp::get("k", Some(GetOptions::new().with_prefix())),
        ])
        .or_else([TxnOp::put("failed", "1", None)]);
    let r = c.txn(txn).await.unwrap();
    assert!(r.succeeded());
    assert_eq!(r.header().unwrap().revision(), 6);

    let r = c.delete("k", Some(DeleteOptions::new().with_prefix().with_prev_key())).await.unwrap();
    assert_eq!(r.deleted(), 3);
    assert_eq!(r.prev_kvs().len(), 3);

    c.compact(5, Some(CompactionOptions::new().with_physical())).await.unwrap();
    let (code, msg) = status_of(c.get("k1", Some(GetOptions::new().with_revision(4))).await.unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (tonic::Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted")
    );
    let (code, msg) = status_of(c.get("k1", Some(GetOptions::new().with_revision(1000))).await.unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (tonic::Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision")
    );

    let dup = Txn::new().and_then([TxnOp::put("a", "1", None), TxnOp::put("a", "2", None)]);
    let (code, msg) = status_of(c.txn(dup).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (tonic::Code::InvalidArgument, "etcdserver: duplicate key given in txn request"));
    let (code, msg) = status_of(c.put("k", "v", Some(PutOptions::new().with_lease(42))).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (tonic::Code::NotFound, "etcdserver: requested lease not found"));

    let s = c.status().await.unwrap();
    assert_eq!(s.leader(), s.header().unwrap().member_id());
    assert!(s.raft_index() >= 7);
}

#[tokio::test]
async fn oversized_and_overlong_requests_are_refused_and_change_nothing() {
    let server = Server::start_with(Kind::Keel, &["--max-request-bytes", "1024", "--max-txn-ops", "4"]).await;
    let mut c = client(&server).await;
    let (code, msg) = status_of(c.put("big", vec![b'x'; 2048], None).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (tonic::Code::InvalidArgument, "etcdserver: request is too large"));
    let ops: Vec<TxnOp> = (0..5).map(|i| TxnOp::put(format!("k{i}"), "v", None)).collect();
    let (code, msg) = status_of(c.txn(Txn::new().and_then(ops)).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (tonic::Code::InvalidArgument, "etcdserver: too many operations in txn request"));
    let r = c.get("\0", Some(GetOptions::new().with_from_key())).await.unwrap();
    assert_eq!(r.count(), 0);
    assert_eq!(r.header().unwrap().revision(), 1, "refused requests did not move the revision");
}
