//! etcd's auth in a member: keel-auth's model wired into the write path, the read path and the
//! token table.
//!
//! ```text
//!   client ──token──▶ receiving member: Member::auth_info ──▶ AuthInfo { user, auth revision }
//!      writes:  Command::Authed { user, revision, cmd } ──Raft──▶ check_write at apply
//!      reads, watches, admin RPCs: checked here, against this member's applied state
//!      management: Command::Auth(AuthCommand) ──Raft──▶ apply (admin check at apply)
//! ```
//!
//! - The replicated [`AuthState`] sits in the MVCC state beside the registry and is written in the
//!   batch of the entry that changed it, so it travels in snapshots and survives restarts.
//! - Writes are checked when they are applied, as etcd's auth applier does: a permission change
//!   ordered before a write in the log always governs it, on every member alike. A write carries
//!   the auth revision its member saw when it was admitted; if the state moved on since, it is
//!   refused with `revision of auth store is old` and the client retries. A write without a
//!   token is applied as from no user, so while auth is on it is refused `user name is empty`.
//! - Reads and watches are checked on the member that serves them, in the same read view.
//! - Tokens ([`Tokens`]) are member-local, as etcd's simple tokens: each member registers a token
//!   when it applies the Authenticate entry, under the same name (`<prefix>.<index>`), so a token
//!   works on every member that has applied that entry. A restarted member has forgotten them.
//! - The lessor's own revokes (`Command::LeaseExpire`) are not checked: etcd revokes expired
//!   leases as root.

use std::time::Duration;

use keel_auth::{AuthError, AuthInfo, AuthState, Permission, SimpleTokens, UserPassword};
use keel_proto::etcdserverpb::{request_op, TxnRequest};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::mvcc::lease::LeaseTable;
use crate::mvcc::ApplyBatch;
use crate::raft::{Command, Proto};

/// An auth management request as proposed to Raft: passwords arrive hashed and token prefixes
/// chosen, so applying it is deterministic.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AuthCommand {
    Enable,
    Disable,
    Authenticate { name: String, prefix: String },
    UserAdd { name: String, password: UserPassword },
    UserGet { name: String },
    UserList,
    UserDelete { name: String },
    UserChangePassword { name: String, hash: String },
    UserGrantRole { user: String, role: String },
    UserRevokeRole { name: String, role: String },
    RoleAdd { name: String },
    RoleGet { role: String },
    RoleList,
    RoleDelete { role: String },
    RoleGrantPermission { name: String, perm: Permission },
    RoleRevokePermission { role: String, key: Vec<u8>, range_end: Vec<u8> },
}

/// What applying an [`AuthCommand`] answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AuthReply {
    Done,
    /// Authenticate's token.
    Token(String),
    /// UserGet's roles, UserList's users, RoleList's roles.
    Names(Vec<String>),
    /// RoleGet's permissions.
    Permissions(Vec<Permission>),
}

/// The member-local simple tokens and the clock their TTLs run on (the runtime's, so the
/// simulation's time drives them too).
pub struct Tokens {
    table: Mutex<SimpleTokens>,
    epoch: tokio::time::Instant,
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens::new(Duration::ZERO)
    }
}

impl Tokens {
    /// An empty table whose tokens live `ttl` after issue or last use (zero: etcd's 300 s).
    pub fn new(ttl: Duration) -> Tokens {
        Tokens { table: Mutex::new(SimpleTokens::new(ttl)), epoch: tokio::time::Instant::now() }
    }

    /// Forgets every token and gives later ones `ttl` (set once, at start).
    pub fn set_ttl(&self, ttl: Duration) {
        *self.table.lock() = SimpleTokens::new(ttl);
    }

    /// Runs `f` on the table with the current time.
    pub fn with<R>(&self, f: impl FnOnce(&mut SimpleTokens, Duration) -> R) -> R {
        let now = self.epoch.elapsed();
        f(&mut self.table.lock(), now)
    }
}

/// Applies a management request from `who` in the batch, with etcd's checks in etcd's order:
/// the admin check first (UserGet of oneself and RoleGet of one's own role excepted;
/// Authenticate needs none), then the operation's own. Reads and Authenticate leave the state as
/// it is (no record written); a change answers `Done`. `index` is the entry's log index (part of
/// Authenticate's token).
pub fn apply(
    batch: &mut ApplyBatch,
    tokens: &Tokens,
    index: u64,
    who: &AuthInfo,
    cmd: &AuthCommand,
) -> Result<AuthReply, AuthError> {
    use AuthCommand as C;
    let state = batch.auth();
    match cmd {
        C::Authenticate { .. } => {}
        C::UserGet { name } => state.is_user_get_permitted(who, name)?,
        C::RoleGet { role } => state.is_role_get_permitted(who, role)?,
        _ => state.is_admin_permitted(who)?,
    }
    match cmd {
        C::Authenticate { name, prefix } => {
            return Ok(AuthReply::Token(tokens.with(|t, now| {
                t.expire(now);
                state.authenticate(t, name, prefix, index, now)
            })?))
        }
        C::UserGet { name } => return Ok(AuthReply::Names(state.user_get(name)?.to_vec())),
        C::UserList => return Ok(AuthReply::Names(state.user_list())),
        C::RoleGet { role } => return Ok(AuthReply::Permissions(state.role_get(role)?.to_vec())),
        C::RoleList => return Ok(AuthReply::Names(state.role_list())),
        _ => {}
    }
    batch.change_auth(|state| -> Result<(), AuthError> {
        match cmd {
            C::Enable => state.auth_enable()?,
            C::Disable => tokens.with(|t, _| state.auth_disable(t)),
            C::UserAdd { name, password } => state.user_add(name, password.clone())?,
            C::UserDelete { name } => tokens.with(|t, _| state.user_delete(name, t))?,
            C::UserChangePassword { name, hash } => {
                tokens.with(|t, _| state.user_change_password(name, hash.clone(), t))?
            }
            C::UserGrantRole { user, role } => state.user_grant_role(user, role)?,
            C::UserRevokeRole { name, role } => state.user_revoke_role(name, role)?,
            C::RoleAdd { name } => state.role_add(name)?,
            C::RoleDelete { role } => state.role_delete(role)?,
            C::RoleGrantPermission { name, perm } => state.role_grant_permission(name, perm.clone())?,
            C::RoleRevokePermission { role, key, range_end } => state.role_revoke_permission(role, key, range_end)?,
            // Answered above.
            C::Authenticate { .. } | C::UserGet { .. } | C::UserList | C::RoleGet { .. } | C::RoleList => {}
        }
        Ok(())
    })?;
    Ok(AuthReply::Done)
}

/// The check etcd's auth applier makes on a client write before applying it (commands that
/// are not client writes pass). Put needs write on its key, read too with `prev_kv`, and, with a
/// lease, write on every key already attached to the lease (or the user could not revoke it);
/// DeleteRange needs write on its range, read too with `prev_kv`; a txn, see [`check_txn`]; a
/// client's LeaseRevoke needs write on every attached key.
pub fn check_write(state: &AuthState, leases: &LeaseTable, who: &AuthInfo, cmd: &Command) -> Result<(), AuthError> {
    if !state.is_enabled() {
        return Ok(());
    }
    match cmd {
        Command::Put(Proto(p)) => {
            state.is_put_permitted(who, &p.key)?;
            check_lease_keys(state, leases, who, p.lease)?;
            if p.prev_kv {
                state.is_range_permitted(who, &p.key, &[])?;
            }
            Ok(())
        }
        Command::DeleteRange(Proto(d)) => {
            state.is_delete_range_permitted(who, &d.key, &d.range_end)?;
            if d.prev_kv {
                state.is_range_permitted(who, &d.key, &d.range_end)?;
            }
            Ok(())
        }
        Command::Txn(Proto(t)) => check_txn(state, who, t),
        Command::LeaseRevoke(Proto(r)) => check_lease_keys(state, leases, who, r.id),
        _ => Ok(()),
    }
}

/// Write permission on every key attached to lease `id` (none to check if it has no keys or
/// does not exist).
fn check_lease_keys(state: &AuthState, leases: &LeaseTable, who: &AuthInfo, id: i64) -> Result<(), AuthError> {
    if id == 0 {
        return Ok(());
    }
    match leases.get(id) {
        Some(lease) => lease.keys.iter().try_for_each(|k| state.is_put_permitted(who, k)),
        None => Ok(()),
    }
}

/// A txn's check, read-only or not: read on every compare's range, then each op of both
/// branches as etcd checks txn ops (a range needs read, a put write on its key, a delete write
/// on its range and read too with `prev_kv`); nested txns are checked the same way.
pub fn check_txn(state: &AuthState, who: &AuthInfo, t: &TxnRequest) -> Result<(), AuthError> {
    if !state.is_enabled() {
        return Ok(());
    }
    for c in &t.compare {
        state.is_range_permitted(who, &c.key, &c.range_end)?;
    }
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(request_op::Request::RequestRange(r)) => state.is_range_permitted(who, &r.key, &r.range_end)?,
            Some(request_op::Request::RequestPut(p)) => state.is_put_permitted(who, &p.key)?,
            Some(request_op::Request::RequestDeleteRange(d)) => {
                if d.prev_kv {
                    state.is_range_permitted(who, &d.key, &d.range_end)?;
                }
                state.is_delete_range_permitted(who, &d.key, &d.range_end)?;
            }
            Some(request_op::Request::RequestTxn(inner)) => check_txn(state, who, inner)?,
            None => {}
        }
    }
    Ok(())
}

/// A watch's check, on the range as etcd's watch server normalizes it before checking: an empty
/// key is `"\0"`, and a `"\0"` range end (every key from `key` on) is checked as the key alone.
pub fn check_watch(state: &AuthState, who: &AuthInfo, key: &[u8], range_end: &[u8]) -> Result<(), AuthError> {
    let key: &[u8] = if key.is_empty() { &[0] } else { key };
    let range_end: &[u8] = if range_end == [0] { &[] } else { range_end };
    state.is_range_permitted(who, key, range_end)
}

/// `cmd` as proposed for a client known as `who`: wrapped with the user and auth revision when
/// the client presented a token, as is otherwise (applied as from no user).
pub fn as_client(who: AuthInfo, cmd: Command) -> Command {
    if who.username.is_empty() && who.revision == 0 {
        return cmd;
    }
    Command::Authed { user: who.username, revision: who.revision, cmd: Box::new(cmd) }
}
