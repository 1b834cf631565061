//! The simulated side of keel's network seam: the same servers and clients as the binary, on
//! turmoil's sockets.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keel_store::raft::network::{channel_via, Connector, PeerIo};
use tonic::transport::{Channel, Endpoint};

/// turmoil's TCP listener as a listener keel's servers (axum) accept connections from.
pub struct SimListener(pub turmoil::net::TcpListener);

impl SimListener {
    /// Binds `port` on the current simulated host.
    pub async fn bind(port: u16) -> io::Result<Self> {
        Ok(SimListener(turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?))
    }
}

impl axum::serve::Listener for SimListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Opens turmoil connections to `http://host:port` URLs (simulated host names resolve).
pub fn connector() -> Connector {
    Arc::new(|uri: http::Uri| {
        Box::pin(async move {
            let host = uri.host().unwrap_or_default().to_string();
            let port = uri.port_u16().unwrap_or(80);
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(Box::new(stream) as Box<dyn PeerIo>)
        })
    })
}

/// A lazy gRPC channel to `url` over the simulated network, with a per-request deadline.
pub fn channel(url: &str, timeout: Duration) -> Channel {
    let endpoint = Endpoint::from_shared(url.to_string()).expect("simulated URLs are valid").timeout(timeout);
    channel_via(endpoint, &connector())
}
