//! `etcdserverpb.KV`: validation at the edge, writes through Raft, reads from MVCC after the
//! read barrier (or locally when serializable).

use std::sync::Arc;

use keel_proto::etcdserverpb::kv_server::Kv;
use keel_proto::etcdserverpb::{
    request_op, CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use prost::Message;
use tonic::{Request, Response, Status};

use super::{status, unexpected, validate};
use crate::error::Error;
use crate::mvcc::kv;
use crate::node::Member;
use crate::raft::{Command, Proto, Reply};

pub struct KvService {
    member: Arc<Member>,
}

impl KvService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }

    /// Proposes a write after etcd's size check on the encoded request.
    async fn propose(&self, size: usize, cmd: Command) -> Result<Reply, Status> {
        if size as u64 > self.member.limits.max_request_bytes {
            return Err(status(Error::RequestTooLarge));
        }
        self.member.write(cmd).await.map_err(status)
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
    ($svc:ident, $req:expr, $kind:ident) => {{
        let req = $req;
        match $svc.propose(req.encoded_len(), Command::$kind(Proto(req))).await? {
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
        let r = req.into_inner();
        validate::range(&r).map_err(status)?;
        if !r.serializable {
            self.member.linearize().await.map_err(status)?;
        }
        let mut resp = kv::range(&self.member.mvcc.read(), &r).map_err(status)?;
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let p = req.into_inner();
        validate::put(&p).map_err(status)?;
        write!(self, p, Put)
    }

    async fn delete_range(&self, req: Request<DeleteRangeRequest>) -> Result<Response<DeleteRangeResponse>, Status> {
        let d = req.into_inner();
        validate::delete_range(&d).map_err(status)?;
        write!(self, d, DeleteRange)
    }

    async fn txn(&self, req: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let t = req.into_inner();
        validate::txn(&t, self.member.limits.max_txn_ops).map_err(status)?;
        if kv::is_read_only(&t) {
            if !all_serializable(&t) {
                self.member.linearize().await.map_err(status)?;
            }
            let mut resp = kv::txn_read(&mut self.member.mvcc.read(), &t).map_err(status)?;
            self.member.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
        write!(self, t, Txn)
    }

    async fn compact(&self, req: Request<CompactionRequest>) -> Result<Response<CompactionResponse>, Status> {
        // Compaction is applied, and durable, before the reply: `physical` is always honoured.
        write!(self, req.into_inner(), Compact)
    }
}
