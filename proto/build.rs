//! Compiles etcd's v3 API and keel's Raft RPC with protox, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/rpc.proto", "proto/raft.proto"];
    for f in files.iter().chain(&["proto/kv.proto", "proto/auth.proto"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
