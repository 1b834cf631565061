//! `etcdserverpb.Cluster`: member list and membership changes, served by any member (changes
//! run on the leader; `crate::node::Member::change_membership`).

use std::sync::Arc;

use keel_proto::etcdserverpb::cluster_server::Cluster;
use keel_proto::etcdserverpb::{
    Member as PbMember, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse, MemberUpdateRequest,
    MemberUpdateResponse,
};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::status;
use crate::membership::{Change, Changed, MemberInfo};
use crate::node::Member;

pub struct ClusterService {
    member: Arc<Member>,
}

impl ClusterService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }

    /// A membership change, for a caller with the root role while auth is on.
    async fn change(&self, md: &MetadataMap, change: Change) -> Result<(Option<PbMember>, Vec<PbMember>), Status> {
        super::check_admin(&self.member, md).await.map_err(status)?;
        let Changed { member, members } = self.member.change_membership(change).await.map_err(status)?;
        Ok((member.map(|m| m.to_proto()), protos(&members)))
    }
}

fn protos(members: &[MemberInfo]) -> Vec<PbMember> {
    members.iter().map(MemberInfo::to_proto).collect()
}

/// Answers a membership response with its header filled.
macro_rules! answer {
    ($svc:ident, $resp:expr) => {{
        let mut resp = $resp;
        $svc.member.fill(&mut resp.header);
        Ok(Response::new(resp))
    }};
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(&self, req: Request<MemberAddRequest>) -> Result<Response<MemberAddResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let (member, members) =
            self.change(&md, Change::Add { peer_urls: r.peer_ur_ls, learner: r.is_learner }).await?;
        answer!(self, MemberAddResponse { header: None, member, members })
    }

    async fn member_remove(&self, req: Request<MemberRemoveRequest>) -> Result<Response<MemberRemoveResponse>, Status> {
        let (_, members) = self.change(req.metadata(), Change::Remove(req.get_ref().id)).await?;
        answer!(self, MemberRemoveResponse { header: None, members })
    }

    async fn member_update(&self, req: Request<MemberUpdateRequest>) -> Result<Response<MemberUpdateResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let (_, members) = self.change(&md, Change::Update { id: r.id, peer_urls: r.peer_ur_ls }).await?;
        answer!(self, MemberUpdateResponse { header: None, members })
    }

    async fn member_list(&self, req: Request<MemberListRequest>) -> Result<Response<MemberListResponse>, Status> {
        if req.get_ref().linearizable {
            self.member.linearize().await.map_err(status)?;
        }
        answer!(self, MemberListResponse { header: None, members: protos(&self.member.members()) })
    }

    async fn member_promote(
        &self,
        req: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        let (_, members) = self.change(req.metadata(), Change::Promote(req.get_ref().id)).await?;
        answer!(self, MemberPromoteResponse { header: None, members })
    }
}
