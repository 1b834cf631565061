//! keel-auth: etcd 3.4's authentication and authorization, as pure deterministic logic.
//!
//! The crate owns the auth model and nothing around it: no storage, no Raft, no gRPC, no clock.
//! keel's state machine holds an [`AuthState`] next to the keyspace and applies auth entries to
//! it; the gRPC Auth service and the KV appliers call the checks here. What it owns:
//!
//! - [`AuthState`]: the replicated part — the enabled flag, the auth revision, users (bcrypt hash
//!   or `no_password`, sorted roles) and roles (permissions sorted by key). Serde-serializable
//!   with ordered maps, so it goes into snapshots as is and two members that applied the same
//!   entries serialize to the same bytes.
//! - The management operations (`auth_enable` … `role_revoke_permission`) with etcd's checks,
//!   in etcd's order, and etcd's revision bumps. Each either applies whole or fails changing
//!   nothing.
//! - The permission checks the KV path needs (`is_put_permitted`, `is_range_permitted`,
//!   `is_delete_range_permitted`) and the admin check for management requests, with etcd's key
//!   range semantics ([`perm`] explains them: single keys, `[key, range_end)`, `"\0"` open ends,
//!   coverage by the merged intervals of all the user's roles).
//! - [`SimpleTokens`]: etcd's `simple` token provider, member-local and not replicated.
//! - Password hashing and checking ([`hash_password`], [`check_password`]).
//! - [`AuthError`]: every error, its `Display` etcd's exact message, with etcd's gRPC code.
//!
//! Determinism. Applying an entry must give the same state and answer on every member, so
//! nothing here reads a clock or a random source during apply. The two random things etcd makes
//! come from the proposer, inside the entry:
//!
//! ```text
//!   receiving member (propose side)            every member (apply side)
//!   ------------------------------            -------------------------
//!   UserAdd/ChangePassword:
//!     hash_password(pw, cost) ───── hash ───▶  user_add(name, Hashed(hash))
//!   Authenticate:
//!     check_password(state, name, pw)
//!     gen_token_prefix(rng) ─── prefix ─────▶  authenticate(tokens, name, prefix, log_index, now)
//!                                              → token "<prefix>.<log_index>"
//! ```
//!
//! Time enters only the token table, as an argument (`now`): token expiry is local to each member
//! in etcd too, and tokens are not part of the replicated state.
//!
//! etcd semantics followed (3.4.23, `auth/store.go`, `auth/range_perm_cache.go`,
//! `auth/simple_token.go`, `etcdserver/apply_auth.go`):
//! - Auth off: every check passes. Auth can be enabled only with a `root` user holding the `root`
//!   role. The root role is implicit: it can be granted without being created, and grants all.
//! - While auth is on, `root` can be neither deleted (user or role) nor stripped of `root`.
//! - Deleting a role revokes it from every user. Deleting a user or changing its password
//!   forgets its tokens; disabling auth forgets all tokens.
//! - The auth revision starts at 1 and grows by one with every change except AuthEnable. A KV
//!   request carries the revision at which its member admitted it; if the state has moved on by
//!   the time the request is applied, the check answers AuthOldRevision and the client retries.
//!   Management requests check the caller's root role but not the revision.
//! - An unknown user and a wrong password are both AuthFailed; a `no_password` user cannot
//!   authenticate with a password.

pub mod error;
pub mod password;
pub mod perm;
pub mod state;
pub mod token;

pub use error::{AuthError, GrpcCode, Result};
pub use password::{
    check_password, hash_password, hash_password_with_salt, DEFAULT_BCRYPT_COST, MAX_BCRYPT_COST, MIN_BCRYPT_COST,
};
pub use perm::{PermType, Permission};
pub use state::{AuthInfo, AuthState, Role, User, UserPassword, ROOT_ROLE, ROOT_USER};
pub use token::{gen_token_prefix, token_index, SimpleTokens, DEFAULT_TOKEN_TTL, SIMPLE_TOKEN_PREFIX_LEN};
