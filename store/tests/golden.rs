//! Golden-script tests for MVCC semantics, run on the in-memory engine without Raft: every write
//! goes through the applier a member runs for a committed entry (`apply_command`: quota and auth
//! checks, then the MVCC), one command per batch, published to the watch hub as apply does.
//!
//! Each file under `tests/golden/` holds cases: command lines, a line `---`, then the expected
//! output, cases separated by a blank line. Output never holds a blank line, so a file splits into
//! cases one way only; a case without its `---` line, or with two, is an error. `KEEL_GOLDEN_REGEN=1 cargo test --test golden`
//! rewrites the expected outputs from what the store answers (review the diff before committing).
//!
//! Commands (keys and values are plain words; `-` is the empty string):
//! ```text
//! put KEY VALUE [prev_kv] [ignore_value] [ignore_lease] [lease=N]
//! get KEY [end=E|prefix|from_key] [rev=N] [limit=N] [sort=key|version|create|mod|value]
//!         [order=asc|desc] [keys_only] [count_only] [min_mod=N] [max_mod=N] [min_create=N] [max_create=N]
//! del KEY [end=E|prefix|from_key] [prev_kv]
//! txn CMP... then OP... else OP...   CMP: KEY:version|create|mod|value|lease:=|!=|>|<:VALUE[:END]
//!                                    OP: put:K:V | del:K[:END] | get:K[:END] (joined by spaces)
//! compact REV
//! restart                            reopen the store on the same engine (rebuilds the index)
//! crash                              drop everything not synced, then restart
//! install N                          install a snapshot of this store moved N writes ahead (puts
//!                                    of snap1..snapN), as a follower installs the leader's
//! lease grant ID TTL | lease revoke ID | lease checkpoint ID REMAINING | lease show ID
//! ```
//!
//! Watch hub commands (writes are published to the hub as apply does; streams are named by
//! number and opened on first use):
//! ```text
//! watch S ID KEY [end=E|prefix|from_key] [rev=N] [prev_kv] [noput] [nodelete] [fragment]
//!       [progress_notify]
//! tick                               one periodic progress-notification tick
//! cancel S ID | progress S
//! recv S                             every response queued on stream S, decoded
//! sync                               run the hub's sync loop until it has nothing to do
//! state S ID                         synced | unsynced from REV | gone
//! outbox BYTES                       outbox size for streams opened from now on
//! maxbytes BYTES                     fragmenting threshold
//! ```

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use keel_proto::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, Compare, DeleteRangeRequest, PutRequest, RangeRequest,
    RequestOp, TxnRequest, TxnResponse,
};
use keel_proto::etcdserverpb::{
    LeaseCheckpoint, LeaseCheckpointRequest, LeaseGrantRequest, LeaseRevokeRequest, WatchCreateRequest, WatchResponse,
};
use keel_proto::mvccpb::KeyValue;
use keel_store::auth::Tokens;
use keel_store::engine::{Engine, MemEngine};
use keel_store::mvcc::{keys, kv, Mvcc, View};
use keel_store::raft::apply::{apply_command, EntryContext};
use keel_store::raft::state_machine::dump;
use keel_store::raft::{Command, Proto, Reply};
use keel_store::watch::{Hub, Responses, WatcherState};
use keel_store::Error;
use prost::Message;
use std::collections::BTreeMap;

fn b(s: &str) -> Bytes {
    if s == "-" {
        Bytes::new()
    } else {
        Bytes::copy_from_slice(s.replace("\\0", "\0").as_bytes())
    }
}

fn prefix_end(k: &[u8]) -> Bytes {
    let mut e = k.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xff {
            e.push(last + 1);
            return e.into();
        }
    }
    Bytes::from_static(b"\0")
}

fn show_kv(kv: &KeyValue) -> String {
    format!(
        "{}={} c={} m={} v={} l={}",
        String::from_utf8_lossy(&kv.key),
        String::from_utf8_lossy(&kv.value),
        kv.create_revision,
        kv.mod_revision,
        kv.version,
        kv.lease
    )
}

fn range_of(key: &str, opts: &[&str]) -> (Bytes, Bytes) {
    let k = b(key);
    let mut end = Bytes::new();
    for o in opts {
        if *o == "prefix" {
            end = prefix_end(&k);
        } else if *o == "from_key" {
            end = Bytes::from_static(b"\0");
        } else if let Some(e) = o.strip_prefix("end=") {
            end = b(e);
        }
    }
    (k, end)
}

fn num(opts: &[&str], name: &str) -> i64 {
    opts.iter().find_map(|o| o.strip_prefix(&format!("{name}=")).map(|v| v.parse().unwrap())).unwrap_or(0)
}

fn parse_range(key: &str, opts: &[&str]) -> RangeRequest {
    let (key, range_end) = range_of(key, opts);
    let target = match opts.iter().find_map(|o| o.strip_prefix("sort=")) {
        None | Some("key") => 0,
        Some("version") => 1,
        Some("create") => 2,
        Some("mod") => 3,
        Some("value") => 4,
        Some(x) => panic!("sort target {x}"),
    };
    let order = match opts.iter().find_map(|o| o.strip_prefix("order=")) {
        None => 0,
        Some("asc") => 1,
        Some("desc") => 2,
        Some(x) => panic!("order {x}"),
    };
    RangeRequest {
        key,
        range_end,
        limit: num(opts, "limit"),
        revision: num(opts, "rev"),
        sort_order: order,
        sort_target: target,
        keys_only: opts.contains(&"keys_only"),
        count_only: opts.contains(&"count_only"),
        min_mod_revision: num(opts, "min_mod"),
        max_mod_revision: num(opts, "max_mod"),
        min_create_revision: num(opts, "min_create"),
        max_create_revision: num(opts, "max_create"),
        serializable: false,
    }
}

fn parse_op(s: &str) -> RequestOp {
    let parts: Vec<&str> = s.split(':').collect();
    let request = match parts[0] {
        "put" => {
            request_op::Request::RequestPut(PutRequest { key: b(parts[1]), value: b(parts[2]), ..Default::default() })
        }
        "del" => request_op::Request::RequestDeleteRange(DeleteRangeRequest {
            key: b(parts[1]),
            range_end: parts.get(2).map(|e| b(e)).unwrap_or_default(),
            ..Default::default()
        }),
        "get" => request_op::Request::RequestRange(RangeRequest {
            key: b(parts[1]),
            range_end: parts.get(2).map(|e| b(e)).unwrap_or_default(),
            ..Default::default()
        }),
        x => panic!("txn op {x}"),
    };
    RequestOp { request: Some(request) }
}

fn parse_cmp(s: &str) -> Compare {
    let p: Vec<&str> = s.split(':').collect();
    let (target, union) = match p[1] {
        "version" => (0, compare::TargetUnion::Version(p[3].parse().unwrap())),
        "create" => (1, compare::TargetUnion::CreateRevision(p[3].parse().unwrap())),
        "mod" => (2, compare::TargetUnion::ModRevision(p[3].parse().unwrap())),
        "value" => (3, compare::TargetUnion::Value(b(p[3]))),
        "lease" => (4, compare::TargetUnion::Lease(p[3].parse().unwrap())),
        x => panic!("compare target {x}"),
    };
    let result = match p[2] {
        "=" => 0,
        ">" => 1,
        "<" => 2,
        "!=" => 3,
        x => panic!("compare result {x}"),
    };
    Compare {
        result,
        target,
        key: b(p[0]),
        range_end: p.get(4).map(|e| b(e)).unwrap_or_default(),
        target_union: Some(union),
    }
}

fn show_txn(t: &TxnResponse, depth: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    out.push(format!("{pad}succeeded={} rev={}", t.succeeded, t.header.as_ref().map(|h| h.revision).unwrap_or(0)));
    for r in &t.responses {
        match r.response.as_ref().unwrap() {
            response_op::Response::ResponseRange(rr) => {
                out.push(format!("{pad}- range count={} more={}", rr.count, rr.more));
                out.extend(rr.kvs.iter().map(|kv| format!("{pad}  {}", show_kv(kv))));
            }
            response_op::Response::ResponsePut(p) => {
                out.push(format!("{pad}- put rev={}", p.header.as_ref().unwrap().revision))
            }
            response_op::Response::ResponseDeleteRange(d) => {
                out.push(format!("{pad}- del deleted={} rev={}", d.deleted, d.header.as_ref().unwrap().revision))
            }
            response_op::Response::ResponseTxn(inner) => show_txn(inner, depth + 1, out),
        }
    }
}

struct Harness {
    engine: MemEngine,
    mvcc: Arc<Mvcc>,
    hub: Arc<Hub>,
    /// Open streams by script number: hub stream id and the responses.
    streams: BTreeMap<u64, (u64, Responses)>,
    /// Auth tokens, as a member's state machine keeps them.
    tokens: Tokens,
    /// The log index of the last command applied.
    index: u64,
}

fn show_event(e: &keel_proto::mvccpb::Event) -> String {
    let kind = if e.r#type == 0 { "PUT" } else { "DELETE" };
    let kv = e.kv.clone().unwrap_or_default();
    let mut s = format!("{kind} {}", show_kv(&kv));
    if let Some(p) = &e.prev_kv {
        s.push_str(&format!(" prev[{}]", show_kv(p)));
    }
    s
}

fn show_watch(r: &WatchResponse) -> String {
    let mut s = format!("id={} rev={}", r.watch_id, r.header.as_ref().map(|h| h.revision).unwrap_or_default());
    for (flag, on) in [("created", r.created), ("canceled", r.canceled), ("fragment", r.fragment)] {
        if on {
            s.push(' ');
            s.push_str(flag);
        }
    }
    if r.compact_revision != 0 {
        s.push_str(&format!(" compact_revision={}", r.compact_revision));
    }
    if !r.cancel_reason.is_empty() {
        s.push_str(&format!(" reason={:?}", r.cancel_reason));
    }
    for e in &r.events {
        s.push_str(&format!("\n  {}", show_event(e)));
    }
    s
}

/// Applies `Command::$kind(request)` through the harness and unpacks the reply of that kind.
macro_rules! applied {
    ($h:expr, $kind:ident($req:expr)) => {
        $h.apply(Command::$kind(Proto($req))).map(|reply| match reply {
            Reply::$kind(Proto(resp)) => resp,
            other => panic!("{} answered {other:?}", stringify!($kind)),
        })
    };
}

impl Harness {
    fn new() -> Self {
        let engine = MemEngine::new();
        let mvcc = Arc::new(Mvcc::open(Arc::new(engine.clone()) as Arc<dyn Engine>).unwrap());
        let hub = Arc::new(Hub::new(mvcc.clone()));
        let tokens = Tokens::new(std::time::Duration::from_secs(300));
        Self { engine, mvcc, hub, streams: BTreeMap::new(), tokens, index: 0 }
    }

    /// Applies one command as the state machine applies a committed entry: the applier, in a
    /// batch, committed, published to the hub.
    fn apply(&mut self, cmd: Command) -> Result<Reply, Error> {
        self.index += 1;
        let mut batch = self.mvcc.apply(self.hub.wants_prev());
        let at = EntryContext { index: self.index, term: 1, tokens: &self.tokens };
        let res = apply_command(&mut batch, &at, &cmd);
        let revs = batch.commit(true).unwrap();
        self.hub.publish(&revs);
        res
    }

    fn stream(&mut self, n: &str) -> u64 {
        let n: u64 = n.parse().unwrap();
        let hub = self.hub.clone();
        self.streams.entry(n).or_insert_with(|| {
            let (id, _, responses) = hub.open_stream();
            (id, responses)
        });
        self.streams[&n].0
    }

    fn run(&mut self, line: &str) -> Vec<String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let err = |e: Error| vec![format!("error: {e}")];
        match words[0] {
            "put" => {
                let opts = &words[3..];
                let p = PutRequest {
                    key: b(words[1]),
                    value: if opts.contains(&"ignore_value") { Bytes::new() } else { b(words[2]) },
                    lease: num(opts, "lease"),
                    prev_kv: opts.contains(&"prev_kv"),
                    ignore_value: opts.contains(&"ignore_value"),
                    ignore_lease: opts.contains(&"ignore_lease"),
                };
                match applied!(self, Put(p)) {
                    Err(e) => err(e),
                    Ok(resp) => {
                        let mut out = vec![format!("rev={}", resp.header.unwrap().revision)];
                        out.extend(resp.prev_kv.iter().map(|kv| format!("prev {}", show_kv(kv))));
                        out
                    }
                }
            }
            "get" => {
                let r = parse_range(words[1], &words[2..]);
                match kv::range(&self.mvcc.read(), &r) {
                    Err(e) => err(e),
                    Ok(resp) => {
                        let mut out = vec![format!(
                            "rev={} count={} more={}",
                            resp.header.unwrap().revision,
                            resp.count,
                            resp.more
                        )];
                        out.extend(resp.kvs.iter().map(show_kv));
                        out
                    }
                }
            }
            "del" => {
                let (key, range_end) = range_of(words[1], &words[2..]);
                let d = DeleteRangeRequest { key, range_end, prev_kv: words.contains(&"prev_kv") };
                match applied!(self, DeleteRange(d)) {
                    Err(e) => err(e),
                    Ok(resp) => {
                        let mut out = vec![format!("rev={} deleted={}", resp.header.unwrap().revision, resp.deleted)];
                        out.extend(resp.prev_kvs.iter().map(|kv| format!("prev {}", show_kv(kv))));
                        out
                    }
                }
            }
            "txn" => {
                let mut t = TxnRequest::default();
                let mut section = "if";
                for w in &words[1..] {
                    match *w {
                        "then" | "else" => section = w,
                        _ if section == "if" => t.compare.push(parse_cmp(w)),
                        _ if section == "then" => t.success.push(parse_op(w)),
                        _ => t.failure.push(parse_op(w)),
                    }
                }
                match applied!(self, Txn(t)) {
                    Err(e) => err(e),
                    Ok(resp) => {
                        let mut out = Vec::new();
                        show_txn(&resp, 0, &mut out);
                        out
                    }
                }
            }
            "compact" => {
                let c = CompactionRequest { revision: words[1].parse().unwrap(), physical: true };
                match applied!(self, Compact(c)) {
                    Err(e) => err(e),
                    Ok(resp) => vec![format!("rev={}", resp.header.unwrap().revision)],
                }
            }
            "install" => {
                // The leader: this store's state, then N more writes.
                let leader = Mvcc::open(Arc::new(MemEngine::new()) as Arc<dyn Engine>).unwrap();
                let marker = || (keys::sm_meta(keys::meta::INSTALLING), Vec::new());
                leader.replace(dump(&self.mvcc).unwrap().into_iter().map(Ok), marker()).unwrap();
                for i in 1..=words[1].parse::<u32>().unwrap() {
                    let mut batch = leader.apply(false);
                    let p =
                        PutRequest { key: b(&format!("snap{i}")), value: b(&format!("v{i}")), ..Default::default() };
                    kv::put(&mut batch, &p).unwrap();
                    batch.commit(false).unwrap();
                }
                self.mvcc.replace(dump(&leader).unwrap().into_iter().map(Ok), marker()).unwrap();
                self.hub.reset();
                vec![format!("rev={} compacted={}", self.mvcc.current_rev(), self.mvcc.compact_rev())]
            }
            "restart" | "crash" => {
                if words[0] == "crash" {
                    self.engine.crash();
                }
                self.streams.clear();
                self.mvcc = Arc::new(Mvcc::open(Arc::new(self.engine.clone()) as Arc<dyn Engine>).unwrap());
                self.hub = Arc::new(Hub::new(self.mvcc.clone()));
                vec![format!("rev={} compacted={}", self.mvcc.current_rev(), self.mvcc.compact_rev())]
            }
            "lease" => {
                let id: i64 = words[2].parse().unwrap();
                let res = match words[1] {
                    "grant" => {
                        let g = LeaseGrantRequest { ttl: words[3].parse().unwrap(), id };
                        applied!(self, LeaseGrant(g)).map(|r| format!("id={} ttl={}", r.id, r.ttl))
                    }
                    "revoke" => applied!(self, LeaseRevoke(LeaseRevokeRequest { id }))
                        .map(|r| format!("rev={}", r.header.unwrap().revision)),
                    "checkpoint" => {
                        let cp = LeaseCheckpoint { id, remaining_ttl: words[3].parse().unwrap() };
                        let c = LeaseCheckpointRequest { checkpoints: vec![cp] };
                        applied!(self, LeaseCheckpoint(c)).map(|_| "ok".to_string())
                    }
                    "show" => Ok(match self.mvcc.read().leases().get(id) {
                        None => "none".to_string(),
                        Some(l) => {
                            let keys: Vec<String> = l.keys.iter().map(|k| String::from_utf8_lossy(k).into()).collect();
                            format!("ttl={} remaining={} keys=[{}]", l.record.ttl, l.record.remaining, keys.join(" "))
                        }
                    }),
                    x => panic!("unknown lease command {x}"),
                };
                res.map_or_else(err, |s| vec![s])
            }
            "watch" => {
                let s = self.stream(words[1]);
                let opts = &words[4..];
                let (key, range_end) = range_of(words[3], opts);
                let mut filters = Vec::new();
                if opts.contains(&"noput") {
                    filters.push(0);
                }
                if opts.contains(&"nodelete") {
                    filters.push(1);
                }
                let c = WatchCreateRequest {
                    key,
                    range_end,
                    start_revision: num(opts, "rev"),
                    progress_notify: opts.contains(&"progress_notify"),
                    filters,
                    prev_kv: opts.contains(&"prev_kv"),
                    watch_id: words[2].parse().unwrap(),
                    fragment: opts.contains(&"fragment"),
                };
                self.hub.create(s, &c);
                vec![]
            }
            "cancel" => {
                let s = self.stream(words[1]);
                self.hub.cancel(s, words[2].parse().unwrap());
                vec![]
            }
            "progress" => {
                let s = self.stream(words[1]);
                self.hub.progress_request(s);
                vec![]
            }
            "recv" => {
                self.stream(words[1]);
                let (_, responses) = self.streams.get_mut(&words[1].parse().unwrap()).unwrap();
                let mut out = Vec::new();
                while let Some(Some(w)) = responses.next().now_or_never() {
                    out.push(show_watch(&WatchResponse::decode(w.to_vec().as_slice()).unwrap()));
                }
                if out.is_empty() {
                    out.push("(nothing)".into());
                }
                out
            }
            "tick" => {
                self.hub.notify_progress();
                vec![]
            }
            "sync" => {
                let mut rounds = 0;
                while self.hub.sync_once().unwrap() {
                    rounds += 1;
                    assert!(rounds < 1000, "sync does not settle");
                }
                vec![]
            }
            "state" => {
                let s = self.stream(words[1]);
                vec![match self.hub.state(s, words[2].parse().unwrap()) {
                    None => "gone".to_string(),
                    Some(WatcherState::Synced) => "synced".to_string(),
                    Some(WatcherState::Unsynced(r)) => format!("unsynced from {r}"),
                }]
            }
            "outbox" => {
                self.hub.set_outbox_bytes(words[1].parse().unwrap());
                vec![]
            }
            "maxbytes" => {
                self.hub.configure(0, 0, words[1].parse().unwrap());
                vec![]
            }
            x => panic!("unknown command {x}"),
        }
    }
}

fn run_file(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut h = Harness::new();
    let mut rewritten = String::new();
    let mut failures = Vec::new();
    for case in text.split("\n\n").filter(|c| !c.trim().is_empty()) {
        let separators = case.lines().filter(|l| l.trim_end() == "---").count();
        if separators != 1 {
            return Err(format!("{}: a case needs one `---` line, this one has {separators}:\n{case}", path.display()));
        }
        let (cmds, expected) = case.split_once("\n---\n").or_else(|| case.split_once("\n---")).unwrap_or((case, ""));
        let mut actual = Vec::new();
        for line in cmds.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            actual.push(format!("> {line}"));
            actual.extend(h.run(line));
        }
        let actual = actual.join("\n");
        assert!(
            !actual.contains("\n\n"),
            "{}: output with a blank line cannot be a golden case:\n{actual}",
            path.display()
        );
        let expected = expected.trim_end();
        if actual != expected {
            failures.push(format!("case:\n{cmds}\nexpected:\n{expected}\nactual:\n{actual}\n"));
        }
        rewritten.push_str(&format!("{}\n---\n{}\n\n", cmds.trim_end(), actual));
    }
    if std::env::var_os("KEEL_GOLDEN_REGEN").is_some() {
        std::fs::write(path, rewritten.trim_end().to_string() + "\n").unwrap();
        return Ok(());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: {} case(s) differ (KEEL_GOLDEN_REGEN=1 rewrites):\n{}",
            path.display(),
            failures.len(),
            failures.join("\n")
        ))
    }
}

#[test]
fn golden_scripts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no golden scripts in {}", dir.display());
    let errors: Vec<String> = files.iter().filter_map(|f| run_file(f).err()).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
