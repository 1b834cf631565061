//! `keel migrate --from URL`: a new member's data directory made from a running etcd, with every
//! revision etcd still retains, kept up to date until the operator stops it.
//!
//! 1. The copy: etcd's snapshot, fetched over its Maintenance API as `etcdctl snapshot save`
//!    would, checked against its SHA-256 and restored ([`crate::snapshot::restore`]): the whole
//!    retained history, the compacted revision, leases and auth, as a restore from a file.
//! 2. With `--follow`, the tail: a watch on every key from the snapshot's revision on. Each
//!    event is written as etcd stored it (the same revision, sub-revision, create revision,
//!    version and lease; a delete as a tombstone), a watch response per synced engine batch, so
//!    the data directory holds etcd's history up to the last revision written. Every second
//!    it asks etcd for its revision and says when the copy has caught up.
//! 3. On SIGINT or SIGTERM: the leases are read again (granted TTLs; leases granted or revoked
//!    while following), and a compaction etcd made meanwhile is made too (HashKV tells its
//!    revision); then it stops, and `keel` started on the directory serves what etcd held.
//!
//! Not followed: users, roles and permissions changed after the snapshot (etcd's API never
//! returns password hashes; they come from the snapshot), and alarms.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::auth_client::AuthClient;
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::{
    watch_request, AuthenticateRequest, HashKvRequest, LeaseLeasesRequest, LeaseTimeToLiveRequest, RangeRequest,
    SnapshotRequest, WatchCreateRequest, WatchRequest,
};
use keel_proto::mvccpb::{event::EventType, KeyValue};
use prost::Message;
use tokio::io::AsyncWriteExt;
use tonic::transport::Channel;

use crate::config::Config;
use crate::engine::{Batch, Engine, RocksEngine};
use crate::mvcc::keys::{self, meta, Rev};
use crate::mvcc::lease::LeaseRecord;
use crate::mvcc::Mvcc;

/// How `keel migrate` was asked to run.
#[derive(Debug, Clone)]
pub struct Migration {
    /// etcd's client URL (`http://host:2379`).
    pub from: String,
    /// `name:password` when etcd has auth on (the snapshot needs the root role).
    pub user: Option<String>,
    /// Keep following etcd's watch until stopped.
    pub follow: bool,
}

/// An etcd client: a channel and, with auth, the token every request carries.
struct Etcd {
    channel: Channel,
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Etcd {
    async fn connect(m: &Migration) -> anyhow::Result<Etcd> {
        let channel = Channel::from_shared(m.from.clone())?
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach etcd at {}: {e}", m.from))?;
        let mut etcd = Etcd { channel, token: None };
        if let Some(user) = &m.user {
            let (name, password) = user.split_once(':').unwrap_or((user, ""));
            let req = AuthenticateRequest { name: name.into(), password: password.into() };
            let token = AuthClient::new(etcd.channel.clone()).authenticate(req).await?.into_inner().token;
            etcd.token = Some(token.parse()?);
        }
        Ok(etcd)
    }

    fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(t) = &self.token {
            r.metadata_mut().insert("token", t.clone());
        }
        r
    }

    /// etcd's current revision.
    async fn revision(&self) -> anyhow::Result<i64> {
        let req = RangeRequest { key: vec![0].into(), count_only: true, limit: 1, ..Default::default() };
        let resp = KvClient::new(self.channel.clone()).range(self.req(req)).await?.into_inner();
        Ok(resp.header.map_or(0, |h| h.revision))
    }
}

/// Runs a migration into the new data directory `cfg.data_dir`, reporting on stderr.
pub async fn run(m: &Migration, cfg: &Config) -> anyhow::Result<i64> {
    if cfg.data_dir.exists() {
        anyhow::bail!("data-dir {:?} exists", cfg.data_dir);
    }
    let etcd = Etcd::connect(m).await?;
    let restored = copy(&etcd, cfg).await?;
    eprintln!(
        "keel migrate: copied etcd's snapshot at revision {} ({} revisions of history)",
        restored.rev, restored.revisions
    );
    if !m.follow {
        return Ok(restored.rev);
    }
    let engine: Arc<dyn Engine> = Arc::new(RocksEngine::open(&cfg.data_dir.join("db"))?);
    let rev = follow(&etcd, &*engine, restored.rev).await?;
    settle(&etcd, engine).await?;
    eprintln!("keel migrate: stopped at revision {rev}");
    Ok(rev)
}

/// Fetches etcd's snapshot into a temporary file and restores it into `cfg.data_dir`.
async fn copy(etcd: &Etcd, cfg: &Config) -> anyhow::Result<crate::snapshot::Restored> {
    let parent = cfg.data_dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(parent)?;
    let mut file = tokio::fs::File::from_std(tmp.reopen()?);
    let mut stream =
        MaintenanceClient::new(etcd.channel.clone()).snapshot(etcd.req(SnapshotRequest {})).await?.into_inner();
    while let Some(chunk) = stream.message().await? {
        file.write_all(&chunk.blob).await?;
    }
    file.sync_all().await?;
    let (path, cfg) = (tmp.path().to_owned(), cfg.clone());
    let restored = tokio::task::spawn_blocking(move || crate::snapshot::restore(&path, &cfg, false)).await??;
    Ok(restored)
}

/// Where the next event of the tail goes: its main revision and sub-revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Next {
    main: i64,
    sub: i64,
}

impl Next {
    /// The revision of an event changed at main revision `main`, in the order etcd sent them
    /// (etcd numbers a transaction's changes in that order).
    fn take(&mut self, main: i64) -> Rev {
        if main != self.main {
            *self = Next { main, sub: 0 };
        }
        let rev = Rev::new(self.main, self.sub);
        self.sub += 1;
        rev
    }
}

/// The pair etcd stored for one watch event.
fn event_pair(next: &mut Next, put: bool, kv: KeyValue) -> (Vec<u8>, Vec<u8>) {
    let rev = next.take(kv.mod_revision);
    if put {
        (keys::rev_key(rev, false), kv.encode_to_vec())
    } else {
        (keys::rev_key(rev, true), KeyValue { key: kv.key, ..Default::default() }.encode_to_vec())
    }
}

/// Follows etcd's watch from after `rev` until SIGINT or SIGTERM; returns the last revision
/// written.
async fn follow(etcd: &Etcd, engine: &dyn Engine, mut rev: i64) -> anyhow::Result<i64> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let create = WatchCreateRequest {
        key: vec![0].into(),
        range_end: vec![0].into(),
        start_revision: rev + 1,
        ..Default::default()
    };
    tx.send(WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) }).await?;
    let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut watch = WatchClient::new(etcd.channel.clone()).watch(etcd.req(requests)).await?.into_inner();
    let mut next = Next { main: 0, sub: 0 };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut said = 0;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tick.tick() => {
                let at = etcd.revision().await?;
                if at == rev && said != rev {
                    eprintln!("keel migrate: caught up with etcd at revision {rev}");
                    said = rev;
                }
            }
            resp = watch.message() => {
                let Some(resp) = resp? else { anyhow::bail!("etcd closed the watch") };
                if resp.compact_revision != 0 {
                    anyhow::bail!("etcd compacted revision {} before keel copied it; start the migration again", resp.compact_revision);
                }
                if resp.canceled {
                    anyhow::bail!("etcd cancelled the watch: {}", resp.cancel_reason);
                }
                if resp.events.is_empty() {
                    continue;
                }
                let mut batch = Batch::default();
                for ev in resp.events {
                    let Some(kv) = ev.kv else { continue };
                    rev = rev.max(kv.mod_revision);
                    let (k, v) = event_pair(&mut next, ev.r#type == EventType::Put as i32, kv);
                    batch.put(k, v);
                }
                batch.put(keys::sm_meta(meta::REV), rev.to_be_bytes().to_vec());
                engine.write(batch, true)?;
            }
        }
    }
    drop(tx);
    Ok(rev)
}

/// The leases etcd holds now, and the compaction it made while the tail was followed.
async fn settle(etcd: &Etcd, engine: Arc<dyn Engine>) -> anyhow::Result<()> {
    let mut leases = LeaseClient::new(etcd.channel.clone());
    let listed = leases.lease_leases(etcd.req(LeaseLeasesRequest {})).await?.into_inner().leases;
    let mut live = BTreeMap::new();
    for l in listed {
        let ttl =
            leases.lease_time_to_live(etcd.req(LeaseTimeToLiveRequest { id: l.id, keys: false })).await?.into_inner();
        // A lease that expired between the two calls answers TTL -1: it is gone.
        if ttl.ttl >= 0 {
            live.insert(l.id, LeaseRecord { ttl: ttl.granted_ttl, remaining: 0 });
        }
    }
    let mut batch = Batch::default();
    batch.delete_range(vec![keys::LEASE], keys::prefix_end(keys::LEASE));
    for (id, record) in live {
        batch.put(keys::lease_key(id), bincode::serialize(&record)?);
    }
    engine.write(batch, true)?;
    let hash = MaintenanceClient::new(etcd.channel.clone()).hash_kv(etcd.req(HashKvRequest { revision: 0 })).await?;
    let compacted = hash.into_inner().compact_revision;
    let mvcc = Mvcc::open(engine)?;
    if compacted > mvcc.compact_rev() && compacted <= mvcc.current_rev() {
        let mut batch = mvcc.apply(false);
        batch.compact(compacted);
        batch.commit(true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_s_events_take_sub_revisions_in_order() {
        let mut next = Next { main: 0, sub: 0 };
        assert_eq!(next.take(5), Rev::new(5, 0));
        assert_eq!(next.take(6), Rev::new(6, 0));
        assert_eq!(next.take(6), Rev::new(6, 1));
        assert_eq!(next.take(6), Rev::new(6, 2));
        assert_eq!(next.take(9), Rev::new(9, 0));
        let kv =
            KeyValue { key: b"a".to_vec().into(), mod_revision: 9, value: b"x".to_vec().into(), ..Default::default() };
        let (k, v) = event_pair(&mut next, false, kv);
        assert_eq!(k, keys::rev_key(Rev::new(9, 1), true));
        assert_eq!(
            KeyValue::decode(v.as_slice()).unwrap(),
            KeyValue { key: b"a".to_vec().into(), ..Default::default() }
        );
    }
}
