//! The peer service `keelraft.Raft` on the peer URLs: openraft's RPCs from other members, and
//! requests followers forward to the leader. Payloads are bincode (`raft::network`).

use std::sync::Arc;

use keel_proto::keelraft::raft_server::{Raft as RaftRpc, RaftServer};
use keel_proto::keelraft::RaftPayload;
use tonic::{Request, Response, Status};

use crate::node::{Forwarded, Member};
use crate::raft::network::{decode, encode};

struct PeerService {
    member: Arc<Member>,
}

fn bad(e: String) -> Status {
    Status::invalid_argument(e)
}

#[tonic::async_trait]
impl RaftRpc for PeerService {
    async fn append_entries(&self, req: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req.get_ref()).map_err(bad)?;
        Ok(Response::new(encode(&self.member.append_entries(rpc).await)))
    }

    async fn vote(&self, req: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req.get_ref()).map_err(bad)?;
        Ok(Response::new(encode(&self.member.vote(rpc).await)))
    }

    async fn install_snapshot(&self, req: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req.get_ref()).map_err(bad)?;
        Ok(Response::new(encode(&self.member.install_snapshot(rpc).await)))
    }

    async fn forward(&self, req: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let f: Forwarded = decode(req.get_ref()).map_err(bad)?;
        Ok(Response::new(encode(&self.member.serve_forwarded(f).await)))
    }
}

/// The largest peer message a member takes: an AppendEntries of openraft's most entries
/// (`max_payload_entries`), each at most one request-sized proposal batch and its gRPC framing,
/// and 16 MiB to spare; snapshot chunks and forwarded requests are far smaller. Anything larger
/// is refused (`ResourceExhausted`) before it is buffered.
pub fn peer_receive_limit(max_request_bytes: u64) -> usize {
    let entries = openraft::Config::default().max_payload_entries as usize;
    entries.saturating_mul(max_request_bytes as usize + crate::config::GRPC_OVERHEAD_BYTES).saturating_add(16 << 20)
}

/// The peer service, for a `--listen-peer-urls` listener.
pub fn peer_router(member: Arc<Member>) -> axum::Router {
    let limit = peer_receive_limit(member.limits().max_request_bytes);
    let svc =
        RaftServer::new(PeerService { member }).max_decoding_message_size(limit).max_encoding_message_size(usize::MAX);
    tonic::service::Routes::new(svc).into_axum_router()
}
