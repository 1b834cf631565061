//! etcd's plain-HTTP endpoints on the client URL: `/health` and `/version`.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::node::{Member, ETCD_API_VERSION, ETCD_CLUSTER_VERSION};

pub fn router(member: Arc<Member>) -> Router {
    Router::new().route("/health", get(health)).route("/version", get(version)).with_state(member)
}

/// Healthy as etcd 3.4 judges it: no alarm is raised, this member knows a leader, and a
/// linearizable read barrier passes (etcd does a quorum read). Without a leader or with an alarm
/// the answer is immediate. The body is etcd 3.4's (`{"health":"true"}`); the reason for an
/// unhealthy answer goes to the log.
async fn health(State(m): State<Arc<Member>>) -> (http::StatusCode, Json<Value>) {
    let alarms = !m.read().registry().alarms.is_empty();
    let verdict = if alarms {
        Err("an alarm is raised".to_string())
    } else if m.raft_status().leader.is_none() {
        Err("no leader".to_string())
    } else {
        m.linearize().await.map_err(|e| e.to_string())
    };
    match verdict {
        Ok(()) => (http::StatusCode::OK, Json(json!({"health": "true"}))),
        Err(e) => {
            tracing::warn!("/health: unhealthy: {e}");
            (http::StatusCode::SERVICE_UNAVAILABLE, Json(json!({"health": "false"})))
        }
    }
}

async fn version() -> Json<Value> {
    Json(json!({"etcdserver": ETCD_API_VERSION, "etcdcluster": ETCD_CLUSTER_VERSION}))
}
