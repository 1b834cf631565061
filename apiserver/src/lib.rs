//! keel-apiserver: a Kubernetes API server in front of an etcd v3 store (a keel cluster, a keel
//! member in the same process, or etcd itself). Work in progress (issue 9 of the plan,
//! `docs/apiserver-research.md`): what exists so far is the storage layer, which lays objects
//! out and changes them exactly as kube-apiserver does, so that a keel-apiserver and a
//! kube-apiserver can share one store, and kube's errors ([`status`]) as kube writes them.

pub mod status;
pub mod storage;
