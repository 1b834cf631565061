//! keel-auth's one error enum. `Display` is the exact message an etcd 3.4 client receives, and
//! [`AuthError::grpc_code`] the gRPC code etcd sends with it (etcd's `rpctypes/error.go` and the
//! `toGRPCErrorMap` in `v3rpc/util.go`), so the gRPC edge maps each variant without a table of
//! its own.
//!
//! Every error here is a deterministic outcome of applying an entry to an [`crate::AuthState`]:
//! it may travel inside a Raft reply, so the enum is serializable.

use serde::{Deserialize, Serialize};

/// An authentication or authorization failure, by meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error, Serialize, Deserialize)]
pub enum AuthError {
    /// Enabling auth needs a user named `root`.
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    /// Enabling auth needs the `root` user to hold the `root` role.
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    /// An empty user name in UserAdd, or a request without a user (no token) while auth is on.
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    /// Unknown user or wrong password: etcd does not say which.
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    /// Deleting `root` (user or role), or revoking `root` from `root`, while auth is on.
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    /// The auth state changed between the request's admission and its apply.
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// A password was given for a user created with `no_password`. etcd 3.4 has no gRPC mapping
    /// for it, so clients see code Unknown and the `auth:`-prefixed text.
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    /// RoleGrantPermission without a permission. etcd 3.4.23 dereferences the missing field and
    /// crashes; this is etcd 3.5's answer, for the gRPC edge to give instead.
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
}

/// The gRPC status codes etcd uses for auth errors, numbered as gRPC numbers them (so
/// `tonic::Code::from_i32(code as i32)` converts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum GrpcCode {
    Unknown = 2,
    InvalidArgument = 3,
    PermissionDenied = 7,
    FailedPrecondition = 9,
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The code's canonical gRPC name, e.g. `"FailedPrecondition"`.
    pub fn name(self) -> &'static str {
        match self {
            GrpcCode::Unknown => "Unknown",
            GrpcCode::InvalidArgument => "InvalidArgument",
            GrpcCode::PermissionDenied => "PermissionDenied",
            GrpcCode::FailedPrecondition => "FailedPrecondition",
            GrpcCode::Unauthenticated => "Unauthenticated",
        }
    }
}

impl AuthError {
    /// The gRPC code etcd 3.4 answers this error with.
    pub fn grpc_code(self) -> GrpcCode {
        use AuthError::*;
        match self {
            UserEmpty | RoleEmpty | AuthFailed | InvalidAuthMgmt | AuthOldRevision | PermissionNotGiven => {
                GrpcCode::InvalidArgument
            }
            RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound | RoleAlreadyExist | RoleNotFound
            | RoleNotGranted | PermissionNotGranted | AuthNotEnabled => GrpcCode::FailedPrecondition,
            PermissionDenied => GrpcCode::PermissionDenied,
            InvalidAuthToken => GrpcCode::Unauthenticated,
            NoPasswordUser => GrpcCode::Unknown,
        }
    }
}

impl AuthError {
    /// The text of etcd 3.4's own auth-store error (`auth/store.go`), which reaches a client
    /// as is, with code Unknown, where etcd skips its gRPC mapping: the admin check on
    /// Defragment, Snapshot, Hash and HashKV.
    pub fn store_message(self) -> &'static str {
        use AuthError::*;
        match self {
            RootUserNotExist => "auth: root user does not exist",
            RootRoleNotExist => "auth: root user does not have root role",
            UserAlreadyExist => "auth: user already exists",
            UserEmpty => "auth: user name is empty",
            UserNotFound => "auth: user not found",
            RoleAlreadyExist => "auth: role already exists",
            RoleNotFound => "auth: role not found",
            RoleEmpty => "auth: role name is empty",
            AuthFailed => "auth: authentication failed, invalid user ID or password",
            PermissionDenied => "auth: permission denied",
            RoleNotGranted => "auth: role is not granted to the user",
            PermissionNotGranted => "auth: permission is not granted to the role",
            AuthNotEnabled => "auth: authentication is not enabled",
            InvalidAuthToken => "auth: invalid auth token",
            InvalidAuthMgmt => "auth: invalid auth management",
            AuthOldRevision => "auth: revision in header is old",
            NoPasswordUser => "auth: authentication failed, password was given for no password user",
            PermissionNotGiven => "auth: permission not given",
        }
    }
}

pub type Result<T, E = AuthError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::AuthError::*;
    use super::*;

    /// etcd 3.4.23's messages and codes, transcribed from rpctypes/error.go.
    #[test]
    fn every_error_has_etcds_message_and_code() {
        let table = [
            (RootUserNotExist, "etcdserver: root user does not exist", "FailedPrecondition"),
            (RootRoleNotExist, "etcdserver: root user does not have root role", "FailedPrecondition"),
            (UserAlreadyExist, "etcdserver: user name already exists", "FailedPrecondition"),
            (UserEmpty, "etcdserver: user name is empty", "InvalidArgument"),
            (UserNotFound, "etcdserver: user name not found", "FailedPrecondition"),
            (RoleAlreadyExist, "etcdserver: role name already exists", "FailedPrecondition"),
            (RoleNotFound, "etcdserver: role name not found", "FailedPrecondition"),
            (RoleEmpty, "etcdserver: role name is empty", "InvalidArgument"),
            (AuthFailed, "etcdserver: authentication failed, invalid user ID or password", "InvalidArgument"),
            (PermissionDenied, "etcdserver: permission denied", "PermissionDenied"),
            (RoleNotGranted, "etcdserver: role is not granted to the user", "FailedPrecondition"),
            (PermissionNotGranted, "etcdserver: permission is not granted to the role", "FailedPrecondition"),
            (AuthNotEnabled, "etcdserver: authentication is not enabled", "FailedPrecondition"),
            (InvalidAuthToken, "etcdserver: invalid auth token", "Unauthenticated"),
            (InvalidAuthMgmt, "etcdserver: invalid auth management", "InvalidArgument"),
            (AuthOldRevision, "etcdserver: revision of auth store is old", "InvalidArgument"),
            (NoPasswordUser, "auth: authentication failed, password was given for no password user", "Unknown"),
            (PermissionNotGiven, "etcdserver: permission not given", "InvalidArgument"),
        ];
        for (err, msg, code) in table {
            assert_eq!(err.to_string(), msg, "{err:?}");
            assert_eq!(err.grpc_code().name(), code, "{err:?}");
        }
        assert_eq!(GrpcCode::FailedPrecondition as i32, 9);
        assert_eq!(GrpcCode::Unauthenticated as i32, 16);
    }
}
