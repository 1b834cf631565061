//! `keel-apiserver`: serves the Kubernetes API until SIGTERM or SIGINT.

use clap::Parser;
use keel_apiserver::run::{start, Flags};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let flags = Flags::parse();
    let running = start(&flags).await?;
    let kubeconfig = std::fs::canonicalize(&running.kubeconfig).unwrap_or_else(|_| running.kubeconfig.clone());
    eprintln!(
        "keel-apiserver serves https://{} — point kubectl at it with:\n  export KUBECONFIG={}\n  kubectl get namespaces",
        running.addr,
        kubeconfig.display()
    );
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    running.stop().await;
    Ok(())
}
