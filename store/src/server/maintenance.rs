//! `etcdserverpb.Maintenance`: everything but Downgrade (which answers `Unimplemented`; README,
//! compatibility table). Snapshot streams etcd's snapshot file (`crate::snapshot`).

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_proto::etcdserverpb::maintenance_server::Maintenance;
use keel_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AlarmType, DefragmentRequest, DefragmentResponse, DowngradeRequest, DowngradeResponse,
    HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest, MoveLeaderResponse, ResponseHeader,
    SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status};

use super::{status, unexpected};
use crate::error::Error;
use crate::node::{Member, ETCD_API_VERSION};
use crate::raft::{Command, Proto, Reply};

/// Bytes per Snapshot response message (etcd sends 32 KiB pieces).
const SNAPSHOT_CHUNK: usize = 32 * 1024;

pub struct MaintenanceService {
    member: Arc<Member>,
}

impl MaintenanceService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }
}

/// An engine or state-machine failure outside Raft, as a gRPC status.
fn internal(e: impl std::fmt::Display) -> Status {
    status(Error::Io(e.to_string()))
}

/// etcd's admin check on Defragment, Snapshot, Hash and HashKV: root only while auth is on.
/// etcd answers its failures unmapped, as its auth store words them, with code Unknown.
async fn admin(m: &Member, md: &tonic::metadata::MetadataMap) -> Result<(), Status> {
    match super::check_admin(m, md).await {
        Err(Error::Auth(a)) => Err(Status::unknown(a.store_message())),
        r => r.map_err(status),
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, req: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        match self.member.write(Command::Alarm(Proto(req.into_inner()))).await.map_err(status)? {
            Reply::Alarm(Proto(mut resp)) => {
                self.member.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected("Alarm")),
        }
    }

    async fn status(&self, _req: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let m = &self.member;
        let raft = m.raft_status();
        let (db_size, in_use) = m.backend_sizes();
        // etcd lists raised alarms as their protobuf text form.
        let errors = m
            .read()
            .registry()
            .alarms(AlarmType::None as i32)
            .iter()
            .map(|a| {
                let kind = AlarmType::try_from(a.alarm).map(|t| t.as_str_name()).unwrap_or("NONE");
                format!("memberID:{} alarm:{} ", a.member_id, kind)
            })
            .collect();
        let mut resp = StatusResponse {
            header: None,
            version: ETCD_API_VERSION.to_string(),
            db_size: db_size as i64,
            leader: raft.leader.unwrap_or(0),
            raft_index: raft.last_log_index,
            raft_term: raft.term,
            raft_applied_index: raft.applied_index,
            errors,
            db_size_in_use: in_use as i64,
            is_learner: m.is_learner(),
        };
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn defragment(&self, req: Request<DefragmentRequest>) -> Result<Response<DefragmentResponse>, Status> {
        admin(&self.member, req.metadata()).await?;
        // Compaction runs beside reads and writes; only this call waits for it.
        let engine = self.member.engine().clone();
        tokio::task::spawn_blocking(move || engine.defragment()).await.map_err(internal)?.map_err(status)?;
        let mut resp = DefragmentResponse { header: None };
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn hash(&self, req: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        let m = &self.member;
        admin(m, req.metadata()).await?;
        let member = m.clone();
        let hash = tokio::task::spawn_blocking(move || member.hash()).await.map_err(internal)?.map_err(status)?;
        let mut resp = HashResponse { header: None, hash };
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn hash_kv(&self, req: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        let m = &self.member;
        admin(m, req.metadata()).await?;
        let (member, rev) = (m.clone(), req.get_ref().revision);
        let h = tokio::task::spawn_blocking(move || member.hash_kv(rev)).await.map_err(internal)?.map_err(status)?;
        let mut resp = HashKvResponse { header: None, hash: h.hash, compact_revision: h.compact_rev.max(0) };
        resp.header = Some(ResponseHeader { revision: h.rev, ..Default::default() });
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

    /// Streams the snapshot file from one engine snapshot as the client reads it: a chunk at a
    /// time is in memory, and applies go on meanwhile.
    async fn snapshot(&self, req: Request<SnapshotRequest>) -> Result<Response<Self::SnapshotStream>, Status> {
        admin(&self.member, req.metadata()).await?;
        let m = self.member.clone();
        let mut header = None;
        m.fill(&mut header);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let send = |blob: Vec<u8>, remaining_bytes| {
                let resp = SnapshotResponse { header, remaining_bytes, blob: blob.into() };
                tx.blocking_send(Ok(resp)).is_ok()
            };
            let spill = m.engine().spill_dir();
            if let Err(e) = crate::snapshot::stream(&*m.engine_snapshot(), spill.as_deref(), SNAPSHOT_CHUNK, send) {
                let _ = tx.blocking_send(Err(status(e)));
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn move_leader(&self, req: Request<MoveLeaderRequest>) -> Result<Response<MoveLeaderResponse>, Status> {
        self.member.move_leader(req.get_ref().target_id).await.map_err(status)?;
        let mut resp = MoveLeaderResponse { header: None };
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn downgrade(&self, _req: Request<DowngradeRequest>) -> Result<Response<DowngradeResponse>, Status> {
        Err(Status::unimplemented("keel: Maintenance.Downgrade is not implemented"))
    }
}
