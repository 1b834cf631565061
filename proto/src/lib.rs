//! keel-proto: etcd's v3 wire API (packages `etcdserverpb`, `mvccpb`, `authpb`, with etcd's
//! message, field and service names and numbers, so gRPC paths such as `/etcdserverpb.KV/Range`
//! match and any etcd client works) and keel's internal Raft RPC (`keelraft`).
//!
//! The `.proto` files under `proto/` carry etcd 3.5's definitions without its Go-specific options.

#![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation)]

pub mod mvccpb {
    tonic::include_proto!("mvccpb");
    include!(concat!(env!("OUT_DIR"), "/mvccpb.serde.rs"));
}

pub mod authpb {
    tonic::include_proto!("authpb");
    include!(concat!(env!("OUT_DIR"), "/authpb.serde.rs"));
}

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.serde.rs"));
}

include!(concat!(env!("OUT_DIR"), "/methods.rs"));

pub mod keelraft {
    tonic::include_proto!("keelraft");
}
