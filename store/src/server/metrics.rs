//! `/metrics` in Prometheus' text format, with etcd's metric names where keel has the same
//! quantity: server and Raft state, backend size, keys, watchers, gRPC request counters, and the
//! process' resident memory and CPU time. Served on every client URL and on
//! `--listen-metrics-urls` (with `/health`).

use std::collections::BTreeMap;
use std::fmt::Write;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use parking_lot::Mutex;

use keel_proto::ETCD_METHODS;

use super::Edge;
use crate::node::Member;

/// gRPC request counters: started and handled (by status code) per method. Only etcd's own
/// methods ([`ETCD_METHODS`]) are counted, so what clients send cannot grow the table: a call to
/// a path no service has is not counted, as grpc-go's interceptors never see one.
pub struct GrpcCounters {
    /// One entry per method of [`ETCD_METHODS`], in its order.
    calls: Mutex<Vec<MethodCounts>>,
}

impl Default for GrpcCounters {
    fn default() -> Self {
        Self { calls: Mutex::new(ETCD_METHODS.iter().map(|_| MethodCounts::default()).collect()) }
    }
}

#[derive(Default)]
struct MethodCounts {
    started: u64,
    /// Calls answered, by grpc-go's code name (a bounded set: [`code_name`]).
    handled: BTreeMap<&'static str, u64>,
}

/// grpc-go's name for a status code, as the `grpc_code` label.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

impl GrpcCounters {
    /// Counts a call to `path` (`/package.Service/Method`) as started if it names one of etcd's
    /// methods; returns the method's place in [`ETCD_METHODS`].
    pub(super) fn start(&self, path: &str) -> Option<usize> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        let i = ETCD_METHODS.iter().position(|(s, m, _)| *s == service && *m == method)?;
        self.calls.lock()[i].started += 1;
        Some(i)
    }

    /// Counts a call as handled with the status of its answer `resp` (a stream counts once its
    /// response starts; its final status is in trailers); `key` is what [`Self::start`] returned.
    pub(super) fn handled(&self, key: Option<usize>, resp: &axum::response::Response) {
        let Some(i) = key else { return };
        let code = resp
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .map(tonic::Code::from_i32)
            .unwrap_or(tonic::Code::Ok);
        *self.calls.lock()[i].handled.entry(code_name(code)).or_default() += 1;
    }
}

/// `/metrics` for the edge's member.
pub fn router(edge: Edge) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(edge)
}

async fn metrics(State(edge): State<Edge>) -> ([(http::header::HeaderName, &'static str); 1], String) {
    let content_type = [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")];
    (content_type, render(&edge.member, &edge.grpc))
}

/// One metric family: HELP, TYPE and its samples.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

fn single(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    family(out, name, kind, help, &[(String::new(), value)]);
}

/// Everything `/metrics` reports, rendered.
pub fn render(m: &Member, grpc: &GrpcCounters) -> String {
    let mut out = String::new();
    let raft = m.raft_status();
    let leader = raft.leader;
    single(
        &mut out,
        "etcd_server_has_leader",
        "gauge",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        leader.is_some() as u8 as f64,
    );
    single(
        &mut out,
        "etcd_server_is_leader",
        "gauge",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        (leader == Some(m.id())) as u8 as f64,
    );
    single(
        &mut out,
        "etcd_server_is_learner",
        "gauge",
        "Whether or not this member is a learner. 1 if is, 0 otherwise.",
        m.is_learner() as u8 as f64,
    );
    single(
        &mut out,
        "etcd_server_leader_changes_seen_total",
        "counter",
        "The number of leader changes seen.",
        m.leader_changes() as f64,
    );
    let applied = raft.applied_index as f64;
    single(
        &mut out,
        "etcd_server_proposals_committed_total",
        "gauge",
        "The total number of consensus proposals committed.",
        applied,
    );
    single(
        &mut out,
        "etcd_server_proposals_applied_total",
        "gauge",
        "The total number of consensus proposals applied.",
        applied,
    );
    single(
        &mut out,
        "etcd_server_quota_backend_bytes",
        "gauge",
        "Current backend storage quota size in bytes.",
        m.quota().map(|q| q as f64).unwrap_or(-1.0),
    );
    let (size, in_use) = m.backend_sizes();
    single(
        &mut out,
        "etcd_mvcc_db_total_size_in_bytes",
        "gauge",
        "Total size of the underlying database physically allocated in bytes.",
        size as f64,
    );
    single(
        &mut out,
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "gauge",
        "Total size of the underlying database logically in use in bytes.",
        in_use as f64,
    );
    let (keys, rev, compact) = {
        use crate::mvcc::View;
        let v = m.read();
        (v.index().len(), v.rev(), v.compact_rev())
    };
    single(&mut out, "etcd_debugging_mvcc_keys_total", "gauge", "Total number of keys.", keys as f64);
    single(&mut out, "etcd_debugging_mvcc_current_revision", "gauge", "The current revision of store.", rev as f64);
    single(
        &mut out,
        "etcd_debugging_mvcc_compact_revision",
        "gauge",
        "The revision of the last compaction in store.",
        compact.max(0) as f64,
    );
    let (watchers, streams) = m.watches().counts();
    single(&mut out, "etcd_debugging_mvcc_watcher_total", "gauge", "Total number of watchers.", watchers as f64);
    single(
        &mut out,
        "etcd_debugging_mvcc_watch_stream_total",
        "gauge",
        "Total number of watch streams.",
        streams as f64,
    );

    let (mut started, mut handled) = (Vec::new(), Vec::new());
    for ((service, method, kind), counts) in ETCD_METHODS.iter().zip(grpc.calls.lock().iter()) {
        if counts.started == 0 {
            continue;
        }
        let labels = format!("grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{kind}\"");
        started.push((format!("{{{labels}}}"), counts.started as f64));
        for (code, n) in &counts.handled {
            handled.push((format!("{{grpc_code=\"{code}\",{labels}}}"), *n as f64));
        }
    }
    family(&mut out, "grpc_server_started_total", "counter", "Total number of RPCs started on the server.", &started);
    family(
        &mut out,
        "grpc_server_handled_total",
        "counter",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        &handled,
    );

    if let Some((rss, cpu)) = process_stats() {
        single(&mut out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss);
        single(
            &mut out,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            cpu,
        );
    }
    out
}

/// Resident memory (bytes) and CPU time (seconds) of this process, from `/proc/self/stat`.
fn process_stats() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15, rss 24.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    // SAFETY: sysconf only reads system configuration.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    Some((num(24)? * page as f64, (num(14)? + num(15)?) / ticks as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_methods_are_labelled_as_grpc_prometheus_does() {
        let kind = |service: &str, method: &str| {
            ETCD_METHODS.iter().find(|(s, m, _)| *s == service && *m == method).map(|(_, _, k)| *k)
        };
        assert_eq!(kind("etcdserverpb.Watch", "Watch"), Some("bidi_stream"));
        assert_eq!(kind("etcdserverpb.Lease", "LeaseKeepAlive"), Some("bidi_stream"));
        assert_eq!(kind("etcdserverpb.Maintenance", "Snapshot"), Some("server_stream"));
        assert_eq!(kind("etcdserverpb.KV", "Range"), Some("unary"));
        assert_eq!(kind("etcdserverpb.Auth", "RoleRevokePermission"), Some("unary"));
    }

    #[test]
    fn only_etcds_methods_are_counted() {
        let c = GrpcCounters::default();
        let put = c.start("/etcdserverpb.KV/Put").expect("a method of etcd's");
        let answer = axum::response::Response::builder()
            .header("grpc-status", (tonic::Code::ResourceExhausted as i32).to_string())
            .body(axum::body::Body::empty())
            .unwrap();
        c.handled(Some(put), &answer);
        // Paths a client invents leave the table as it was: it has one entry per etcd method.
        for i in 0..1000 {
            assert!(c.start(&format!("/etcdserverpb.KV/Made{i}")).is_none());
            assert!(c.start(&format!("/made.Up{i}/Put")).is_none());
        }
        assert!(c.start("not-a-grpc-path").is_none());
        let calls = c.calls.lock();
        assert_eq!(calls.len(), ETCD_METHODS.len());
        assert_eq!((calls[put].started, calls[put].handled["ResourceExhausted"]), (1, 1));
        assert_eq!(calls.iter().map(|c| c.started).sum::<u64>(), 1);
    }

    #[test]
    fn process_stats_are_read() {
        let (rss, cpu) = process_stats().expect("/proc/self/stat");
        assert!(rss > 0.0 && cpu >= 0.0);
    }
}
