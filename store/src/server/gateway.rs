//! etcd's JSON gateway (grpc-gateway, as etcd 3.4 serves it) on the client URL: `POST /v3/...`
//! (and the `/v3beta/...` aliases) with a JSON request body, answered by the very services that
//! serve gRPC, so both edges give the same answers.
//!
//! ```text
//!   JSON body ──decode──▶ proto request ──▶ KvService / LeaseService / … ──▶ proto response
//!                                                                              │
//!   {"error":…,"message":…,"code":N}  ◀── tonic Status        JSON ◀──encode──┘
//! ```
//!
//! The JSON mapping is proto3's with grpc-gateway's settings in etcd: the proto's original field
//! names (`create_revision`, `TTL`, `dbSize`), 64-bit integers as strings, bytes as base64, enums
//! by name, zero values left out; the serde impls come from keel-proto (pbjson). Input accepts
//! the original and the camelCase names, numbers or strings for integers, names or numbers for
//! enums; unknown fields and `null` values are ignored; only the first JSON value of a body
//! counts and an empty body is an empty request.
//!
//! Errors are grpc-gateway's: a gRPC status becomes `{"error":msg,"message":msg,"code":N}` with
//! the HTTP status grpc-gateway 1.9 maps the code to; a body that does not decode is
//! `InvalidArgument` (400).
//!
//! Streaming calls (`/v3/watch`, `/v3/lease/keepalive`, `/v3/maintenance/snapshot`) answer a
//! chunked stream of `{"result":{…}}` lines. Their request body is a sequence of JSON values,
//! handed on one by one as they arrive: a first value that does not decode is a 500 with code 2
//! (etcd's answer), a later one ends the requests, as when the client stops sending. An error
//! inside the stream ends it with grpc-gateway's
//! `{"error":{"grpc_code":…,"http_code":…,"message":…,"http_status":…}}`, which also sets the HTTP
//! status when it comes first.

use std::future::Future;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post, MethodRouter};
use axum::Router;
use futures::{stream, Stream, StreamExt};
use keel_proto::etcdserverpb::auth_server::Auth;
use keel_proto::etcdserverpb::cluster_server::Cluster;
use keel_proto::etcdserverpb::kv_server::Kv;
use keel_proto::etcdserverpb::lease_server::Lease;
use keel_proto::etcdserverpb::maintenance_server::Maintenance;
use keel_proto::etcdserverpb::{LeaseKeepAliveRequest, WatchRequest, WatchResponse};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Request, Status};

use super::auth::AuthService;
use super::cluster::ClusterService;
use super::kv::KvService;
use super::lease::{keep_alive, LeaseService};
use super::maintenance::MaintenanceService;
use super::watch;
use crate::node::Member;

/// The services behind the gateway: the same ones the gRPC edge serves.
struct Gateway {
    member: Arc<Member>,
    kv: KvService,
    lease: LeaseService,
    maintenance: MaintenanceService,
    cluster: ClusterService,
    auth: AuthService,
    /// gRPC's limit on a received message; a larger request is refused as gRPC refuses it.
    max_recv: usize,
}

type Gw = Arc<Gateway>;

/// The gateway's routes under `/v3` and `/v3beta` (etcd 3.4 answers both), with etcd's CORS
/// headers on every answer.
pub fn router(member: Arc<Member>) -> Router {
    let max_recv = member.limits().max_message_bytes();
    let gate = member.clone();
    let gw = Arc::new(Gateway {
        kv: KvService::new(member.clone()),
        lease: LeaseService::new(member.clone()),
        maintenance: MaintenanceService::new(member.clone()),
        cluster: ClusterService::new(member.clone()),
        auth: AuthService::new(member.clone()),
        member,
        max_recv,
    });
    let endpoints: Vec<(&str, MethodRouter<Gw>)> = vec![
        ("/kv/range", unary(|g: Gw, r| async move { g.kv.range(r).await })),
        ("/kv/put", unary(|g: Gw, r| async move { g.kv.put(r).await })),
        ("/kv/deleterange", unary(|g: Gw, r| async move { g.kv.delete_range(r).await })),
        ("/kv/txn", unary(|g: Gw, r| async move { g.kv.txn(r).await })),
        ("/kv/compaction", unary(|g: Gw, r| async move { g.kv.compact(r).await })),
        ("/watch", post(watch_stream)),
        ("/lease/grant", unary(|g: Gw, r| async move { g.lease.lease_grant(r).await })),
        ("/lease/revoke", unary(|g: Gw, r| async move { g.lease.lease_revoke(r).await })),
        ("/kv/lease/revoke", unary(|g: Gw, r| async move { g.lease.lease_revoke(r).await })),
        ("/lease/keepalive", post(keep_alive_stream)),
        ("/lease/timetolive", unary(|g: Gw, r| async move { g.lease.lease_time_to_live(r).await })),
        ("/kv/lease/timetolive", unary(|g: Gw, r| async move { g.lease.lease_time_to_live(r).await })),
        ("/lease/leases", unary(|g: Gw, r| async move { g.lease.lease_leases(r).await })),
        ("/kv/lease/leases", unary(|g: Gw, r| async move { g.lease.lease_leases(r).await })),
        ("/maintenance/alarm", unary(|g: Gw, r| async move { g.maintenance.alarm(r).await })),
        ("/maintenance/status", unary(|g: Gw, r| async move { g.maintenance.status(r).await })),
        ("/maintenance/defragment", unary(|g: Gw, r| async move { g.maintenance.defragment(r).await })),
        ("/maintenance/hash", unary(|g: Gw, r| async move { g.maintenance.hash(r).await })),
        ("/maintenance/snapshot", post(snapshot_stream)),
        ("/maintenance/transfer-leadership", unary(|g: Gw, r| async move { g.maintenance.move_leader(r).await })),
        ("/cluster/member/add", unary(|g: Gw, r| async move { g.cluster.member_add(r).await })),
        ("/cluster/member/remove", unary(|g: Gw, r| async move { g.cluster.member_remove(r).await })),
        ("/cluster/member/update", unary(|g: Gw, r| async move { g.cluster.member_update(r).await })),
        ("/cluster/member/list", unary(|g: Gw, r| async move { g.cluster.member_list(r).await })),
        ("/cluster/member/promote", unary(|g: Gw, r| async move { g.cluster.member_promote(r).await })),
        ("/auth/enable", unary(|g: Gw, r| async move { g.auth.auth_enable(r).await })),
        ("/auth/disable", unary(|g: Gw, r| async move { g.auth.auth_disable(r).await })),
        ("/auth/status", unary(|g: Gw, r| async move { g.auth.auth_status(r).await })),
        ("/auth/authenticate", unary(|g: Gw, r| async move { g.auth.authenticate(r).await })),
        ("/auth/user/add", unary(|g: Gw, r| async move { g.auth.user_add(r).await })),
        ("/auth/user/get", unary(|g: Gw, r| async move { g.auth.user_get(r).await })),
        ("/auth/user/list", unary(|g: Gw, r| async move { g.auth.user_list(r).await })),
        ("/auth/user/delete", unary(|g: Gw, r| async move { g.auth.user_delete(r).await })),
        ("/auth/user/changepw", unary(|g: Gw, r| async move { g.auth.user_change_password(r).await })),
        ("/auth/user/grant", unary(|g: Gw, r| async move { g.auth.user_grant_role(r).await })),
        ("/auth/user/revoke", unary(|g: Gw, r| async move { g.auth.user_revoke_role(r).await })),
        ("/auth/role/add", unary(|g: Gw, r| async move { g.auth.role_add(r).await })),
        ("/auth/role/get", unary(|g: Gw, r| async move { g.auth.role_get(r).await })),
        ("/auth/role/list", unary(|g: Gw, r| async move { g.auth.role_list(r).await })),
        ("/auth/role/delete", unary(|g: Gw, r| async move { g.auth.role_delete(r).await })),
        ("/auth/role/grant", unary(|g: Gw, r| async move { g.auth.role_grant_permission(r).await })),
        ("/auth/role/revoke", unary(|g: Gw, r| async move { g.auth.role_revoke_permission(r).await })),
    ];
    let mut router = Router::new();
    for prefix in ["/v3", "/v3beta"] {
        for (path, handler) in &endpoints {
            // grpc-gateway answers other methods with 405; OPTIONS is CORS's preflight.
            let handler = handler.clone().options(|| async {}).fallback(method_not_allowed);
            router = router.route(&format!("{prefix}{path}"), handler);
        }
        router = router.route(&format!("{prefix}/{{*rest}}"), any(not_found));
    }
    router
        .layer(axum::middleware::from_fn_with_state(gate, ready_gate))
        .layer(axum::middleware::map_response(cors))
        // Room for a request of gRPC's largest size in JSON (base64 and escapes).
        .layer(DefaultBodyLimit::max(8 * max_recv))
        .with_state(gw)
}

/// Holds every gateway call until the member is ready, as the gRPC calls.
async fn ready_gate(
    State(member): State<Arc<Member>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match super::wait_ready(&member).await {
        Ok(()) => next.run(req).await,
        Err(s) => error_reply(&s),
    }
}

/// The gRPC metadata grpc-gateway makes of a request's headers, as far as keel reads it: the
/// `Authorization` header carries the auth token (etcd reads it as `authorization` metadata).
fn metadata(headers: &HeaderMap) -> MetadataMap {
    let mut md = MetadataMap::new();
    if let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| MetadataValue::try_from(v.as_bytes()).ok()) {
        md.insert("authorization", v);
    }
    md
}

/// A service request with the metadata the headers give.
fn request<T>(headers: &HeaderMap, message: T) -> Request<T> {
    Request::from_parts(metadata(headers), Default::default(), message)
}

/// A unary call: decode the body, call the service, encode its answer (or its error).
fn unary<Req, Resp, F, Fut>(call: F) -> MethodRouter<Gw>
where
    Req: DeserializeOwned + Default + Message + Send + 'static,
    Resp: Serialize,
    F: Fn(Gw, Request<Req>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send,
{
    post(move |State(g): State<Gw>, headers: HeaderMap, body: Bytes| async move {
        let req = match decode_unary::<Req>(&body, g.max_recv) {
            Ok(req) => req,
            Err(s) => return error_reply(&s),
        };
        match call(g, request(&headers, req)).await {
            Ok(resp) => json_reply(StatusCode::OK, serde_json::to_vec(resp.get_ref())),
            Err(s) => error_reply(&s),
        }
    })
}

/// A unary request as grpc-gateway reads it, then refused if gRPC would refuse its size.
fn decode_unary<Req: DeserializeOwned + Default + Message>(body: &[u8], max_recv: usize) -> Result<Req, Status> {
    let req = match first_value(body) {
        Ok(None) => Req::default(),
        Ok(Some(v)) => from_value(v)?,
        Err(e) => return Err(e),
    };
    let len = req.encoded_len();
    if len > max_recv {
        return Err(Status::resource_exhausted(format!(
            "grpc: received message larger than max ({len} vs. {max_recv})"
        )));
    }
    Ok(req)
}

/// The first JSON value of `body` (None: only whitespace), or the syntax error.
fn first_value(body: &[u8]) -> Result<Option<Value>, Status> {
    match serde_json::Deserializer::from_slice(body).into_iter::<Value>().next() {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(e)) => Err(Status::invalid_argument(syntax_error(body, &e))),
    }
}

/// A request message from a JSON value, ignoring `null` members as grpc-gateway does.
fn from_value<T: DeserializeOwned>(mut v: Value) -> Result<T, Status> {
    let kind = match &v {
        Value::Object(_) | Value::Null => None,
        Value::Array(_) => Some("array"),
        Value::String(_) => Some("string"),
        Value::Number(_) => Some("number"),
        Value::Bool(_) => Some("bool"),
    };
    if let Some(kind) = kind {
        return Err(Status::invalid_argument(format!(
            "json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage"
        )));
    }
    if v.is_null() {
        v = Value::Object(Default::default());
    }
    drop_nulls(&mut v);
    T::deserialize(v).map_err(|e| Status::invalid_argument(data_error(e.to_string())))
}

/// etcd's enums by their values as serde lists them, with the Go names jsonpb reports.
const ENUMS: [(&str, &str); 7] = [
    ("`NONE`, `ASCEND`, `DESCEND`", "etcdserverpb.RangeRequest_SortOrder"),
    ("`KEY`, `VERSION`, `CREATE`, `MOD`, `VALUE`", "etcdserverpb.RangeRequest_SortTarget"),
    ("`EQUAL`, `GREATER`, `LESS`, `NOT_EQUAL`", "etcdserverpb.Compare_CompareResult"),
    ("`VERSION`, `CREATE`, `MOD`, `VALUE`, `LEASE`", "etcdserverpb.Compare_CompareTarget"),
    ("`NOPUT`, `NODELETE`", "etcdserverpb.WatchCreateRequest_FilterType"),
    ("`GET`, `ACTIVATE`, `DEACTIVATE`", "etcdserverpb.AlarmRequest_AlarmAction"),
    ("`NONE`, `NOSPACE`, `CORRUPT`", "etcdserverpb.AlarmType"),
];

/// jsonpb's message for an unknown enum name; serde's message for other mismatches.
fn data_error(serde: String) -> String {
    let unknown = serde.strip_prefix("unknown variant `").and_then(|r| r.split_once("`, expected one of "));
    match unknown.and_then(|(value, values)| ENUMS.iter().find(|(v, _)| *v == values).map(|(_, e)| (value, e))) {
        Some((value, name)) => format!("unknown value {value:?} for enum {name}"),
        None => serde,
    }
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Go's `encoding/json` message for a syntax error, where serde_json's says which one it is;
/// serde_json's own message (without its position) otherwise.
fn syntax_error(body: &[u8], e: &serde_json::Error) -> String {
    if e.is_eof() {
        return "unexpected EOF".into();
    }
    let full = e.to_string();
    let what = full.split(" at line ").next().unwrap_or(&full);
    let context = match what {
        "expected value" | "trailing comma" if offending(body, e) == Some(']') => "looking for beginning of value",
        "expected value" => "looking for beginning of value",
        "key must be a string" | "trailing comma" => "looking for beginning of object key string",
        "expected `:`" => "after object key",
        "expected `,` or `}`" => "after object key:value pair",
        "expected `,` or `]`" => "after array element",
        _ => return what.to_string(),
    };
    match offending(body, e) {
        Some(c) => format!("invalid character {} {context}", go_quote(c)),
        None => what.to_string(),
    }
}

/// The character a syntax error points at (serde_json counts lines from 1 and columns from 1).
fn offending(body: &[u8], e: &serde_json::Error) -> Option<char> {
    let line = std::str::from_utf8(body).ok()?.split('\n').nth(e.line().checked_sub(1)?)?;
    line.chars().nth(e.column().checked_sub(1)?)
}

/// A character quoted as Go's `encoding/json` quotes it in errors.
fn go_quote(c: char) -> String {
    match c {
        '\'' => r"'\''".into(),
        '"' => "'\"'".into(),
        c if c.is_ascii_graphic() || c == ' ' => format!("'{c}'"),
        c => format!("'{}'", c.escape_default()),
    }
}

/// A successful JSON answer, or a 500 if it could not be encoded (never for these messages).
fn json_reply(code: StatusCode, body: serde_json::Result<Vec<u8>>) -> Response {
    match body {
        Ok(body) => {
            let mut r = (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            // grpc-gateway forwards the gRPC response's metadata; etcd's carries this.
            r.headers_mut().insert("grpc-metadata-content-type", HeaderValue::from_static("application/grpc"));
            r
        }
        Err(e) => error_reply(&Status::internal(e.to_string())),
    }
}

/// grpc-gateway's unary error body, in its field order.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
    code: i32,
}

fn error_reply(s: &Status) -> Response {
    let body = ErrorBody { error: s.message(), message: s.message(), code: s.code() as i32 };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    (http_status(s.code()), [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// grpc-gateway 1.9's HTTP status for a gRPC code (the version etcd 3.4 ships).
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn method_not_allowed() -> Response {
    plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n")
}

async fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found\n")
}

/// Go's `http.Error` answer.
fn plain(code: StatusCode, body: &'static str) -> Response {
    let mut r = (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
    r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    r
}

/// etcd's CORS headers (its client handler adds them to every HTTP answer).
async fn cors(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    h.insert("access-control-allow-methods", HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"));
    h.insert("access-control-allow-headers", HeaderValue::from_static("accept, content-type, authorization"));
    r
}

/// The JSON values of a streaming request body, decoded one by one as they arrive (values back
/// to back, as Go's `json.Decoder` reads them).
struct Values {
    body: axum::body::BodyDataStream,
    buf: Vec<u8>,
    /// A value still incomplete past this many bytes is refused.
    limit: usize,
    ended: bool,
}

/// Why the next request of a stream could not be had.
enum Next {
    /// The body holds something that is not a request (the message says what).
    Bad(Status),
    /// Reading the body failed: the client is gone.
    Broken,
}

impl Values {
    fn new(body: Body, limit: usize) -> Self {
        Values { body: body.into_data_stream(), buf: Vec::new(), limit, ended: false }
    }

    /// The next request, None once the body ends cleanly.
    async fn next<T: DeserializeOwned>(&mut self) -> Option<Result<T, Next>> {
        loop {
            let mut values = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            match values.next() {
                Some(Ok(v)) => {
                    let used = values.byte_offset();
                    self.buf.drain(..used);
                    return Some(from_value(v).map_err(Next::Bad));
                }
                Some(Err(e)) if !e.is_eof() || self.ended => {
                    return Some(Err(Next::Bad(Status::invalid_argument(syntax_error(&self.buf, &e)))));
                }
                None if self.ended => return None,
                _ if self.buf.len() > self.limit => {
                    return Some(Err(Next::Bad(Status::resource_exhausted("request too large"))));
                }
                _ => {}
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(_)) => return Some(Err(Next::Broken)),
                None => self.ended = true,
            }
        }
    }
}

/// The first request of a streaming call: grpc-gateway answers one that does not decode with a
/// plain error carrying code Unknown. `Ok(None)`: the body was empty.
async fn first_request<T: DeserializeOwned>(values: &mut Values) -> Result<Option<T>, Response> {
    match values.next().await {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(Next::Bad(s))) => Err(error_reply(&Status::unknown(s.message()))),
        Some(Err(Next::Broken)) => Err(error_reply(&Status::unknown("request body broken"))),
    }
}

/// grpc-gateway's error chunk inside a stream.
#[derive(Serialize)]
struct StreamError<'a> {
    grpc_code: i32,
    http_code: u16,
    message: &'a str,
    http_status: &'a str,
}

/// A stream's chunk: `{"result":…}` or `{"error":…}` (structs, so fields keep their order).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum Chunk<'a, T> {
    Result(&'a T),
    Error(StreamError<'a>),
}

fn chunk<T: Serialize>(item: &Result<T, Status>) -> Bytes {
    let encoded = match item {
        Ok(result) => serde_json::to_vec(&Chunk::Result(result)).map(|mut b| {
            b.push(b'\n');
            b
        }),
        Err(s) => {
            let http = http_status(s.code());
            let error = StreamError {
                grpc_code: s.code() as i32,
                http_code: http.as_u16(),
                message: s.message(),
                http_status: http.canonical_reason().unwrap_or(""),
            };
            serde_json::to_vec(&Chunk::<T>::Error(error))
        }
    };
    Bytes::from(encoded.unwrap_or_default())
}

/// A streaming answer: one `{"result":…}` line per response, ended by the first error. The
/// status line waits for the first item, so an error that comes first sets it (as in
/// grpc-gateway, whose headers go out with the first write).
async fn stream_reply<T, S>(items: S) -> Response
where
    T: Serialize + Send + 'static,
    S: Stream<Item = Result<T, Status>> + Send + Unpin + 'static,
{
    let mut items = items.fuse();
    let first = items.next().await;
    let (code, metadata) = match &first {
        Some(Err(s)) => (http_status(s.code()), false),
        Some(Ok(_)) => (StatusCode::OK, true),
        // No response at all: grpc-gateway got no gRPC headers to forward either.
        None => (StatusCode::OK, false),
    };
    let body = stream::iter(first).chain(items).scan(false, |ended, item| {
        let out = (!*ended).then(|| Ok::<_, std::convert::Infallible>(chunk(&item)));
        *ended = item.is_err();
        futures::future::ready(out)
    });
    let mut r = (code, [(header::CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response();
    if metadata {
        r.headers_mut().insert("grpc-metadata-content-type", HeaderValue::from_static("application/grpc"));
    }
    r
}

/// `/v3/watch`: the body's watch requests go to a hub stream, as on a gRPC Watch stream; its
/// responses come back as JSON lines until the client goes away.
async fn watch_stream(State(g): State<Gw>, headers: HeaderMap, body: Body) -> Response {
    let mut values = Values::new(body, g.max_recv);
    let first = match first_request::<WatchRequest>(&mut values).await {
        Ok(first) => first,
        Err(r) => return r,
    };
    let (stream, out, responses) = g.member.watches().open_stream();
    let requests = stream::unfold((first, values), |(first, mut values)| async move {
        let next = match first {
            Some(r) => Some(Ok(r)),
            None => values.next::<WatchRequest>().await,
        };
        match next? {
            Ok(r) => Some((Ok(r), (None, values))),
            // A later request that does not decode ends the requests; the watchers carry on.
            Err(Next::Bad(_)) => None,
            Err(Next::Broken) => Some((Err(()), (None, values))),
        }
    });
    let member = g.member.clone();
    tokio::spawn(watch::forward_requests(member, metadata(&headers), stream, out, Box::pin(requests)));
    let responses =
        responses.map(|w| WatchResponse::decode(w.to_vec().as_slice()).map_err(|e| Status::internal(e.to_string())));
    stream_reply(responses).await
}

/// `/v3/lease/keepalive`: one answer per request in the body, in order; the stream ends with the
/// body.
async fn keep_alive_stream(State(g): State<Gw>, body: Body) -> Response {
    let mut values = Values::new(body, g.max_recv);
    let first = match first_request::<LeaseKeepAliveRequest>(&mut values).await {
        Ok(first) => first,
        Err(r) => return r,
    };
    let answers = stream::unfold((first, values, g), |(first, mut values, g)| async move {
        let r = match first {
            Some(r) => r,
            None => values.next::<LeaseKeepAliveRequest>().await?.ok()?,
        };
        Some((keep_alive(&g.member, r.id).await, (None, values, g)))
    });
    stream_reply(Box::pin(answers)).await
}

/// `/v3/maintenance/snapshot`: the service's stream, or its refusal as the stream's first item.
async fn snapshot_stream(State(g): State<Gw>, headers: HeaderMap, body: Bytes) -> Response {
    let req = match decode_unary(&body, g.max_recv) {
        Ok(req) => req,
        Err(s) => return error_reply(&s),
    };
    match g.maintenance.snapshot(request(&headers, req)).await {
        Ok(s) => stream_reply(s.into_inner()).await,
        Err(s) => stream_reply(stream::iter([Err::<(), _>(s)])).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader};
    use keel_proto::mvccpb::KeyValue;

    fn range(body: &str) -> Result<RangeRequest, String> {
        decode_unary::<RangeRequest>(body.as_bytes(), 1 << 20).map_err(|s| s.message().to_string())
    }

    #[test]
    fn requests_decode_as_grpc_gateway_reads_them() {
        let want = RangeRequest { key: "foo".into(), range_end: "fop".into(), limit: 2, ..Default::default() };
        assert_eq!(range(r#"{"key":"Zm9v","range_end":"Zm9w","limit":"2"}"#), Ok(want.clone()));
        assert_eq!(range(r#"{"key":"Zm9v","rangeEnd":"Zm9w","limit":2,"bogus":[1]} trailing"#), Ok(want));
        assert_eq!(range(""), Ok(RangeRequest::default()));
        assert_eq!(range(r#"{"key":null,"limit":null}"#), Ok(RangeRequest::default()));
        assert_eq!(range(r#"{"sort_order":"DESCEND"}"#).unwrap().sort_order, 2);
        assert_eq!(range(r#"{"sort_order":1}"#).unwrap().sort_order, 1);
    }

    #[test]
    fn bad_bodies_are_go_json_errors() {
        assert_eq!(range(r#"{"key":"#), Err("unexpected EOF".into()));
        assert_eq!(range("xx"), Err("invalid character 'x' looking for beginning of value".into()));
        assert_eq!(range(r#"{"key" 1}"#), Err("invalid character '1' after object key".into()));
        assert_eq!(range(r#"{"a":1 "b":2}"#), Err("invalid character '\"' after object key:value pair".into()));
        assert_eq!(
            range(r#"{"a":1,}"#),
            Err("invalid character '}' looking for beginning of object key string".into())
        );
        assert_eq!(
            range("[]"),
            Err("json: cannot unmarshal array into Go value of type map[string]json.RawMessage".into())
        );
        assert!(range(r#"{"key":5}"#).is_err());
        assert!(range(r#"{"key":"!!"}"#).is_err());
        assert!(range(r#"{"limit":"abc"}"#).is_err());
        assert_eq!(
            range(r#"{"sort_target":"XX"}"#),
            Err(r#"unknown value "XX" for enum etcdserverpb.RangeRequest_SortTarget"#.into())
        );
    }

    #[test]
    fn responses_encode_as_etcd_3_4() {
        let resp = RangeResponse {
            header: Some(ResponseHeader { cluster_id: 1, member_id: 2, revision: 3, raft_term: 0 }),
            kvs: vec![KeyValue { key: "foo".into(), create_revision: 3, version: 1, ..Default::default() }],
            count: 1,
            more: false,
        };
        assert_eq!(
            serde_json::to_string(&resp).unwrap(),
            r#"{"header":{"cluster_id":"1","member_id":"2","revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"3","version":"1"}],"count":"1"}"#
        );
    }

    #[test]
    fn stream_chunks() {
        let ok: Result<RangeResponse, Status> = Ok(RangeResponse::default());
        assert_eq!(&chunk(&ok)[..], b"{\"result\":{}}\n");
        let err: Result<RangeResponse, Status> = Err(Status::unavailable("etcdserver: no leader"));
        assert_eq!(
            &chunk(&err)[..],
            br#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}"#
        );
    }
}
