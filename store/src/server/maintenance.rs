//! `etcdserverpb.Maintenance`: Status and HashKV are served; the other RPCs answer `Unimplemented` until the
//! cluster issue brings them (README, compatibility table).

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_proto::etcdserverpb::maintenance_server::Maintenance;
use keel_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, DowngradeRequest, DowngradeResponse,
    HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest, MoveLeaderResponse, SnapshotRequest,
    SnapshotResponse, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status};

use super::status;
use crate::mvcc::View;
use crate::node::{Member, ETCD_API_VERSION};

pub struct MaintenanceService {
    member: Arc<Member>,
}

impl MaintenanceService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }
}

fn not_yet(rpc: &str) -> Status {
    Status::unimplemented(format!("keel: Maintenance.{rpc} is not implemented yet"))
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, _req: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        Err(not_yet("Alarm"))
    }

    async fn status(&self, _req: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let m = &self.member;
        let metrics = m.raft.metrics().borrow().clone();
        let db_size = m.engine().size_on_disk() as i64;
        let mut resp = StatusResponse {
            header: None,
            version: ETCD_API_VERSION.to_string(),
            db_size,
            leader: metrics.current_leader.unwrap_or(0),
            raft_index: metrics.last_log_index.unwrap_or(0),
            raft_term: metrics.current_term,
            raft_applied_index: metrics.last_applied.map(|l| l.index).unwrap_or(0),
            errors: vec![],
            db_size_in_use: db_size,
            is_learner: false,
        };
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn defragment(&self, _req: Request<DefragmentRequest>) -> Result<Response<DefragmentResponse>, Status> {
        Err(not_yet("Defragment"))
    }

    async fn hash(&self, _req: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        Err(not_yet("Hash"))
    }

    async fn hash_kv(&self, req: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        let m = &self.member;
        let (hash, compact_revision, rev) = {
            let view = m.mvcc.read();
            (view.hash_kv(req.get_ref().revision).map_err(status)?, view.compact_rev(), view.rev())
        };
        let mut resp = HashKvResponse { header: None, hash, compact_revision: compact_revision.max(0) };
        resp.header = Some(keel_proto::etcdserverpb::ResponseHeader { revision: rev, ..Default::default() });
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

    async fn snapshot(&self, _req: Request<SnapshotRequest>) -> Result<Response<Self::SnapshotStream>, Status> {
        Err(not_yet("Snapshot"))
    }

    async fn move_leader(&self, _req: Request<MoveLeaderRequest>) -> Result<Response<MoveLeaderResponse>, Status> {
        Err(not_yet("MoveLeader"))
    }

    async fn downgrade(&self, _req: Request<DowngradeRequest>) -> Result<Response<DowngradeResponse>, Status> {
        Err(not_yet("Downgrade"))
    }
}
