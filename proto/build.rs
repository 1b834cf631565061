//! Compiles etcd's v3 API and keel's Raft RPC with protox, so no system `protoc` is needed, and
//! generates serde impls for etcd's messages (pbjson, proto3's JSON mapping with the original
//! field names) for the JSON gateway, and the table of etcd's gRPC methods (`ETCD_METHODS`).

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/rpc.proto", "proto/raft.proto"];
    for f in files.iter().chain(&["proto/kv.proto", "proto/auth.proto"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let encoded = fds.encode_to_vec();
    write_methods(&fds)?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    // grpc-gateway's marshaler (etcd 3.4): `OrigName`, unknown input fields ignored.
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .build(&[".etcdserverpb", ".mvccpb", ".authpb"])?;
    Ok(())
}

/// Writes `methods.rs`: every method of etcd's services, as `(service, method, kind)` with
/// grpc-prometheus's kind label, so what counts calls knows exactly the methods that exist.
fn write_methods(fds: &prost_types::FileDescriptorSet) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = String::from("/// etcd's gRPC methods: (service, method, grpc-prometheus kind).\n");
    out.push_str("pub const ETCD_METHODS: &[(&str, &str, &str)] = &[\n");
    for file in fds.file.iter().filter(|f| f.package() == "etcdserverpb") {
        for service in &file.service {
            for m in &service.method {
                let kind = match (m.client_streaming(), m.server_streaming()) {
                    (false, false) => "unary",
                    (true, false) => "client_stream",
                    (false, true) => "server_stream",
                    (true, true) => "bidi_stream",
                };
                out.push_str(&format!("    (\"etcdserverpb.{}\", {:?}, {kind:?}),\n", service.name(), m.name()));
            }
        }
    }
    out.push_str("];\n");
    std::fs::write(std::path::Path::new(&std::env::var("OUT_DIR")?).join("methods.rs"), out)?;
    Ok(())
}
