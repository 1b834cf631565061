//! etcdctl 3.4 against etcd and against keel: the same script of commands, the same output.
//!
//! A fresh etcd and a fresh keel run side by side; every step of [`script`] runs as
//! `ETCDCTL_API=3 etcdctl --endpoints=http://127.0.0.1:P <args>` (with its stdin, for `txn`)
//! against each, and the exit code, stdout and stderr must be equal after normalising only what
//! genuinely differs between two servers: ports, cluster/member ids, raft term and index, db size,
//! version strings, timings, and the timestamp and client id in etcdctl's own log lines. Ids are
//! mapped to "set"/"unset" rather than dropped, so a field etcd leaves out (e.g. in the headers
//! nested in a txn response) must be left out by keel too. All differences are collected and
//! reported together (a later step may differ only because an earlier one did).
//!
//! Each step also states whether etcdctl must succeed on etcd, so a typo in the script (etcdctl
//! 3.4 rejecting a flag) fails loudly instead of comparing two identical usage errors.
//!
//! Leases: the id a server picks for `lease grant` differs between servers, so each server's
//! granted ids are named `<lease1>`, `<lease2>`, ... in grant order, in etcdctl's hex form and in
//! JSON and fields output (`ID`, `id`, `lease`); `{leaseN}` in a step's arguments or stdin stands
//! for the server's own id. A remaining TTL (`remaining(599s)`, JSON `ttl` next to `granted-ttl`)
//! depends on timing: it must lie in `0..=granted` and is then replaced. etcd lists leases and a
//! lease's keys in map or expiry order; those lists are sorted.
//!
//! Watches: a `start` step runs `etcdctl watch ...` in the background against each server while
//! the following steps run; its `stop` step waits (with a deadline) until each watch has printed
//! a given line, kills both and compares what they printed. Watches start at an explicit
//! revision (`{next}`: the server's current revision + 1) so that their output does not depend
//! on when the server registered them. In `watch -w json` output the events are compared one by
//! one, without the headers of the responses carrying them: how events are grouped into
//! responses depends on timing. Every etcdctl process is killed and reaped when its handle is
//! dropped, also on panic.
//!
//! A second test fetches `/health` and `/version` over plain HTTP/1.1 from the client URL (etcd
//! serves them next to gRPC on the same port) and compares them with etcd's.
//!
//! `KEEL_DIFF_AGAINST=etcd` compares etcd with a second etcd (validates the harness);
//! `KEEL_DIFF_TRACE=1` prints every step with etcd's normalised output.
//! Run: `cargo test --workspace --test etcdctl -- --nocapture`.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::etcdctl::Etcdctl;
use common::{poll_until, Kind, Server};
use keel_proto::etcdserverpb::{PutRequest, RangeRequest};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// etcdctl has its own dial (2 s) and command (5 s) timeouts; this only bounds a stuck process.
const ETCDCTL_DEADLINE: Duration = Duration::from_secs(60);
/// How long `etcdctl watch` may take to exit (refused) or to print what a `stop` step waits for.
const WATCH_DEADLINE: Duration = Duration::from_secs(10);

/// One etcdctl invocation.
struct Step {
    args: Vec<String>,
    stdin: Option<String>,
    /// Whether etcdctl exits 0 against etcd (checked, to keep the script honest).
    ok: bool,
    background: Background,
    /// Compare only the exit code and the last line of stderr: for connections refused at the
    /// TLS handshake, where the Go and Rust TLS stacks word the alert in etcdctl's retry log
    /// differently (and etcd 3.4 stops at TLS 1.2).
    loose: bool,
}

/// Watches running in the background across steps.
enum Background {
    /// A plain step: etcdctl runs to completion.
    No,
    /// Starts `etcdctl <args>` under this name and goes on.
    Start(&'static str),
    /// Waits until the named watch printed the line `until` (in JSON output: a key or value
    /// `until`, base64-encoded), then kills it; its output is the step's output.
    Stop { name: &'static str, until: &'static str },
}

fn ok(args: &str) -> Step {
    Step {
        args: args.split_whitespace().map(String::from).collect(),
        stdin: None,
        ok: true,
        background: Background::No,
        loose: false,
    }
}

/// A step that fails at the TLS handshake ([`Step::loose`]).
fn refused(args: &str) -> Step {
    Step { loose: true, ..fails(args) }
}

fn fails(args: &str) -> Step {
    Step { ok: false, ..ok(args) }
}

/// `etcdctl txn` fed with `input` (compares, blank line, success ops, blank line, failure ops,
/// blank line).
fn txn(args: &str, input: &str, succeeds: bool) -> Step {
    Step { stdin: Some(input.to_string()), ok: succeeds, ..ok(&format!("txn {args}")) }
}

/// `etcdctl <args>` fed with `input` on its stdin.
fn fed(args: &str, input: &str, succeeds: bool) -> Step {
    Step { stdin: Some(input.to_string()), ok: succeeds, ..ok(args) }
}

/// Steps whose arguments contain an empty string.
fn ok_args(args: &[&str]) -> Step {
    Step { args: args.iter().map(|s| s.to_string()).collect(), ..ok("") }
}

/// Starts `etcdctl <args>` (a watch) in the background as `name`.
fn start(name: &'static str, args: &str) -> Step {
    Step { background: Background::Start(name), ..ok(args) }
}

/// Stops the background watch `name` once it printed `until`, and compares its output.
fn stop(name: &'static str, until: &'static str) -> Step {
    Step { background: Background::Stop { name, until }, ..ok("") }
}

/// The command script. Revisions in comments are those of a fresh store (revision 1).
fn script() -> Vec<Step> {
    let mut steps = vec![
        // put
        ok("put k1 v1"),                               // rev 2
        ok("put k1 v2 --prev-kv"),                     // rev 3
        ok("put k2 v3 -w json"),                       // rev 4
        ok("put foo/a 1"),                             // rev 5
        ok("put foo/b 2"),                             // rev 6
        ok("put foo/c 3"),                             // rev 7
        ok("put zoo 4"),                               // rev 8
        ok("put foo/b 22"),                            // rev 9
        ok("put k1 v4 --prev-kv -w json"),             // rev 10
        ok("put k1 --ignore-value"),                   // rev 11
        ok("put k1 --ignore-value --prev-kv -w json"), // rev 12
        fails("put nokey --ignore-value"),
        fails("put k1 v5 --lease=1234"),
        ok("put k1 v5 --ignore-lease"), // rev 13
        ok("put k1 v6 -w fields"),      // rev 14
        // get
        ok("get k1"),
        ok("get k1 -w json"),
        ok("get k1 -w fields"),
        ok("get k1 --print-value-only"),
        ok("get nokey"),
        ok("get nokey -w json"),
        ok("get foo --prefix"),
        ok("get foo --prefix -w json"),
        ok("get foo --prefix --hex"),
        ok("get foo/a foo/c"),
        ok("get foo/b --from-key"),
        ok("get foo/b --from-key -w json"),
        ok("get foo --prefix --limit 2"),
        ok("get foo --prefix --limit 2 -w json"),
        ok("get foo --prefix --limit 1 --keys-only -w json"),
        ok("get k1 --rev 2"),
        ok("get k1 --rev 3 -w json"),
        ok("get k1 --rev 1"),
        ok("get foo --prefix --rev 6 -w json"),
        fails("get k1 --rev 100"),
        ok("get foo --prefix --keys-only"),
        ok("get foo --prefix --keys-only -w json"),
        ok("get foo --prefix --consistency=s"),
        ok_args(&["get", "", "--from-key"]),
        ok_args(&["get", "", "--from-key", "-w", "json"]),
        ok_args(&["get", "", "--from-key", "--keys-only", "--limit", "3", "-w", "json"]),
        ok("get foo --prefix --order=DESCEND"),
        ok("get foo --prefix --order=ASCEND -w json"),
    ];
    for target in ["KEY", "CREATE", "MODIFY", "VALUE", "VERSION"] {
        steps.push(ok(&format!("get foo --prefix --sort-by={target}")));
        steps.push(ok(&format!("get foo --prefix --sort-by={target} --order=DESCEND")));
        steps.push(ok(&format!("get foo --prefix --sort-by={target} --order=ASCEND --limit 2 -w json")));
    }
    steps.extend([
        // txn
        txn("", "mod(\"k1\") > \"0\"\nvalue(\"k2\") = \"v3\"\n\nput k3 s1\nget k1\n\nput k3 f1\n\n", true),
        txn("-w json", "mod(\"k1\") > \"0\"\nvalue(\"k2\") = \"v3\"\n\nput k3 s2\nget k1\n\nput k3 f2\n\n", true),
        txn("", "version(\"k1\") = \"1\"\n\nput k4 s\n\nget k1\ndel k2 --prev-kv\nput k5 f\n\n", true),
        txn("-w json", "version(\"k1\") = \"1\"\n\nput k4 s\n\nget k1\nget foo --prefix --limit=1\n\n", true),
        txn(
            "-w json",
            // (etcdctl 3.4 cannot parse lease("k") compares: it panics with "bad value".)
            "create(\"k1\") < \"100\"\nmod(\"k2\") = \"4\"\n\nget k --prefix\ndel foo/c\n\n\n",
            true,
        ),
        txn("-w json", "version(\"nokey\") = \"0\"\nvalue(\"nokey\") = \"\"\n\nput nokey x\n\nput nokey y\n\n", true),
        txn("", "value(\"k1\") != \"zz\"\n\nget k1 k9\n\n\n", true),
        txn("", "\nput a 1\nput a 2\n\n\n", false),
        txn("", "\nput a 1\n\nput b 2\n\n", true),
        txn("", "value(\"k1\") = \"v1\"\n", false),
        // del
        ok("del foo/a --prev-kv"),
        ok("del nothing"),
        ok("del nothing -w json"),
        ok("del foo --prefix --prev-kv"),
        ok("del k --prefix -w json"),
        ok("del zoo --from-key --prev-kv -w json"),
        ok("put k1 again"),
        ok("put k2 again"),
        // leases, with a live JSON watch on their keys
        start("leases", "watch --prefix lk --prev-kv -w json --rev={next}"),
        ok("lease grant 600"),            // <lease1>
        ok("lease grant 900 -w json"),    // <lease2>
        ok("lease grant 3600 -w fields"), // <lease3>
        fails("lease grant 9000000001"),
        ok("put lk1 v1 --lease={lease1}"),
        ok("put lk2 v2 --lease={lease1} --prev-kv"),
        ok("put lk3 v3 --lease={lease2} -w json"),
        ok("put lk2 v22 --lease={lease3} --prev-kv -w json"),
        ok("put lk1 v11 --ignore-lease --prev-kv -w json"),
        fails("put lk4 v4 --lease=1234"),
        txn("", "version(\"lk1\") > \"0\"\n\nput lk5 t1 --lease={lease2}\n\nput lk5 t2\n\n", true),
        txn("-w json", "\nput lk6 t1 --lease=1234\n\n\n", false),
        ok("get lk --prefix -w json"),
        ok("get lk --prefix --keys-only -w fields"),
        ok("lease timetolive {lease1}"),
        ok("lease timetolive {lease1} --keys"),
        ok("lease timetolive {lease2} --keys -w json"),
        ok("lease timetolive {lease3} -w json"),
        ok("lease timetolive 1234"),
        ok("lease timetolive 1234 --keys -w json"),
        ok("lease keep-alive --once {lease1}"),
        ok("lease keep-alive --once {lease2} -w json"),
        fails("lease keep-alive --once 1234"),
        ok("lease list"),
        ok("lease list -w json"),
        ok("lease revoke {lease1}"), // deletes lk1
        ok("get lk --prefix"),
        ok("get lk --prefix -w json"),
        fails("lease revoke {lease1}"),
        fails("lease revoke 1234"),
        ok("lease timetolive {lease1} --keys"),
        ok("lease timetolive {lease1} -w json"),
        fails("lease keep-alive --once {lease1}"),
        fails("put lk7 v --lease={lease1}"),
        ok("lease revoke {lease2} -w json"), // deletes lk3 and lk5
        ok("lease list"),
        ok("lease grant 9000000000"), // <lease4>, the largest TTL
        ok("lease timetolive {lease4} --keys"),
        ok("lease list -w json"),
        ok("put lk/end x"),
        stop("leases", "lk/end"),
        // watches: replays of the history so far, and a single key watched live with --prev-kv
        start("foo", "watch --rev=1 --prefix foo"),
        start("foo-json", "watch --rev=1 --prefix foo --prev-kv -w json"),
        start("k1", "watch k1 --prev-kv --rev={next}"),
        start("k1-json", "watch k1 --prev-kv -w json --rev={next}"),
        ok("put k1 watched"),
        ok("del k1"),
        ok("put k1 back"),
        ok("put foo/end x"),
        stop("foo", "foo/end"),
        stop("foo-json", "foo/end"),
        stop("k1", "back"),
        stop("k1-json", "back"),
        // compaction and errors around it
        ok("compaction 3"),
        fails("get k1 --rev 2"),
        ok("get k1 --rev 3"),
        fails("compaction 3"),
        fails("compaction 2"),
        ok("compaction 5 --physical"),
        fails("get k1 --rev 4 -w json"),
        fails("compaction 1000"),
        fails("compaction 1000 --physical"),
        ok_args(&["get", "", "--from-key", "--rev", "9", "-w", "json"]),
        ok_args(&["get", "", "--from-key", "-w", "json"]),
        // watches from below the compacted revision are refused (exit 5); from it, replayed
        fails("watch --rev=1 --prefix foo"),
        fails("watch --rev=4 k1 -w json"),
        start("compacted", "watch --rev=5 --prefix foo --prev-kv"),
        start("compacted-json", "watch --rev=5 --prefix foo --prev-kv -w json"),
        ok("put foo/end2 x"),
        stop("compacted", "foo/end2"),
        stop("compacted-json", "foo/end2"),
        // endpoint
        ok("endpoint status"),
        ok("endpoint status -w table"),
        ok("endpoint status -w json"),
        ok("endpoint health"),
        ok("endpoint health -w table"),
        ok("endpoint health -w json"),
        // Last, as the lease expires 2 s later: a TTL below etcd's minimum is raised to it.
        ok("lease grant 1"),
    ]);
    steps
}

/// The auth script (see `etcdctl_auth_flow_matches_etcd`). `--user` names the user of one step.
fn auth_script() -> Vec<Step> {
    const ROOT: &str = "--user root:rootpw";
    const ALICE: &str = "--user alice:alicepw";
    let root = |args: &str| ok(&format!("{ROOT} {args}"));
    let root_fails = |args: &str| fails(&format!("{ROOT} {args}"));
    let alice = |args: &str| ok(&format!("{ALICE} {args}"));
    let alice_fails = |args: &str| fails(&format!("{ALICE} {args}"));
    vec![
        // users and roles while auth is off: anyone manages them
        ok("put foo/a 1"),
        ok("put k1 v1"),
        ok("user add root:rootpw"),
        ok("user add alice:alicepw"),
        fails("user add alice:again"),
        ok("role add reader"),
        ok("role add writer"),
        fails("role add reader"),
        ok("role grant-permission reader read foo/ --prefix=true"),
        ok("role grant-permission writer readwrite k1"),
        ok("role grant-permission writer write k2 k4"),
        ok("role get reader"),
        ok("role get writer"),
        ok("role get reader -w json"),
        fails("role get nosuch"),
        ok("user grant-role alice reader"),
        ok("user grant-role alice writer"),
        fails("user grant-role alice nosuch"),
        fails("user grant-role nobody reader"),
        ok("user get alice"),
        ok("user get alice -w json"),
        fails("user get nobody"),
        ok("user list"),
        ok("role list"),
        // enabling needs root with the root role: etcdctl creates the role and grants it first
        ok("auth enable"),
        ok(&format!("{ROOT} user get root")),
        ok(&format!("{ROOT} auth enable")),
        // no user, a wrong password, an unknown user
        fails("get foo/a"),
        fails("put foo/a 2"),
        fails("--user alice:wrong get foo/a"),
        fails("--user nobody:x get foo/a"),
        // alice: read on foo/*, readwrite on k1, write on [k2, k4)
        alice("get foo/a"),
        alice("get foo/ --prefix"),
        alice("get foo/ --prefix -w json"),
        alice("put k1 v2"),
        alice("get k1"),
        alice("put k3 v3"),
        alice("del k1 --prev-kv"),
        alice("put k1 v4"),
        alice_fails("put foo/a 2"),
        alice_fails("get k2"),
        alice_fails("get k --prefix"),
        alice_fails("get k2 --consistency=s -w json"),
        alice_fails("del k3 --prev-kv"),
        alice_fails("del foo/a"),
        alice_fails("put k3 v5 --prev-kv"),
        fed(&format!("{ALICE} txn"), "value(\"foo/a\") = \"1\"\n\nput k1 t1\n\nget foo/a\n\n", true),
        fed(&format!("{ALICE} txn"), "value(\"k2\") = \"1\"\n\nput k1 t2\n\n\n", false),
        fed(&format!("{ALICE} txn"), "\nput k1 t3\n\nput foo/z t3\n\n", false),
        fed(&format!("{ALICE} txn -w json"), "\nget foo/a\n\nget k1\n\n", true),
        alice_fails("watch k2"),
        // root may do anything
        root("put foo/b 2"),
        root("get k --prefix"),
        root("user list"),
        root("role list"),
        root("user get root"),
        root("role get writer -w json"),
        alice_fails("member remove 1234"),
        root_fails("member remove 1234"),
        alice_fails("defrag"),
        fails("defrag"),
        fails("--user alice:alicepw endpoint hashkv"),
        fails("snapshot save /tmp/keel-auth-flow-snapshot.db"),
        root("defrag"),
        // management is root's, except a user's own record and the roles it holds
        alice_fails("user list"),
        alice_fails("role list"),
        alice_fails("user add eve:x"),
        alice_fails("role add evil"),
        alice_fails("user grant-role alice root"),
        alice("user get alice"),
        alice_fails("user get root"),
        alice("role get reader"),
        alice_fails("role get root"),
        alice_fails("auth disable"),
        root_fails("user delete root"),
        root_fails("role delete root"),
        root_fails("user revoke-role root root"),
        // a lease carrying a key alice may not write cannot be revoked by her
        alice("lease grant 600"),
        alice("put k1 leased --lease={lease1}"),
        root("put foo/c 3 --lease={lease1}"),
        alice_fails("lease revoke {lease1}"),
        alice_fails("put k1 again --lease={lease1}"),
        root("lease revoke {lease1}"),
        root("get foo/ --prefix"),
        // a new password replaces the old one
        fed(&format!("{ROOT} user passwd alice --interactive=false"), "newpw\n", true),
        alice_fails("get foo/a"),
        ok("--user alice:newpw get foo/a"),
        // revocations
        root("role revoke-permission writer k1"),
        root_fails("role revoke-permission writer k1"),
        fails("--user alice:newpw get k1"),
        root("role revoke-permission writer k2 k4"),
        root("user revoke-role alice reader"),
        root_fails("user revoke-role alice reader"),
        fails("--user alice:newpw get foo/a"),
        root("role delete writer"),
        root("user get alice"),
        root_fails("role delete writer"),
        root("user delete alice"),
        root_fails("user delete alice"),
        fails("--user alice:newpw get foo/a"),
        // disabling: everyone reads again, a user given is no longer checked
        root("auth disable"),
        ok("get foo/a"),
        ok("--user nobody:x get foo/a"),
        ok("user list"),
        ok("user delete root"),
        fails("auth enable"),
        ok("user add root:pw2"),
        // the root role is left: etcdctl's attempt to create it fails
        fails("auth enable"),
        ok("user grant-role root root"),
        ok("auth enable"),
        ok("--user root:pw2 role list"),
    ]
}

#[derive(Debug, PartialEq)]
struct Outcome {
    /// `None`: killed (a background watch stopped by the test, or a hung etcdctl).
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// One server, the ids of the leases granted on it (in grant order: `<lease1>` first) and its
/// background watches.
struct Target<'a> {
    server: &'a Server,
    leases: Vec<i64>,
    watches: HashMap<&'static str, Etcdctl>,
    /// What `{certs}` stands for: the directory of the test's certificates.
    certs: Option<String>,
}

impl Target<'_> {
    /// `text` with `{leaseN}` replaced by this server's id of lease N (hex, as etcdctl takes it),
    /// `{next}` by its current revision + 1 and `{certs}` by the certificates' directory.
    async fn substitute(&self, text: &str) -> String {
        let mut text = text.to_string();
        if let Some(certs) = &self.certs {
            text = text.replace("{certs}", certs);
        }
        for (n, id) in self.leases.iter().enumerate() {
            text = text.replace(&format!("{{lease{}}}", n + 1), &format!("{id:x}"));
        }
        if text.contains("{next}") {
            let range = self.server.kv().await.range(RangeRequest { key: "k".into(), ..Default::default() }).await;
            let revision = range.expect("current revision").into_inner().header.expect("header").revision;
            text = text.replace("{next}", &(revision + 1).to_string());
        }
        text
    }

    /// Notes the id a successful `lease grant` printed (simple, JSON or fields output). Output
    /// without one (only possible from the server under test) gets an id no server picks, so the
    /// steps using it show the difference.
    fn note_grant(&mut self, stdout: &str) {
        let id = stdout.lines().find_map(|line| {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("lease ").filter(|l| l.contains(" granted with TTL(")) {
                let hex = rest.split_whitespace().next()?;
                return u64::from_str_radix(hex, 16).ok().map(|id| id as i64);
            }
            if let Some(rest) = line.strip_prefix("\"ID\" : ") {
                return rest.trim().parse().ok();
            }
            serde_json::from_str::<Value>(line).ok()?.get("ID")?.as_i64()
        });
        self.leases.push(id.unwrap_or(i64::MIN));
    }

    async fn run(&mut self, step: &Step) -> Outcome {
        let mut args = Vec::new();
        for arg in &step.args {
            args.push(self.substitute(arg).await);
        }
        let Outcome { code, stdout, stderr } = match step.background {
            Background::No => {
                let stdin = match &step.stdin {
                    Some(input) => Some(self.substitute(input).await),
                    None => None,
                };
                let mut process = Etcdctl::spawn(self.server, &args, stdin.as_deref());
                let deadline =
                    if args.first().is_some_and(|a| a == "watch") { WATCH_DEADLINE } else { ETCDCTL_DEADLINE };
                let exited = poll_until(deadline, Duration::from_millis(5), || process.exited()).await;
                let (code, stdout, mut stderr) = process.finish();
                if !exited {
                    stderr.push_str(&format!("<still running after {deadline:?}; killed>"));
                }
                if code == Some(0) && args.windows(2).any(|w| w[0] == "lease" && w[1] == "grant") {
                    self.note_grant(&stdout);
                }
                Outcome { code, stdout, stderr }
            }
            Background::Start(name) => {
                let watch = Etcdctl::spawn(self.server, &args, None);
                assert!(self.watches.insert(name, watch).is_none(), "script bug: watch {name} started twice");
                Outcome { code: Some(0), stdout: String::new(), stderr: String::new() }
            }
            Background::Stop { name, until } => {
                let mut watch = self.watches.remove(name).unwrap_or_else(|| panic!("script bug: no watch {name}"));
                let encoded = format!("\"{}\"", base64(until.as_bytes()));
                let shown = |out: String| out.lines().any(|l| l == until || l.contains(&encoded));
                poll_until(WATCH_DEADLINE, Duration::from_millis(20), || shown(watch.stdout()) || watch.exited()).await;
                let showed = shown(watch.stdout());
                let exited_early = watch.exited();
                let (code, stdout, mut stderr) = watch.finish();
                if !showed {
                    stderr.push_str(&format!("<no {until:?} within {WATCH_DEADLINE:?}>"));
                }
                // Killed while still running is what every stop expects: `None`.
                Outcome { code: if exited_early { code } else { None }, stdout, stderr }
            }
        };
        let port = self.server.client_port();
        Outcome { code, stdout: normalise(&stdout, port, &self.leases), stderr: normalise(&stderr, port, &self.leases) }
    }
}

/// Standard base64, as etcdctl prints keys and values in JSON.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// Table columns whose values differ between any two servers.
const VOLATILE_COLUMNS: &[&str] =
    &["ID", "VERSION", "DB SIZE", "RAFT TERM", "RAFT INDEX", "RAFT APPLIED INDEX", "TOOK"];

/// Normalises etcdctl's output against the server on `port`, on which `leases` were granted.
fn normalise(text: &str, port: u16, leases: &[i64]) -> String {
    let mut text = text.replace(&format!("127.0.0.1:{port}"), "127.0.0.1:<port>");
    for (n, id) in leases.iter().enumerate() {
        text = text.replace(&format!("{id:016x}"), &format!("<lease{}>", n + 1));
    }
    let mut out = Vec::new();
    let mut table_header: Option<Vec<String>> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('+') {
            out.push("<table border>".to_string());
            continue;
        }
        if trimmed.starts_with('|') {
            let cells: Vec<String> = trimmed.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
            let row = match &table_header {
                None => {
                    table_header = Some(cells.clone());
                    cells
                }
                Some(header) => cells
                    .into_iter()
                    .zip(header)
                    .map(|(cell, column)| {
                        if VOLATILE_COLUMNS.contains(&column.as_str()) && !cell.is_empty() {
                            format!("<{}>", column.to_lowercase())
                        } else {
                            cell
                        }
                    })
                    .collect(),
            };
            out.push(format!("| {} |", row.join(" | ")));
            continue;
        }
        table_header = None;
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            if let Ok(mut json) = serde_json::from_str::<Value>(trimmed) {
                if let Some(events) = watch_events(&mut json) {
                    for mut event in events {
                        normalise_json(&mut event, leases);
                        out.push(event.to_string());
                    }
                }
                if !json.is_null() {
                    normalise_json(&mut json, leases);
                    out.push(json.to_string());
                }
                continue;
            }
        }
        out.push(normalise_text_line(line, leases));
    }
    sort_lease_lists(&mut out);
    sort_log_runs(&mut out);
    out.join("\n")
}

/// Sorts each run of consecutive etcdctl log lines (`{"caller":...}`): etcdctl logs from several
/// goroutines, so lines such as `snapshot save`'s "fetching snapshot" and its stream's failure
/// come in either order from one run to the next, against etcd as against keel.
fn sort_log_runs(lines: &mut [String]) {
    let is_log = |l: &String| l.starts_with("{\"caller\":");
    let mut i = 0;
    while i < lines.len() {
        let end = lines[i..].iter().position(|l| !is_log(l)).map_or(lines.len(), |n| i + n);
        lines[i..end].sort();
        i = end + 1;
    }
}

/// Splits a `watch -w json` response with events into its events, returned, and the rest, left
/// in `response` — or `Null` when the rest is only the header (whose revision depends on how
/// events were grouped into responses) and default fields. `None` for any other JSON.
fn watch_events(response: &mut Value) -> Option<Vec<Value>> {
    let map = response.as_object_mut()?;
    let events = match map.remove("Events") {
        Some(Value::Array(events)) if !events.is_empty() => events,
        Some(other) => {
            map.insert("Events".into(), other);
            return None;
        }
        None => return None,
    };
    map.remove("Header");
    if *response == serde_json::json!({"CompactRevision": 0, "Canceled": false, "Created": false}) {
        *response = Value::Null;
    }
    Some(events)
}

/// `lease list` prints `found N leases` and then the ids in expiry order: sorts them.
fn sort_lease_lists(lines: &mut [String]) {
    let mut at = 0;
    while at < lines.len() {
        let count = lines[at]
            .strip_prefix("found ")
            .and_then(|rest| rest.strip_suffix(" leases"))
            .and_then(|n| n.parse::<usize>().ok());
        match count {
            Some(n) => {
                let end = (at + 1 + n).min(lines.len());
                lines[at + 1..end].sort();
                at = end;
            }
            None => at += 1,
        }
    }
}

/// `lease timetolive`: `lease <id> granted with TTL(600s), remaining(599s)[, attached keys([k1
/// k2])]` gets the remaining TTL replaced (if it lies in 0..=600) and the keys sorted.
fn normalise_time_to_live(line: &str) -> Option<String> {
    let (head, rest) = line.split_once(" granted with TTL(")?;
    let (granted, rest) = rest.split_once("s), remaining(")?;
    let (remaining, rest) = rest.split_once("s)")?;
    let (granted, remaining): (i64, i64) = (granted.parse().ok()?, remaining.parse().ok()?);
    let remaining = if (0..=granted).contains(&remaining) { "<remaining>".to_string() } else { remaining.to_string() };
    let rest = match rest.strip_prefix(", attached keys([").and_then(|keys| keys.strip_suffix("])")) {
        Some(keys) => {
            let mut keys: Vec<&str> = keys.split(' ').collect();
            keys.sort();
            format!(", attached keys([{}])", keys.join(" "))
        }
        None => rest.to_string(),
    };
    Some(format!("{head} granted with TTL({granted}s), remaining({remaining}s){rest}"))
}

/// `<leaseN>` if `value` is the id of a lease granted on this server.
fn lease_name(value: &Value, leases: &[i64]) -> Option<Value> {
    let id = value.as_i64()?;
    let n = leases.iter().position(|&l| l == id)?;
    Some(Value::from(format!("<lease{}>", n + 1)))
}

fn normalise_text_line(line: &str, leases: &[i64]) -> String {
    // -w fields: `"ClusterID" : 123`
    for field in ["\"ClusterID\" : ", "\"MemberID\" : ", "\"RaftTerm\" : "] {
        if let Some(value) = line.strip_prefix(field) {
            return format!("{field}{}", set_or_unset(value.trim() != "0"));
        }
    }
    // -w fields: `"ID" : 4111120396446574116`, `"Lease" : ...`
    for field in ["\"ID\" : ", "\"Lease\" : "] {
        let id = line.strip_prefix(field).and_then(|value| value.trim().parse::<i64>().ok());
        if let Some(Value::String(name)) = id.and_then(|id| lease_name(&Value::from(id), leases)) {
            return format!("{field}{name}");
        }
    }
    if let Some(line) = normalise_time_to_live(line) {
        return line;
    }
    // endpoint health: `<url> is healthy: successfully committed proposal: took = 1.2ms`
    if let Some(at) = line.find("took = ") {
        return format!("{}took = <took>", &line[..at]);
    }
    // endpoint status (simple): endpoint, id, version, db size, is leader, is learner,
    // raft term, raft index, raft applied index, errors
    let fields: Vec<&str> = line.split(", ").collect();
    if fields.len() == 10 && fields[0].starts_with("http://") {
        let mut fields: Vec<String> = fields.into_iter().map(String::from).collect();
        for (i, name) in [(1, "<id>"), (2, "<version>"), (3, "<db size>"), (6, "<raft term>")]
            .into_iter()
            .chain([(7, "<raft index>"), (8, "<raft applied index>")])
        {
            fields[i] = name.to_string();
        }
        return fields.join(", ");
    }
    line.to_string()
}

fn set_or_unset(set: bool) -> &'static str {
    if set {
        "<set>"
    } else {
        "<unset>"
    }
}

fn is_set(value: &Value) -> bool {
    !matches!(value, Value::Null)
        && value.as_u64() != Some(0)
        && value.as_i64() != Some(0)
        && value.as_str() != Some("")
}

/// Normalises etcdctl's JSON output (responses, endpoint status/health, lease answers, watch
/// events) and its log lines.
fn normalise_json(value: &mut Value, leases: &[i64]) {
    match value {
        Value::Object(map) => {
            if let (Some(ttl), Some(granted)) =
                (map.get("ttl").and_then(Value::as_i64), map.get("granted-ttl").and_then(Value::as_i64))
            {
                // lease timetolive: the remaining TTL depends on timing; keys come in map order.
                if (0..=granted).contains(&ttl) {
                    map.insert("ttl".into(), Value::from("<remaining>"));
                }
                if let Some(Value::Array(keys)) = map.get_mut("keys") {
                    keys.sort_by_key(Value::to_string);
                }
            }
            if map.contains_key("level") && map.contains_key("msg") {
                // etcdctl's own zap log line: drop the timestamp and the per-process client id.
                map.remove("ts");
                if let Some(target) = map.get_mut("target") {
                    *target = Value::from("<target>");
                }
            }
            let member = map.get("header").and_then(|h| h.get("member_id")).cloned();
            for (key, field) in map.iter_mut() {
                match key.as_str() {
                    "cluster_id" | "member_id" | "raft_term" | "raftTerm" | "raftIndex" | "raftAppliedIndex"
                    | "dbSize" | "dbSizeInUse" => {
                        *field = Value::from(set_or_unset(is_set(field)));
                    }
                    "leader" => {
                        let who = if member.as_ref() == Some(&*field) { "<this member>" } else { "<another member>" };
                        *field = Value::from(who);
                    }
                    "version" | "took" if field.is_string() => {
                        *field = Value::from(format!("<{key}>"));
                    }
                    "ID" | "id" | "lease" if lease_name(field, leases).is_some() => {
                        *field = lease_name(field, leases).unwrap_or_default();
                    }
                    "leases" => {
                        // lease list: in expiry order.
                        normalise_json(field, leases);
                        if let Value::Array(items) = field {
                            items.sort_by_key(Value::to_string);
                        }
                    }
                    _ => normalise_json(field, leases),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| normalise_json(item, leases)),
        _ => {}
    }
}

fn show(step: &Step) -> String {
    if let Background::Stop { name, until } = step.background {
        return format!("stop watch {name} once it printed {until:?}");
    }
    let args: Vec<String> = step.args.iter().map(|a| if a.is_empty() { "''".into() } else { a.clone() }).collect();
    let mut text = format!("etcdctl {}", args.join(" "));
    if let Background::Start(name) = step.background {
        text = format!("start watch {name}: {text}");
    }
    if let Some(input) = &step.stdin {
        text.push_str(&format!(" <<< {input:?}"));
    }
    text
}

#[tokio::test]
async fn etcdctl_output_matches_etcd() {
    compare(script(), &[]).await;
}

/// The auth flow through etcdctl 3.4's `--user name:password`: users, roles, prefix and range
/// permissions, enable and disable, wrong passwords and unknown users, self and holder reads,
/// root-only operations, a lease whose keys the user may not write, a watch it may not read,
/// password change, revocations and deletions. Both servers hash at bcrypt's lowest cost, so that
/// the many logins stay quick in a debug build.
#[tokio::test]
async fn etcdctl_auth_flow_matches_etcd() {
    compare(auth_script(), &["--bcrypt-cost=4"]).await;
}

/// etcdctl over mutual TLS: the client URL is `https://`, the server requires a certificate the
/// test's CA signed (`--client-cert-auth --trusted-ca-file`), and with auth on a certificate's
/// common name is the user when no `--user` is given.
fn tls_script() -> Vec<Step> {
    let with = |who: &str, args: &str| {
        format!("--cacert={{certs}}/ca.pem --cert={{certs}}/{who}.pem --key={{certs}}/{who}-key.pem {args}")
    };
    let root = |args: &str| ok(&with("root", args));
    let alice = |args: &str| ok(&with("alice", args));
    let alice_fails = |args: &str| fails(&with("alice", args));
    vec![
        root("put a 1"),
        root("get a"),
        alice("get a -w json"),
        root("endpoint health"),
        root("endpoint status -w table"),
        // refused at the handshake: no client certificate, one another CA signed, and a server
        // certificate the client cannot verify
        refused("--dial-timeout=1s --cacert={certs}/ca.pem get a"),
        refused(&format!("--dial-timeout=1s {}", with("foreign", "get a"))),
        refused("--dial-timeout=1s --cert={certs}/root.pem --key={certs}/root-key.pem get a"),
        // auth: the certificate's common name is the user
        root("user add root:rootpw"),
        root("user add alice:alicepw"),
        root("role add reader"),
        root("role grant-permission reader read a"),
        root("user grant-role alice reader"),
        root("auth enable"),
        alice("get a"),
        alice_fails("put a 2"),
        alice_fails("del a"),
        root("put a 3"),
        alice("get a"),
        // a token beats the certificate
        alice("--user root:rootpw put a 4"),
        alice_fails("--user alice:wrong get a"),
        fails(&with("bob", "get a")),
        alice_fails("user list"),
        root("user list"),
        root("role revoke-permission reader a"),
        alice_fails("get a"),
        root("auth disable"),
        alice("put a 5"),
        ok(&with("bob", "get a")),
    ]
}

#[tokio::test]
async fn etcdctl_over_mutual_tls_matches_etcd() {
    let pki = common::pki::Pki::new();
    let server = pki.issue("server", "keel-test-server");
    let root = pki.issue("root", "root");
    for (name, cn) in [("alice", "alice"), ("bob", "bob")] {
        pki.issue(name, cn);
    }
    pki.issue_foreign("foreign", "root");
    let flags = [
        format!("--cert-file={}", server.cert.display()),
        format!("--key-file={}", server.key.display()),
        format!("--trusted-ca-file={}", pki.ca_file().display()),
        "--client-cert-auth".to_string(),
        "--bcrypt-cost=4".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let secure = common::Secure { client: Some(pki.client_config(Some(&root))), peer: false };
    let against = Kind::under_test();
    let (etcd, other) = tokio::join!(
        Server::start_secure(Kind::Etcd, &flags, secure.clone()),
        Server::start_secure(against, &flags, secure.clone())
    );
    // /health and /metrics follow the client URL: over TLS, and only with a client certificate.
    for server in [&etcd, &other] {
        let name = server.kind().name();
        let health = https_get(pki.client_config(Some(&root)), server.client_port(), "/health").await;
        let health = health.unwrap_or_else(|e| panic!("{name}: GET /health over TLS: {e}"));
        assert_eq!(health.status, 200, "{name}: /health over TLS: {health:?}");
        let health: Value = serde_json::from_str(&health.body).expect("/health JSON");
        assert_eq!(health["health"], "true", "{name}: /health over TLS");
        let metrics = https_get(pki.client_config(Some(&root)), server.client_port(), "/metrics").await;
        let metrics = metrics.unwrap_or_else(|e| panic!("{name}: GET /metrics over TLS: {e}"));
        assert_eq!(metrics.status, 200, "{name}: /metrics over TLS");
        assert!(metrics.body.contains("etcd_server_has_leader"), "{name}: /metrics over TLS");
        let refused = https_get(pki.client_config(None), server.client_port(), "/health").await;
        assert!(refused.is_err(), "{name}: /health without a client certificate answered {refused:?}");
        let plain = http_get(server.client_port(), "/health").await;
        assert!(plain.map_or(true, |r| r.status != 200), "{name}: /health answered over plain HTTP on a TLS URL");
    }
    compare_on(tls_script(), &etcd, &other, Some(&pki.dir())).await;
}

/// Runs `steps` against a fresh etcd and a fresh server under test, both started with `flags`,
/// and fails with every difference.
async fn compare(steps: Vec<Step>, flags: &[&str]) {
    let against = Kind::under_test();
    let (etcd, other) = tokio::join!(Server::start_with(Kind::Etcd, flags), Server::start_with(against, flags));
    compare_on(steps, &etcd, &other, None).await;
}

/// Runs `steps` against `etcd` and `other` and fails with every difference; `{certs}` in a step
/// stands for `certs`.
async fn compare_on(steps: Vec<Step>, etcd: &Server, other: &Server, certs: Option<&std::path::Path>) {
    let name = other.kind().name();
    let started = std::time::Instant::now();
    let trace = std::env::var_os("KEEL_DIFF_TRACE").is_some_and(|v| !v.is_empty() && v != "0");
    let mut differences = Vec::new();
    let certs = certs.map(|c| c.display().to_string());
    let mut targets = [etcd, other].map(|server| Target {
        server,
        leases: Vec::new(),
        watches: HashMap::new(),
        certs: certs.clone(),
    });
    for (i, step) in steps.iter().enumerate() {
        let want = targets[0].run(step).await;
        if trace {
            eprintln!(
                "step {i}: {}
{want:#?}",
                show(step)
            );
        }
        let as_expected = match step.background {
            Background::No => want.code.is_some() && (want.code == Some(0)) == step.ok,
            Background::Start(_) => true,
            Background::Stop { .. } => want.code.is_none() && !want.stderr.contains("<no "),
        };
        assert!(
            as_expected,
            "script bug at step {i}: `{}` was expected to {} on etcd, got {want:#?}",
            show(step),
            if step.ok { "succeed" } else { "fail" },
        );
        let got = targets[1].run(step).await;
        let last_line = |o: &Outcome| o.stderr.trim_end().lines().last().unwrap_or_default().to_string();
        let same = if step.loose { want.code == got.code && last_line(&want) == last_line(&got) } else { want == got };
        if !same {
            differences.push(format!(
                "step {i}: {}\n  etcd: exit {:?}\n    stdout: {:?}\n    stderr: {:?}\n  \
                 {name}: exit {:?}\n    stdout: {:?}\n    stderr: {:?}",
                show(step),
                want.code,
                want.stdout,
                want.stderr,
                got.code,
                got.stdout,
                got.stderr
            ));
        }
    }
    for target in &targets {
        let left: Vec<&str> = target.watches.keys().copied().collect();
        assert!(left.is_empty(), "script bug: watches {left:?} never stopped");
    }
    eprintln!("etcdctl: {} steps against etcd and {name} in {:.1?}", steps.len(), started.elapsed());
    assert!(
        differences.is_empty(),
        "etcdctl output differs between etcd and {name} in {} of {} steps:\n\n{}",
        differences.len(),
        steps.len(),
        differences.join("\n\n")
    );
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct HttpResponse {
    status: u16,
    body: String,
}

/// `GET path` over a plain TCP connection with `Connection: close`.
async fn http_get(port: u16, path: &str) -> Result<HttpResponse, String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"));
    http_get_on(stream?, port, path).await
}

/// `GET path` over TLS as `tls` says, with `Connection: close`.
async fn https_get(tls: std::sync::Arc<rustls::ClientConfig>, port: u16, path: &str) -> Result<HttpResponse, String> {
    let stream = common::pki::dial_http1(tls, port).await.map_err(|e| format!("TLS connect: {e}"))?;
    http_get_on(stream, port, path).await
}

async fn http_get_on<S>(mut stream: S, port: u16, path: &str) -> Result<HttpResponse, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let exchange = async {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("send: {e}"))?;
        let mut raw = Vec::new();
        match stream.read_to_end(&mut raw).await {
            Ok(_) => {}
            // Go's server closes a TLS connection without close_notify after `Connection: close`.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(format!("receive: {e}")),
        }
        parse_http(&raw)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "no complete response within 10 s".to_string())?
}

fn parse_http(raw: &[u8]) -> Result<HttpResponse, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("no end of headers in {text:?}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let chunked = lines.any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked { dechunk(body)? } else { body.to_string() };
    Ok(HttpResponse { status, body })
}

fn dechunk(mut body: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or_else(|| format!("bad chunk in {body:?}"))?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("bad chunk size {size:?}: {e}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or_else(|| format!("short chunk in {rest:?}"))?;
        out.push_str(chunk);
        body = rest[size..].trim_start_matches("\r\n");
    }
}

/// The JSON "shape": object keys with the type of each value, recursively.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(_) => Value::from("string"),
        Value::Number(_) => Value::from("number"),
        Value::Bool(_) => Value::from("bool"),
        Value::Null => Value::from("null"),
    }
}

fn is_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[tokio::test]
async fn http_health_and_version_match_etcd() {
    let against = Kind::under_test();
    let name = against.name();
    let (etcd, other) = tokio::join!(Server::start(Kind::Etcd), Server::start(against));
    let mut problems = Vec::new();
    for path in ["/health", "/version"] {
        let want = http_get(etcd.client_port(), path).await.unwrap_or_else(|e| panic!("etcd GET {path}: {e}"));
        let want_json: Value = serde_json::from_str(&want.body)
            .unwrap_or_else(|e| panic!("etcd GET {path}: body {:?} is not JSON: {e}", want.body));
        let got = match http_get(other.client_port(), path).await {
            Ok(got) => got,
            Err(e) => {
                problems.push(format!("GET {path}: {name}: {e}"));
                continue;
            }
        };
        if got.status != want.status {
            problems.push(format!(
                "GET {path}: status {} from etcd, {} from {name} (body {:?})",
                want.status, got.status, got.body
            ));
        }
        let got_json: Value = match serde_json::from_str(&got.body) {
            Ok(json) => json,
            Err(e) => {
                problems.push(format!("GET {path}: {name}'s body {:?} is not JSON: {e}", got.body));
                continue;
            }
        };
        if shape(&got_json) != shape(&want_json) {
            problems.push(format!("GET {path}: JSON shape differs: etcd {want_json}, {name} {got_json}"));
            continue;
        }
        match path {
            // No server-specific value in it: must be equal.
            "/health" if got_json != want_json => {
                problems.push(format!("GET /health: etcd {want_json}, {name} {got_json}"))
            }
            "/version" => {
                for field in ["etcdserver", "etcdcluster"] {
                    let value = got_json[field].as_str().unwrap_or_default();
                    if !is_version(value) {
                        problems.push(format!(
                            "GET /version: {name}'s {field} {value:?} is not a version (etcd: {want_json})"
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "HTTP endpoints of {name} differ from etcd's:\n{}", problems.join("\n"));
}

/// The metrics keel and etcd share, by etcd's names, each with a sample on `/metrics`.
const SHARED_METRICS: [&str; 8] = [
    "etcd_server_has_leader",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_proposals_committed_total",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_debugging_mvcc_keys_total",
    "grpc_server_started_total",
    "grpc_server_handled_total",
    "process_resident_memory_bytes",
];

#[tokio::test]
async fn metrics_carry_etcds_names() {
    let against = Kind::under_test();
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics_url = format!("http://127.0.0.1:{metrics_port}");
    let flags = ["--listen-metrics-urls", metrics_url.as_str()];
    let (etcd, other) = tokio::join!(Server::start(Kind::Etcd), Server::start_with(against, &flags));
    for server in [&etcd, &other] {
        let put = PutRequest { key: "m".into(), value: "v".into(), ..Default::default() };
        server.kv().await.put(put).await.expect("put");
    }
    for (name, port) in
        [("etcd", etcd.client_port()), (against.name(), other.client_port()), ("metrics URL", metrics_port)]
    {
        let got = http_get(port, "/metrics").await.unwrap_or_else(|e| panic!("{name} GET /metrics: {e}"));
        assert_eq!(got.status, 200, "{name}");
        let samples: Vec<&str> = got.body.lines().filter(|l| !l.starts_with('#')).collect();
        for metric in SHARED_METRICS {
            assert!(samples.iter().any(|l| l.starts_with(metric)), "{name} has no {metric}");
        }
        assert!(samples.contains(&"etcd_server_has_leader 1"), "{name}: a leader");
        assert!(
            samples.iter().any(|l| l.starts_with("grpc_server_handled_total")
                && l.contains("grpc_code=\"OK\"")
                && l.contains("grpc_method=\"Put\"")),
            "{name} counted the put"
        );
    }
    let health = http_get(metrics_port, "/health").await.expect("GET /health on the metrics URL");
    assert_eq!((health.status, health.body.trim()), (200, r#"{"health":"true"}"#));
}
