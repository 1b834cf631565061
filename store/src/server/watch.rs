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
use keel_proto::etcdserverpb::{watch_request::RequestUnion, WatchRequest};
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use crate::node::Member;
use crate::watch::wire::Wire;

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
        let hub = self.member.hub.clone();
        Box::pin(async move {
            let mut inbound = req.into_inner();
            let (stream, out, responses) = hub.open_stream();
            let requests = hub.clone();
            tokio::spawn(async move {
                // A client that stops reading stops being read: each request waits for room.
                loop {
                    match inbound.message().await {
                        Ok(Some(r)) => {
                            out.room().await;
                            match r.request_union {
                                Some(RequestUnion::CreateRequest(c)) => requests.create(stream, &c),
                                Some(RequestUnion::CancelRequest(c)) => requests.cancel(stream, c.watch_id),
                                Some(RequestUnion::ProgressRequest(_)) => requests.progress_request(stream),
                                None => {}
                            }
                        }
                        // The client closed its sending side: as etcd, its watchers carry on.
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
                requests.close_stream(stream);
            });
            let s: WireStream = Box::pin(responses.map(Ok));
            Ok(Response::new(s))
        })
    }
}
