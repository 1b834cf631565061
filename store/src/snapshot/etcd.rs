//! etcd's snapshot file is its bbolt database ([`crate::bbolt`]) with a SHA-256 of it appended.
//! This module maps etcd's buckets to keel's state-machine pairs (`mvcc::keys`) and back:
//!
//! ```text
//! etcd bucket  etcd key -> value                         keel pair
//! key          <main:8 BE> '_' <sub:8 BE> ['t']          r <main:8 BE> <sub:8 BE> ['t']
//!                -> mvccpb.KeyValue                        -> the same bytes
//! lease        <id:8 BE> -> leasepb.Lease                e <id:8 BE> -> LeaseRecord
//!                (ID 1, TTL 2, RemainingTTL 3)             (TTL, remaining)
//! meta         finishedCompactRev -> <main>'_'<sub>      m compact (8 bytes BE)
//!              scheduledCompactRev -> <main>'_'<sub>     (finished by the restore: see below)
//!              consistent_index -> 8 bytes BE            m applied (written; a restore starts a
//!                                                          new cluster, so it is not read)
//! auth         authEnabled -> [0|1], authRevision -> BE  m auth (AuthState)
//! authUsers    name -> authpb.User                         with its users
//! authRoles    name -> authpb.Role                         and roles
//! ```
//! Both stores write a tombstone as a KeyValue holding only the key, so history carries over
//! byte for byte: every revision, create and mod revision, version and lease. etcd's current
//! revision is not stored; as etcd does, it is the larger of the last history key's and the
//! compacted revision. A compaction etcd had scheduled but not finished (`scheduledCompactRev`
//! above `finishedCompactRev`) is finished at start-up by etcd; a restore into keel finishes it
//! before the member starts. Not carried: `members`, `members_removed`, `cluster` (a restored
//! member starts a new cluster, as etcd's restore does) and `alarm`.

use std::io::{Seek, Write};

use keel_auth::{AuthState, PermType, Permission, Role, User};
use keel_proto::authpb;
use keel_proto::mvccpb::KeyValue;
use prost::Message;

use crate::bbolt;
use crate::engine::{Pair, Reads};
use crate::mvcc::keys::{self, meta, Rev};
use crate::mvcc::lease::LeaseRecord;

/// etcd's `leasepb.Lease`, as its lease bucket stores it.
#[derive(Clone, PartialEq, Message)]
struct LeasePb {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
    #[prost(int64, tag = "3")]
    remaining_ttl: i64,
}

const KEY: &[u8] = b"key";
const LEASE: &[u8] = b"lease";
const META: &[u8] = b"meta";
const AUTH: &[u8] = b"auth";
const AUTH_USERS: &[u8] = b"authUsers";
const AUTH_ROLES: &[u8] = b"authRoles";
const FINISHED_COMPACT: &[u8] = b"finishedCompactRev";
const SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
const CONSISTENT_INDEX: &[u8] = b"consistent_index";
const AUTH_ENABLED: &[u8] = b"authEnabled";
const AUTH_REVISION: &[u8] = b"authRevision";
/// The buckets etcd 3.4 creates, in name order (the writer needs them so); the ones keel has
/// nothing for are written empty, as a fresh etcd has them.
const BUCKETS: [&[u8]; 10] =
    [b"alarm", AUTH, AUTH_ROLES, AUTH_USERS, b"cluster", KEY, LEASE, b"members", b"members_removed", META];

/// What an etcd file held, beyond its pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// The store's revision (the larger of the last history key's and the compacted one).
    pub rev: i64,
    /// The finished compaction (-1: never compacted).
    pub compacted: i64,
    /// A compaction etcd had scheduled beyond the finished one, for the restore to finish.
    pub scheduled: Option<i64>,
    /// History entries (every key revision and tombstone).
    pub revisions: u64,
}

/// etcd's revision key: `<main:8 BE> '_' <sub:8 BE>`, then `t` for a tombstone.
fn parse_rev(k: &[u8]) -> Result<(Rev, bool), String> {
    let bad = || format!("bad revision key {k:x?} in etcd's key bucket");
    if !(k.len() == 17 || k.len() == 18) || k[8] != b'_' {
        return Err(bad());
    }
    let main = i64::from_be_bytes(k[..8].try_into().map_err(|_| bad())?);
    let sub = i64::from_be_bytes(k[9..17].try_into().map_err(|_| bad())?);
    let tomb = match k.get(17) {
        None => false,
        Some(b't') => true,
        Some(_) => return Err(bad()),
    };
    if main <= 0 || sub < 0 {
        return Err(bad());
    }
    Ok((Rev::new(main, sub), tomb))
}

fn rev_bytes(rev: Rev, tomb: bool) -> Vec<u8> {
    let mut k = Vec::with_capacity(18);
    k.extend_from_slice(&rev.main.to_be_bytes());
    k.push(b'_');
    k.extend_from_slice(&rev.sub.to_be_bytes());
    if tomb {
        k.push(b't');
    }
    k
}

/// Reads an etcd bbolt file as keel's state-machine pairs, calling `emit` on each (history in
/// revision order, then leases, then metadata and auth). Anything that is not what etcd writes
/// is refused with what was wrong.
pub fn import(
    file: &bbolt::File<'_>,
    emit: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> anyhow::Result<()>,
) -> anyhow::Result<Imported> {
    let buckets = file.buckets()?;
    let find = |name: &[u8]| buckets.iter().find(|(n, _)| *n == name).map(|(_, b)| *b);
    let walk = |name: &[u8], f: &mut Visit<'_>| walk(file, find(name), f);
    if find(KEY).is_none() || find(META).is_none() {
        anyhow::bail!("not an etcd snapshot: it has no key or meta bucket");
    }
    let (mut last, mut revisions) = (0i64, 0u64);
    walk(KEY, &mut |k, v| {
        let (rev, tomb) = parse_rev(k).map_err(anyhow::Error::msg)?;
        let kv = KeyValue::decode(v).map_err(|e| anyhow::anyhow!("revision {}.{}: {e}", rev.main, rev.sub))?;
        if kv.key.is_empty() || (!tomb && kv.mod_revision != rev.main) {
            anyhow::bail!("revision {}.{} does not hold a key stored at that revision", rev.main, rev.sub);
        }
        last = rev.main;
        revisions += 1;
        emit(keys::rev_key(rev, tomb), v.to_vec())
    })?;
    walk(LEASE, &mut |k, v| {
        let lease = LeasePb::decode(v)?;
        if k != lease.id.to_be_bytes() {
            anyhow::bail!("lease {:x} is stored under key {k:x?}", lease.id);
        }
        let record = LeaseRecord { ttl: lease.ttl, remaining: lease.remaining_ttl };
        emit(keys::lease_key(lease.id), bincode::serialize(&record)?)
    })?;
    let (mut compacted, mut scheduled) = (-1, -1);
    walk(META, &mut |k, v| {
        match k {
            FINISHED_COMPACT => compacted = parse_rev(v).map_err(anyhow::Error::msg)?.0.main,
            SCHEDULED_COMPACT => scheduled = parse_rev(v).map_err(anyhow::Error::msg)?.0.main,
            _ => {}
        }
        Ok(())
    })?;
    let rev = last.max(compacted).max(1);
    emit(keys::sm_meta(meta::REV), rev.to_be_bytes().to_vec())?;
    if compacted >= 0 {
        emit(keys::sm_meta(meta::COMPACT), compacted.to_be_bytes().to_vec())?;
    }
    let auth = import_auth(&walk)?;
    emit(keys::sm_meta(meta::AUTH), bincode::serialize(&auth)?)?;
    Ok(Imported { rev, compacted, scheduled: (scheduled > compacted).then_some(scheduled), revisions })
}

/// What a walk over a bucket calls on each pair.
type Visit<'v> = dyn FnMut(&[u8], &[u8]) -> anyhow::Result<()> + 'v;
/// A walk over the named bucket.
type Walk<'w> = dyn Fn(&[u8], &mut Visit<'_>) -> anyhow::Result<()> + 'w;

/// Calls `f` on every pair of `bucket` (none when absent), stopping at the first error, which it
/// returns.
fn walk(file: &bbolt::File<'_>, bucket: Option<bbolt::Bucket<'_>>, f: &mut Visit<'_>) -> anyhow::Result<()> {
    let Some(bucket) = bucket else { return Ok(()) };
    let mut failed = None;
    file.for_each(bucket, &mut |k, v| going(&mut failed, f(k, v)))?;
    failed.map_or(Ok(()), Err)
}

/// Whether a walk goes on after a step's result; keeps the error that stops it.
fn going<E>(failed: &mut Option<E>, step: Result<(), E>) -> bool {
    step.map_err(|e| *failed = Some(e)).is_ok()
}

/// The auth state of etcd's auth buckets (a fresh store's without them).
fn import_auth(walk: &Walk<'_>) -> anyhow::Result<AuthState> {
    let (mut enabled, mut revision) = (false, 1u64);
    walk(AUTH, &mut |k, v| {
        match k {
            AUTH_ENABLED => enabled = v == [1],
            AUTH_REVISION => {
                revision = u64::from_be_bytes(v.try_into().map_err(|_| anyhow::anyhow!("bad authRevision {v:x?}"))?)
            }
            _ => {}
        }
        Ok(())
    })?;
    let text =
        |b: &[u8], what: &str| String::from_utf8(b.to_vec()).map_err(|_| anyhow::anyhow!("{what} {b:x?} is not UTF-8"));
    let mut users = Vec::new();
    walk(AUTH_USERS, &mut |_, v| {
        let u = authpb::User::decode(v)?;
        let hash = (!u.password.is_empty()).then(|| text(&u.password, "a password hash")).transpose()?;
        let no_password = u.options.is_some_and(|o| o.no_password);
        users.push(User::from_parts(text(&u.name, "user name")?, hash, no_password, u.roles));
        Ok(())
    })?;
    let mut roles = Vec::new();
    walk(AUTH_ROLES, &mut |_, v| {
        let r = authpb::Role::decode(v)?;
        let perms = r.key_permission.into_iter().map(|p| {
            let kind = PermType::from_i32(p.perm_type)
                .ok_or_else(|| anyhow::anyhow!("role {:?}: permission type {}", r.name, p.perm_type))?;
            Ok(Permission::new(kind, p.key.to_vec(), p.range_end.to_vec()))
        });
        roles.push(Role::from_parts(text(&r.name, "role name")?, perms.collect::<anyhow::Result<_>>()?));
        Ok(())
    })?;
    Ok(AuthState::from_parts(enabled, revision, users, roles))
}

/// Writes the state-machine pairs of `r` (one applied state: an engine snapshot) as etcd's
/// bbolt file into `out`, which must be empty. The SHA-256 etcd appends is the caller's.
pub fn export<W: Write + Seek>(r: &dyn Reads, out: W) -> crate::Result<W> {
    let mut w = bbolt::Writer::new(out, 4096)?;
    let auth: AuthState = match r.get(&keys::sm_meta(meta::AUTH))? {
        Some(b) => bincode::deserialize(&b)?,
        None => AuthState::new(),
    };
    let compacted = match r.get(&keys::sm_meta(meta::COMPACT))? {
        Some(b) => {
            i64::from_be_bytes(b.as_slice().try_into().map_err(|_| crate::Error::Corrupt("bad meta compact".into()))?)
        }
        None => -1,
    };
    let applied: Option<crate::raft::LogId> =
        r.get(&keys::sm_meta(meta::APPLIED))?.map(|b| bincode::deserialize(&b)).transpose()?;
    for name in BUCKETS {
        w.bucket(name)?;
        match name {
            AUTH => {
                w.put(AUTH_ENABLED, &[u8::from(auth.is_enabled())])?;
                w.put(AUTH_REVISION, &auth.revision().to_be_bytes())?;
            }
            AUTH_ROLES => {
                for role in auth.roles() {
                    let perms = role.permissions().iter().map(|p| authpb::Permission {
                        perm_type: p.perm_type as i32,
                        key: p.key.clone().into(),
                        range_end: p.range_end.clone().into(),
                    });
                    let pb = authpb::Role { name: role.name().to_owned().into(), key_permission: perms.collect() };
                    w.put(role.name().as_bytes(), &pb.encode_to_vec())?;
                }
            }
            AUTH_USERS => {
                for user in auth.users() {
                    let pb = authpb::User {
                        name: user.name().to_owned().into(),
                        password: user.password_hash().unwrap_or_default().to_owned().into(),
                        roles: user.roles().to_vec(),
                        options: Some(authpb::UserAddOptions { no_password: user.no_password() }),
                    };
                    w.put(user.name().as_bytes(), &pb.encode_to_vec())?;
                }
            }
            KEY => copy(r, keys::HISTORY, &mut w, |k, v| {
                let (rev, tomb) = keys::decode_rev_key(k)?;
                Ok((rev_bytes(rev, tomb), v.to_vec()))
            })?,
            LEASE => copy(r, keys::LEASE, &mut w, |k, v| {
                let record: LeaseRecord = bincode::deserialize(v)?;
                let id = k.get(1..9).and_then(|b| b.try_into().ok()).map(i64::from_be_bytes);
                let id = id.ok_or_else(|| crate::Error::Corrupt(format!("bad lease key {k:?}")))?;
                let pb = LeasePb { id, ttl: record.ttl, remaining_ttl: record.remaining };
                Ok((id.to_be_bytes().to_vec(), pb.encode_to_vec()))
            })?,
            META => {
                if let Some(applied) = applied {
                    w.put(CONSISTENT_INDEX, &applied.index.to_be_bytes())?;
                }
                if compacted >= 0 {
                    let rev = rev_bytes(Rev::new(compacted, 0), false);
                    w.put(FINISHED_COMPACT, &rev)?;
                    w.put(SCHEDULED_COMPACT, &rev)?;
                }
            }
            _ => {}
        }
    }
    Ok(w.finish()?)
}

/// Writes every pair under the one-byte `prefix` of `r`, converted by `f`, into the current
/// bucket (the conversions keep key order).
fn copy<W: Write + Seek>(
    r: &dyn Reads,
    prefix: u8,
    w: &mut bbolt::Writer<W>,
    mut f: impl FnMut(&[u8], &[u8]) -> crate::Result<Pair>,
) -> crate::Result<()> {
    let mut failed = None;
    r.for_each(&[prefix], &keys::prefix_end(prefix), &mut |k, v| {
        going(&mut failed, f(k, v).and_then(|(k, v)| Ok(w.put(&k, &v)?)))
    })?;
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Batch, Engine, MemEngine};
    use keel_auth::UserPassword;

    /// A store's pairs, written as etcd's file and read back, are the same pairs.
    #[test]
    fn export_then_import_gives_the_same_pairs() {
        let engine = MemEngine::new();
        let mut batch = Batch::default();
        for i in 1..=3000i64 {
            let kv = KeyValue {
                key: format!("k{}", i % 70).into_bytes().into(),
                create_revision: 1,
                mod_revision: i,
                version: i,
                value: vec![b'v'; (i % 200) as usize].into(),
                lease: if i % 3 == 0 { 7 } else { 0 },
            };
            batch.put(keys::rev_key(Rev::new(i, 0), false), kv.encode_to_vec());
        }
        let tomb = KeyValue { key: b"k1".to_vec().into(), ..Default::default() };
        batch.put(keys::rev_key(Rev::new(3001, 0), true), tomb.encode_to_vec());
        batch.put(keys::lease_key(7), bincode::serialize(&LeaseRecord { ttl: 60, remaining: 12 }).unwrap());
        batch.put(keys::sm_meta(meta::REV), 3001i64.to_be_bytes().to_vec());
        batch.put(keys::sm_meta(meta::COMPACT), 5i64.to_be_bytes().to_vec());
        let mut auth = AuthState::new();
        auth.user_add("root", UserPassword::Hashed("$2a$10$abc".into())).unwrap();
        auth.user_add("cert", UserPassword::NoPassword).unwrap();
        auth.role_add("reader").unwrap();
        auth.role_grant_permission("reader", Permission::new(PermType::Read, b"a".to_vec(), b"b".to_vec())).unwrap();
        auth.user_grant_role("root", "root").unwrap();
        auth.user_grant_role("cert", "reader").unwrap();
        auth.auth_enable().unwrap();
        batch.put(keys::sm_meta(meta::AUTH), bincode::serialize(&auth).unwrap());
        engine.write(batch, false).unwrap();

        let file = export(&engine, std::io::Cursor::new(Vec::new())).unwrap().into_inner();
        let bolt = bbolt::File::open(&file).unwrap();
        let names: Vec<_> = bolt.buckets().unwrap().into_iter().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, BUCKETS.map(<[u8]>::to_vec).to_vec());
        let mut pairs = Vec::new();
        let got = import(&bolt, &mut |k, v| {
            pairs.push((k, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, Imported { rev: 3001, compacted: 5, scheduled: None, revisions: 3001 });
        pairs.sort();
        let mut want = crate::raft::state_machine::dump_of(&engine).unwrap();
        want.sort();
        let auth_key = keys::sm_meta(meta::AUTH);
        let decoded = |p: &[(Vec<u8>, Vec<u8>)]| -> AuthState {
            bincode::deserialize(&p.iter().find(|(k, _)| *k == auth_key).unwrap().1).unwrap()
        };
        assert_eq!(decoded(&pairs), auth);
        assert_eq!(pairs, want);
    }

    /// etcd 3.5 adds `term` and `confState` to its meta bucket (and 3.6 `storageVersion`); a
    /// restore reads what it knows and passes over the rest, as etcd's own restore does.
    #[test]
    fn reads_etcd_3_5_files() {
        let mut w = bbolt::Writer::new(std::io::Cursor::new(Vec::new()), 4096).unwrap();
        let kv = KeyValue {
            key: b"a".to_vec().into(),
            create_revision: 2,
            mod_revision: 2,
            version: 1,
            ..Default::default()
        };
        for name in BUCKETS {
            w.bucket(name).unwrap();
            match name {
                KEY => w.put(&rev_bytes(Rev::new(2, 0), false), &kv.encode_to_vec()).unwrap(),
                META => {
                    w.put(b"confState", br#"{"voters":[1]}"#).unwrap();
                    w.put(CONSISTENT_INDEX, &9u64.to_be_bytes()).unwrap();
                    w.put(b"storageVersion", b"3.6.0").unwrap();
                    w.put(b"term", &2u64.to_be_bytes()).unwrap();
                }
                _ => {}
            }
        }
        let file = w.finish().unwrap().into_inner();
        let mut pairs = Vec::new();
        let got = import(&bbolt::File::open(&file).unwrap(), &mut |k, v| {
            pairs.push((k, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, Imported { rev: 2, compacted: -1, scheduled: None, revisions: 1 });
        assert_eq!(pairs[0], (keys::rev_key(Rev::new(2, 0), false), kv.encode_to_vec()));
    }

    #[test]
    fn refuses_what_etcd_does_not_write() {
        assert!(parse_rev(b"12345678_12345678").is_ok());
        assert!(parse_rev(b"12345678-12345678").is_err());
        assert!(parse_rev(b"12345678_12345678x").is_err());
        assert!(parse_rev(&rev_bytes(Rev::new(0, 0), false)).is_err());
        // A file without etcd's buckets.
        let mut w = bbolt::Writer::new(std::io::Cursor::new(Vec::new()), 4096).unwrap();
        w.bucket(b"other").unwrap();
        w.put(b"a", b"b").unwrap();
        let file = w.finish().unwrap().into_inner();
        let err = import(&bbolt::File::open(&file).unwrap(), &mut |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("not an etcd snapshot"), "{err}");
    }
}
