//! The client edge: one tonic service per etcd service, plus etcd's plain-HTTP `/health` and
//! `/version` and its JSON gateway (`/v3/...`, [`gateway`]), all on each client listener. This is
//! the only place that maps [`Error`] to etcd's gRPC codes and messages ([`status`]).
//!
//! Every etcd v3 service is registered; an RPC keel does not serve answers `Unimplemented`, as
//! the README's compatibility table lists.

mod auth;
mod authority;
mod cluster;
mod gateway;
mod http;
mod kv;
mod lease;
mod maintenance;
pub mod metrics;
mod peer;
pub mod validate;
pub use peer::peer_router;
mod watch;

use std::future::Future;
use std::sync::Arc;

use keel_auth::{AuthError, AuthInfo};
use keel_proto::etcdserverpb::auth_server::AuthServer;
use keel_proto::etcdserverpb::cluster_server::ClusterServer;
use keel_proto::etcdserverpb::kv_server::KvServer;
use keel_proto::etcdserverpb::lease_server::LeaseServer;
use keel_proto::etcdserverpb::maintenance_server::MaintenanceServer;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::error::{Error, Result};
use crate::node::{Credentials, Member};
use crate::raft::{Command, Reply};
use crate::tls::{ConnInfo, Incoming};
use metrics::GrpcCounters;

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
        | Error::RequestTooLarge
        | Error::MemberBadUrls => Code::InvalidArgument,
        Error::Compacted | Error::FutureRev | Error::LeaseTtlTooLarge => Code::OutOfRange,
        Error::LeaseNotFound | Error::MemberNotFound => Code::NotFound,
        Error::LeaseExist
        | Error::NotLeader
        | Error::BadLeaderTransferee
        | Error::MemberExist
        | Error::PeerUrlExist
        | Error::NotEnoughStarted
        | Error::MemberNotLearner
        | Error::LearnerNotReady
        | Error::TooManyLearners => Code::FailedPrecondition,
        Error::NoLeader
        | Error::Timeout
        | Error::TimeoutDueToConnectionLost
        | Error::TimeoutLeaderTransfer
        | Error::TimeoutLeaderFail
        | Error::NotSupportedForLearner
        | Error::Stopped => Code::Unavailable,
        Error::NoSpace => Code::ResourceExhausted,
        Error::Corrupt(_) => Code::DataLoss,
        Error::Io(_) => Code::Internal,
        Error::Unimplemented(_) => Code::Unimplemented,
        Error::Auth(a) => Code::from_i32(a.grpc_code() as i32),
    };
    Status::new(code, e.to_string())
}

/// The answer when Raft returns a reply of the wrong kind for a command (a bug, not a client
/// error).
fn unexpected(what: &str) -> Status {
    status(Error::Corrupt(format!("unexpected reply to {what}")))
}

/// What a learner serves its clients, as etcd: Status, and Range (the KV service refuses a
/// linearizable one).
const LEARNER_RPCS: [&str; 2] = ["/etcdserverpb.Maintenance/Status", "/etcdserverpb.KV/Range"];

/// Waits until the member is ready to answer clients (`Member::ready`): like etcd, which serves
/// no client before it has caught up with its log after a start.
async fn wait_ready(member: &Member) -> Result<(), Status> {
    member.ready().await.map_err(status)
}

/// Serves `router` on `listener` (TCP, or the simulation's: the network seam) until `shutdown`
/// resolves, then drains in-flight requests.
pub async fn serve_with<L: axum::serve::Listener>(
    listener: L,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// The client API on a listener (TCP, TLS when its URL is `https://`) whose connections pass
/// through the `:authority` pump; each request knows its connection ([`ConnInfo`]).
pub async fn serve(
    edge: Edge,
    listener: Incoming,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = client_router(edge).into_make_service_with_connect_info::<ConnInfo>();
    axum::serve(authority::FixingListener::new(listener), router).with_graceful_shutdown(shutdown).await
}

/// The metadata key under which a gRPC request carries its connection's verified certificate
/// user ([`grpc_edge`]); a client can never set it, since the edge removes it from every request.
pub const CERT_USER: &str = "keel-tls-common-name";

/// What every gRPC call passes through, outermost first:
/// - the common name of the connection's verified client certificate (client side with
///   `--client-cert-auth`) goes in its metadata for the auth layer, under [`CERT_USER`], after
///   whatever the client sent under that name is removed (etcd takes the name only on gRPC, not
///   through its gateway);
/// - it is counted, started and then handled with its answer's status ([`GrpcCounters`]);
/// - it waits until the member is ready to answer clients ([`Member::ready`]), as etcd serves
///   no client before it has caught up with its log after a start;
/// - on a learner, every etcd RPC but [`LEARNER_RPCS`] is refused with `etcdserver: rpc not
///   supported for learner`.
///
/// One layer rather than one per step: each layer costs every call another boxed future.
async fn grpc_edge(
    axum::extract::State(edge): axum::extract::State<Edge>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    req.headers_mut().remove(CERT_USER);
    let user = req.extensions().get::<axum::extract::ConnectInfo<ConnInfo>>().and_then(|c| c.0.user.clone());
    if let Some(v) = user.and_then(|u| ::http::HeaderValue::from_bytes(u.as_bytes()).ok()) {
        req.headers_mut().insert(CERT_USER, v);
    }
    let path = req.uri().path();
    let key = edge.grpc.start(path);
    let not_for_learners = path.starts_with("/etcdserverpb.") && !LEARNER_RPCS.contains(&path);
    let resp = match wait_ready(&edge.member).await {
        Err(s) => s.into_http(),
        Ok(()) if not_for_learners && edge.member.is_learner() => status(Error::NotSupportedForLearner).into_http(),
        Ok(()) => next.run(req).await,
    };
    edge.grpc.handled(key, &resp);
    resp
}

/// What all the client and metrics listeners of one member share: the member and its gRPC call
/// counters.
#[derive(Clone)]
pub struct Edge {
    member: Arc<Member>,
    grpc: Arc<GrpcCounters>,
}

impl Edge {
    pub fn new(member: Arc<Member>) -> Self {
        Self { member, grpc: Default::default() }
    }
}

/// How a request's metadata proves who sent it: a token (`token`, or `authorization` as etcd's
/// gateway passes it), else the verified certificate's user ([`CERT_USER`]). A token that is not
/// text is `invalid auth token`.
fn credentials(md: &MetadataMap) -> Result<Credentials<'_>> {
    if let Some(token) = md.get("token").or_else(|| md.get("authorization")) {
        let token = token.to_str().map_err(|_| Error::Auth(AuthError::InvalidAuthToken))?;
        return Ok(Credentials::Token(token));
    }
    Ok(match md.get(CERT_USER).and_then(|v| std::str::from_utf8(v.as_bytes()).ok()) {
        Some(user) => Credentials::Certificate(user),
        None => Credentials::Anonymous,
    })
}

/// Who sent a request, from its metadata (see [`Member::caller`]).
pub(crate) async fn caller(m: &Member, md: &MetadataMap) -> Result<AuthInfo> {
    m.caller(credentials(md)?).await
}

/// Writes `cmd` (as [`Member::write`]) for the client the metadata names: with its user and auth
/// revision, to be checked when the write is applied.
pub(crate) async fn write_for(m: &Member, md: &MetadataMap, cmd: Command) -> Result<Reply> {
    let who = caller(m, md).await?;
    m.write(crate::auth::as_client(who, cmd)).await
}

/// Whether the client the metadata names may manage the cluster (root role) while auth is on:
/// etcd's check on defragment, snapshot, the hashes and membership changes.
pub(crate) async fn check_admin(m: &Member, md: &MetadataMap) -> Result<()> {
    let who = caller(m, md).await?;
    Ok(m.read().auth().is_admin_permitted(&who)?)
}

/// Every client-facing service, gRPC and HTTP, as one router.
pub fn client_router(edge: Edge) -> axum::Router {
    let member = edge.member.clone();
    let max_recv = member.limits().max_message_bytes();
    let kv = KvServer::new(kv::KvService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let maintenance = MaintenanceServer::new(maintenance::MaintenanceService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let lease = LeaseServer::new(lease::LeaseService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let cluster = ClusterServer::new(cluster::ClusterService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let auth = AuthServer::new(auth::AuthService::new(member.clone()))
        .max_decoding_message_size(max_recv)
        .max_encoding_message_size(usize::MAX);
    let watch = watch::WatchServer::new(member.clone(), max_recv);
    tonic::service::Routes::new(kv)
        .add_service(maintenance)
        .add_service(cluster)
        .add_service(lease)
        .add_service(watch)
        .add_service(auth)
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(edge.clone(), grpc_edge))
        .merge(http::router(member.clone()))
        .merge(metrics::router(edge))
        .merge(gateway::router(member))
}

/// `/metrics`, `/health` and `/version`: what a `--listen-metrics-urls` listener serves.
pub fn metrics_router(edge: Edge) -> axum::Router {
    http::router(edge.member.clone()).merge(metrics::router(edge))
}
