//! `etcdserverpb.KV`: validation at the edge, writes through Raft, reads from MVCC after the
//! read barrier (or locally when serializable).

use std::sync::Arc;

use keel_proto::etcdserverpb::kv_server::Kv;
use keel_proto::etcdserverpb::{
    request_op, CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::{status, unexpected, validate};
use crate::auth;
use crate::error::Error;
use crate::mvcc::kv;
use crate::node::Member;
use crate::raft::{Command, Proto, Reply};
use keel_auth::{AuthError, AuthInfo};

pub struct KvService {
    member: Arc<Member>,
}

impl KvService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }

    /// Proposes a write for the client the metadata names, after etcd's size check on the
    /// encoded request (its permissions are checked when it is applied).
    async fn propose(&self, md: &MetadataMap, size: usize, cmd: Command) -> Result<Reply, Status> {
        if size as u64 > self.member.limits().max_request_bytes {
            return Err(status(Error::RequestTooLarge));
        }
        super::write_for(&self.member, md, cmd).await.map_err(status)
    }

    /// The caller, once a linearizable read has passed its barrier (etcd looks the token up
    /// after it).
    async fn reader(&self, md: &MetadataMap, serializable: bool) -> Result<AuthInfo, Status> {
        if !serializable {
            self.member.linearize().await.map_err(status)?;
        }
        super::caller(&self.member, md).await.map_err(status)
    }
}

/// Whether every range of a read-only txn (nested too) is serializable.
fn all_serializable(t: &TxnRequest) -> bool {
    t.success.iter().chain(&t.failure).all(|op| match &op.request {
        Some(request_op::Request::RequestRange(r)) => r.serializable,
        Some(request_op::Request::RequestTxn(inner)) => all_serializable(inner),
        _ => true,
    })
}

/// Proposes a write whose `Command` and `Reply` variants share the name `$kind`, and answers the
/// reply with its header filled.
macro_rules! write {
    ($svc:ident, $md:expr, $req:expr, $kind:ident) => {{
        let req = $req;
        match $svc.propose($md, req.encoded_len(), Command::$kind(Proto(req))).await? {
            Reply::$kind(Proto(mut resp)) => {
                $svc.member.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected(stringify!($kind))),
        }
    }};
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, req: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let (md, _, r) = req.into_parts();
        validate::range(&r).map_err(status)?;
        let who = self.reader(&md, r.serializable).await?;
        let permitted = self.member.read().auth().is_range_permitted(&who, &r.key, &r.range_end);
        permitted.map_err(|e| status(e.into()))?;
        let mut resp = self.member.range(&r).map_err(status)?;
        // The range read after the permission check, outside the lock it took: as etcd, an auth
        // change meanwhile makes the answer unusable, and the client retries.
        if who.revision != 0 && who.revision != self.member.read().auth().revision() {
            return Err(status(Error::Auth(AuthError::AuthOldRevision)));
        }
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let (md, _, p) = req.into_parts();
        validate::put(&p).map_err(status)?;
        write!(self, &md, p, Put)
    }

    async fn delete_range(&self, req: Request<DeleteRangeRequest>) -> Result<Response<DeleteRangeResponse>, Status> {
        let (md, _, d) = req.into_parts();
        validate::delete_range(&d).map_err(status)?;
        write!(self, &md, d, DeleteRange)
    }

    async fn txn(&self, req: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let (md, _, t) = req.into_parts();
        validate::txn(&t, self.member.limits().max_txn_ops).map_err(status)?;
        if kv::is_read_only(&t) {
            let who = self.reader(&md, all_serializable(&t)).await?;
            // The index is read under the state lock; the values from an engine snapshot of
            // the same moment, after it (as a Range).
            let (planned, snapshot) = {
                let view = self.member.read();
                auth::check_txn(view.auth(), &who, &t).map_err(|e| status(e.into()))?;
                (kv::txn_plan(&view, &t).map_err(status)?, view.engine_snapshot())
            };
            let mut resp = planned.load(|rev| crate::mvcc::load_from(&*snapshot, rev)).map_err(status)?;
            self.member.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
        write!(self, &md, t, Txn)
    }

    async fn compact(&self, req: Request<CompactionRequest>) -> Result<Response<CompactionResponse>, Status> {
        // Compaction is applied before the reply (its Raft entry is durable, and a restart applies
        // it again): `physical` is always honoured.
        let (md, _, c) = req.into_parts();
        write!(self, &md, c, Compact)
    }
}
