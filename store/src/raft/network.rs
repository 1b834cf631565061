//! The peer network: openraft's RPCs over keel's internal gRPC service `keelraft.Raft`, on the
//! peer URLs. A payload is the bincode encoding of openraft's own request, and the reply the
//! bincode encoding of `Result<response, RaftError>`; the gRPC layer only moves bytes.
//!
//! Every call has a deadline (openraft's per-RPC TTL, or the caller's), connections are made
//! lazily and re-made after a transport failure, and an unreachable peer is reported as
//! `Unreachable`, so openraft backs off instead of treating it as a protocol error.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_proto::keelraft::raft_client::RaftClient;
use keel_proto::keelraft::RaftPayload;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use super::TypeConfig;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How often an HTTP/2 ping goes to each peer, and how long its answer may take.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// A byte stream to a peer, whatever carries it.
pub use crate::tls::Conn as PeerIo;

/// Opens a connection to a peer URL: the network seam. The binary dials TCP (the default); the
/// simulation passes turmoil's connector, so the same member code runs on simulated links.
pub type Connector =
    Arc<dyn Fn(http::Uri) -> Pin<Box<dyn Future<Output = io::Result<Box<dyn PeerIo>>> + Send>> + Send + Sync>;

/// gRPC channels to peers by peer URL, shared by the Raft network and request forwarding.
#[derive(Clone, Default)]
pub struct Dialer {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// `None`: TCP.
    connector: Option<Connector>,
    /// How TCP connections to `https://` peer URLs do their TLS handshake.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Dialer {
    /// A dialer that opens connections with `connector` instead of TCP.
    pub fn with_connector(connector: Connector) -> Self {
        Dialer { channels: Default::default(), connector: Some(connector), tls: None }
    }

    /// A dialer over TCP that speaks TLS, as `tls` says, to `https://` peer URLs.
    pub fn tcp(tls: Arc<rustls::ClientConfig>) -> Self {
        Dialer { channels: Default::default(), connector: None, tls: Some(tls) }
    }

    /// A client for the peer at `url` (the first of a member's comma-separated peer URLs).
    pub fn client(&self, url: &str) -> Result<RaftClient<Channel>, String> {
        let url = url.split(',').next().unwrap_or_default().to_string();
        let mut channels = self.channels.lock();
        if let Some(c) = channels.get(&url) {
            return Ok(RaftClient::new(c.clone()));
        }
        // tonic is given http://: the TLS is ours, done by the connector.
        let tls = self.tls.clone().filter(|_| url.starts_with("https://"));
        let target = if tls.is_some() { url.replacen("https://", "http://", 1) } else { url.clone() };
        let endpoint = Endpoint::from_shared(target).map_err(|e| format!("bad peer URL {url:?}: {e}"))?;
        // HTTP/2 pings find a connection a partition or a dead peer left hung within a couple of
        // seconds, so forwarded requests do not wait out their whole deadline on it.
        let endpoint = endpoint
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let channel = match (&self.connector, tls) {
            (Some(connect), _) => channel_via(endpoint, connect),
            (None, Some(tls)) => channel_via(endpoint, &tls_connector(tls)),
            (None, None) => channel_via(endpoint, &tcp_connector()),
        };
        channels.insert(url, channel.clone());
        Ok(RaftClient::new(channel).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX))
    }

    /// Drops the channel to `url` so the next call reconnects.
    pub fn forget(&self, url: &str) {
        self.channels.lock().remove(url.split(',').next().unwrap_or_default());
    }
}

/// A peer call that failed before it had a connection: nothing of it was sent, so sending it
/// again cannot apply it twice. Every connection a [`Dialer`] opens goes through
/// [`channel_via`], which reports each failure to connect (within [`CONNECT_TIMEOUT`], the TLS
/// handshake included) as this error, found in a failed call's error sources by
/// [`never_sent`].
#[derive(Debug)]
pub struct NotConnected(io::Error);

impl std::fmt::Display for NotConnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connect error: {}", self.0)
    }
}

impl std::error::Error for NotConnected {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether a failed peer call never had a connection ([`NotConnected`] among its error
/// sources), so it was never sent.
pub fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<NotConnected>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A lazy channel to `endpoint` whose connections `connect` opens; a connection not open within
/// [`CONNECT_TIMEOUT`] fails, and every failure to open one is [`NotConnected`].
pub fn channel_via(endpoint: Endpoint, connect: &Connector) -> Channel {
    let connect = connect.clone();
    endpoint.connect_with_connector_lazy(tower::service_fn(move |uri: http::Uri| {
        let opening = tokio::time::timeout(CONNECT_TIMEOUT, connect(uri));
        async move {
            match opening.await {
                Ok(Ok(io)) => Ok(hyper_util::rt::TokioIo::new(io)),
                Ok(Err(e)) => Err(NotConnected(e)),
                Err(_) => Err(NotConnected(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))),
            }
        }
    }))
}

/// Opens plain TCP connections to the URL's host and port.
fn tcp_connector() -> Connector {
    Arc::new(|uri: http::Uri| {
        Box::pin(async move {
            let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
            let tcp = tokio::net::TcpStream::connect((host.as_str(), uri.port_u16().unwrap_or(80))).await?;
            let _ = tcp.set_nodelay(true);
            Ok(Box::new(tcp) as Box<dyn PeerIo>)
        })
    })
}

/// Opens TCP connections and does a TLS handshake on each, as `tls` says.
fn tls_connector(tls: Arc<rustls::ClientConfig>) -> Connector {
    Arc::new(move |uri: http::Uri| {
        let tls = tls.clone();
        Box::pin(async move { crate::tls::dial(tls, &uri).await })
    })
}

/// Encodes a value for the peer service.
pub fn encode<T: Serialize>(v: &T) -> RaftPayload {
    RaftPayload { data: bincode::serialize(v).expect("raft messages serialize").into() }
}

/// Decodes a peer payload.
pub fn decode<T: DeserializeOwned>(p: &RaftPayload) -> Result<T, String> {
    bincode::deserialize(&p.data).map_err(|e| format!("undecodable peer payload: {e}"))
}

/// Creates peer clients.
#[derive(Clone, Default)]
pub struct Peers {
    pub dialer: Dialer,
    /// While set, every Raft RPC fails as unreachable without being sent (a leader making way
    /// for another during a leadership transfer).
    pub hold: Arc<AtomicBool>,
}

/// openraft's client for one peer.
pub struct Peer {
    target: u64,
    url: String,
    dialer: Dialer,
    hold: Arc<AtomicBool>,
}

impl RaftNetworkFactory<TypeConfig> for Peers {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        Peer { target, url: node.addr.clone(), dialer: self.dialer.clone(), hold: self.hold.clone() }
    }
}

fn unreachable<E: std::error::Error>(why: impl ToString) -> RPCError<u64, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why.to_string())))
}

#[derive(Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Peer {
    async fn call<Req, Resp, E>(
        &mut self,
        method: Method,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        if self.hold.load(Ordering::SeqCst) {
            return Err(unreachable("held for a leadership transfer"));
        }
        let mut client = self.dialer.client(&self.url).map_err(unreachable)?;
        let mut request = tonic::Request::new(encode(req));
        request.set_timeout(option.hard_ttl());
        let reply = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let payload = match reply {
            Ok(r) => r.into_inner(),
            Err(status) => {
                // Application errors travel inside the payload, so this is the transport: the
                // connection may be broken (a partition can leave it hung), so make a new one.
                self.dialer.forget(&self.url);
                if status.code() == tonic::Code::Unavailable {
                    return Err(unreachable(status.message()));
                }
                return Err(RPCError::Network(NetworkError::new(&std::io::Error::other(status.to_string()))));
            }
        };
        let result: Result<Resp, RaftError<u64, E>> =
            decode(&payload).map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Method::Vote, &rpc, &option).await
    }
}
