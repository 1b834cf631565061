//! The client edge: one tonic service per etcd service, plus etcd's plain-HTTP `/health` and
//! `/version` and its JSON gateway (`/v3/...`, [`gateway`]), all on each client listener. This is
//! the only place that maps [`Error`] to etcd's gRPC codes and messages ([`status`]).
//!
//! Services not built yet (Cluster, Auth) are not registered, so their calls are
//! answered `Unimplemented`, as the README's compatibility table lists.

mod authority;
mod gateway;
mod http;
mod kv;
mod lease;
mod maintenance;
mod peer;
pub mod validate;
pub use peer::serve_peers;
mod watch;

use std::future::Future;
use std::sync::Arc;

use keel_proto::etcdserverpb::kv_server::KvServer;
use keel_proto::etcdserverpb::lease_server::LeaseServer;
use keel_proto::etcdserverpb::maintenance_server::MaintenanceServer;
use tokio::net::TcpListener;
use tonic::{Code, Status};

use crate::error::Error;
use crate::node::Member;

/// etcd's gRPC status for an error: the code etcd uses and its exact message.
pub fn status(e: Error) -> Status {
    let code = match &e {
        Error::EmptyKey
        | Error::KeyNotFound
        | Error::ValueProvided
        | Error::LeaseProvided
        | Error::TooManyOps
        | Error::DuplicateKey
        | Error::InvalidSortOption
        | Error::RequestTooLarge => Code::InvalidArgument,
        Error::Compacted | Error::FutureRev | Error::LeaseTtlTooLarge => Code::OutOfRange,
        Error::LeaseNotFound => Code::NotFound,
        Error::LeaseExist => Code::FailedPrecondition,
        Error::NoLeader | Error::Timeout | Error::Stopped => Code::Unavailable,
        Error::NotLeader => Code::FailedPrecondition,
        Error::Corrupt(_) => Code::DataLoss,
        Error::Io(_) => Code::Internal,
        Error::Unimplemented(_) => Code::Unimplemented,
    };
    Status::new(code, e.to_string())
}

/// The answer when Raft returns a reply of the wrong kind for a command (a bug, not a client
/// error).
fn unexpected(what: &str) -> Status {
    status(Error::Corrupt(format!("unexpected reply to {what}")))
}

/// gRPC's allowance on top of `--max-request-bytes` for a received message (etcd's 512 KiB).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// Serves the client API on `listener` until `shutdown` resolves, then drains in-flight requests.
pub async fn serve(
    member: Arc<Member>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max_recv = member.limits.max_request_bytes as usize + GRPC_OVERHEAD_BYTES;
    let kv = KvServer::new(kv::KvService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let maintenance = MaintenanceServer::new(maintenance::MaintenanceService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let lease = LeaseServer::new(lease::LeaseService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let watch = watch::WatchServer::new(member.clone(), max_recv);
    let router = tonic::service::Routes::new(kv)
        .add_service(maintenance)
        .add_service(lease)
        .add_service(watch)
        .into_axum_router()
        .merge(http::router(member.clone()))
        .merge(gateway::router(member));
    axum::serve(authority::FixingListener::new(listener), router).with_graceful_shutdown(shutdown).await
}
