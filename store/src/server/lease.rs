//! `etcdserverpb.Lease`: grants and revokes through Raft; keep-alives and remaining TTLs from the
//! leader's lessor; lists from the replicated lease table.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use keel_proto::etcdserverpb::lease_server::Lease;
use keel_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest,
    LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{status, unexpected};
use crate::error::Error;
use crate::mvcc::View;
use crate::node::Member;
use crate::raft::{Command, Proto, Reply};

pub struct LeaseService {
    member: Arc<Member>,
}

impl LeaseService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }
}

/// etcd's answer to one keep-alive request (the gRPC stream and the JSON gateway both send it):
/// the renewed TTL, or TTL 0 for an unknown (or just expired) lease. An error ends the stream.
pub(super) async fn keep_alive(m: &Arc<Member>, id: i64) -> Result<LeaseKeepAliveResponse, Status> {
    let ttl = match crate::lessor::keep_alive(m, id).await {
        Ok(ttl) => ttl,
        Err(Error::LeaseNotFound) => 0,
        Err(e) => return Err(status(e)),
    };
    let mut resp = LeaseKeepAliveResponse { header: None, id, ttl };
    m.fill(&mut resp.header);
    Ok(resp)
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(&self, req: Request<LeaseGrantRequest>) -> Result<Response<LeaseGrantResponse>, Status> {
        let mut resp = crate::lessor::grant(&self.member, req.into_inner()).await.map_err(status)?;
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn lease_revoke(&self, req: Request<LeaseRevokeRequest>) -> Result<Response<LeaseRevokeResponse>, Status> {
        let (md, _, r) = req.into_parts();
        match super::write_for(&self.member, &md, Command::LeaseRevoke(Proto(r))).await.map_err(status)? {
            Reply::LeaseRevoke(Proto(mut resp)) => {
                self.member.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected("LeaseRevoke")),
        }
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let m = self.member.clone();
        tokio::spawn(async move {
            loop {
                let r = tokio::select! {
                    r = inbound.message() => match r {
                        Ok(Some(r)) => r,
                        _ => return,
                    },
                    // Shutting down: the stream ends and the client moves on.
                    _ = m.closing() => return,
                };
                let resp = keep_alive(&m, r.id).await;
                let failed = resp.is_err();
                if tx.send(resp).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        let m = &self.member;
        let r = req.into_inner();
        m.linearize().await.map_err(status)?;
        let left = crate::lessor::remaining(m, r.id).await.map_err(status)?;
        let found = m.read().leases().get(r.id).map(|l| (l.record, l.keys.iter().cloned().collect::<Vec<_>>()));
        let mut resp = match (found, left) {
            (Some((record, keys)), Some(left)) => LeaseTimeToLiveResponse {
                header: None,
                id: r.id,
                ttl: left as i64,
                granted_ttl: record.ttl,
                keys: if r.keys { keys } else { Vec::new() },
            },
            // etcd answers an unknown lease with TTL -1, not an error.
            _ => LeaseTimeToLiveResponse { id: r.id, ttl: -1, ..Default::default() },
        };
        m.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn lease_leases(&self, _req: Request<LeaseLeasesRequest>) -> Result<Response<LeaseLeasesResponse>, Status> {
        let leases = self.member.read().leases().iter().map(|(id, _)| LeaseStatus { id }).collect();
        let mut resp = LeaseLeasesResponse { header: None, leases };
        self.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }
}
