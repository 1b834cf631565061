//! The `keel` binary: etcd's command line in, a serving member out. SIGTERM or SIGINT drains
//! in-flight requests and exits cleanly.

use std::process::ExitCode;
use std::sync::Arc;

use keel_store::config::{url_addr, Config, Invocation};
use keel_store::engine::RocksEngine;
use keel_store::engine::SyncMode;
use keel_store::node::{Member, ETCD_API_VERSION};
use keel_store::raft::network::Dialer;
use keel_store::server;
use keel_store::tls::{Incoming, Tls};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// mimalloc instead of glibc's malloc: a profile of puts at 1,000 clients spent a fifth of the
/// server's CPU in glibc's allocator and its arena locks (README, Performance).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Takes flag `name` out of `args`: `--name=value`, `--name value`, or a bare `--name` when
/// `boolean` (then "true").
fn take_flag(args: &mut Vec<String>, name: &str, boolean: bool) -> Option<String> {
    let flag = format!("--{name}");
    let at = args.iter().position(|a| *a == flag || a.starts_with(&format!("{flag}=")))?;
    let arg = args.remove(at);
    if let Some((_, v)) = arg.split_once('=') {
        return Some(v.to_string());
    }
    if boolean || at >= args.len() {
        return Some("true".to_string());
    }
    Some(args.remove(at))
}

/// The data directory and cluster flags of a restore or migration, as keel's server takes them.
fn member_flags(args: Vec<String>) -> Result<Config, ExitCode> {
    Config::parse_from(std::iter::once("keel".to_string()).chain(args)).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn failed(e: anyhow::Error) -> ExitCode {
    eprintln!("Error: {e:#}");
    ExitCode::FAILURE
}

/// `keel snapshot restore FILE [etcdctl's restore flags]`, as `etcdctl snapshot restore` for etcd.
fn snapshot_restore(args: &[String]) -> ExitCode {
    let Some(file) = args.first() else {
        eprintln!("Error: snapshot restore expects one argument");
        return ExitCode::from(2);
    };
    let mut flags = args[1..].to_vec();
    let skip_hash_check = take_flag(&mut flags, "skip-hash-check", true).is_some_and(|v| v == "true");
    let cfg = match member_flags(flags) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match keel_store::snapshot::restore(std::path::Path::new(file), &cfg, skip_hash_check) {
        Ok(r) => {
            println!(
                "restored snapshot {file} into {} at revision {} ({} revisions of history)",
                cfg.data_dir.display(),
                r.rev,
                r.revisions
            );
            ExitCode::SUCCESS
        }
        Err(e) => failed(e),
    }
}

/// `keel migrate --from URL [--user NAME:PASSWORD] [--follow] [restore's flags]`
/// (`keel_store::migrate`).
fn migrate(args: &[String]) -> ExitCode {
    let mut flags = args.to_vec();
    let Some(from) = take_flag(&mut flags, "from", false) else {
        eprintln!("Error: migrate needs --from, etcd's client URL");
        return ExitCode::from(2);
    };
    let user = take_flag(&mut flags, "user", false);
    let follow = take_flag(&mut flags, "follow", true).is_some_and(|v| v == "true");
    let cfg = match member_flags(flags) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let m = keel_store::migrate::Migration { from, user, follow };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(keel_store::migrate::run(&m, &cfg)) {
        Ok(rev) => {
            println!("migrated etcd at {} into {} up to revision {rev}", m.from, cfg.data_dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => failed(e),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("snapshot") && args.get(2).map(String::as_str) == Some("restore") {
        return snapshot_restore(&args[3..]);
    }
    if args.get(1).map(String::as_str) == Some("migrate") {
        return migrate(&args[2..]);
    }
    let cfg = match Config::invocation_from(std::env::args_os()) {
        Ok(Invocation::Run(cfg)) => cfg,
        Ok(Invocation::PrintVersion) => {
            println!("keel Version: {}\netcd API Version: {ETCD_API_VERSION}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let level = match cfg.log_level.as_str() {
        "panic" | "fatal" => "error",
        l => l,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},openraft=warn"))),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(run(*cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("keel: {e:#}");
            eprintln!("keel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What a listener serves.
#[derive(Debug, Clone, Copy)]
enum Listener {
    Client,
    Peer,
    Metrics,
}

/// How long a stopping member waits for client connections to finish.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

async fn run(cfg: Config) -> anyhow::Result<()> {
    if !cfg.ignored.is_empty() {
        tracing::warn!(flags = %cfg.ignored.join(" "), "keel accepts these etcd flags but does not act on them");
    }
    // Every listener with its URL resolved, before anything starts.
    let groups = [
        (&cfg.listen_client_urls, Listener::Client),
        (&cfg.listen_peer_urls, Listener::Peer),
        (&cfg.listen_metrics_urls, Listener::Metrics),
    ];
    let mut listeners = Vec::new();
    for (urls, kind) in groups {
        for url in urls {
            listeners.push((url_addr(url).map_err(anyhow::Error::msg)?, kind, url.starts_with("https://")));
        }
    }
    std::fs::create_dir_all(&cfg.data_dir)?;
    let tls = Tls::load(&cfg).map_err(anyhow::Error::msg)?;
    let engine = Arc::new(RocksEngine::open(&cfg.data_dir.join("db"))?);
    let dialer = Dialer::tcp(tls.peer_dialing().map_err(anyhow::Error::msg)?);
    let member = Member::start_with(&cfg, engine, dialer, SyncMode::Background).await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = Vec::new();
    // Every client and metrics listener counts into the same gRPC counters.
    let edge = server::Edge::new(member.clone());
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    for (addr, kind, https) in listeners {
        // Metrics URLs serve the client side's certificate, as etcd's.
        let side = if matches!(kind, Listener::Peer) { &tls.peer } else { &tls.client };
        let side = https.then(|| side.as_ref().expect("https URLs were checked to have a certificate"));
        let listener = Incoming::new(tokio::net::TcpListener::bind(addr).await?, side)?;
        let (shutdown, m) = (stopped(stop_rx.clone()), member.clone());
        let edge = edge.clone();
        let scheme = if side.is_some() { "https" } else { "http" };
        tracing::info!(%addr, scheme, "serving {kind:?} traffic");
        servers.push(match kind {
            Listener::Client => tokio::spawn(server::serve(edge, listener, shutdown)),
            Listener::Peer => tokio::spawn(server::serve_with(listener, server::peer_router(m), shutdown)),
            Listener::Metrics => tokio::spawn(server::serve_with(listener, server::metrics_router(edge), shutdown)),
        });
    }
    tracing::info!(name = %cfg.name, id = %format!("{:x}", member.id()), cluster = %format!("{:x}", member.cluster_id()), "keel member started");

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM, draining"),
        _ = int.recv() => tracing::info!("received SIGINT, draining"),
        _ = member.removed() => tracing::warn!("removed from the cluster; stopping"),
    }
    member.begin_shutdown();
    let _ = stop_tx.send(true);
    // In-flight requests get a grace period; a client that keeps a finished stream open (its
    // sending side) would otherwise hold the listener forever.
    let drain = async {
        for s in servers {
            s.await??;
        }
        anyhow::Ok(())
    };
    match tokio::time::timeout(DRAIN_TIMEOUT, drain).await {
        Ok(r) => r?,
        Err(_) => tracing::warn!("client connections still open after {DRAIN_TIMEOUT:?}; closing them"),
    }
    member.shutdown().await;
    tracing::info!("keel stopped");
    Ok(())
}
