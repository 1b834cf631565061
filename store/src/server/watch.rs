//! `etcdserverpb.Watch/Watch`: one bidirectional stream per client stream, many watchers on it.
//!
//! Requests (create, cancel, progress) go to the member's watch hub; responses come from the
//! stream's outbox, already encoded ([`crate::watch::wire::Wire`]). That is why this service is
//! served by hand rather than through tonic's generated `WatchServer`: the generated one would
//! make us decode shared event bytes into a `WatchResponse` per watcher just to encode it again.
//! On the wire it is the same method, path and message types.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use keel_proto::etcdserverpb::{watch_request::RequestUnion, WatchCreateRequest, WatchRequest};
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use crate::node::Member;
use crate::watch::wire::Wire;
use crate::watch::Outbox;

/// The Watch service.
#[derive(Clone)]
pub struct WatchServer {
    member: Arc<Member>,
    max_decoding: usize,
}

impl WatchServer {
    pub fn new(member: Arc<Member>, max_decoding: usize) -> Self {
        Self { member, max_decoding }
    }
}

impl NamedService for WatchServer {
    const NAME: &'static str = "etcdserverpb.Watch";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type WireStream = Pin<Box<dyn Stream<Item = Result<Wire, Status>> + Send>>;

impl tower::Service<http::Request<Body>> for WatchServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/etcdserverpb.Watch/Watch" {
                return Ok(Status::unimplemented("").into_http());
            }
            let codec = ProstCodec::<Wire, WatchRequest>::default();
            let mut grpc = Grpc::new(codec).apply_max_message_size_config(Some(svc.max_decoding), Some(usize::MAX));
            Ok(grpc.streaming(svc, req).await)
        })
    }
}

impl StreamingService<WatchRequest> for WatchServer {
    type Response = Wire;
    type ResponseStream = WireStream;
    type Future = BoxFuture<Result<Response<WireStream>, Status>>;

    fn call(&mut self, req: Request<Streaming<WatchRequest>>) -> Self::Future {
        let member = self.member.clone();
        Box::pin(async move {
            let (stream, out, responses) = member.watches().open_stream();
            let (md, _, requests) = req.into_parts();
            tokio::spawn(forward_requests(member, md, stream, out, requests));
            let s: WireStream = Box::pin(responses.map(Ok));
            Ok(Response::new(s))
        })
    }
}

/// etcd's cancel reason for a watch the client may not read: the gRPC error's text.
const PERMISSION_DENIED: &str = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";

/// Whether the caller may watch what `c` asks for; a bad token is a refusal too, as in etcd.
async fn may_watch(member: &Member, md: &MetadataMap, c: &WatchCreateRequest) -> crate::error::Result<()> {
    let who = super::caller(member, md).await?;
    Ok(crate::auth::check_watch(member.read().auth(), &who, &c.key, &c.range_end)?)
}

/// Hands a stream's requests to the hub in order (the gRPC stream and the JSON gateway both use
/// it). A client that stops reading stops being read: each request waits for room in the outbox.
/// The end of the requests leaves the watchers running, as etcd does when a client closes its
/// sending side; a broken request stream closes the watch stream. Each create is checked
/// against the caller's read permission as the stream's metadata names it (the token is looked
/// up at each create, as etcd does).
pub(super) async fn forward_requests<E>(
    member: Arc<Member>,
    md: MetadataMap,
    stream: u64,
    out: Arc<Outbox>,
    mut requests: impl Stream<Item = Result<WatchRequest, E>> + Unpin,
) {
    let hub = member.watches().clone();
    while let Some(r) = requests.next().await {
        let Ok(r) = r else {
            hub.close_stream(stream);
            return;
        };
        out.room().await;
        match r.request_union {
            Some(RequestUnion::CreateRequest(c)) => match may_watch(&member, &md, &c).await {
                Ok(()) => hub.create(stream, &c),
                Err(_) => hub.refuse(stream, &c, PERMISSION_DENIED),
            },
            Some(RequestUnion::CancelRequest(c)) => hub.cancel(stream, c.watch_id),
            Some(RequestUnion::ProgressRequest(_)) => hub.progress_request(stream),
            None => {}
        }
    }
}
