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

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::cluster_client::ClusterClient;
use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::request_op::Request as OpRequest;
use keel_proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, HashKvRequest, PutRequest, RangeRequest, RequestOp, ResponseHeader,
    TxnRequest,
};
use keel_proto::etcdserverpb::{MemberAddRequest, MemberListRequest, MemberPromoteRequest, MemberRemoveRequest};
use keel_store::config::Config;
use keel_store::engine::{Engine, MemEngine, RocksEngine, SyncMode};
use keel_store::node::Member;
use keel_store::raft::network::Dialer;
use keel_store::server;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tonic::transport::Channel;

use crate::check::{shortest_failing_prefix, Answer, Call, Op};
use crate::lease;
use crate::net::{self, SimListener};
use crate::watch;

const CLIENT_PORT: u16 = 2379;
/// The most a message takes on a healthy link.
const MAX_LATENCY: Duration = Duration::from_millis(5);
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
    /// Clients compact the history at their last write's revision once in this many operations
    /// (0: never).
    pub compact_one_in: u32,
    /// Leasers: clients granting leases, keeping them alive and letting them expire.
    pub leasers: usize,
    /// Members snapshot every this many entries and keep only a few entries behind a snapshot,
    /// so members that fall behind (or are replaced) catch up through InstallSnapshot, crashes
    /// included (`None`: etcd's default, 100,000, never reached here).
    pub snapshot_every: Option<u64>,
    /// Members store on RocksDB (in temporary directories, reopened on every restart) instead of
    /// the in-memory engine. A crash then loses nothing the process handed to RocksDB, since the
    /// operating system keeps it: it is a process crash, not a power loss.
    pub rocksdb: bool,
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
    /// Split the members into a minority and a majority that cannot reach each other.
    Split,
    /// FoundationDB's swizzle: cut the links between members one by one, then repair them one by
    /// one in another random order.
    Swizzle,
    /// Slow every link between a member and the other members: messages take up to 50 ms to
    /// 1.5 s (a latency spike), until the heal.
    Slow,
    /// Crash a member (unsynced writes lost) and restart it a little later.
    Crash,
    /// Crash every member at once (a power loss), restart them shortly after.
    CrashAll,
    /// Remove a member from the cluster (MemberRemove), wipe its storage, add it again
    /// (MemberAdd) and start it empty, joining the existing cluster.
    Replace,
    /// Repair every link, release held messages.
    Heal,
}

impl Fault {
    /// The fault's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Isolate => "isolate",
            Fault::Pause => "pause",
            Fault::Cut => "cut",
            Fault::CutOneWay => "cut-one-way",
            Fault::Slow => "slow",
            Fault::Split => "split",
            Fault::Swizzle => "swizzle",
            Fault::Crash => "crash",
            Fault::CrashAll => "crash-all",
            Fault::Replace => "replace",
            Fault::Heal => "heal",
        }
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ALL_FAULTS.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let known: Vec<&str> = ALL_FAULTS.iter().map(|f| f.name()).collect();
            format!("unknown fault {s:?}; known: {}", known.join(", "))
        })
    }
}

/// Every fault, the default nemesis.
pub const ALL_FAULTS: [Fault; 11] = [
    Fault::Isolate,
    Fault::Pause,
    Fault::Cut,
    Fault::CutOneWay,
    Fault::Split,
    Fault::Swizzle,
    Fault::Slow,
    Fault::Crash,
    Fault::CrashAll,
    Fault::Replace,
    Fault::Heal,
];

impl Options {
    /// The default history of `seed`: 3 members (5 for every fifth seed), 3 clients on 3 keys for
    /// 20 simulated seconds, every fault. Every third seed compacts (once in 15 operations): the
    /// checkers see the history only from the last compaction on, so the others do not.
    pub fn new(seed: u64) -> Self {
        Options {
            seed,
            members: if seed % 5 == 4 { 5 } else { 3 },
            clients: 3,
            keys: 3,
            duration: Duration::from_secs(20),
            faults: true,
            plant: None,
            compact_one_in: if seed.is_multiple_of(3) { 15 } else { 0 },
            rocksdb: false,
            leasers: 2,
            snapshot_every: (seed % 4 == 1).then_some(100),
            nemesis: ALL_FAULTS.to_vec(),
        }
    }
}

impl Options {
    /// The `keel-chaos` command that runs exactly this history again.
    pub fn replay(&self) -> String {
        let nemesis: Vec<&str> = self.nemesis.iter().map(|f| f.name()).collect();
        let plant = self.plant.as_ref().map(|p| format!(" --plant {p}")).unwrap_or_default();
        format!(
            "keel-chaos sim --seeds 1 --start {} --members {} --seconds {} --compact-one-in {} --leasers {} --nemesis {}{plant}",
            self.seed,
            self.members,
            self.duration.as_secs(),
            self.compact_one_in,
            self.leasers,
            nemesis.join(","),
        ) + if self.rocksdb { " --rocksdb" } else { "" }
            + &self.snapshot_every.map(|n| format!(" --snapshot-every {n}")).unwrap_or_default()
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

impl Report {
    /// The violations, with the command that replays the history (`opts`) and its faults.
    pub fn explain(&self, opts: &Options) -> String {
        format!("replay: {}\nfaults: {}\n{}", opts.replay(), self.faults.join("; "), self.violations.join("\n"))
    }
}

/// How long a client waits for an answer before counting the outcome unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long after the clients stop the members have to agree on their history.
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);
/// Fault-free time at the end of a history, so the cluster heals before the clients stop.
const HEAL_BEFORE_END: Duration = Duration::from_secs(5);

/// The members' client URLs.
fn urls_of(names: &[String]) -> Vec<String> {
    names.iter().map(|n| format!("http://{n}:{CLIENT_PORT}")).collect()
}

fn member_name(i: usize) -> String {
    format!("m{}", i + 1)
}

/// Runs one history; `Err` if the simulation itself failed (a host errored).
pub fn run(opts: &Options) -> Result<Report, String> {
    // Election jitter and lease ids come from this thread's seeded source: every host runs here.
    keel_store::raft::runtime::seed(opts.seed);
    let simulated = opts.plant.as_deref().is_none_or(|p| keel_store::plant::NAMES.contains(&p));
    if !simulated || !keel_store::plant::set(opts.plant.as_deref()) {
        return Err(format!("unknown bug to plant {:?}; known: {:?}", opts.plant, keel_store::plant::NAMES));
    }
    let mut sim = turmoil::Builder::new()
        .simulation_duration(opts.duration + Duration::from_secs(60))
        .max_message_latency(MAX_LATENCY)
        .rng_seed(opts.seed)
        .build();
    let names: Vec<String> = (0..opts.members).map(member_name).collect();
    let cluster: Vec<String> = names.iter().map(|n| format!("{n}=http://{n}:{PEER_PORT}")).collect();
    let cluster = cluster.join(",");
    // Each member's storage, replaced with an empty one when the member is removed and added
    // again; the RocksDB directories live until the history ends.
    let mut dirs = Vec::new();
    let slots = (0..names.len())
        .map(|_| Setup::fresh(opts.rocksdb, &mut dirs, false).map(|s| Rc::new(RefCell::new(s))))
        .collect::<Result<Vec<_>, _>>()?;
    for (name, slot) in names.iter().zip(&slots) {
        let (host, cluster, slot) = (name.clone(), cluster.clone(), slot.clone());
        let snapshots = opts.snapshot_every;
        sim.host(name.as_str(), move || run_member(host.clone(), cluster.clone(), slot.borrow().clone(), snapshots));
    }

    let history: Rc<RefCell<Vec<(usize, Call)>>> = Rc::default();
    let acked: Rc<RefCell<Vec<Acked>>> = Rc::default();
    let observed: Rc<RefCell<Vec<Observed>>> = Rc::default();
    // Violations found while the history runs (revisions going back) and after (watch, convergence).
    let verdict: Rc<RefCell<Vec<String>>> = Rc::default();
    for c in 0..opts.clients {
        let client = Client {
            id: c,
            rng: ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(31).wrapping_add(c as u64 + 1)),
            urls: urls_of(&names),
            members: Vec::new(),
            keys: opts.keys,
            last_read: BTreeMap::new(),
            writes: 0,
            history: history.clone(),
            acked: acked.clone(),
            observed: observed.clone(),
            compact_one_in: opts.compact_one_in,
            last_write_rev: 0,
            compacted: 0,
            seen_revs: BTreeMap::new(),
            violations: verdict.clone(),
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
    let leases: Rc<RefCell<Vec<lease::LeaseLog>>> = Rc::default();
    let leasers_done: Rc<std::cell::Cell<usize>> = Rc::default();
    for l in 0..opts.leasers {
        let (urls, leases, done, duration) = (urls_of(&names), leases.clone(), leasers_done.clone(), opts.duration);
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(257).wrapping_add(l as u64 + 11));
        sim.client(format!("leaser{l}").as_str(), async move {
            lease::leaser(&urls, duration, &mut rng, leases).await;
            done.set(done.get() + 1);
            Ok(())
        });
    }
    let urls = urls_of(&names);
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
        let (acked, observed) = (acked.clone(), observed.clone());
        let (leases, leasers_done, leasers) = (leases.clone(), leasers_done.clone(), opts.leasers);
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
                    let revs: Vec<Option<i64>> = all.iter().map(|h| h.as_ref().map(watch::History::last_rev)).collect();
                    verdict.borrow_mut().push(format!("members did not converge: last revisions {revs:?}"));
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            while leasers_done.get() < leasers && turmoil::elapsed() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let leases = leases.borrow().clone();
            verdict.borrow_mut().extend(lease::early(&leases));
            let not_gone = lease::expired(&urls, &leases, deadline).await;
            verdict.borrow_mut().extend(not_gone);
            if let Some(truth) = truth {
                verdict.borrow_mut().extend(durable(&acked.borrow(), &truth));
                verdict.borrow_mut().extend(reads_at_revision(&observed.borrow(), &truth));
                let hashes = same_hash_kv(&urls, truth.last_rev()).await;
                verdict.borrow_mut().extend(hashes);
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
    // A member being removed and added again, how far that got, and whether it comes back as a
    // learner.
    let mut replacing: Option<(usize, Rc<Cell<Phase>>, bool)> = None;
    // Learners started again, awaiting their promotion.
    let mut promoting: Vec<(usize, Rc<Cell<Phase>>)> = Vec::new();
    let mut replacements = 0;
    // Link changes due later (a swizzle): when, cut (or repair), and the two members.
    let mut scheduled: Vec<(Duration, bool, usize, usize)> = Vec::new();
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
        scheduled.retain(|&(at, cut, a, b)| {
            if now < at {
                return true;
            }
            if cut {
                sim.partition(names[a].as_str(), names[b].as_str());
            } else {
                sim.repair(names[a].as_str(), names[b].as_str());
            }
            false
        });
        if let Some((v, phase, learner)) = &replacing {
            let name = names[*v].as_str();
            match phase.get() {
                Phase::Removed => {
                    sim.crash(name);
                    *slots[*v].borrow_mut() = Setup::fresh(opts.rocksdb, &mut dirs, true)?;
                    phase.set(Phase::Wiped);
                    report.faults.push(format!("{now:?} {name} removed, its storage wiped"));
                }
                Phase::Added => {
                    sim.bounce(name);
                    report.faults.push(format!("{now:?} {name} added again, started empty"));
                    if *learner {
                        promoting.push((*v, phase.clone()));
                    }
                    replacing = None;
                }
                _ => {}
            }
        }
        promoting.retain(|(v, phase)| {
            let done = phase.get() == Phase::Promoted;
            if done {
                report.faults.push(format!("{now:?} {} promoted", names[*v]));
            }
            !done
        });
        if !opts.faults || now < next_fault {
            continue;
        }
        if now + HEAL_BEFORE_END >= opts.duration {
            if !healed {
                scheduled.clear();
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
            Fault::Split if names.len() >= 3 => {
                let mut order: Vec<usize> = (0..names.len()).collect();
                order.shuffle(&mut nemesis);
                let (minority, majority) = order.split_at((names.len() - 1) / 2);
                for &a in minority {
                    for &b in majority {
                        sim.partition(names[a].as_str(), names[b].as_str());
                    }
                }
                let minority: Vec<&str> = minority.iter().map(|&i| names[i].as_str()).collect();
                report.faults.push(format!("{now:?} split off {}", minority.join(",")));
            }
            Fault::Swizzle if names.len() >= 2 => {
                let mut pairs: Vec<(usize, usize)> =
                    (0..names.len()).flat_map(|a| (a + 1..names.len()).map(move |b| (a, b))).collect();
                pairs.shuffle(&mut nemesis);
                let mut at = now;
                for &(a, b) in &pairs {
                    at += Duration::from_millis(nemesis.random_range(100..400));
                    scheduled.push((at, true, a, b));
                }
                pairs.shuffle(&mut nemesis);
                for &(a, b) in &pairs {
                    at += Duration::from_millis(nemesis.random_range(100..400));
                    scheduled.push((at, false, a, b));
                }
                report.faults.push(format!("{now:?} swizzle until {at:?}"));
            }
            Fault::Slow if !others.is_empty() => {
                let max = Duration::from_millis(nemesis.random_range(50..1500));
                for other in &others {
                    sim.set_link_max_message_latency(v, other.as_str(), max);
                }
                report.faults.push(format!("{now:?} slow {v} ({max:?})"));
            }
            // At most a minority down at once, so the cluster can make progress.
            Fault::Replace if replacing.is_none() && crashed.is_empty() && names.len() >= 3 => {
                let phase = Rc::new(Cell::new(Phase::Removing));
                let (urls, p, until) = (urls_of(&names), phase.clone(), opts.duration + CONVERGE_WITHIN);
                replacements += 1;
                // Every second replacement joins as a learner and is promoted once it has caught
                // up, while the faults go on.
                let learner = replacements % 2 == 0;
                sim.client(format!("reconfig{replacements}").as_str(), async move {
                    replace(&urls, victim, &p, learner, until).await;
                    Ok(())
                });
                replacing = Some((victim, phase, learner));
                let how = if learner { " (back as a learner, then promoted)" } else { "" };
                report.faults.push(format!("{now:?} replace {v}{how}"));
            }
            // The member being replaced is not crashed meanwhile: started empty before it is added
            // again, it could not join.
            Fault::Crash
                if crashed.iter().all(|(i, _)| *i != victim)
                    && crashed.len() < (names.len() - 1) / 2
                    && replacing.as_ref().is_none_or(|(r, ..)| *r != victim) =>
            {
                sim.crash(v);
                slots[victim].borrow().crash();
                let down = Duration::from_millis(nemesis.random_range(500..4000));
                crashed.push((victim, now + down));
                report.faults.push(format!("{now:?} crash {v} for {down:?}"));
            }
            // The whole cluster loses power (what was not synced is gone), back shortly.
            Fault::CrashAll if crashed.is_empty() && replacing.is_none() => {
                for (i, name) in names.iter().enumerate() {
                    sim.crash(name.as_str());
                    slots[i].borrow().crash();
                    crashed.push((i, now + Duration::from_millis(nemesis.random_range(200..2000))));
                }
                report.faults.push(format!("{now:?} crash all"));
            }
            Fault::Heal => {
                scheduled.clear();
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

/// Repairs every link between members, releases held messages and ends latency spikes.
fn heal(sim: &turmoil::Sim, names: &[String]) {
    for a in names {
        for b in names {
            if a < b {
                sim.repair(a.as_str(), b.as_str());
                sim.release(a.as_str(), b.as_str());
                sim.set_link_max_message_latency(a.as_str(), b.as_str(), MAX_LATENCY);
            }
        }
    }
}

/// How far the replacement of a member got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Removing,
    /// The member is no longer in the member list: the nemesis stops it and wipes its storage.
    Removed,
    Wiped,
    /// The member is in the list again: the nemesis starts it.
    Added,
    /// The member, added again as a learner, is a voter now.
    Promoted,
}

/// What `replace` waits for the member list to show of the victim.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Gone,
    Listed,
    Voter,
}

/// Removes member `victim` through the other members (retrying until the member list shows it
/// gone), waits for the nemesis to wipe it, then adds its peer URL again (retrying until the list
/// shows it), as a voter or as a `learner`; a learner is then promoted, retried until the list
/// shows it a voter (a learner still catching up is refused). Gives up at `until`.
async fn replace(urls: &[String], victim: usize, phase: &Cell<Phase>, learner: bool, until: Duration) {
    let peer_url = format!("http://{}:{PEER_PORT}", member_name(victim));
    let others: Vec<&String> = urls.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, u)| u).collect();
    let steps: &[Want] = if learner { &[Want::Gone, Want::Listed, Want::Voter] } else { &[Want::Gone, Want::Listed] };
    for &want in steps {
        let mut attempt = 0;
        loop {
            if turmoil::elapsed() >= until {
                return;
            }
            let mut cluster = ClusterClient::new(net::channel(others[attempt % others.len()], REQUEST_TIMEOUT));
            attempt += 1;
            let listed = cluster.member_list(MemberListRequest { linearizable: true }).await;
            if let Ok(list) = listed.map(|l| l.into_inner().members) {
                let found = list.iter().find(|m| m.peer_ur_ls.contains(&peer_url)).map(|m| (m.id, m.is_learner));
                match (found, want) {
                    (None, Want::Gone) | (Some(_), Want::Listed) | (Some((_, false)), Want::Voter) => break,
                    (Some((id, _)), Want::Gone) => {
                        let _ = cluster.member_remove(MemberRemoveRequest { id }).await;
                    }
                    (None, Want::Listed) => {
                        let add = MemberAddRequest { peer_ur_ls: vec![peer_url.clone()], is_learner: learner };
                        let _ = cluster.member_add(add).await;
                    }
                    (Some((id, true)), Want::Voter) => {
                        let _ = cluster.member_promote(MemberPromoteRequest { id }).await;
                    }
                    // The learner's entry vanished: nothing to promote.
                    (None, Want::Voter) => return,
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        match want {
            Want::Gone => {
                phase.set(Phase::Removed);
                while phase.get() != Phase::Wiped {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Want::Listed => phase.set(Phase::Added),
            Want::Voter => phase.set(Phase::Promoted),
        }
    }
}

/// Where a member keeps its state across restarts.
#[derive(Clone)]
enum Storage {
    Memory(MemEngine),
    Rocks(std::path::PathBuf),
}

/// What a member starts from: its storage, and whether it joins an existing cluster (a member
/// added again after its removal) rather than founding the cluster.
#[derive(Clone)]
struct Setup {
    storage: Storage,
    existing: bool,
}

impl Setup {
    /// Empty storage: in memory, or a new RocksDB directory kept in `dirs`.
    fn fresh(rocksdb: bool, dirs: &mut Vec<tempfile::TempDir>, existing: bool) -> Result<Setup, String> {
        let storage = if rocksdb {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let path = dir.path().to_path_buf();
            dirs.push(dir);
            Storage::Rocks(path)
        } else {
            Storage::Memory(MemEngine::new())
        };
        Ok(Setup { storage, existing })
    }

    /// A crash: the in-memory engine loses what was not synced (RocksDB keeps what the process
    /// handed it).
    fn crash(&self) {
        if let Storage::Memory(e) = &self.storage {
            e.crash();
        }
    }
}

/// One member's software: the store with its client and peer servers on simulated sockets.
async fn run_member(name: String, cluster: String, setup: Setup, snapshot_every: Option<u64>) -> turmoil::Result {
    let snapshots = snapshot_every.map(|n| {
        ["--snapshot-count".to_string(), n.to_string(), "--experimental-snapshot-catchup-entries".into(), "10".into()]
    });
    let cfg = Config::parse_from(
        [
            "keel".to_string(),
            "--name".into(),
            name.clone(),
            "--initial-cluster".into(),
            cluster,
            "--initial-advertise-peer-urls".into(),
            format!("http://{name}:{PEER_PORT}"),
            "--advertise-client-urls".into(),
            format!("http://{name}:{CLIENT_PORT}"),
            "--initial-cluster-state".into(),
            if setup.existing { "existing" } else { "new" }.into(),
        ]
        .into_iter()
        .chain(snapshots.into_iter().flatten()),
    )?;
    let clients = SimListener::bind(CLIENT_PORT).await?;
    let peers = SimListener::bind(PEER_PORT).await?;
    let engine: Arc<dyn Engine> = match setup.storage {
        Storage::Memory(e) => Arc::new(e),
        Storage::Rocks(dir) => Arc::new(RocksEngine::open(&dir).map_err(|e| e.to_string())?),
    };
    let dialer = Dialer::with_connector(net::connector());
    let member = Member::start_with(&cfg, engine, dialer, SyncMode::Inline).await.map_err(|e| e.to_string())?;
    tokio::spawn(server::serve_with(peers, server::peer_router(member.clone()), std::future::pending()));
    server::serve_with(clients, server::client_router(server::Edge::new(member)), std::future::pending()).await?;
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
    /// Every acknowledged change, with the revision it was given.
    acked: Rc<RefCell<Vec<Acked>>>,
    /// Every read's answer, with its revision.
    observed: Rc<RefCell<Vec<Observed>>>,
    compact_one_in: u32,
    /// The revision of this client's last acknowledged write, and the last it compacted at.
    last_write_rev: i64,
    compacted: i64,
    /// The newest revision each member's answers carried: it must never go back.
    seen_revs: BTreeMap<u64, i64>,
    violations: Rc<RefCell<Vec<String>>>,
}

impl Client {
    async fn run(mut self, duration: Duration) {
        self.members = self.urls.iter().map(|u| KvClient::new(net::channel(u, REQUEST_TIMEOUT))).collect();
        while turmoil::elapsed() < duration {
            let key = self.rng.random_range(0..self.keys);
            let member = self.rng.random_range(0..self.members.len());
            let compact = self.compact_one_in > 0 && self.rng.random_ratio(1, self.compact_one_in);
            if compact && self.last_write_rev > self.compacted {
                // Compact at this client's last write (sometimes a delete: etcd-io/etcd#18089,
                // #19179); the outcome does not matter to the register history.
                let at = self.last_write_rev;
                let compact = CompactionRequest { revision: at, physical: false };
                if self.members[member].compact(compact).await.is_ok() {
                    self.compacted = at;
                }
                continue;
            }
            let op = match self.rng.random_range(0..12) {
                10 => {
                    self.put_two(member, key).await;
                    continue;
                }
                11 => {
                    self.read_all(member).await;
                    continue;
                }
                0..=3 => Op::Read,
                4..=6 => Op::Write(self.unique()),
                7 => Op::Delete,
                _ => Op::Cas { expect: self.last_read.get(&key).copied().flatten(), new: self.unique() },
            };
            let invoked = turmoil::elapsed();
            let (answer, header, changed) = self.perform(member, key, op).await;
            let answered = (answer != Answer::Unknown).then(turmoil::elapsed);
            let rev = header.map(|h| self.note_revision(member, h));
            if let Some(rev) = rev {
                if changed {
                    self.last_write_rev = rev;
                    let value = match op {
                        Op::Write(v) | Op::Cas { new: v, .. } => Some(v),
                        _ => None,
                    };
                    self.acked.borrow_mut().push(Acked { rev, key, value });
                }
            }
            if let Answer::Read(v) = answer {
                self.last_read.insert(key, v);
                if let Some(rev) = rev {
                    let kvs =
                        v.map(|v| (format!("k{key}").into_bytes(), v.to_string().into_bytes())).into_iter().collect();
                    self.observe(Observed { rev, key: Some(key), kvs, client: self.id, member, serializable: false });
                }
            }
            self.history.borrow_mut().push((key, Call { client: self.id, op, answer, invoked, answered }));
            self.think().await;
        }
    }

    async fn think(&mut self) {
        let think = Duration::from_millis(self.rng.random_range(0..30));
        tokio::time::sleep(think).await;
    }

    fn observe(&self, o: Observed) {
        self.observed.borrow_mut().push(o);
    }

    /// A txn that puts unique values on `key` and another key at once: in each key's history a
    /// write, both with the same outcome; the watch checker sees that both came at one revision.
    async fn put_two(&mut self, member: usize, key: usize) {
        let other = (key + 1 + self.rng.random_range(0..self.keys.max(2) - 1)) % self.keys.max(2);
        let writes = [(key, self.unique()), (other, self.unique())];
        let put = |(k, v): (usize, u64)| RequestOp {
            request: Some(OpRequest::RequestPut(PutRequest {
                key: format!("k{k}").into_bytes().into(),
                value: v.to_string().into_bytes().into(),
                ..Default::default()
            })),
        };
        let txn = TxnRequest { compare: vec![], success: writes.map(put).to_vec(), failure: vec![] };
        let invoked = turmoil::elapsed();
        let result = self.members[member].txn(txn).await.map(|r| r.into_inner());
        let answer = if result.is_ok() { Answer::Written } else { Answer::Unknown };
        let answered = result.is_ok().then(turmoil::elapsed);
        if let Some(h) = result.ok().and_then(|r| r.header) {
            let rev = self.note_revision(member, h);
            self.last_write_rev = rev;
            for (key, v) in writes {
                self.acked.borrow_mut().push(Acked { rev, key, value: Some(v) });
            }
        }
        for (key, v) in writes {
            self.history
                .borrow_mut()
                .push((key, Call { client: self.id, op: Op::Write(v), answer, invoked, answered }));
        }
        self.think().await;
    }

    /// A serializable read of every key: what the member answers must be the whole state at the
    /// revision its header gives (checked against the converged history at the end).
    async fn read_all(&mut self, member: usize) {
        let range = RangeRequest {
            key: watch::KEY_FROM.to_vec().into(),
            range_end: watch::KEY_END.to_vec().into(),
            serializable: true,
            ..Default::default()
        };
        if let Ok(r) = self.members[member].range(range).await {
            let r = r.into_inner();
            if let Some(h) = r.header {
                let rev = self.note_revision(member, h);
                let kvs = r.kvs.into_iter().map(|kv| (kv.key.to_vec(), kv.value.to_vec())).collect();
                self.observe(Observed { rev, key: None, kvs, client: self.id, member, serializable: true });
            }
        }
        self.think().await;
    }

    /// Checks that the revision of the member that answered did not go back since its last
    /// answer to this client (etcd-io/etcd#17780: after a crash during compaction); returns the
    /// revision. Members are told apart by id: a member removed and added again is a new member,
    /// and starts empty.
    fn note_revision(&mut self, member: usize, header: ResponseHeader) -> i64 {
        let rev = header.revision;
        let last = self.seen_revs.entry(header.member_id).or_insert(0);
        if rev < *last {
            self.violations.borrow_mut().push(format!(
                "member m{}'s revision went back from {last} to {rev} (client{}, at {:?})",
                member + 1,
                self.id,
                turmoil::elapsed()
            ));
        }
        *last = rev.max(*last);
        rev
    }

    /// A value no other write in the history has.
    fn unique(&mut self) -> u64 {
        self.writes += 1;
        ((self.id as u64 + 1) << 32) | self.writes
    }

    /// Performs `op`; the answer, its header, and whether the key changed at the header's
    /// revision.
    async fn perform(&mut self, member: usize, key: usize, op: Op) -> (Answer, Option<ResponseHeader>, bool) {
        let kv = &mut self.members[member];
        let key_bytes = format!("k{key}").into_bytes();
        match op {
            Op::Read => match kv.range(RangeRequest { key: key_bytes.into(), ..Default::default() }).await {
                Ok(r) => {
                    let r = r.into_inner();
                    (Answer::Read(r.kvs.first().map(|kv| parse(&kv.value))), r.header, false)
                }
                Err(_) => (Answer::Unknown, None, false),
            },
            Op::Write(v) => {
                let put = PutRequest {
                    key: key_bytes.into(),
                    value: v.to_string().into_bytes().into(),
                    ..Default::default()
                };
                match kv.put(put).await {
                    Ok(r) => (Answer::Written, r.into_inner().header, true),
                    Err(_) => (Answer::Unknown, None, false),
                }
            }
            Op::Delete => {
                match kv.delete_range(DeleteRangeRequest { key: key_bytes.into(), ..Default::default() }).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        (Answer::Written, r.header, r.deleted > 0)
                    }
                    Err(_) => (Answer::Unknown, None, false),
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
                    Ok(r) => {
                        let r = r.into_inner();
                        (Answer::Cas(r.succeeded), r.header, r.succeeded)
                    }
                    Err(_) => (Answer::Unknown, None, false),
                }
            }
        }
    }
}

/// What a read returned: the keys and values at revision `rev` (one key's, or all of them).
#[derive(Debug, Clone)]
struct Observed {
    rev: i64,
    key: Option<usize>,
    kvs: BTreeMap<Vec<u8>, Vec<u8>>,
    client: usize,
    member: usize,
    serializable: bool,
}

/// Every read returned exactly the state of the converged history at its header's revision
/// (reads below the history's compacted revision cannot be checked).
fn reads_at_revision(observed: &[Observed], truth: &watch::History) -> Vec<String> {
    let mut violations = Vec::new();
    let mut reads: Vec<&Observed> = observed.iter().filter(|o| o.rev >= truth.compacted).collect();
    reads.sort_by_key(|o| o.rev);
    let mut state = truth.base.clone();
    let mut events = truth.events.iter().filter(|e| e.rev > truth.compacted).peekable();
    for o in reads {
        while let Some(e) = events.next_if(|e| e.rev <= o.rev) {
            match &e.value {
                Some(v) => state.insert(e.key.clone(), v.clone()),
                None => state.remove(&e.key),
            };
        }
        let expected: BTreeMap<Vec<u8>, Vec<u8>> = match o.key {
            None => state.clone(),
            Some(k) => state
                .get_key_value(format!("k{k}").as_bytes())
                .map(|(k, v)| (k.clone(), v.clone()))
                .into_iter()
                .collect(),
        };
        let show = |m: &BTreeMap<Vec<u8>, Vec<u8>>| -> Vec<String> {
            m.iter().map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), String::from_utf8_lossy(v))).collect()
        };
        if o.rev > truth.last_rev() || o.kvs != expected {
            violations.push(format!(
                "client{}'s {} read on m{} at revision {} returned {:?}; the history has {:?} there (up to revision {})",
                o.client,
                if o.serializable { "serializable" } else { "linearizable" },
                o.member + 1,
                o.rev,
                show(&o.kvs),
                show(&expected),
                truth.last_rev()
            ));
        }
    }
    violations
}

/// An acknowledged change: `key` took `value` (`None`: deleted) at revision `rev`.
#[derive(Debug, Clone, Copy)]
struct Acked {
    rev: i64,
    key: usize,
    value: Option<u64>,
}

/// Durability: every acknowledged change at or above the history's compacted revision is in the
/// converged history, at its revision (what compaction removed below it cannot be checked).
fn durable(acked: &[Acked], truth: &watch::History) -> Vec<String> {
    let changes: BTreeMap<(i64, &[u8]), Option<u64>> =
        truth.events.iter().map(|e| ((e.rev, e.key.as_slice()), e.value.as_deref().map(parse))).collect();
    let mut violations = Vec::new();
    for a in acked.iter().filter(|a| a.rev >= truth.compacted) {
        let key = format!("k{}", a.key);
        let found = changes.get(&(a.rev, key.as_bytes())).copied();
        if found != Some(a.value) {
            let has = match found {
                None => format!("no change of {key}"),
                Some(v) => format!("{key} = {v:?}"),
            };
            violations.push(format!(
                "acknowledged change lost: {key} = {:?} at revision {}; the history has {has} there (compacted at {})",
                a.value, a.rev, truth.compacted
            ));
        }
    }
    violations
}

/// Convergence of the whole store: every member's HashKV at `rev` is the same.
async fn same_hash_kv(urls: &[String], rev: i64) -> Vec<String> {
    let mut hashes = Vec::new();
    for u in urls {
        let mut m = MaintenanceClient::new(net::channel(u, REQUEST_TIMEOUT));
        let got = m.hash_kv(HashKvRequest { revision: rev }).await.map(|r| r.into_inner());
        hashes.push(got.map(|r| (r.hash, r.compact_revision)).map_err(|e| e.message().to_string()));
    }
    if hashes.windows(2).all(|w| w[0] == w[1]) {
        return vec![];
    }
    vec![format!("members' HashKV at revision {rev} differ: (hash, compacted) {hashes:?}")]
}

fn parse(value: &[u8]) -> u64 {
    std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX)
}

/// One call, for a violation report.
fn describe(c: &Call) -> String {
    let answered = c.answered.map(|t| format!("{t:?}")).unwrap_or_else(|| "never".into());
    format!("client{} {:?} -> {:?} (invoked {:?}, answered {answered})", c.client, c.op, c.answer, c.invoked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watch::{Event, History};

    fn put(rev: i64, key: usize, v: u64) -> Event {
        let value = Some(v.to_string().into_bytes());
        Event { rev, key: format!("k{key}").into_bytes(), value, prev: None, response: 0 }
    }

    fn truth() -> History {
        let base = [(b"k0".to_vec(), b"1".to_vec())].into_iter().collect();
        let delete = Event { value: None, ..put(7, 0, 0) };
        History { compacted: 5, base, events: vec![put(5, 0, 1), put(6, 1, 2), delete] }
    }

    #[test]
    fn an_acknowledged_change_missing_from_the_history_is_lost() {
        let acked = |rev, key, value| Acked { rev, key, value };
        let good = [acked(5, 0, Some(1)), acked(6, 1, Some(2)), acked(7, 0, None), acked(3, 2, Some(9))];
        assert!(durable(&good, &truth()).is_empty());
        assert_eq!(durable(&[acked(6, 1, Some(3))], &truth()).len(), 1, "another value");
        assert_eq!(durable(&[acked(6, 0, None)], &truth()).len(), 1, "no such change");
    }

    #[test]
    fn a_read_must_be_the_state_at_its_revision() {
        let read = |rev, key, kvs: &[(&str, &str)]| Observed {
            rev,
            key,
            kvs: kvs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect(),
            client: 0,
            member: 0,
            serializable: key.is_none(),
        };
        let good = [
            read(5, None, &[("k0", "1")]),
            read(6, None, &[("k0", "1"), ("k1", "2")]),
            read(7, Some(0), &[]),
            read(7, Some(1), &[("k1", "2")]),
            read(2, None, &[("k9", "9")]),
        ];
        assert!(reads_at_revision(&good, &truth()).is_empty());
        assert_eq!(reads_at_revision(&[read(6, None, &[("k0", "1")])], &truth()).len(), 1, "a missing key");
        assert_eq!(reads_at_revision(&[read(7, Some(0), &[("k0", "1")])], &truth()).len(), 1, "a stale value");
        assert_eq!(reads_at_revision(&[read(8, None, &[("k1", "2")])], &truth()).len(), 1, "a future revision");
    }
}
