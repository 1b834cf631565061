//! Cluster membership as etcd's Cluster service shows it: Raft's membership (which members exist,
//! their peer URLs, who is a learner) joined with what each member published about itself (name,
//! client URLs; `mvcc::registry`). Changes run on the leader as openraft membership changes;
//! [`crate::node::Member`] forwards them there.

use std::collections::BTreeMap;

use keel_proto::etcdserverpb::Member as PbMember;
use openraft::{BasicNode, Membership};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mvcc::registry::Registry;

/// One member as etcd reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    pub id: u64,
    /// Empty until the member has started and published it.
    pub name: String,
    pub peer_urls: Vec<String>,
    /// Empty until the member has started and published them.
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl MemberInfo {
    pub fn to_proto(&self) -> PbMember {
        PbMember {
            id: self.id,
            name: self.name.clone(),
            peer_ur_ls: self.peer_urls.clone(),
            client_ur_ls: self.client_urls.clone(),
            is_learner: self.is_learner,
        }
    }
}

/// A membership change, as a client asks for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Change {
    Add { peer_urls: Vec<String>, learner: bool },
    Remove(u64),
    Update { id: u64, peer_urls: Vec<String> },
    Promote(u64),
}

/// The outcome of a change: the added member (for Add) and the members afterwards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Changed {
    pub member: Option<MemberInfo>,
    pub members: Vec<MemberInfo>,
}

/// A member's peer URLs as Raft's node record holds them (comma-joined).
pub fn peer_urls(node: &BasicNode) -> Vec<String> {
    node.addr.split(',').filter(|u| !u.is_empty()).map(String::from).collect()
}

/// Raft's node record for a member with these peer URLs.
pub fn node_of(urls: &[String]) -> BasicNode {
    BasicNode { addr: urls.join(",") }
}

/// The members of `membership`, voters and learners, by id, with their published attributes.
pub fn members(membership: &Membership<u64, BasicNode>, registry: &Registry) -> Vec<MemberInfo> {
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, node)| {
            let attrs = registry.attributes.get(id).cloned().unwrap_or_default();
            MemberInfo {
                id: *id,
                name: attrs.name,
                peer_urls: peer_urls(node),
                client_urls: attrs.client_urls,
                is_learner: !voters.contains(id),
            }
        })
        .collect()
}

/// Checks peer URLs as etcd does: at least one, each `scheme://host:port` with a known scheme
/// and nothing after the port.
pub fn validate_urls(urls: &[String]) -> Result<()> {
    let ok = |u: &str| -> bool {
        let Some((scheme, rest)) = u.split_once("://") else { return false };
        if !matches!(scheme, "http" | "https" | "unix" | "unixs") {
            return false;
        }
        let Some((host, port)) = rest.rsplit_once(':') else { return false };
        !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
    };
    if urls.is_empty() || !urls.iter().all(|u| ok(u)) {
        return Err(Error::MemberBadUrls);
    }
    Ok(())
}

/// Whether any of `urls` belongs to a member other than `except`.
pub fn urls_taken(membership: &Membership<u64, BasicNode>, urls: &[String], except: Option<u64>) -> bool {
    let taken: BTreeMap<String, u64> =
        membership.nodes().flat_map(|(id, n)| peer_urls(n).into_iter().map(move |u| (u, *id))).collect();
    urls.iter().any(|u| taken.get(u).is_some_and(|owner| Some(*owner) != except))
}

/// etcd's rule for promoting a learner: its log must have reached 90% of the leader's.
pub fn learner_ready(learner_matched: Option<u64>, leader_last: u64) -> bool {
    learner_matched.unwrap_or(0) as f64 >= leader_last as f64 * 0.9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_like_etcd() {
        assert!(validate_urls(&["http://127.0.0.1:2380".into(), "https://a.example:1".into()]).is_ok());
        for bad in ["127.0.0.1:2380", "http://127.0.0.1", "ftp://a:1", "http://:1", "http://a:1/x", "http://a:x"] {
            assert_eq!(validate_urls(&[bad.to_string()]), Err(Error::MemberBadUrls), "{bad}");
        }
        assert_eq!(validate_urls(&[]), Err(Error::MemberBadUrls));
    }

    #[test]
    fn learners_are_ready_at_ninety_percent() {
        assert!(learner_ready(Some(90), 100));
        assert!(!learner_ready(Some(89), 100));
        assert!(!learner_ready(None, 100));
        assert!(learner_ready(None, 0));
    }
}
