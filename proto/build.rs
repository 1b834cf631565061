//! Compiles etcd's v3 API and keel's Raft RPC with protox, so no system `protoc` is needed, and
//! generates serde impls for etcd's messages (pbjson, proto3's JSON mapping with the original
//! field names) for the JSON gateway.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/rpc.proto", "proto/raft.proto"];
    for f in files.iter().chain(&["proto/kv.proto", "proto/auth.proto"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let encoded = fds.encode_to_vec();
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    // grpc-gateway's marshaler (etcd 3.4): `OrigName`, unknown input fields ignored.
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .build(&[".etcdserverpb", ".mvccpb", ".authpb"])?;
    Ok(())
}
