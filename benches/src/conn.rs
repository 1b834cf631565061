//! Connections: `n` HTTP/2 channels spread round-robin over the endpoints. A tonic `Channel` is
//! one TCP connection; clients that share a channel multiplex their requests over it, which is
//! what etcd's benchmark means by "clients" and "connections".

use std::time::Duration;

use anyhow::{bail, Context, Result};
use tonic::transport::{Channel, Endpoint};

/// A request that has not been answered after this long fails (and is counted as an error)
/// instead of hanging the run.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `host:port` becomes `http://host:port`; URLs are kept.
pub fn url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    }
}

/// One channel to `endpoint`.
pub async fn channel(endpoint: &str) -> Result<Channel> {
    let url = url(endpoint);
    Endpoint::from_shared(url.clone())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(REQUEST_TIMEOUT)
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// `n` channels; channel `i` goes to `endpoints[i % len]`.
pub async fn connect(endpoints: &[String], n: usize) -> Result<Vec<Channel>> {
    if endpoints.is_empty() || n == 0 {
        bail!("need at least one endpoint and one connection");
    }
    let mut channels = Vec::with_capacity(n);
    for i in 0..n {
        channels.push(channel(&endpoints[i % endpoints.len()]).await?);
    }
    Ok(channels)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bare_addresses_get_a_scheme() {
        assert_eq!(super::url("127.0.0.1:2379"), "http://127.0.0.1:2379");
        assert_eq!(super::url("http://localhost:1"), "http://localhost:1");
    }
}
