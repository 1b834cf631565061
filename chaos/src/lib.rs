//! keel-chaos: whole keel clusters in one process under turmoil, driven by one seed, with
//! history checkers that can fail.
//!
//! - [`net`]: the network seam's simulated side — turmoil listeners for keel's servers and a
//!   turmoil connector for its peer and client channels.
//! - [`sim`]: one history: a cluster of real keel members (the store code, on the in-memory
//!   engine whose unsynced writes a crash loses), clients running a register workload through the
//!   etcd API, and faults chosen from the seed (partitions, crashes and restarts).
//! - [`check`]: the linearizability checker the histories go through.
//! - [`watch`]: watchers that resume across faults, and the check of what they got against the
//!   members' converged history.
//! - [`lease`]: leasers that keep leases alive and let them go, and the checks that no lease ends
//!   before its time and every lease whose time is up ends.
//!
//! Everything random comes from the seed, and time is turmoil's, so a seed replays its history.

pub mod check;
pub mod lease;
pub mod net;
pub mod sim;
pub mod watch;
