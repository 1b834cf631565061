//! `etcdserverpb.Auth`: users, roles, enable/disable and Authenticate, as etcd 3.4 serves them.
//! Every request but AuthStatus is a Raft entry (etcd answers UserGet and the lists through Raft
//! too, so they are linearizable); passwords are hashed here, before proposing, so applying stays
//! deterministic. The checks themselves are in `crate::auth` and keel-auth.

use std::sync::Arc;

use keel_auth::{AuthError, PermType, Permission, UserPassword};
use keel_proto::authpb;
use keel_proto::etcdserverpb::auth_server::Auth;
use keel_proto::etcdserverpb::*;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::{status, unexpected};
use crate::auth::{AuthCommand, AuthReply};
use crate::error::Error;
use crate::node::Member;
use crate::raft::{Command, Reply};

pub struct AuthService {
    member: Arc<Member>,
}

impl AuthService {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member }
    }

    /// Proposes a management request for the caller the metadata names; returns its reply.
    async fn manage(&self, md: &MetadataMap, cmd: AuthCommand) -> Result<AuthReply, Status> {
        auth_reply(super::write_for(&self.member, md, Command::Auth(cmd)).await)
    }

    /// A management request whose answer is only a header.
    async fn done(&self, md: &MetadataMap, cmd: AuthCommand) -> Result<Option<ResponseHeader>, Status> {
        match self.manage(md, cmd).await? {
            AuthReply::Done => Ok(self.header()),
            _ => Err(unexpected("auth")),
        }
    }

    /// A management request that answers names (roles or users).
    async fn names(&self, md: &MetadataMap, cmd: AuthCommand) -> Result<Vec<String>, Status> {
        match self.manage(md, cmd).await? {
            AuthReply::Names(n) => Ok(n),
            _ => Err(unexpected("auth")),
        }
    }

    fn header(&self) -> Option<ResponseHeader> {
        let mut h = None;
        self.member.fill(&mut h);
        h
    }

    /// A bcrypt hash of `password` at the member's cost, made off the async threads.
    async fn hash(&self, password: String) -> Result<String, Status> {
        let cost = self.member.bcrypt_cost();
        tokio::task::spawn_blocking(move || keel_auth::hash_password(&password, cost))
            .await
            .map_err(|e| status(Error::Io(e.to_string())))
    }
}

/// The reply to an auth command.
fn auth_reply(r: crate::error::Result<Reply>) -> Result<AuthReply, Status> {
    match r.map_err(status)? {
        Reply::Auth(r) => Ok(r),
        _ => Err(unexpected("auth")),
    }
}

/// A role's permission as etcd answers it.
fn to_proto(p: Permission) -> authpb::Permission {
    let perm_type = match p.perm_type {
        PermType::Read => authpb::permission::Type::Read,
        PermType::Write => authpb::permission::Type::Write,
        PermType::ReadWrite => authpb::permission::Type::Readwrite,
    };
    authpb::Permission { perm_type: perm_type as i32, key: p.key.into(), range_end: p.range_end.into() }
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(&self, req: Request<AuthEnableRequest>) -> Result<Response<AuthEnableResponse>, Status> {
        let header = self.done(req.metadata(), AuthCommand::Enable).await?;
        Ok(Response::new(AuthEnableResponse { header }))
    }

    async fn auth_disable(&self, req: Request<AuthDisableRequest>) -> Result<Response<AuthDisableResponse>, Status> {
        let header = self.done(req.metadata(), AuthCommand::Disable).await?;
        Ok(Response::new(AuthDisableResponse { header }))
    }

    /// Served from this member's state after a read barrier (etcd 3.5's RPC; 3.4 has none).
    async fn auth_status(&self, _req: Request<AuthStatusRequest>) -> Result<Response<AuthStatusResponse>, Status> {
        self.member.linearize().await.map_err(status)?;
        let (enabled, auth_revision) = {
            let view = self.member.read();
            (view.auth().is_enabled(), view.auth().revision())
        };
        Ok(Response::new(AuthStatusResponse { header: self.header(), enabled, auth_revision }))
    }

    /// As etcd: the password is checked here against the state after a read barrier, then an
    /// Authenticate entry registers the token on every member. Should the auth state have moved
    /// on between the check and the apply, the whole exchange runs again.
    async fn authenticate(&self, req: Request<AuthenticateRequest>) -> Result<Response<AuthenticateResponse>, Status> {
        let r = req.into_inner();
        self.member.linearize().await.map_err(status)?;
        loop {
            let state = self.member.read().auth().clone();
            let (name, password) = (r.name.clone(), r.password.clone());
            let checked = tokio::task::spawn_blocking(move || keel_auth::check_password(&state, &name, &password))
                .await
                .map_err(|e| status(Error::Io(e.to_string())))?
                .map_err(|e| status(e.into()))?;
            let prefix = keel_auth::gen_token_prefix(&mut rand::rng());
            let cmd = Command::Auth(AuthCommand::Authenticate { name: r.name.clone(), prefix });
            let AuthReply::Token(token) = auth_reply(self.member.write(cmd).await)? else {
                return Err(unexpected("Authenticate"));
            };
            if checked == self.member.read().auth().revision() {
                return Ok(Response::new(AuthenticateResponse { header: self.header(), token }));
            }
        }
    }

    async fn user_add(&self, req: Request<AuthUserAddRequest>) -> Result<Response<AuthUserAddResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let password = if r.options.as_ref().is_some_and(|o| o.no_password) {
            UserPassword::NoPassword
        } else {
            UserPassword::Hashed(self.hash(r.password).await?)
        };
        let header = self.done(&md, AuthCommand::UserAdd { name: r.name, password }).await?;
        Ok(Response::new(AuthUserAddResponse { header }))
    }

    async fn user_get(&self, req: Request<AuthUserGetRequest>) -> Result<Response<AuthUserGetResponse>, Status> {
        let name = req.get_ref().name.clone();
        let roles = self.names(req.metadata(), AuthCommand::UserGet { name }).await?;
        Ok(Response::new(AuthUserGetResponse { header: self.header(), roles }))
    }

    async fn user_list(&self, req: Request<AuthUserListRequest>) -> Result<Response<AuthUserListResponse>, Status> {
        let users = self.names(req.metadata(), AuthCommand::UserList).await?;
        Ok(Response::new(AuthUserListResponse { header: self.header(), users }))
    }

    async fn user_delete(
        &self,
        req: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        let name = req.get_ref().name.clone();
        let header = self.done(req.metadata(), AuthCommand::UserDelete { name }).await?;
        Ok(Response::new(AuthUserDeleteResponse { header }))
    }

    async fn user_change_password(
        &self,
        req: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let hash = self.hash(r.password).await?;
        let header = self.done(&md, AuthCommand::UserChangePassword { name: r.name, hash }).await?;
        Ok(Response::new(AuthUserChangePasswordResponse { header }))
    }

    async fn user_grant_role(
        &self,
        req: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let header = self.done(&md, AuthCommand::UserGrantRole { user: r.user, role: r.role }).await?;
        Ok(Response::new(AuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        req: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let header = self.done(&md, AuthCommand::UserRevokeRole { name: r.name, role: r.role }).await?;
        Ok(Response::new(AuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(&self, req: Request<AuthRoleAddRequest>) -> Result<Response<AuthRoleAddResponse>, Status> {
        let name = req.get_ref().name.clone();
        let header = self.done(req.metadata(), AuthCommand::RoleAdd { name }).await?;
        Ok(Response::new(AuthRoleAddResponse { header }))
    }

    async fn role_get(&self, req: Request<AuthRoleGetRequest>) -> Result<Response<AuthRoleGetResponse>, Status> {
        let role = req.get_ref().role.clone();
        match self.manage(req.metadata(), AuthCommand::RoleGet { role }).await? {
            AuthReply::Permissions(p) => Ok(Response::new(AuthRoleGetResponse {
                header: self.header(),
                perm: p.into_iter().map(to_proto).collect(),
            })),
            _ => Err(unexpected("RoleGet")),
        }
    }

    async fn role_list(&self, req: Request<AuthRoleListRequest>) -> Result<Response<AuthRoleListResponse>, Status> {
        let roles = self.names(req.metadata(), AuthCommand::RoleList).await?;
        Ok(Response::new(AuthRoleListResponse { header: self.header(), roles }))
    }

    async fn role_delete(
        &self,
        req: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        let role = req.get_ref().role.clone();
        let header = self.done(req.metadata(), AuthCommand::RoleDelete { role }).await?;
        Ok(Response::new(AuthRoleDeleteResponse { header }))
    }

    /// A missing permission is refused as etcd 3.5 refuses it (3.4 crashes on it). A permission
    /// type etcd does not define is refused too: etcd 3.4 would store it and let it grant
    /// nothing.
    async fn role_grant_permission(
        &self,
        req: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let p = r.perm.ok_or_else(|| status(AuthError::PermissionNotGiven.into()))?;
        let perm_type = PermType::from_i32(p.perm_type)
            .ok_or_else(|| Status::invalid_argument(format!("keel: unknown permission type {}", p.perm_type)))?;
        let perm = Permission::new(perm_type, p.key, p.range_end);
        let header = self.done(&md, AuthCommand::RoleGrantPermission { name: r.name, perm }).await?;
        Ok(Response::new(AuthRoleGrantPermissionResponse { header }))
    }

    async fn role_revoke_permission(
        &self,
        req: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let cmd = AuthCommand::RoleRevokePermission { role: r.role, key: r.key.into(), range_end: r.range_end.into() };
        let header = self.done(&md, cmd).await?;
        Ok(Response::new(AuthRoleRevokePermissionResponse { header }))
    }
}
