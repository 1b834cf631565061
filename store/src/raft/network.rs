//! The peer network seam. This build runs single-member clusters only (the cluster issue brings
//! the gRPC transport over `keelraft.Raft`), so no peer is ever dialled: the start-up refuses an
//! `--initial-cluster` with more than one member, and any call here reports the peer unreachable.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;

use super::TypeConfig;

/// Creates peer clients. Has no peers in a single-member cluster.
#[derive(Clone, Default)]
pub struct NoPeers;

/// A client for a peer that cannot exist in a single-member cluster.
pub struct NoPeer;

fn unreachable<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
        "keel: this build serves single-member clusters only",
    )))
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeer;

    async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> Self::Network {
        NoPeer
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(unreachable())
    }
}
