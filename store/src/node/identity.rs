//! Who a member is: its id and its cluster's id, computed as etcd computes them on a new
//! cluster, asked of a running member when joining one, and kept in the data directory so that a
//! restart ignores the `--initial-*` flags.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

use super::peer::{ForwardReply, Forwarded};
use crate::config::Config;
use crate::engine::{Batch, Engine};
use crate::error::Result;
use crate::mvcc::keys::raft_meta;
use crate::mvcc::keys::raft_meta::IDENTITY;
use crate::raft::network::{decode, encode, Dialer};

/// How long a member joining an existing cluster keeps asking the peers in `--initial-cluster`
/// who it is.
const JOIN_DEADLINE: Duration = Duration::from_secs(60);

/// The ids a data directory was created with; a restart uses them, not the flags.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Identity {
    pub id: u64,
    pub cluster_id: u64,
}

impl Identity {
    /// The identity the data directory was created with, if any.
    pub fn read(engine: &dyn Engine) -> Result<Option<Identity>> {
        Ok(engine.get(&raft_meta(IDENTITY))?.map(|b| bincode::deserialize(&b)).transpose()?)
    }

    /// Records the identity (synced: it is what every later start goes by).
    pub fn write(self, engine: &dyn Engine) -> Result<()> {
        let mut b = Batch::default();
        b.put(raft_meta(IDENTITY), bincode::serialize(&self).expect("identity serializes"));
        engine.write(b, true)
    }
}

/// Learns this member's id and the cluster id from a running member: the member whose peer URLs
/// are this member's advertised peer URLs (etcd's `--initial-cluster-state existing`).
pub(super) async fn join(cfg: &Config, dialer: &Dialer) -> anyhow::Result<Identity> {
    let mine: BTreeSet<&String> = cfg.initial_advertise_peer_urls.iter().collect();
    let peers: Vec<&String> = cfg.initial_cluster.iter().map(|(_, u)| u).filter(|u| !mine.contains(u)).collect();
    if peers.is_empty() {
        anyhow::bail!("--initial-cluster-state=existing needs another member's peer URL in --initial-cluster");
    }
    let started = tokio::time::Instant::now();
    loop {
        for url in &peers {
            let Ok(mut client) = dialer.client(url) else { continue };
            let mut req = tonic::Request::new(encode(&Forwarded::Members));
            req.set_timeout(Duration::from_secs(2));
            let Ok(resp) = client.forward(req).await else {
                dialer.forget(url);
                continue;
            };
            if let Ok(Ok(ForwardReply::Members(cluster_id, members))) =
                decode::<Result<ForwardReply>>(&resp.into_inner())
            {
                let me = members.iter().find(|m| m.peer_urls.iter().collect::<BTreeSet<_>>() == mine);
                return match me {
                    Some(m) => Ok(Identity { id: m.id, cluster_id }),
                    None => anyhow::bail!(
                        "error validating peerURLs: no member of the existing cluster has peer URLs {:?} (add it with `etcdctl member add` first)",
                        cfg.initial_advertise_peer_urls
                    ),
                };
            }
        }
        if started.elapsed() > JOIN_DEADLINE {
            anyhow::bail!("could not reach any member of the existing cluster at {peers:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd's member id: the first 8 bytes (big endian) of SHA-1 over the sorted peer URLs and the
/// cluster token.
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = Sha1::new();
    for u in &urls {
        h.update(u.as_bytes());
    }
    h.update(token.as_bytes());
    u64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

/// etcd's cluster id: SHA-1 over the sorted member ids (big endian), first 8 bytes.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    u64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_etcds_defaults() {
        // A default `etcd` (peer URL http://localhost:2380, token etcd-cluster) is member
        // 8e9e05c52164694d of cluster cdf818194e3a8c32.
        let id = member_id(&["http://localhost:2380".to_string()], "etcd-cluster");
        assert_eq!(format!("{id:x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:x}", cluster_id(&[id])), "cdf818194e3a8c32");
    }
}
