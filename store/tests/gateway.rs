//! The JSON gateway, differentially: one script of HTTP requests (`POST /v3/...` with JSON bodies)
//! runs against etcd 3.4 and against keel, and every answer — HTTP status, content type and body
//! text — must be equal once what legitimately differs is masked: cluster and member ids, Raft
//! terms and indexes, server-chosen lease ids, a lease's remaining TTL (checked to be close to
//! its grant), and the status fields that describe the server (version, database sizes).
//!
//! The script covers put, ranges (prefix, count, keys-only, sorted), txns with compares, nested
//! txns, delete with `prev_kv`, compaction and its errors, leases (grant, keep-alive,
//! time-to-live, list, revoke, their `/v3/kv/lease/...` aliases), error answers (empty key,
//! duplicate txn key, unknown lease, malformed JSON), 404/405, `/v3beta`, status, and watch
//! streams (created, a put's event with `prev_kv`, a canceled watch on a compacted revision).
//!
//! `KEEL_DIFF_AGAINST=etcd` compares etcd with etcd, which validates the script itself.
//! Run: `cargo test --workspace --test gateway -- --nocapture`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Kind, Server};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long one answer (or one line of a stream) may take before the test fails.
const ANSWER_DEADLINE: Duration = Duration::from_secs(15);

/// An answer as compared: status, content type, body with the differing fields masked.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// One open HTTP/1.1 request whose answer is read as it arrives.
struct Exchange {
    status: u16,
    content_type: String,
    body: Incoming,
    buf: Vec<u8>,
}

impl Exchange {
    async fn open(server: &Server, method: &str, path: &str, body: &str) -> Exchange {
        Exchange::open_with(server, method, path, body, None).await
    }

    /// As [`Exchange::open`], with an `Authorization` header carrying `token` if given.
    async fn open_with(server: &Server, method: &str, path: &str, body: &str, token: Option<&str>) -> Exchange {
        let stream = TcpStream::connect(("127.0.0.1", server.client_port())).await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("127.0.0.1:{}", server.client_port()))
            .header("content-type", "application/json");
        let req = match token {
            Some(t) => req.header("authorization", t),
            None => req,
        };
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let resp = tokio::time::timeout(ANSWER_DEADLINE, sender.send_request(req))
            .await
            .unwrap_or_else(|_| panic!("{}: no answer to {method} {path} in time", server.kind().name()))
            .expect("send request");
        let content_type =
            resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        Exchange { status: resp.status().as_u16(), content_type, body: resp.into_body(), buf: Vec::new() }
    }

    /// The next newline-ended line of a streamed body (without the newline); None at its end.
    async fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(String::from_utf8(line[..i].to_vec()).unwrap());
            }
            let frame = tokio::time::timeout(ANSWER_DEADLINE, self.body.frame()).await.expect("stream line in time")?;
            if let Ok(data) = frame.expect("body frame").into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    /// The rest of the body.
    async fn rest(mut self) -> String {
        let body = tokio::time::timeout(ANSWER_DEADLINE, self.body.collect()).await.expect("body in time");
        self.buf.extend_from_slice(&body.expect("body").to_bytes());
        String::from_utf8(self.buf).unwrap()
    }
}

/// Replaces the value of every `"field":` in a JSON text by `"*"`, keeping everything else as is.
fn mask(text: &str, field: &str) -> String {
    let pat = format!("\"{field}\":");
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(&pat) {
        out.push_str(&rest[..i + pat.len()]);
        rest = &rest[i + pat.len()..];
        let end = if let Some(s) = rest.strip_prefix('"') {
            s.find('"').map(|j| j + 2).unwrap_or(rest.len())
        } else {
            rest.find([',', '}']).unwrap_or(rest.len())
        };
        out.push_str("\"*\"");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The value of the first `"field":"…"` (a string-encoded integer) in a JSON text.
fn field(text: &str, name: &str) -> Option<i64> {
    let pat = format!("\"{name}\":\"");
    let i = text.find(&pat)? + pat.len();
    text[i..].split('"').next()?.parse().ok()
}

/// Masks what differs between any two servers in every answer.
fn normalise(body: &str) -> String {
    ["cluster_id", "member_id", "raft_term"].iter().fold(body.to_string(), |b, f| mask(&b, f))
}

/// Runs the script against one server and returns the answers, each named by its request.
struct Script<'a> {
    server: &'a Server,
    answers: Vec<(String, Answer)>,
}

impl<'a> Script<'a> {
    fn record(&mut self, what: String, status: u16, content_type: String, body: String) -> String {
        let body = normalise(&body);
        self.answers.push((what, Answer { status, content_type, body: body.clone() }));
        body
    }

    /// A unary call; the answer is recorded, with the extra `masked` fields masked too.
    async fn call_masked(&mut self, method: &str, path: &str, body: &str, masked: &[&str]) -> String {
        let ex = Exchange::open(self.server, method, path, body).await;
        let (status, content_type) = (ex.status, ex.content_type.clone());
        let text = ex.rest().await;
        let masked_text = masked.iter().fold(text.clone(), |b, f| mask(&b, f));
        self.record(format!("{method} {path} {body}"), status, content_type, masked_text);
        text
    }

    async fn post(&mut self, path: &str, body: &str) -> String {
        self.call_masked("POST", path, body, &[]).await
    }

    async fn run(mut self) -> Vec<(String, Answer)> {
        // KV: puts, prefix and option-laden ranges (snake_case and camelCase input).
        self.post("/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#).await; // foo=bar
        self.post("/v3/kv/put", r#"{"key":"Zm9vLzE=","value":"MQ=="}"#).await; // foo/1
        self.post("/v3/kv/put", r#"{"key":"Zm9vLzE=","value":"Mg==","prev_kv":true}"#).await;
        self.post("/v3beta/kv/put", r#"{"key":"Zm9vLzI=","value":"","prevKv":true}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","range_end":"Zm9w"}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","rangeEnd":"Zm9w","countOnly":true}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","range_end":"Zm9w","keys_only":true,"limit":"1"}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","range_end":"Zm9w","sort_order":"DESCEND","sort_target":"MOD"}"#)
            .await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","revision":2,"serializable":true}"#).await;
        self.post("/v3/kv/range", r#"{"key":"bm9uZQ=="} trailing text is ignored"#).await;

        // Txns: a compare that holds, one that fails into a delete and a nested txn.
        self.post(
            "/v3/kv/txn",
            r#"{"compare":[{"key":"Zm9v","target":"VALUE","result":"EQUAL","value":"YmFy"}],
                "success":[{"request_put":{"key":"YmF6","value":"MQ=="}},{"request_range":{"key":"Zm9v"}}],
                "failure":[{"request_delete_range":{"key":"Zm9v"}}]}"#,
        )
        .await;
        self.post(
            "/v3/kv/txn",
            r#"{"compare":[{"key":"Zm9vLzE=","target":"VERSION","result":"GREATER","version":"10"}],
                "success":[{"request_put":{"key":"YmF6","value":"Mg=="}}],
                "failure":[{"request_delete_range":{"key":"YmF6","prev_kv":true}},{"request_txn":{}}]}"#,
        )
        .await;
        self.post(
            "/v3/kv/txn",
            r#"{"compare":[{"key":"YmF6","target":"CREATE","createRevision":"0"}],
                "success":[{"requestPut":{"key":"YmF6","value":"Mw=="}}]}"#,
        )
        .await;

        // Errors from the services, with grpc-gateway's HTTP statuses.
        self.post("/v3/kv/put", r#"{"key":""}"#).await;
        self.post("/v3/kv/put", "").await;
        self.post("/v3/kv/txn", r#"{"success":[{"request_put":{"key":"YQ=="}},{"request_put":{"key":"YQ=="}}]}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","revision":"100"}"#).await;
        self.post("/v3/kv/put", r#"{"key":"YQ==","lease":"1","ignore_lease":true}"#).await;
        // Bodies that are not requests.
        self.post("/v3/kv/range", r#"{"key":"#).await;
        self.post("/v3/kv/range", "xx").await;
        self.post("/v3/kv/range", r#"{"key" "Zm9v"}"#).await;
        self.post("/v3/kv/range", "[]").await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","sort_order":"SIDEWAYS"}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","limit":null,"nonsense":{"a":[1]}}"#).await;

        // Delete with prev_kv, then compaction and what it makes unreachable.
        self.post("/v3/kv/deleterange", r#"{"key":"Zm9vLw==","range_end":"Zm9vMA==","prev_kv":true}"#).await;
        self.post("/v3/kv/compaction", r#"{"revision":"4"}"#).await;
        self.post("/v3/kv/compaction", r#"{"revision":"4","physical":true}"#).await;
        self.post("/v3/kv/range", r#"{"key":"Zm9v","revision":"3"}"#).await;
        self.post("/v3/kv/compaction", r#"{"revision":"500"}"#).await;

        // Leases, with a client-chosen id so the answers agree.
        self.post("/v3/lease/grant", r#"{"TTL":"60","ID":"7587"}"#).await;
        self.post("/v3/lease/grant", r#"{"TTL":60,"ID":7587}"#).await;
        self.post("/v3/lease/grant", r#"{"TTL":"9999999999999"}"#).await;
        self.call_masked("POST", "/v3/lease/grant", r#"{"TTL":"30"}"#, &["ID"]).await;
        self.post("/v3/kv/put", r#"{"key":"bGVhc2Vk","value":"MQ==","lease":"7587"}"#).await;
        self.post("/v3/kv/put", r#"{"key":"bGVhc2Vk","value":"MQ==","lease":"7588"}"#).await;
        self.post("/v3/lease/keepalive", r#"{"ID":"7587"}"#).await;
        self.post("/v3/lease/keepalive", r#"{"ID":"7588"} {"ID":"7587"}"#).await;
        self.post("/v3/lease/keepalive", "").await;
        self.post("/v3/lease/keepalive", "x").await;
        let left = self.call_masked("POST", "/v3/lease/timetolive", r#"{"ID":"7587","keys":true}"#, &["TTL"]).await;
        let ttl = field(&left, "TTL").unwrap_or_else(|| panic!("no TTL in {left}"));
        assert!((50..=60).contains(&ttl), "{}: remaining TTL {ttl} of a 60 s lease", self.server.kind().name());
        self.post("/v3/kv/lease/timetolive", r#"{"ID":"7588","keys":true}"#).await;
        // etcd lists leases in map order: only their number is compared.
        self.call_masked("POST", "/v3/lease/leases", "{}", &["ID"]).await;
        self.call_masked("POST", "/v3/kv/lease/leases", "", &["ID"]).await;
        self.post("/v3/lease/revoke", r#"{"ID":"7587"}"#).await;
        self.post("/v3/kv/lease/revoke", r#"{"ID":"7587"}"#).await;
        self.post("/v3/kv/range", r#"{"key":"bGVhc2Vk"}"#).await;

        // Routing: other methods, unknown paths, CORS preflight.
        self.call_masked("GET", "/v3/kv/range", "", &[]).await;
        self.call_masked("POST", "/v3/kv/nothing", "{}", &[]).await;
        self.call_masked("OPTIONS", "/v3/kv/put", "", &[]).await;

        self.call_masked(
            "POST",
            "/v3/maintenance/status",
            "{}",
            &["version", "dbSize", "dbSizeInUse", "leader", "raftIndex", "raftTerm", "raftAppliedIndex"],
        )
        .await;

        self.watches().await;
        self.auth().await;
        self.answers
    }

    /// Auth through the gateway, last (it leaves auth on): users and roles, enable, a login,
    /// and reads without and with the token in the `Authorization` header.
    async fn auth(&mut self) {
        self.post("/v3/auth/user/add", r#"{"name":"root","password":"rootpw"}"#).await;
        self.post("/v3/auth/user/add", r#"{"name":"alice","password":"alicepw"}"#).await;
        self.post("/v3/auth/role/add", r#"{"name":"reader"}"#).await;
        self.post("/v3/auth/role/grant", r#"{"name":"reader","perm":{"permType":"READ","key":"Zm9v"}}"#).await;
        self.post("/v3/auth/user/grant", r#"{"user":"alice","role":"reader"}"#).await;
        self.post("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#).await;
        self.post("/v3/auth/enable", "{}").await;
        self.post("/v3/auth/authenticate", r#"{"name":"alice","password":"wrong"}"#).await;
        let alice = r#"{"name":"alice","password":"alicepw"}"#;
        let login = self.call_masked("POST", "/v3/auth/authenticate", alice, &["token"]).await;
        let token =
            login.split("\"token\":\"").nth(1).and_then(|t| t.split('"').next()).unwrap_or_default().to_string();
        self.post("/v3/kv/range", r#"{"key":"Zm9v"}"#).await;
        assert!(!token.is_empty(), "{}: no token in {login}", self.server.kind().name());
        for (i, (path, body)) in [
            ("/v3/kv/range", r#"{"key":"Zm9v"}"#),
            ("/v3/kv/range", r#"{"key":"YmF6"}"#),
            ("/v3/kv/put", r#"{"key":"Zm9v","value":"eA=="}"#),
            ("/v3/auth/user/get", r#"{"name":"alice"}"#),
            ("/v3/auth/user/list", "{}"),
        ]
        .into_iter()
        .enumerate()
        {
            let ex = Exchange::open_with(self.server, "POST", path, body, Some(&token)).await;
            let (status, content_type) = (ex.status, ex.content_type.clone());
            let text = ex.rest().await;
            // The token must count: alice may read foo, where no user may not.
            assert!(i != 0 || status == 200, "{}: {path} with a token: {status} {text}", self.server.kind().name());
            self.record(format!("POST {path} {body} (with alice's token)"), status, content_type, text);
        }
        let ex = Exchange::open_with(self.server, "POST", "/v3/kv/range", r#"{"key":"Zm9v"}"#, Some("bad.1")).await;
        let (status, content_type) = (ex.status, ex.content_type.clone());
        let text = ex.rest().await;
        self.record("POST /v3/kv/range (with a bad token)".into(), status, content_type, text);
    }

    /// Watch streams: a put's event reaches an open watch; a watch on a compacted revision is
    /// created, then canceled; a first request that is not JSON is refused.
    async fn watches(&mut self) {
        let server = self.server;
        let mut w =
            Exchange::open(server, "POST", "/v3/watch", r#"{"create_request":{"key":"dw==","prev_kv":true}}"#).await;
        let (status, content_type) = (w.status, w.content_type.clone());
        let created = w.line().await.expect("created");
        self.record("watch: created".into(), status, content_type.clone(), created);
        self.post("/v3/kv/put", r#"{"key":"dw==","value":"MQ=="}"#).await;
        self.post("/v3/kv/put", r#"{"key":"dw==","value":"Mg=="}"#).await;
        for n in 1..=2 {
            let event = w.line().await.expect("event");
            self.record(format!("watch: event {n}"), status, content_type.clone(), event);
        }
        drop(w);

        let mut w =
            Exchange::open(server, "POST", "/v3beta/watch", r#"{"createRequest":{"key":"dw==","startRevision":"2"}}"#)
                .await;
        let (status, content_type) = (w.status, w.content_type.clone());
        for n in 1..=2 {
            let line = w.line().await.expect("compacted watch line");
            self.record(format!("compacted watch: line {n}"), status, content_type.clone(), line);
        }
        drop(w);

        let bad = Exchange::open(server, "POST", "/v3/watch", "xx").await;
        let (status, content_type) = (bad.status, bad.content_type.clone());
        let body = bad.rest().await;
        self.record("watch: not JSON".into(), status, content_type, body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_answers_as_etcd_does() {
    let against = Kind::under_test();
    let (etcd, other) = tokio::join!(Server::start(Kind::Etcd), Server::start(against));
    let want = Script { server: &etcd, answers: Vec::new() }.run().await;
    let got = Script { server: &other, answers: Vec::new() }.run().await;
    assert_eq!(want.len(), got.len());
    let mut differences = Vec::new();
    for ((what, w), (_, g)) in want.iter().zip(&got) {
        if w != g {
            differences.push(format!("{what}\n  etcd: {w:?}\n  {}: {g:?}", against.name()));
        }
    }
    assert!(differences.is_empty(), "{} answers differ from etcd's:\n{}", differences.len(), differences.join("\n"));
}

#[test]
fn mask_replaces_strings_and_numbers() {
    assert_eq!(mask(r#"{"a":"12","b":3,"c":{"a":4}}"#, "a"), r#"{"a":"*","b":3,"c":{"a":"*"}}"#);
    assert_eq!(mask(r#"{"leases":[{"ID":"1"}]}"#, "ID"), r#"{"leases":[{"ID":"*"}]}"#);
}
