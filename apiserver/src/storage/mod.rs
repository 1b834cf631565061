//! Kubernetes objects in an etcd v3 keyspace, reached only through the etcd v3 API (so the same
//! code runs on keel and on etcd), changed as kube-apiserver's `etcd3` store changes them:
//!
//! ```text
//! create  Txn If(ModRevision(key) = 0)   Then(Put)                  -> AlreadyExists
//! update  Txn If(ModRevision(key) = rv)  Then(Put)        Else(Get) -> Conflict with the current object
//! delete  Txn If(ModRevision(key) = rv)  Then(Delete)     Else(Get) -> Conflict / NotFound
//! list    Range(from, prefix end, limit, revision)                   -> a page and kube's continue token
//! watch   Watch(prefix, from rv + 1, prev_kv, progress_notify)       -> ADDED / MODIFIED / DELETED
//! ```
//!
//! An object's resourceVersion is its `mod_revision`; a list's is the revision of the Range that
//! read it. Values are opaque bytes here (the codec is the caller's).

pub mod compact;
pub mod cont;
pub mod encryption;
pub mod keys;
pub mod watch;

use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::request_op::Request;
use keel_proto::etcdserverpb::response_op::Response;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, StatusRequest, TxnRequest, TxnResponse,
};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::LeaseGrantRequest;
use keel_proto::mvccpb::KeyValue;
use tonic::transport::Channel;

/// etcd's answer to a read below the compacted revision.
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";

/// kube's message for a continue token whose revision was compacted (410 Expired).
pub const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// One stored object: its bytes and resourceVersion (`mod_revision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub value: Vec<u8>,
    pub rev: i64,
}

impl From<KeyValue> for Stored {
    fn from(kv: KeyValue) -> Self {
        Stored { value: kv.value.to_vec(), rev: kv.mod_revision }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    AlreadyExists,
    /// The object is not at the expected resourceVersion; `current` is what is there now.
    #[error("the object has been modified")]
    Conflict { current: Option<Stored> },
    /// A continue token kube would refuse (400), with kube's message.
    #[error("{0}")]
    InvalidContinue(String),
    /// A continue token whose revision was compacted (410 Expired, [`EXPIRED_CONTINUE`]);
    /// `restart` goes on from the same key at the latest revision (kube's `rv: -1` token).
    #[error("{EXPIRED_CONTINUE}")]
    Expired { restart: Option<String> },
    /// A read or watch from a resourceVersion below the store's compacted one (that revision,
    /// when the store said it; 0 otherwise).
    #[error("compacted")]
    Compacted(i64),
    /// The store failed or refused (unreachable, timed out, too large): its gRPC status.
    #[error("store: {0}")]
    Store(#[from] tonic::Status),
}

pub type Result<T> = std::result::Result<T, StorageError>;

/// Which revision a LIST reads at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The latest (a consistent read: etcd's Range is linearizable).
    Latest,
    /// Exactly this revision.
    Exact(i64),
}

/// What to list.
#[derive(Debug, Clone)]
pub struct ListOptions {
    /// Most objects per page; 0 = all.
    pub limit: i64,
    /// A continue token from an earlier page (its revision wins over `at`).
    pub continue_token: Option<String>,
    pub at: At,
}

/// One page of a LIST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Keys and objects, in key order.
    pub items: Vec<(String, Stored)>,
    /// The list's resourceVersion.
    pub rev: i64,
    /// Where the next page starts, if there is one.
    pub continue_token: Option<String>,
    /// Objects after this page (kube's `remainingItemCount`), when there is a next page.
    pub remaining: Option<i64>,
}

/// The leases objects that expire are written with (kube's `leaseManager`, for events and
/// `--event-ttl`): one lease serves every write for a while (5% of the TTL, at most a minute),
/// granted that much longer, so a busy cluster does not make a lease per event.
pub struct Leases {
    ttl: Duration,
    current: parking_lot::Mutex<Option<(i64, Instant)>>,
}

impl Leases {
    pub fn new(ttl: Duration) -> Self {
        Leases { ttl, current: parking_lot::Mutex::new(None) }
    }

    /// A lease that outlives `ttl` from now (and not by more than the reuse window).
    pub async fn get(&self, storage: &Storage) -> Result<i64> {
        let reuse = (self.ttl / 20).min(Duration::from_secs(60));
        let now = Instant::now();
        if let Some((id, expires)) = *self.current.lock() {
            if now + self.ttl < expires && now + self.ttl + reuse > expires {
                return Ok(id);
            }
        }
        let granted = self.ttl + reuse;
        let id = storage.grant(granted.as_secs().max(1) as i64).await?;
        *self.current.lock() = Some((id, now + granted));
        Ok(id)
    }
}

/// The store's client endpoints (`--etcd-servers`), one in use at a time, as etcd's client
/// balancer fails over: a request that finds its endpoint unreachable (or leaderless, or too slow)
/// fails, and moves the requests after it to the next endpoint.
pub(crate) struct Endpoints {
    channels: Vec<Channel>,
    current: AtomicUsize,
}

impl Endpoints {
    /// The endpoint in use: its index and channel.
    fn pick(&self) -> (usize, Channel) {
        let i = self.current.load(Ordering::Relaxed) % self.channels.len();
        (i, self.channels[i].clone())
    }

    /// The error of a request made on endpoint `i`; one that says the endpoint cannot serve
    /// moves the next requests on.
    pub(crate) fn failed(&self, i: usize, s: tonic::Status) -> StorageError {
        use tonic::Code::*;
        if matches!(s.code(), Unavailable | Unknown | DeadlineExceeded | Cancelled) && self.channels.len() > 1 {
            let next = (i + 1) % self.channels.len();
            if self.current.compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                tracing::warn!(from = i, to = next, error = %s.message(), "the store endpoint failed; using the next");
            }
        }
        StorageError::Store(s)
    }
}

/// Objects in an etcd v3 keyspace. Cheap to clone (its endpoints' HTTP/2 channels are shared).
#[derive(Clone)]
pub struct Storage {
    endpoints: Arc<Endpoints>,
    /// `--encryption-provider-config`: how values are sealed on the way in and opened on the way
    /// out.
    encryption: Arc<encryption::Encryption>,
}

fn compare_mod_rev(key: &str, rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec().into(),
        target_union: Some(TargetUnion::ModRevision(rev)),
        ..Default::default()
    }
}

fn get_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.as_bytes().to_vec().into(),
            ..Default::default()
        })),
    }
}

/// A value read at `key`, opened by `encryption`; one that does not open is logged and passed
/// on as stored.
fn open(encryption: &encryption::Encryption, key: &[u8], value: Vec<u8>) -> Vec<u8> {
    if encryption.is_empty() {
        return value;
    }
    match encryption.open(key, value.clone()) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!("{e}");
            value
        }
    }
}

/// The key a failed txn's `Else(Get)` read.
fn txn_key(resp: &TxnResponse) -> Option<Vec<u8>> {
    match resp.responses.first().and_then(|r| r.response.as_ref()) {
        Some(Response::ResponseRange(r)) => r.kvs.first().map(|kv| kv.key.to_vec()),
        _ => None,
    }
}

/// The object a failed txn's `Else(Get)` read, if there was one.
fn current(resp: &TxnResponse) -> Option<Stored> {
    match resp.responses.first().and_then(|r| r.response.as_ref()) {
        Some(Response::ResponseRange(r)) => r.kvs.first().cloned().map(Stored::from),
        _ => None,
    }
}

fn is_compacted(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::OutOfRange && s.message() == COMPACTED
}

impl Storage {
    /// A store behind one channel.
    pub fn new(channel: Channel) -> Self {
        Self::with_endpoints(vec![channel])
    }

    /// A store behind several endpoints (members of one cluster), failing over between them.
    pub fn with_endpoints(channels: Vec<Channel>) -> Self {
        assert!(!channels.is_empty(), "a store has an endpoint");
        Self { endpoints: Arc::new(Endpoints { channels, current: AtomicUsize::new(0) }), encryption: Arc::default() }
    }

    /// The same store, its values sealed and opened as `encryption` says.
    pub fn with_encryption(mut self, encryption: encryption::Encryption) -> Self {
        self.encryption = Arc::new(encryption);
        self
    }

    /// A value read at `key`, opened (one that does not open is passed on as stored, and fails
    /// to decode where it is read).
    fn opened(&self, key: &[u8], value: Vec<u8>) -> Vec<u8> {
        open(&self.encryption, key, value)
    }

    /// A key-value read, opened.
    fn stored(&self, kv: KeyValue) -> Stored {
        Stored { value: self.opened(&kv.key, kv.value.to_vec()), rev: kv.mod_revision }
    }

    /// What a failed txn's `Else(Get)` read, opened.
    fn current(&self, resp: &TxnResponse) -> Option<Stored> {
        current(resp)
            .map(|s| Stored { value: self.opened(txn_key(resp).as_deref().unwrap_or_default(), s.value), rev: s.rev })
    }

    /// One KV call on the endpoint in use.
    async fn kv<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(KvClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let (i, channel) = self.endpoints.pick();
        let kv = KvClient::new(channel).max_decoding_message_size(usize::MAX);
        call(kv).await.map(tonic::Response::into_inner).map_err(|s| self.endpoints.failed(i, s))
    }

    /// A watch client on the endpoint in use, its index, and the endpoints (to report failures).
    fn watch_client(&self) -> (usize, WatchClient<Channel>, Arc<Endpoints>) {
        let (i, channel) = self.endpoints.pick();
        (i, WatchClient::new(channel).max_decoding_message_size(usize::MAX), self.endpoints.clone())
    }

    /// The store's current revision, as kube's `GetCurrentResourceVersion` reads it: a
    /// linearizable Range of the one key a collection prefix names without its `/`.
    pub async fn current_revision(&self, prefix: &str) -> Result<i64> {
        let key = prefix.trim_end_matches('/');
        let r = RangeRequest { key: key.as_bytes().to_vec().into(), limit: 1, ..Default::default() };
        let resp = self.kv(|mut kv| async move { kv.range(r).await }).await?;
        Ok(resp.header.map_or(0, |h| h.revision))
    }

    /// The version the store reports (etcd's `Maintenance.Status`), e.g. `3.4.23`.
    pub async fn version(&self) -> Result<String> {
        let (i, channel) = self.endpoints.pick();
        match MaintenanceClient::new(channel).status(StatusRequest {}).await {
            Ok(r) => Ok(r.into_inner().version),
            Err(s) => Err(self.endpoints.failed(i, s)),
        }
    }

    /// A new lease of `ttl` seconds; its id.
    pub async fn grant(&self, ttl: i64) -> Result<i64> {
        let (i, channel) = self.endpoints.pick();
        match LeaseClient::new(channel).lease_grant(LeaseGrantRequest { ttl, id: 0 }).await {
            Ok(r) => Ok(r.into_inner().id),
            Err(s) => Err(self.endpoints.failed(i, s)),
        }
    }

    /// The object at `key`, if any (a linearizable read).
    pub async fn get(&self, key: &str) -> Result<Option<Stored>> {
        let r = RangeRequest { key: key.as_bytes().to_vec().into(), ..Default::default() };
        let resp = self.kv(|mut kv| async move { kv.range(r).await }).await?;
        Ok(resp.kvs.into_iter().next().map(|kv| self.stored(kv)))
    }

    /// Whether the value at `key` is sealed otherwise than a write would seal it now (an older
    /// key, or none): an update that changes nothing is written anyway, as kube re-writes a
    /// stale read.
    pub async fn stale(&self, key: &str) -> Result<bool> {
        if self.encryption.is_empty() {
            return Ok(false);
        }
        let r = RangeRequest { key: key.as_bytes().to_vec().into(), ..Default::default() };
        let resp = self.kv(|mut kv| async move { kv.range(r).await }).await?;
        Ok(resp.kvs.first().is_some_and(|kv| self.encryption.stale(&kv.key, &kv.value)))
    }

    /// Creates the object at `key` (attached to `lease`, 0 for none); returns its
    /// resourceVersion. `AlreadyExists` if something is there.
    pub async fn create(&self, key: &str, value: Vec<u8>, lease: i64) -> Result<i64> {
        let value = self.encryption.seal(key, value);
        let put = PutRequest { key: key.as_bytes().to_vec().into(), value: value.into(), lease, ..Default::default() };
        let txn = TxnRequest {
            compare: vec![compare_mod_rev(key, 0)],
            success: vec![RequestOp { request: Some(Request::RequestPut(put)) }],
            failure: vec![],
        };
        let resp = self.kv(|mut kv| async move { kv.txn(txn).await }).await?;
        if !resp.succeeded {
            return Err(StorageError::AlreadyExists);
        }
        Ok(resp.header.map_or(0, |h| h.revision))
    }

    /// Creates the object at `key` together with writes of other keys, each only if it is
    /// still at its revision (a ResourceQuota's charge for the object): all or nothing, in one
    /// transaction. `AlreadyExists` if the object is there, `Conflict` if another key moved.
    pub async fn create_with(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: i64,
        others: &[(String, Vec<u8>, i64)],
    ) -> Result<i64> {
        let put = |k: &str, v: Vec<u8>, lease: i64| RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: k.as_bytes().to_vec().into(),
                value: self.encryption.seal(k, v).into(),
                lease,
                ..Default::default()
            })),
        };
        let mut compare = vec![compare_mod_rev(key, 0)];
        let mut success = vec![put(key, value, lease)];
        for (k, v, rev) in others {
            compare.push(compare_mod_rev(k, *rev));
            success.push(put(k, v.clone(), 0));
        }
        let txn = TxnRequest { compare, success, failure: vec![get_op(key)] };
        let resp = self.kv(|mut kv| async move { kv.txn(txn).await }).await?;
        if resp.succeeded {
            return Ok(resp.header.map_or(0, |h| h.revision));
        }
        match self.current(&resp) {
            Some(_) => Err(StorageError::AlreadyExists),
            None => Err(StorageError::Conflict { current: None }),
        }
    }

    /// Replaces the object at `key` if it is still at resourceVersion `expected`; returns the new
    /// resourceVersion. `Conflict` (with what is there) otherwise, `NotFound` if nothing is.
    pub async fn update(&self, key: &str, value: Vec<u8>, expected: i64) -> Result<i64> {
        self.update_with_lease(key, value, expected, 0).await
    }

    /// `update`, the object attached to `lease` (0 for none: an update without a lease takes
    /// the object off the one it had, as etcd's put does).
    pub async fn update_with_lease(&self, key: &str, value: Vec<u8>, expected: i64, lease: i64) -> Result<i64> {
        let value = self.encryption.seal(key, value);
        let put = PutRequest { key: key.as_bytes().to_vec().into(), value: value.into(), lease, ..Default::default() };
        let resp = self.cas(key, expected, Request::RequestPut(put)).await?;
        Ok(resp.header.map_or(0, |h| h.revision))
    }

    /// Deletes the object at `key` if it is at resourceVersion `expected` (if None: at the one
    /// it has when read here, so a change in between is a `Conflict` the caller may retry, as
    /// kube's delete loop does); returns what was deleted, with the revision of the deletion.
    pub async fn delete(&self, key: &str, expected: Option<i64>) -> Result<Stored> {
        let del = DeleteRangeRequest { key: key.as_bytes().to_vec().into(), prev_kv: true, ..Default::default() };
        let expected = match expected {
            Some(rev) => rev,
            None => self.get(key).await?.ok_or(StorageError::NotFound)?.rev,
        };
        let resp = self.cas(key, expected, Request::RequestDeleteRange(del)).await?;
        let rev = resp.header.map_or(0, |h| h.revision);
        match resp.responses.into_iter().next().and_then(|r| r.response) {
            Some(Response::ResponseDeleteRange(d)) => d
                .prev_kvs
                .into_iter()
                .next()
                .map(|kv| Stored { value: self.opened(&kv.key, kv.value.to_vec()), rev })
                .ok_or(StorageError::NotFound),
            _ => Err(StorageError::NotFound),
        }
    }

    /// Runs `op` on `key` if it is at `expected`; else `Conflict` with what is there, or
    /// `NotFound`.
    async fn cas(&self, key: &str, expected: i64, op: Request) -> Result<TxnResponse> {
        let txn = TxnRequest {
            compare: vec![compare_mod_rev(key, expected)],
            success: vec![RequestOp { request: Some(op) }],
            failure: vec![get_op(key)],
        };
        let resp = self.kv(|mut kv| async move { kv.txn(txn).await }).await?;
        if resp.succeeded {
            return Ok(resp);
        }
        match self.current(&resp) {
            None => Err(StorageError::NotFound),
            current => Err(StorageError::Conflict { current }),
        }
    }

    /// One page of the objects under `prefix` (a collection, ending in `/`), as kube's LIST
    /// reads them: from the continue token's key and revision, or from the start at `at`.
    pub async fn list(&self, prefix: &str, opts: &ListOptions) -> Result<Page> {
        let (from, at) = match &opts.continue_token {
            Some(token) => {
                let (from, rev) = cont::decode(token, prefix).map_err(StorageError::InvalidContinue)?;
                (from, if rev < 0 { At::Latest } else { At::Exact(rev) })
            }
            None => (prefix.to_string(), opts.at),
        };
        let r = RangeRequest {
            key: from.as_bytes().to_vec().into(),
            range_end: keys::prefix_end(prefix.as_bytes()).into(),
            limit: opts.limit.max(0),
            revision: match at {
                At::Latest => 0,
                At::Exact(rev) => rev,
            },
            ..Default::default()
        };
        let resp = match self.kv(|mut kv| async move { kv.range(r).await }).await {
            Ok(resp) => resp,
            Err(StorageError::Store(s)) if is_compacted(&s) && opts.continue_token.is_some() => {
                return Err(StorageError::Expired { restart: cont::encode(&from, prefix, -1) });
            }
            Err(StorageError::Store(s)) if is_compacted(&s) => return Err(StorageError::Compacted(0)),
            Err(e) => return Err(e),
        };
        // Every page of a list reads at the revision of its first.
        let rev = match at {
            At::Exact(rev) => rev,
            At::Latest => resp.header.as_ref().map_or(0, |h| h.revision),
        };
        let items: Vec<(String, Stored)> =
            resp.kvs.into_iter().map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), self.stored(kv))).collect();
        let (continue_token, remaining) = match items.last() {
            Some((last, _)) if resp.more => {
                (cont::encode(&format!("{last}\0"), prefix, rev), Some(resp.count - items.len() as i64))
            }
            _ => (None, None),
        };
        Ok(Page { items, rev, continue_token, remaining })
    }
}
