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
//! A second test fetches `/health` and `/version` over plain HTTP/1.1 from the client URL (etcd
//! serves them next to gRPC on the same port) and compares them with etcd's.
//!
//! `KEEL_DIFF_AGAINST=etcd` compares etcd with a second etcd (validates the harness);
//! `KEEL_DIFF_TRACE=1` prints every step with etcd's normalised output.
//! Run: `cargo test --workspace --test etcdctl -- --nocapture`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Kind, Server};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// etcdctl has its own dial (2 s) and command (5 s) timeouts; this only bounds a stuck process.
const ETCDCTL_DEADLINE: Duration = Duration::from_secs(60);

/// One etcdctl invocation.
struct Step {
    args: Vec<String>,
    stdin: Option<String>,
    /// Whether etcdctl exits 0 against etcd (checked, to keep the script honest).
    ok: bool,
}

fn ok(args: &str) -> Step {
    Step { args: args.split_whitespace().map(String::from).collect(), stdin: None, ok: true }
}

fn fails(args: &str) -> Step {
    Step { ok: false, ..ok(args) }
}

/// `etcdctl txn` fed with `input` (compares, blank line, success ops, blank line, failure ops,
/// blank line).
fn txn(args: &str, input: &str, succeeds: bool) -> Step {
    Step { stdin: Some(input.to_string()), ok: succeeds, ..ok(&format!("txn {args}")) }
}

/// Steps whose arguments contain an empty string.
fn ok_args(args: &[&str]) -> Step {
    Step { args: args.iter().map(|s| s.to_string()).collect(), stdin: None, ok: true }
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
        // endpoint
        ok("endpoint status"),
        ok("endpoint status -w table"),
        ok("endpoint status -w json"),
        ok("endpoint health"),
        ok("endpoint health -w table"),
        ok("endpoint health -w json"),
    ]);
    steps
}

#[derive(Debug, PartialEq)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn etcdctl(server: &Server, step: &Step) -> Outcome {
    let mut cmd = tokio::process::Command::new("etcdctl");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ETCDCTL_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", server.endpoint()))
        .args(&step.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn etcdctl");
    let mut stdin = child.stdin.take().expect("etcdctl stdin");
    if let Some(input) = &step.stdin {
        stdin.write_all(input.as_bytes()).await.expect("write etcdctl stdin");
    }
    drop(stdin);
    let output = tokio::time::timeout(ETCDCTL_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("etcdctl {:?} still running after {ETCDCTL_DEADLINE:?}", step.args))
        .expect("wait for etcdctl");
    let port = server.client_port();
    Outcome {
        code: output.status.code(),
        stdout: normalise(&String::from_utf8_lossy(&output.stdout), port),
        stderr: normalise(&String::from_utf8_lossy(&output.stderr), port),
    }
}

/// Table columns whose values differ between any two servers.
const VOLATILE_COLUMNS: &[&str] =
    &["ID", "VERSION", "DB SIZE", "RAFT TERM", "RAFT INDEX", "RAFT APPLIED INDEX", "TOOK"];

fn normalise(text: &str, port: u16) -> String {
    let text = text.replace(&format!("127.0.0.1:{port}"), "127.0.0.1:<port>");
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
                normalise_json(&mut json);
                out.push(json.to_string());
                continue;
            }
        }
        out.push(normalise_text_line(line));
    }
    out.join("\n")
}

fn normalise_text_line(line: &str) -> String {
    // -w fields: `"ClusterID" : 123`
    for field in ["\"ClusterID\" : ", "\"MemberID\" : ", "\"RaftTerm\" : "] {
        if let Some(value) = line.strip_prefix(field) {
            return format!("{field}{}", set_or_unset(value.trim() != "0"));
        }
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

/// Normalises etcdctl's JSON output (responses, endpoint status/health) and its log lines.
fn normalise_json(value: &mut Value) {
    match value {
        Value::Object(map) => {
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
                    _ => normalise_json(field),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_json),
        _ => {}
    }
}

fn show(step: &Step) -> String {
    let args: Vec<String> = step.args.iter().map(|a| if a.is_empty() { "''".into() } else { a.clone() }).collect();
    let mut text = format!("etcdctl {}", args.join(" "));
    if let Some(input) = &step.stdin {
        text.push_str(&format!(" <<< {input:?}"));
    }
    text
}

#[tokio::test]
async fn etcdctl_output_matches_etcd() {
    let against = Kind::under_test();
    let name = against.name();
    let (etcd, other) = tokio::join!(Server::start(Kind::Etcd), Server::start(against));
    let started = std::time::Instant::now();
    let steps = script();
    let trace = std::env::var_os("KEEL_DIFF_TRACE").is_some_and(|v| !v.is_empty() && v != "0");
    let mut differences = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let want = etcdctl(&etcd, step).await;
        if trace {
            eprintln!(
                "step {i}: {}
{want:#?}",
                show(step)
            );
        }
        assert_eq!(
            want.code == Some(0),
            step.ok,
            "script bug at step {i}: `{}` was expected to {} on etcd, got {want:#?}",
            show(step),
            if step.ok { "succeed" } else { "fail" },
        );
        let got = etcdctl(&other, step).await;
        if want != got {
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
    let exchange = async {
        let mut stream =
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("send: {e}"))?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.map_err(|e| format!("receive: {e}"))?;
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
