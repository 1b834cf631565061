//! One simulated history: a keel cluster under turmoil, clients running a register workload
//! through the etcd API, faults chosen from the seed, and the history checked at the end.
//!
//! - Members run the real store code ([`Member::start_with`] with turmoil's connector, and the
//!   real client and peer servers on turmoil listeners) on the in-memory engine. A crash throws
//!   away what was written but never synced ([`MemEngine::crash`]); the restarted member opens the
//!   same engine.
//! - Each client picks a key, a member and an operation (linearizable read, put of a unique
//!   value, compare-and-swap) from its own seeded generator and records when it invoked the call,
//!   when the answer came and what it was.
//! - The nemesis isolates members, splits the cluster, and crashes and restarts members (the
//!   leader too, as it comes), then heals everything before the clients stop.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::request_op::Request as OpRequest;
use keel_proto::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use keel_store::config::Config;
use keel_store::engine::MemEngine;
use keel_store::node::Member;
use keel_store::raft::network::Dialer;
use keel_store::server;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tonic::transport::Channel;

use crate::check::{shortest_failing_prefix, Answer, Call, Op};
use crate::net::{self, SimListener};
use crate::watch;

const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;

/// What one history runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub members: usize,
    pub clients: usize,
    pub keys: usize,
    /// How long the clients run (simulated time); the nemesis heals a few seconds before.
    pub duration: Duration,
    pub faults: bool,
    /// A bug to plant in the store (`keel_store::plant::NAMES`).
    pub plant: Option<String>,
    /// The faults the nemesis draws from (a fault that does not apply, such as cutting a link of
    /// a single member, is skipped).
    pub nemesis: Vec<Fault>,
}

/// A fault the nemesis can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Cut a member off from every other member.
    Isolate,
    /// Hold every message to and from a member until the heal (a paused process).
    Pause,
    /// Cut one link, both ways.
    Cut,
    /// Cut one link one way.
    CutOneWay,
    /// Crash a member (unsynced writes lost) and restart it a little later.
    Crash,
    /// Crash every member at once (a power loss), restart them shortly after.
    CrashAll,
    /// Repair every link, release held messages.
    Heal,
}

/// Every fault, the default nemesis.
pub const ALL_FAULTS: [Fault; 7] =
    [Fault::Isolate, Fault::Pause, Fault::Cut, Fault::CutOneWay, Fault::Crash, Fault::CrashAll, Fault::Heal];

impl Options {
    pub fn new(seed: u64) -> Self {
        Options {
            seed,
            members: 3,
            clients: 3,
            keys: 3,
            duration: Duration::from_secs(20),
            faults: true,
            plant: None,
            nemesis: ALL_FAULTS.to_vec(),
        }
    }
}

/// What one history did and what the checkers found.
#[derive(Debug, Default)]
pub struct Report {
    pub ops: usize,
    pub sim_time: Duration,
    /// The faults injected, in order, with their simulated time.
    pub faults: Vec<String>,
    pub violations: Vec<String>,
    /// A fingerprint of the whole history (every call, answer and time), to show a seed replays.
    pub digest: u64,
}

/// How long a client waits for an answer before counting the outcome unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long after the clients stop the members have to agree on their history.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);
/// Fault-free time at the end of a history, so the cluster heals before the clients stop.
const HEAL_BEFORE_END: Duration = Duration::from_secs(5);

fn member_name(i: usize) -> String {
    format!("m{}", i + 1)
}

/// Runs one history; `Err` if the simulation itself failed (a host errored).
pub fn run(opts: &Options) -> Result<Report, String> {
    // Election jitter and lease ids come from this thread's seeded source: every host runs here.
    keel_store::raft::runtime::seed(opts.seed);
    if !keel_store::plant::set(opts.plant.as_deref()) {
        return Err(format!("unknown bug to plant {:?}; known: {:?}", opts.plant, keel_store::plant::NAMES));
    }
    let mut sim = turmoil::Builder::new()
        .simulation_duration(opts.duration + Duration::from_secs(60))
        .max_message_latency(Duration::from_millis(5))
        .rng_seed(opts.seed)
        .build();
    let names: Vec<String> = (0..opts.members).map(member_name).collect();
    let cluster: Vec<String> = names.iter().map(|n| format!("{n}=http://{n}:{PEER_PORT}")).collect();
    let cluster = cluster.join(",");
    let engines: Vec<MemEngine> = names.iter().map(|_| MemEngine::new()).collect();
    for (name, engine) in names.iter().zip(&engines) {
        let (host, cluster, engine) = (name.clone(), cluster.clone(), engine.clone());
        sim.host(name.as_str(), move || run_member(host.clone(), cluster.clone(), engine.clone()));
    }

    let history: Rc<RefCell<Vec<(usize, Call)>>> = Rc::default();
    for c in 0..opts.clients {
        let client = Client {
            id: c,
            rng: ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(31).wrapping_add(c as u64 + 1)),
            urls: names.iter().map(|n| format!("http://{n}:{CLIENT_PORT}")).collect(),
            members: Vec::new(),
            keys: opts.keys,
            last_read: BTreeMap::new(),
            writes: 0,
            history: history.clone(),
        };
        let duration = opts.duration;
        sim.client(format!("client{c}").as_str(), async move {
            client.run(duration).await;
            Ok(())
        });
    }

    // A watcher, resuming across faults, and after the faults a verifier that waits until the
    // members agree on their history and checks what the watcher got against it.
    let segments: Rc<RefCell<Vec<watch::Segment>>> = Rc::default();
    let verdict: Rc<RefCell<Vec<String>>> = Rc::default();
    let urls: Vec<String> = names.iter().map(|n| format!("http://{n}:{CLIENT_PORT}")).collect();
    {
        let (urls, segments, duration) = (urls.clone(), segments.clone(), opts.duration);
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(131).wrapping_add(7));
        sim.client("watcher", async move {
            let got = watch::watch_until(&urls, duration, &mut rng).await;
            segments.borrow_mut().extend(got);
            Ok(())
        });
    }
    {
        let (segments, verdict, duration) = (segments.clone(), verdict.clone(), opts.duration);
        sim.client("verifier", async move {
            tokio::time::sleep(duration + Duration::from_secs(1)).await;
            let deadline = duration + CONVERGE_WITHIN;
            let truth = loop {
                let mut all = Vec::new();
                for u in &urls {
                    all.push(watch::history(u, deadline).await);
                }
                if all.iter().all(Option::is_some) && all.windows(2).all(|w| w[0] == w[1]) {
                    break all.pop().flatten();
                }
                if turmoil::elapsed() >= deadline {
                    let revs: Vec<Option<i64>> =
                        all.iter().map(|h| h.as_ref().and_then(|e| e.last().map(|e| e.0))).collect();
                    verdict.borrow_mut().push(format!("members did not converge: last revisions {revs:?}"));
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            if let Some(truth) = truth {
                // Wait for the watcher to hand over what it saw.
                while segments.borrow().is_empty() && turmoil::elapsed() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                verdict.borrow_mut().extend(watch::check(&segments.borrow(), &truth));
            }
            Ok(())
        });
    }

    let mut report = Report::default();
    let mut nemesis = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x006e_656d_6573_6973);
    let mut next_fault = Duration::from_secs(3);
    let mut crashed: Vec<(usize, Duration)> = Vec::new();
    let mut healed = false;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return Err(format!("simulation failed at {:?}: {e}", sim.elapsed())),
        }
        let now = sim.elapsed();
        // Restarts that are due.
        crashed.retain(|&(i, at)| {
            if now >= at {
                sim.bounce(names[i].as_str());
                report.faults.push(format!("{now:?} restart {}", names[i]));
                false
            } else {
                true
            }
        });
        if !opts.faults || now < next_fault {
            continue;
        }
        if now + HEAL_BEFORE_END >= opts.duration {
            if !healed {
                heal(&sim, &names);
                for (i, _) in crashed.drain(..) {
                    sim.bounce(names[i].as_str());
                }
                report.faults.push(format!("{now:?} heal all"));
                healed = true;
            }
            continue;
        }
        let victim = nemesis.random_range(0..names.len());
        let others: Vec<&String> = names.iter().enumerate().filter(|(j, _)| *j != victim).map(|(_, n)| n).collect();
        let fault = opts.nemesis[nemesis.random_range(0..opts.nemesis.len())];
        let v = names[victim].as_str();
        match fault {
            Fault::Isolate if !others.is_empty() => {
                for other in &others {
                    sim.partition(v, other.as_str());
                }
                report.faults.push(format!("{now:?} isolate {v}"));
            }
            Fault::Pause if !others.is_empty() => {
                // Messages to and from the member wait (a paused process), delivered on heal.
                for other in &others {
                    sim.hold(v, other.as_str());
                }
                report.faults.push(format!("{now:?} pause {v}"));
            }
            Fault::Cut if !others.is_empty() => {
                let other = others[nemesis.random_range(0..others.len())];
                sim.partition(v, other.as_str());
                report.faults.push(format!("{now:?} cut {v}-{other}"));
            }
            Fault::CutOneWay if !others.is_empty() => {
                let other = others[nemesis.random_range(0..others.len())];
                sim.partition_oneway(v, other.as_str());
                report.faults.push(format!("{now:?} cut {v}->{other}"));
            }
            // At most a minority down at once, so the cluster can make progress.
            Fault::Crash if crashed.iter().all(|(i, _)| *i != victim) && crashed.len() < (names.len() - 1) / 2 => {
                sim.crash(v);
                engines[victim].crash();
                let down = Duration::from_millis(nemesis.random_range(500..4000));
                crashed.push((victim, now + down));
                report.faults.push(format!("{now:?} crash {v} for {down:?}"));
            }
            // The whole cluster loses power (what was not synced is gone), back shortly.
            Fault::CrashAll if crashed.is_empty() => {
                for (i, name) in names.iter().enumerate() {
                    sim.crash(name.as_str());
                    engines[i].crash();
                    crashed.push((i, now + Duration::from_millis(nemesis.random_range(200..2000))));
                }
                report.faults.push(format!("{now:?} crash all"));
            }
            Fault::Heal => {
                heal(&sim, &names);
                report.faults.push(format!("{now:?} heal"));
            }
            _ => {}
        }
        next_fault = now + Duration::from_millis(nemesis.random_range(500..3000));
    }
    report.sim_time = sim.elapsed();

    report.violations.extend(verdict.borrow().iter().cloned());
    let history = history.borrow();
    report.ops = history.len();
    report.digest = history.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, (key, c)| {
        format!("{key}{c:?}").bytes().fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    });
    let mut by_key: BTreeMap<usize, Vec<Call>> = BTreeMap::new();
    for (key, call) in history.iter() {
        by_key.entry(*key).or_default().push(*call);
    }
    for (key, calls) in by_key {
        if let Some(prefix) = shortest_failing_prefix(&calls) {
            let tail: Vec<String> = prefix.iter().rev().take(8).rev().map(describe).collect();
            report.violations.push(format!(
                "key k{key}: {} calls are not linearizable; the shortest failing prefix has {}, ending:\n    {}",
                calls.len(),
                prefix.len(),
                tail.join("\n    ")
            ));
        }
    }
    Ok(report)
}

/// Repairs every link between members and releases held messages.
fn heal(sim: &turmoil::Sim, names: &[String]) {
    for a in names {
        for b in names {
            if a < b {
                sim.repair(a.as_str(), b.as_str());
                sim.release(a.as_str(), b.as_str());
            }
        }
    }
}

/// One member's software: the store with its client and peer servers on simulated sockets.
async fn run_member(name: String, cluster: String, engine: MemEngine) -> turmoil::Result {
    let cfg = Config::parse_from([
        "keel".to_string(),
        "--name".into(),
        name.clone(),
        "--initial-cluster".into(),
        cluster,
        "--initial-advertise-peer-urls".into(),
        format!("http://{name}:{PEER_PORT}"),
        "--advertise-client-urls".into(),
        format!("http://{name}:{CLIENT_PORT}"),
    ])?;
    let clients = SimListener::bind(CLIENT_PORT).await?;
    let peers = SimListener::bind(PEER_PORT).await?;
    let member = Member::start_with(&cfg, Arc::new(engine), Dialer::with_connector(net::connector()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(server::serve_with(peers, server::peer_router(member.clone()), std::future::pending()));
    server::serve_with(clients, server::client_router(member), std::future::pending()).await?;
    Ok(())
}

/// A client of the register workload.
struct Client {
    id: usize,
    rng: ChaCha8Rng,
    /// The members' client URLs.
    urls: Vec<String>,
    /// A channel per member, opened inside the simulation.
    members: Vec<KvClient<Channel>>,
    keys: usize,
    /// The last value this client read per key (what its CAS expects).
    last_read: BTreeMap<usize, Option<u64>>,
    writes: u64,
    history: Rc<RefCell<Vec<(usize, Call)>>>,
}

impl Client {
    async fn run(mut self, duration: Duration) {
        self.members = self.urls.iter().map(|u| KvClient::new(net::channel(u, REQUEST_TIMEOUT))).collect();
        while turmoil::elapsed() < duration {
            let key = self.rng.random_range(0..self.keys);
            let member = self.rng.random_range(0..self.members.len());
            let op = match self.rng.random_range(0..10) {
                0..=3 => Op::Read,
                4..=7 => Op::Write(self.unique()),
                _ => Op::Cas { expect: self.last_read.get(&key).copied().flatten(), new: self.unique() },
            };
            let invoked = turmoil::elapsed();
            let answer = self.perform(member, key, op).await;
            let answered = (answer != Answer::Unknown).then(turmoil::elapsed);
            if let Answer::Read(v) = answer {
                self.last_read.insert(key, v);
            }
            self.history.borrow_mut().push((key, Call { client: self.id, op, answer, invoked, answered }));
            let think = Duration::from_millis(self.rng.random_range(0..30));
            tokio::time::sleep(think).await;
        }
    }

    /// A value no other write in the history has.
    fn unique(&mut self) -> u64 {
        self.writes += 1;
        ((self.id as u64 + 1) << 32) | self.writes
    }

    async fn perform(&mut self, member: usize, key: usize, op: Op) -> Answer {
        let kv = &mut self.members[member];
        let key_bytes = format!("k{key}").into_bytes();
        match op {
            Op::Read => match kv.range(RangeRequest { key: key_bytes.into(), ..Default::default() }).await {
                Ok(r) => Answer::Read(r.into_inner().kvs.first().map(|kv| parse(&kv.value))),
                Err(_) => Answer::Unknown,
            },
            Op::Write(v) => {
                let put = PutRequest {
                    key: key_bytes.into(),
                    value: v.to_string().into_bytes().into(),
                    ..Default::default()
                };
                match kv.put(put).await {
                    Ok(_) => Answer::Written,
                    Err(_) => Answer::Unknown,
                }
            }
            Op::Cas { expect, new } => {
                let compare = match expect {
                    Some(v) => Compare {
                        result: CompareResult::Equal as i32,
                        target: CompareTarget::Value as i32,
                        key: key_bytes.clone().into(),
                        target_union: Some(TargetUnion::Value(v.to_string().into_bytes().into())),
                        ..Default::default()
                    },
                    None => Compare {
                        result: CompareResult::Equal as i32,
                        target: CompareTarget::Version as i32,
                        key: key_bytes.clone().into(),
                        target_union: Some(TargetUnion::Version(0)),
                        ..Default::default()
                    },
                };
                let put = PutRequest {
                    key: key_bytes.into(),
                    value: new.to_string().into_bytes().into(),
                    ..Default::default()
                };
                let txn = TxnRequest {
                    compare: vec![compare],
                    success: vec![RequestOp { request: Some(OpRequest::RequestPut(put)) }],
                    failure: vec![],
                };
                match kv.txn(txn).await {
                    Ok(r) => Answer::Cas(r.into_inner().succeeded),
                    Err(_) => Answer::Unknown,
                }
            }
        }
    }
}

fn parse(value: &[u8]) -> u64 {
    std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX)
}

/// One call, for a violation report.
fn describe(c: &Call) -> String {
    let answered = c.answered.map(|t| format!("{t:?}")).unwrap_or_else(|| "never".into());
    format!("client{} {:?} -> {:?} (invoked {:?}, answered {answered})", c.client, c.op, c.answer, c.invoked)
}
