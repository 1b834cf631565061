//! The replicated auth state and every operation on it, with etcd 3.4's checks in etcd's order.
//!
//! Each mutating method either changes the state and answers, or returns an error and leaves
//! the state exactly as it was (every check runs before the first write). A method that changes
//! anything adds one to the auth revision, once per call, as etcd's `commitRevision` does;
//! answers that change nothing (granting a role the user already has, enabling auth twice)
//! leave the revision alone, and so does a successful AuthEnable, which in etcd only reloads it.
//!
//! The admin gate etcd puts in front of management requests (`needAdminPermission` in
//! `apply_auth.go`) is not inside these methods: the applier calls [`AuthState::is_admin_permitted`]
//! first, so that a rejected caller is answered before the operation's own checks, as in etcd.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{AuthError, Result};
use crate::perm::{self, PermType, Permission};
use crate::token::{self, SimpleTokens};

/// The user that must exist, holding the root role, before auth can be enabled.
pub const ROOT_USER: &str = "root";
/// The role that grants everything. It is implicit: it may be granted without being created.
pub const ROOT_ROLE: &str = "root";

/// The credential UserAdd stores: a hash made by the proposer, or none at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserPassword {
    /// A bcrypt hash ([`crate::hash_password`]); never a plain password.
    Hashed(String),
    /// etcd's `UserAddOptions.no_password`: the user cannot authenticate with a password (only
    /// by a TLS client certificate whose common name is the user's name).
    NoPassword,
}

/// A user: sorted, duplicate-free role names and a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    name: String,
    password_hash: Option<String>,
    no_password: bool,
    roles: Vec<String>,
}

impl User {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bcrypt hash; `None` for a user added with `no_password` and never given a password.
    pub fn password_hash(&self) -> Option<&str> {
        self.password_hash.as_deref()
    }

    /// Added with `no_password`; stays so even after a password change, as in etcd.
    pub fn no_password(&self) -> bool {
        self.no_password
    }

    /// Role names in byte order, each once.
    pub fn roles(&self) -> &[String] {
        &self.roles
    }

    fn has_role(&self, role: &str) -> bool {
        self.roles.binary_search_by(|r| r.as_str().cmp(role)).is_ok()
    }

    /// A user as another copy of the store kept it (an etcd snapshot's `authUsers`); the roles
    /// are put in this store's order, each once.
    pub fn from_parts(name: String, password_hash: Option<String>, no_password: bool, mut roles: Vec<String>) -> User {
        roles.sort();
        roles.dedup();
        User { name, password_hash, no_password, roles }
    }
}

/// A role: its permissions, ordered by key as etcd keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    name: String,
    permissions: Vec<Permission>,
}

impl Role {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sorted by `key` (byte order); permissions with equal keys keep the order they were
    /// granted in.
    pub fn permissions(&self) -> &[Permission] {
        &self.permissions
    }

    /// A role as another copy of the store kept it (an etcd snapshot's `authRoles`); the
    /// permissions are put in key order, equal keys keeping their order.
    pub fn from_parts(name: String, mut permissions: Vec<Permission>) -> Role {
        permissions.sort_by(|a, b| a.key.cmp(&b.key));
        Role { name, permissions }
    }
}

/// Who a request runs as: the user its token names and the auth revision at which the
/// receiving member admitted it (etcd's `AuthInfo`, carried in the request header through Raft).
/// The default (no user, revision 0) is a request without credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
}

/// etcd's auth store contents: the enabled flag, the auth revision, users and roles. Ordered maps
/// make iteration, listing and serialization deterministic, so members that apply the same
/// entries hold byte-identical states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    enabled: bool,
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
}

impl Default for AuthState {
    fn default() -> Self {
        AuthState::new()
    }
}

impl AuthState {
    /// A new cluster's state: auth off, no users or roles, revision 1 (etcd commits revision 1
    /// when it creates the store; 0 is reserved for "no credentials").
    pub fn new() -> AuthState {
        AuthState { enabled: false, revision: 1, users: BTreeMap::new(), roles: BTreeMap::new() }
    }

    /// A state as another copy of the store kept it (an etcd snapshot's auth buckets).
    pub fn from_parts(
        enabled: bool,
        revision: u64,
        users: impl IntoIterator<Item = User>,
        roles: impl IntoIterator<Item = Role>,
    ) -> AuthState {
        AuthState {
            enabled,
            revision,
            users: users.into_iter().map(|u| (u.name.clone(), u)).collect(),
            roles: roles.into_iter().map(|r| (r.name.clone(), r)).collect(),
        }
    }

    /// Every user, by name.
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    /// Every role, by name.
    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values()
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// etcd's `authRevision`: grows by one with every change to users, roles or the enabled flag
    /// (except AuthEnable).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Whether `user` exists and holds `role` (etcd's `HasRole`).
    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.users.get(user).is_some_and(|u| u.has_role(role))
    }

    fn commit(&mut self) {
        self.revision += 1;
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User> {
        self.users.get_mut(name).ok_or(AuthError::UserNotFound)
    }

    fn role_mut(&mut self, name: &str) -> Result<&mut Role> {
        self.roles.get_mut(name).ok_or(AuthError::RoleNotFound)
    }

    // ---- enable / disable / authenticate ----

    /// Turns auth on. Already on: nothing happens. Refused without a `root` user
    /// (RootUserNotExist) or when `root` lacks the `root` role (RootRoleNotExist); the role
    /// itself need not exist. Does not move the revision.
    pub fn auth_enable(&mut self) -> Result<()> {
        if self.enabled {
            return Ok(());
        }
        let root = self.users.get(ROOT_USER).ok_or(AuthError::RootUserNotExist)?;
        if !root.has_role(ROOT_ROLE) {
            return Err(AuthError::RootRoleNotExist);
        }
        self.enabled = true;
        Ok(())
    }

    /// Turns auth off and forgets every token. Already off: nothing happens. Never fails.
    pub fn auth_disable(&mut self, tokens: &mut SimpleTokens) {
        if !self.enabled {
            return;
        }
        self.enabled = false;
        self.commit();
        tokens.clear();
    }

    /// Applies an Authenticate entry: registers and returns the token `<token_prefix>.<index>`
    /// for `name`, where `token_prefix` came in the entry ([`crate::gen_token_prefix`], drawn by
    /// the proposer) and `index` is the entry's Raft log index. The password was checked before
    /// proposing ([`crate::check_password`]); here only AuthNotEnabled, and AuthFailed for a user
    /// deleted meanwhile or created with `no_password`. Changes no replicated state.
    pub fn authenticate(
        &self,
        tokens: &mut SimpleTokens,
        name: &str,
        token_prefix: &str,
        index: u64,
        now: Duration,
    ) -> Result<String> {
        if !self.enabled {
            return Err(AuthError::AuthNotEnabled);
        }
        let user = self.users.get(name).ok_or(AuthError::AuthFailed)?;
        if user.no_password {
            return Err(AuthError::AuthFailed);
        }
        Ok(tokens.assign(name, token_prefix, index, now))
    }

    /// Who a request presenting `token` runs as: its user and this state's current revision (a
    /// simple token carries no revision of its own). Restarts the token's TTL. InvalidAuthToken
    /// if the token is malformed, unknown or expired — also while auth is off, since disabling
    /// forgets all tokens. Wait until [`crate::token_index`]`(token)` is applied here before
    /// calling, or a token issued moments ago by another member looks invalid.
    pub fn auth_info(&self, tokens: &mut SimpleTokens, token: &str, now: Duration) -> Result<AuthInfo> {
        token::token_index(token).ok_or(AuthError::InvalidAuthToken)?;
        let username = tokens.lookup(token, now).ok_or(AuthError::InvalidAuthToken)?;
        Ok(AuthInfo { username, revision: self.revision })
    }

    // ---- users ----

    /// Adds a user with no roles. UserEmpty for an empty name, UserAlreadyExist for a taken one.
    pub fn user_add(&mut self, name: &str, password: UserPassword) -> Result<()> {
        if name.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        if self.users.contains_key(name) {
            return Err(AuthError::UserAlreadyExist);
        }
        let (password_hash, no_password) = match password {
            UserPassword::Hashed(hash) => (Some(hash), false),
            UserPassword::NoPassword => (None, true),
        };
        self.users
            .insert(name.to_owned(), User { name: name.to_owned(), password_hash, no_password, roles: Vec::new() });
        self.commit();
        Ok(())
    }

    /// Deletes a user and forgets its tokens. InvalidAuthMgmt for `root` while auth is on
    /// (checked before existence), UserNotFound for an unknown name.
    pub fn user_delete(&mut self, name: &str, tokens: &mut SimpleTokens) -> Result<()> {
        if self.enabled && name == ROOT_USER {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.users.remove(name).ok_or(AuthError::UserNotFound)?;
        self.commit();
        tokens.invalidate_user(name);
        Ok(())
    }

    /// Replaces a user's password hash, keeping its roles and `no_password` flag, and forgets its
    /// tokens. UserNotFound for an unknown name.
    pub fn user_change_password(&mut self, name: &str, password_hash: String, tokens: &mut SimpleTokens) -> Result<()> {
        self.user_mut(name)?.password_hash = Some(password_hash);
        self.commit();
        tokens.invalidate_user(name);
        Ok(())
    }

    /// Grants `role` to `user`, keeping the user's roles sorted. UserNotFound, then RoleNotFound
    /// for a role that does not exist — except `root`, which needs no role record. Granting a
    /// role the user holds already succeeds and changes nothing.
    pub fn user_grant_role(&mut self, user: &str, role: &str) -> Result<()> {
        if !self.users.contains_key(user) {
            return Err(AuthError::UserNotFound);
        }
        if role != ROOT_ROLE && !self.roles.contains_key(role) {
            return Err(AuthError::RoleNotFound);
        }
        let u = self.user_mut(user)?;
        match u.roles.binary_search_by(|r| r.as_str().cmp(role)) {
            Ok(_) => return Ok(()),
            Err(at) => u.roles.insert(at, role.to_owned()),
        }
        self.commit();
        Ok(())
    }

    /// Revokes `role` from `user`. InvalidAuthMgmt for `root` from `root` while auth is on,
    /// then UserNotFound, then RoleNotGranted if the user does not hold it (whether or not the
    /// role exists).
    pub fn user_revoke_role(&mut self, user: &str, role: &str) -> Result<()> {
        if self.enabled && user == ROOT_USER && role == ROOT_ROLE {
            return Err(AuthError::InvalidAuthMgmt);
        }
        let u = self.user_mut(user)?;
        let at = u.roles.binary_search_by(|r| r.as_str().cmp(role)).map_err(|_| AuthError::RoleNotGranted)?;
        u.roles.remove(at);
        self.commit();
        Ok(())
    }

    /// The user's roles, sorted. UserNotFound for an unknown name.
    pub fn user_get(&self, name: &str) -> Result<&[String]> {
        self.users.get(name).map(User::roles).ok_or(AuthError::UserNotFound)
    }

    /// Every user name, in byte order.
    pub fn user_list(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    // ---- roles ----

    /// Adds a role with no permissions. RoleEmpty for an empty name, RoleAlreadyExist for a
    /// taken one (`root` included, once created).
    pub fn role_add(&mut self, name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(AuthError::RoleEmpty);
        }
        if self.roles.contains_key(name) {
            return Err(AuthError::RoleAlreadyExist);
        }
        self.roles.insert(name.to_owned(), Role { name: name.to_owned(), permissions: Vec::new() });
        self.commit();
        Ok(())
    }

    /// The role's permissions, ordered by key. RoleNotFound for an unknown role — also for
    /// `root` unless it was created.
    pub fn role_get(&self, name: &str) -> Result<&[Permission]> {
        self.roles.get(name).map(Role::permissions).ok_or(AuthError::RoleNotFound)
    }

    /// Every role name, in byte order.
    pub fn role_list(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    /// Deletes a role and revokes it from every user that holds it, as one change (one
    /// revision). InvalidAuthMgmt for `root` while auth is on, RoleNotFound for an unknown role.
    pub fn role_delete(&mut self, name: &str) -> Result<()> {
        if self.enabled && name == ROOT_ROLE {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.roles.remove(name).ok_or(AuthError::RoleNotFound)?;
        for user in self.users.values_mut() {
            user.roles.retain(|r| r != name);
        }
        self.commit();
        Ok(())
    }

    /// Grants `perm` to a role. etcd looks up the first permission whose key is not below
    /// `perm.key`; if that one has the same key and range_end, its type is replaced, otherwise
    /// `perm` is added and the list re-sorted by key. (So with two permissions on the same key
    /// but different range_ends, granting the second again adds a duplicate, as in etcd.) Always
    /// a change, even when the type is unchanged. RoleNotFound for an unknown role.
    pub fn role_grant_permission(&mut self, name: &str, perm: Permission) -> Result<()> {
        let role = self.role_mut(name)?;
        let at = role.permissions.partition_point(|p| p.key < perm.key);
        match role.permissions.get_mut(at) {
            Some(p) if p.key == perm.key && p.range_end == perm.range_end => p.perm_type = perm.perm_type,
            _ => {
                role.permissions.push(perm);
                role.permissions.sort_by(|a, b| a.key.cmp(&b.key));
            }
        }
        self.commit();
        Ok(())
    }

    /// Revokes every permission of the role on exactly `key`/`range_end`, whatever its type.
    /// RoleNotFound, then PermissionNotGranted if none matches.
    pub fn role_revoke_permission(&mut self, name: &str, key: &[u8], range_end: &[u8]) -> Result<()> {
        let role = self.role_mut(name)?;
        let before = role.permissions.len();
        role.permissions.retain(|p| p.key != key || p.range_end != range_end);
        if role.permissions.len() == before {
            return Err(AuthError::PermissionNotGranted);
        }
        self.commit();
        Ok(())
    }

    // ---- permission checks (etcd's isOpPermitted and IsAdminPermitted) ----

    /// May `info` write `key`? See [`AuthState::is_range_permitted`] for the rules.
    pub fn is_put_permitted(&self, info: &AuthInfo, key: &[u8]) -> Result<()> {
        self.is_op_permitted(info, key, &[], PermType::Write)
    }

    /// May `info` read `key` (empty `range_end`) or the range `[key, range_end)` (`"\0"`: to the
    /// end of the keyspace)? Auth off: yes. Then, in etcd's order: no credentials (revision 0)
    /// → UserEmpty; admitted at an auth revision older than this state's → AuthOldRevision;
    /// unknown user → PermissionDenied; holder of the root role → yes; otherwise yes only if the
    /// user's READ and READWRITE permissions cover the whole request, else PermissionDenied.
    pub fn is_range_permitted(&self, info: &AuthInfo, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.is_op_permitted(info, key, range_end, PermType::Read)
    }

    /// May `info` delete `key` or `[key, range_end)`? As [`AuthState::is_range_permitted`], with
    /// WRITE permissions.
    pub fn is_delete_range_permitted(&self, info: &AuthInfo, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.is_op_permitted(info, key, range_end, PermType::Write)
    }

    /// May `info` manage auth (and list users and roles)? Auth off: yes. Otherwise UserEmpty
    /// without a user, UserNotFound for an unknown one, PermissionDenied without the root role.
    /// Unlike the KV checks, etcd does not compare the auth revision here.
    pub fn is_admin_permitted(&self, info: &AuthInfo) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if info.username.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        let user = self.users.get(&info.username).ok_or(AuthError::UserNotFound)?;
        if !user.has_role(ROOT_ROLE) {
            return Err(AuthError::PermissionDenied);
        }
        Ok(())
    }

    /// May `info` run UserGet on `name`? An admin may, and so may any user on itself; otherwise
    /// the admin check's error.
    pub fn is_user_get_permitted(&self, info: &AuthInfo, name: &str) -> Result<()> {
        match self.is_admin_permitted(info) {
            Err(_) if name == info.username => Ok(()),
            other => other,
        }
    }

    /// May `info` run RoleGet on `role`? An admin may, and so may a holder of the role;
    /// otherwise the admin check's error.
    pub fn is_role_get_permitted(&self, info: &AuthInfo, role: &str) -> Result<()> {
        match self.is_admin_permitted(info) {
            Err(_) if self.has_role(&info.username, role) => Ok(()),
            other => other,
        }
    }

    fn is_op_permitted(&self, info: &AuthInfo, key: &[u8], range_end: &[u8], need: PermType) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if info.revision == 0 {
            return Err(AuthError::UserEmpty);
        }
        if info.revision < self.revision {
            return Err(AuthError::AuthOldRevision);
        }
        let user = self.users.get(&info.username).ok_or(AuthError::PermissionDenied)?;
        if user.has_role(ROOT_ROLE) {
            return Ok(());
        }
        let perms = user.roles.iter().filter_map(|r| self.roles.get(r)).flat_map(|r| r.permissions.iter());
        if perm::covers(perms, need, key, range_end) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied)
        }
    }
}
