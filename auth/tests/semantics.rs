//! etcd 3.4's auth semantics through keel-auth's public API: every management error, the
//! enable/disable rules, root's implicit power, cascades, permission checks, tokens, and
//! deterministic replay.

use std::time::Duration;

use keel_auth::AuthError::*;
use keel_auth::PermType::{Read, ReadWrite, Write};
use keel_auth::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn hashed(pw: &str) -> UserPassword {
    UserPassword::Hashed(hash_password(pw, MIN_BCRYPT_COST))
}

/// Auth enabled with `root` (role root) and `alice` (role `app`: READWRITE on the prefix
/// `/app/`).
fn cluster() -> AuthState {
    let mut s = AuthState::new();
    s.user_add("root", hashed("rootpw")).unwrap();
    s.user_grant_role("root", "root").unwrap();
    s.user_add("alice", hashed("alicepw")).unwrap();
    s.role_add("app").unwrap();
    s.role_grant_permission("app", Permission::new(ReadWrite, "/app/", "/app0")).unwrap();
    s.user_grant_role("alice", "app").unwrap();
    s.auth_enable().unwrap();
    s
}

fn as_user(s: &AuthState, name: &str) -> AuthInfo {
    AuthInfo { username: name.into(), revision: s.revision() }
}

/// Runs `op` on a copy of `s` and checks that it fails with `want` leaving the state untouched.
#[track_caller]
fn fails(s: &AuthState, want: AuthError, op: impl FnOnce(&mut AuthState) -> Result<()>) {
    let mut copy = s.clone();
    assert_eq!(op(&mut copy), Err(want));
    assert_eq!(&copy, s, "a failed operation changed the state");
}

// ---- enable / disable ----

#[test]
fn enable_needs_a_root_user_with_the_root_role() {
    let mut s = AuthState::new();
    fails(&s, RootUserNotExist, |s| s.auth_enable());
    s.user_add("root", hashed("pw")).unwrap();
    fails(&s, RootRoleNotExist, |s| s.auth_enable());
    // A role *named* root is not enough: the user must hold it.
    s.role_add("root").unwrap();
    fails(&s, RootRoleNotExist, |s| s.auth_enable());
    s.user_grant_role("root", "root").unwrap();
    s.auth_enable().unwrap();
    assert!(s.is_enabled());
}

#[test]
fn root_role_is_implicit() {
    let mut s = AuthState::new();
    s.user_add("root", hashed("pw")).unwrap();
    s.user_grant_role("root", "root").unwrap(); // no role "root" was ever added
    assert_eq!(s.role_get("root"), Err(RoleNotFound));
    assert!(s.role_list().is_empty());
    s.auth_enable().unwrap();
    s.user_add("bob", UserPassword::NoPassword).unwrap();
    s.user_grant_role("bob", "root").unwrap();
    let bob = as_user(&s, "bob");
    assert_eq!(s.is_admin_permitted(&bob), Ok(()));
    assert_eq!(s.is_put_permitted(&bob, b"anything"), Ok(()));
    assert_eq!(s.is_range_permitted(&bob, b"\0", b"\0"), Ok(()));
    assert_eq!(s.is_delete_range_permitted(&bob, b"a", b"z"), Ok(()));
}

#[test]
fn enable_twice_is_a_no_op_and_enable_keeps_the_revision() {
    let mut s = AuthState::new();
    s.user_add("root", hashed("pw")).unwrap();
    s.user_grant_role("root", "root").unwrap();
    let rev = s.revision();
    s.auth_enable().unwrap();
    assert_eq!(s.revision(), rev, "etcd's AuthEnable does not commit a revision");
    s.auth_enable().unwrap();
    assert_eq!(s.revision(), rev);
}

#[test]
fn disable_bumps_the_revision_and_forgets_tokens() {
    let mut s = cluster();
    let mut tokens = SimpleTokens::default();
    let tok = s.authenticate(&mut tokens, "alice", "prefixprefixpref", 9, secs(0)).unwrap();
    let rev = s.revision();
    s.auth_disable(&mut tokens);
    assert!(!s.is_enabled());
    assert_eq!(s.revision(), rev + 1);
    assert!(tokens.is_empty());
    assert_eq!(s.auth_info(&mut tokens, &tok, secs(1)), Err(InvalidAuthToken));
    // Disabling again changes nothing.
    s.auth_disable(&mut tokens);
    assert_eq!(s.revision(), rev + 1);
    // And auth can be turned back on: root still holds root.
    s.auth_enable().unwrap();
}

#[test]
fn auth_off_permits_everything() {
    let mut s = cluster();
    s.auth_disable(&mut SimpleTokens::default());
    let nobody = AuthInfo::default();
    assert_eq!(s.is_put_permitted(&nobody, b"/secret"), Ok(()));
    assert_eq!(s.is_range_permitted(&nobody, b"\0", b"\0"), Ok(()));
    assert_eq!(s.is_delete_range_permitted(&nobody, b"a", b"b"), Ok(()));
    assert_eq!(s.is_admin_permitted(&nobody), Ok(()));
    let stale = AuthInfo { username: "alice".into(), revision: 1 };
    assert_eq!(s.is_put_permitted(&stale, b"/secret"), Ok(()), "no revision check while off");
}

// ---- users ----

#[test]
fn user_add_errors_and_revision() {
    let mut s = AuthState::new();
    assert_eq!(s.revision(), 1, "a new store is at auth revision 1");
    fails(&s, UserEmpty, |s| s.user_add("", hashed("pw")));
    s.user_add("alice", hashed("pw")).unwrap();
    assert_eq!(s.revision(), 2);
    fails(&s, UserAlreadyExist, |s| s.user_add("alice", UserPassword::NoPassword));
    s.user_add("svc", UserPassword::NoPassword).unwrap();
    let svc = s.user("svc").unwrap();
    assert!(svc.no_password());
    assert_eq!(svc.password_hash(), None);
    assert!(svc.roles().is_empty());
    assert_eq!(s.user_list(), ["alice", "svc"]);
}

#[test]
fn user_delete_rules() {
    let s = cluster();
    let mut tokens = SimpleTokens::default();
    // Root cannot go while auth is on; that check comes before the existence check.
    fails(&s, InvalidAuthMgmt, |s| s.user_delete("root", &mut tokens));
    fails(&s, UserNotFound, |s| s.user_delete("nobody", &mut tokens));

    let mut s = s;
    let tok = s.authenticate(&mut tokens, "alice", "p", 5, secs(0)).unwrap();
    let rev = s.revision();
    s.user_delete("alice", &mut tokens).unwrap();
    assert_eq!(s.revision(), rev + 1);
    assert_eq!(s.user_get("alice"), Err(UserNotFound));
    assert_eq!(s.auth_info(&mut tokens, &tok, secs(1)), Err(InvalidAuthToken), "tokens go with the user");

    // With auth off, root may be deleted.
    s.auth_disable(&mut tokens);
    s.user_delete("root", &mut tokens).unwrap();
    assert_eq!(s.auth_enable(), Err(RootUserNotExist));
}

#[test]
fn user_change_password() {
    let mut s = cluster();
    let mut tokens = SimpleTokens::default();
    fails(&s, UserNotFound, |s| s.user_change_password("nobody", "h".into(), &mut tokens));
    let tok = s.authenticate(&mut tokens, "alice", "p", 5, secs(0)).unwrap();
    let rev = s.revision();
    s.user_change_password("alice", hash_password("new", MIN_BCRYPT_COST), &mut tokens).unwrap();
    assert_eq!(s.revision(), rev + 1);
    assert_eq!(check_password(&s, "alice", "alicepw"), Err(AuthFailed));
    assert_eq!(check_password(&s, "alice", "new"), Ok(s.revision()));
    assert_eq!(s.user_get("alice").unwrap(), ["app"], "roles are kept");
    assert_eq!(s.auth_info(&mut tokens, &tok, secs(1)), Err(InvalidAuthToken), "old tokens are dropped");
}

#[test]
fn user_grant_role() {
    let mut s = cluster();
    fails(&s, UserNotFound, |s| s.user_grant_role("nobody", "app"));
    fails(&s, RoleNotFound, |s| s.user_grant_role("alice", "nope"));
    // User existence is checked first.
    fails(&s, UserNotFound, |s| s.user_grant_role("nobody", "nope"));

    s.role_add("zeta").unwrap();
    s.role_add("beta").unwrap();
    s.user_grant_role("alice", "zeta").unwrap();
    s.user_grant_role("alice", "beta").unwrap();
    assert_eq!(s.user_get("alice").unwrap(), ["app", "beta", "zeta"], "kept sorted");

    let rev = s.revision();
    s.user_grant_role("alice", "beta").unwrap();
    assert_eq!(s.revision(), rev, "a duplicate grant changes nothing");
    assert_eq!(s.user_get("alice").unwrap(), ["app", "beta", "zeta"]);
}

#[test]
fn user_revoke_role() {
    let mut s = cluster();
    fails(&s, InvalidAuthMgmt, |s| s.user_revoke_role("root", "root"));
    fails(&s, UserNotFound, |s| s.user_revoke_role("nobody", "app"));
    fails(&s, RoleNotGranted, |s| s.user_revoke_role("alice", "root"));
    fails(&s, RoleNotGranted, |s| s.user_revoke_role("alice", "no-such-role"));
    let rev = s.revision();
    s.user_revoke_role("alice", "app").unwrap();
    assert_eq!(s.revision(), rev + 1);
    assert!(s.user_get("alice").unwrap().is_empty());

    // With auth off, root may lose root (and then auth cannot be enabled).
    s.auth_disable(&mut SimpleTokens::default());
    s.user_revoke_role("root", "root").unwrap();
    assert_eq!(s.auth_enable(), Err(RootRoleNotExist));
}

// ---- roles ----

#[test]
fn role_add_get_list() {
    let mut s = AuthState::new();
    fails(&s, RoleEmpty, |s| s.role_add(""));
    s.role_add("b").unwrap();
    s.role_add("a").unwrap();
    s.role_add("root").unwrap();
    fails(&s, RoleAlreadyExist, |s| s.role_add("a"));
    fails(&s, RoleAlreadyExist, |s| s.role_add("root"));
    assert_eq!(s.role_list(), ["a", "b", "root"]);
    assert_eq!(s.role_get("nope"), Err(RoleNotFound));
    assert!(s.role_get("a").unwrap().is_empty());
}

#[test]
fn role_delete_cascades_to_users() {
    let mut s = cluster();
    s.user_add("bob", hashed("pw")).unwrap();
    s.role_add("other").unwrap();
    s.user_grant_role("bob", "app").unwrap();
    s.user_grant_role("bob", "other").unwrap();
    let bob = as_user(&s, "bob");
    assert_eq!(s.is_put_permitted(&bob, b"/app/x"), Ok(()));

    fails(&s, InvalidAuthMgmt, |s| s.role_delete("root"));
    fails(&s, RoleNotFound, |s| s.role_delete("nope"));

    let rev = s.revision();
    s.role_delete("app").unwrap();
    assert_eq!(s.revision(), rev + 1, "one revision for the role and all its revocations");
    assert!(s.user_get("alice").unwrap().is_empty());
    assert_eq!(s.user_get("bob").unwrap(), ["other"]);
    assert_eq!(s.role_list(), ["other"]);
    let bob = as_user(&s, "bob");
    assert_eq!(s.is_put_permitted(&bob, b"/app/x"), Err(PermissionDenied));

    // Recreating the role does not give it back to anyone.
    s.role_add("app").unwrap();
    assert!(!s.has_role("alice", "app"));

    // With auth off, root (a created role) may be deleted and is revoked from root.
    s.role_add("root").unwrap();
    s.auth_disable(&mut SimpleTokens::default());
    s.role_delete("root").unwrap();
    assert!(!s.has_role("root", "root"));
    assert_eq!(s.auth_enable(), Err(RootRoleNotExist));
}

#[test]
fn role_grant_permission_replaces_and_sorts() {
    let mut s = AuthState::new();
    fails(&s, RoleNotFound, |s| s.role_grant_permission("nope", Permission::new(Read, "a", "")));
    s.role_add("r").unwrap();
    s.role_grant_permission("r", Permission::new(Read, "m", "")).unwrap();
    s.role_grant_permission("r", Permission::new(Write, "c", "d")).unwrap();
    s.role_grant_permission("r", Permission::new(Read, "x", "\0")).unwrap();
    let keys: Vec<&[u8]> = s.role_get("r").unwrap().iter().map(|p| p.key.as_slice()).collect();
    assert_eq!(keys, [b"c", b"m", b"x"], "sorted by key");

    // Same key and range_end: the type is replaced in place, and it still counts as a change.
    let rev = s.revision();
    s.role_grant_permission("r", Permission::new(ReadWrite, "c", "d")).unwrap();
    assert_eq!(s.revision(), rev + 1);
    let perms = s.role_get("r").unwrap();
    assert_eq!(perms.len(), 3);
    assert_eq!(perms[0], Permission::new(ReadWrite, "c", "d"));

    // Same key, other range_end: a second permission.
    s.role_grant_permission("r", Permission::new(Read, "c", "")).unwrap();
    let perms = s.role_get("r").unwrap();
    assert_eq!(perms.len(), 4);
    assert_eq!(&perms[..2], [Permission::new(ReadWrite, "c", "d"), Permission::new(Read, "c", "")]);
}

#[test]
fn role_grant_permission_duplicates_like_etcd() {
    // etcd compares only the first permission at or after the key, so re-granting the second
    // of two same-key permissions appends a duplicate instead of replacing it.
    let mut s = AuthState::new();
    s.role_add("r").unwrap();
    s.role_grant_permission("r", Permission::new(Read, "k", "")).unwrap();
    s.role_grant_permission("r", Permission::new(Read, "k", "l")).unwrap();
    s.role_grant_permission("r", Permission::new(Write, "k", "l")).unwrap();
    assert_eq!(
        s.role_get("r").unwrap(),
        [Permission::new(Read, "k", ""), Permission::new(Read, "k", "l"), Permission::new(Write, "k", "l")]
    );
    // Revoking removes every permission on that exact range.
    s.role_revoke_permission("r", b"k", b"l").unwrap();
    assert_eq!(s.role_get("r").unwrap(), [Permission::new(Read, "k", "")]);
}

#[test]
fn role_revoke_permission() {
    let mut s = cluster();
    fails(&s, RoleNotFound, |s| s.role_revoke_permission("nope", b"/app/", b"/app0"));
    fails(&s, PermissionNotGranted, |s| s.role_revoke_permission("app", b"/app/", b""));
    fails(&s, PermissionNotGranted, |s| s.role_revoke_permission("app", b"/other/", b"/other0"));
    let alice = as_user(&s, "alice");
    assert_eq!(s.is_put_permitted(&alice, b"/app/x"), Ok(()));
    let rev = s.revision();
    s.role_revoke_permission("app", b"/app/", b"/app0").unwrap();
    assert_eq!(s.revision(), rev + 1);
    assert!(s.role_get("app").unwrap().is_empty());
    let alice = as_user(&s, "alice");
    assert_eq!(s.is_put_permitted(&alice, b"/app/x"), Err(PermissionDenied));
}

// ---- permission checks ----

#[test]
fn kv_checks_in_etcds_order() {
    let s = cluster();
    let alice = as_user(&s, "alice");
    assert_eq!(s.is_put_permitted(&alice, b"/app/key"), Ok(()));
    assert_eq!(s.is_range_permitted(&alice, b"/app/", b"/app0"), Ok(()));
    assert_eq!(s.is_delete_range_permitted(&alice, b"/app/a", b"/app/b"), Ok(()));
    assert_eq!(s.is_put_permitted(&alice, b"/other"), Err(PermissionDenied));
    assert_eq!(s.is_range_permitted(&alice, b"/app/", b"\0"), Err(PermissionDenied));
    assert_eq!(s.is_range_permitted(&alice, b"/", b"/app0"), Err(PermissionDenied));

    // No credentials.
    assert_eq!(s.is_put_permitted(&AuthInfo::default(), b"/app/key"), Err(UserEmpty));
    // Admitted before the last auth change: old revision, even for root.
    let stale = AuthInfo { username: "root".into(), revision: s.revision() - 1 };
    assert_eq!(s.is_put_permitted(&stale, b"/app/key"), Err(AuthOldRevision));
    assert_eq!(s.is_range_permitted(&stale, b"a", b""), Err(AuthOldRevision));
    // A revision ahead of this member's (admitted on a member further along) passes.
    let ahead = AuthInfo { username: "alice".into(), revision: s.revision() + 5 };
    assert_eq!(s.is_put_permitted(&ahead, b"/app/key"), Ok(()));
    // Unknown user: permission denied (not "user not found").
    assert_eq!(s.is_put_permitted(&as_user(&s, "ghost"), b"/app/key"), Err(PermissionDenied));
}

#[test]
fn an_auth_change_makes_admitted_requests_stale() {
    let mut s = cluster();
    let alice = as_user(&s, "alice");
    s.role_add("unrelated").unwrap();
    assert_eq!(s.is_put_permitted(&alice, b"/app/key"), Err(AuthOldRevision));
    assert_eq!(s.is_put_permitted(&as_user(&s, "alice"), b"/app/key"), Ok(()));
}

#[test]
fn permissions_of_all_roles_merge() {
    let mut s = cluster();
    s.user_add("carol", hashed("pw")).unwrap();
    s.role_add("r1").unwrap();
    s.role_add("r2").unwrap();
    s.role_add("w").unwrap();
    s.role_grant_permission("r1", Permission::new(Read, "a", "c")).unwrap();
    s.role_grant_permission("r2", Permission::new(Read, "c", "f")).unwrap();
    s.role_grant_permission("r2", Permission::new(Read, "m", "\0")).unwrap();
    s.role_grant_permission("w", Permission::new(Write, "f", "m")).unwrap();
    for r in ["r1", "r2", "w"] {
        s.user_grant_role("carol", r).unwrap();
    }
    let carol = as_user(&s, "carol");
    assert_eq!(s.is_range_permitted(&carol, b"a", b"f"), Ok(()), "two roles, adjacent ranges");
    assert_eq!(s.is_range_permitted(&carol, b"b", b"d"), Ok(()));
    assert_eq!(s.is_range_permitted(&carol, b"a", b"g"), Err(PermissionDenied), "[f, m) is write-only");
    assert_eq!(s.is_range_permitted(&carol, b"m", b"\0"), Ok(()), "open end");
    assert_eq!(s.is_range_permitted(&carol, b"z", b""), Ok(()));
    assert_eq!(s.is_range_permitted(&carol, b"a", b"\0"), Err(PermissionDenied), "a gap at [f, m)");
    assert_eq!(s.is_put_permitted(&carol, b"g"), Ok(()));
    assert_eq!(s.is_delete_range_permitted(&carol, b"f", b"m"), Ok(()));
    assert_eq!(s.is_delete_range_permitted(&carol, b"e", b"m"), Err(PermissionDenied));

    // Filling the gap with a READ permission makes the whole keyspace from "a" readable.
    s.role_grant_permission("w", Permission::new(ReadWrite, "f", "m")).unwrap();
    let carol = as_user(&s, "carol");
    assert_eq!(s.is_range_permitted(&carol, b"a", b"\0"), Ok(()));
}

#[test]
fn admin_check() {
    let s = cluster();
    assert_eq!(s.is_admin_permitted(&as_user(&s, "root")), Ok(()));
    assert_eq!(s.is_admin_permitted(&as_user(&s, "alice")), Err(PermissionDenied));
    assert_eq!(s.is_admin_permitted(&as_user(&s, "ghost")), Err(UserNotFound));
    assert_eq!(s.is_admin_permitted(&AuthInfo::default()), Err(UserEmpty));
    // No revision check for admin requests.
    assert_eq!(s.is_admin_permitted(&AuthInfo { username: "root".into(), revision: 1 }), Ok(()));
}

#[test]
fn users_may_get_themselves_and_their_roles() {
    let s = cluster();
    let alice = as_user(&s, "alice");
    assert_eq!(s.is_user_get_permitted(&alice, "alice"), Ok(()));
    assert_eq!(s.is_user_get_permitted(&alice, "root"), Err(PermissionDenied));
    assert_eq!(s.is_role_get_permitted(&alice, "app"), Ok(()));
    assert_eq!(s.is_role_get_permitted(&alice, "root"), Err(PermissionDenied));
    let root = as_user(&s, "root");
    assert_eq!(s.is_user_get_permitted(&root, "alice"), Ok(()));
    assert_eq!(s.is_role_get_permitted(&root, "app"), Ok(()));
    assert_eq!(s.is_user_get_permitted(&AuthInfo::default(), "alice"), Err(UserEmpty));
}

// ---- authenticate and tokens ----

#[test]
fn authenticate_issues_prefix_dot_index_tokens() {
    let s = cluster();
    let mut tokens = SimpleTokens::new(secs(60));
    let tok = s.authenticate(&mut tokens, "alice", "AbCdEfGhIjKlMnOp", 42, secs(10)).unwrap();
    assert_eq!(tok, "AbCdEfGhIjKlMnOp.42");
    assert_eq!(token_index(&tok), Some(42));
    assert_eq!(
        s.auth_info(&mut tokens, &tok, secs(20)),
        Ok(AuthInfo { username: "alice".into(), revision: s.revision() })
    );
    assert_eq!(s.auth_info(&mut tokens, "AbCdEfGhIjKlMnOp.43", secs(20)), Err(InvalidAuthToken));
    assert_eq!(s.auth_info(&mut tokens, "garbage", secs(20)), Err(InvalidAuthToken));

    fails(&s, AuthFailed, |s| s.authenticate(&mut tokens, "ghost", "p", 1, secs(0)).map(drop));
    let mut s2 = s.clone();
    s2.user_add("svc", UserPassword::NoPassword).unwrap();
    assert_eq!(s2.authenticate(&mut tokens, "svc", "p", 2, secs(0)), Err(AuthFailed));

    let mut off = s.clone();
    off.auth_disable(&mut SimpleTokens::default());
    assert_eq!(off.authenticate(&mut tokens, "alice", "p", 3, secs(0)), Err(AuthNotEnabled));
}

#[test]
fn every_member_registers_the_same_token() {
    use rand::SeedableRng;
    let s = cluster();
    let prefix = gen_token_prefix(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
    let (mut a, mut b) = (SimpleTokens::default(), SimpleTokens::default());
    let ta = s.authenticate(&mut a, "alice", &prefix, 17, secs(3)).unwrap();
    let tb = s.authenticate(&mut b, "alice", &prefix, 17, secs(900)).unwrap();
    assert_eq!(ta, tb);
    assert_eq!(s.auth_info(&mut b, &ta, secs(901)).unwrap().username, "alice");
}

#[test]
fn token_expiry_and_renewal_through_auth_info() {
    let s = cluster();
    let mut tokens = SimpleTokens::new(secs(300));
    let tok = s.authenticate(&mut tokens, "alice", "p", 1, secs(0)).unwrap();
    assert!(s.auth_info(&mut tokens, &tok, secs(299)).is_ok());
    assert!(s.auth_info(&mut tokens, &tok, secs(598)).is_ok(), "renewed at 299 s");
    assert_eq!(tokens.expire(secs(898)), 0);
    assert_eq!(s.auth_info(&mut tokens, &tok, secs(899)), Err(InvalidAuthToken), "unused for 301 s");
}

// ---- determinism ----

/// One entry of a replicated log, as the proposer would fill it in.
#[derive(Clone)]
enum Entry {
    UserAdd(&'static str, UserPassword),
    UserDelete(&'static str),
    ChangePassword(&'static str, String),
    Grant(&'static str, &'static str),
    Revoke(&'static str, &'static str),
    RoleAdd(&'static str),
    RoleDelete(&'static str),
    GrantPerm(&'static str, Permission),
    RevokePerm(&'static str, &'static [u8], &'static [u8]),
    Enable,
    Disable,
    Authenticate(&'static str, String),
}

fn apply(s: &mut AuthState, tokens: &mut SimpleTokens, index: u64, e: &Entry, now: Duration) -> Result<String> {
    let done = |r: Result<()>| r.map(|()| String::new());
    match e {
        Entry::UserAdd(n, p) => done(s.user_add(n, p.clone())),
        Entry::UserDelete(n) => done(s.user_delete(n, tokens)),
        Entry::ChangePassword(n, h) => done(s.user_change_password(n, h.clone(), tokens)),
        Entry::Grant(u, r) => done(s.user_grant_role(u, r)),
        Entry::Revoke(u, r) => done(s.user_revoke_role(u, r)),
        Entry::RoleAdd(r) => done(s.role_add(r)),
        Entry::RoleDelete(r) => done(s.role_delete(r)),
        Entry::GrantPerm(r, p) => done(s.role_grant_permission(r, p.clone())),
        Entry::RevokePerm(r, k, e) => done(s.role_revoke_permission(r, k, e)),
        Entry::Enable => done(s.auth_enable()),
        Entry::Disable => {
            s.auth_disable(tokens);
            Ok(String::new())
        }
        Entry::Authenticate(n, prefix) => s.authenticate(tokens, n, prefix, index, now),
    }
}

fn log() -> Vec<Entry> {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
    let h = |pw: &str| hash_password(pw, MIN_BCRYPT_COST);
    vec![
        Entry::UserAdd("root", UserPassword::Hashed(h("r"))),
        Entry::UserAdd("zed", UserPassword::Hashed(h("z"))),
        Entry::UserAdd("amy", UserPassword::NoPassword),
        Entry::UserAdd("zed", UserPassword::NoPassword), // fails: exists
        Entry::Enable,                                   // fails: no root role
        Entry::Grant("root", "root"),
        Entry::RoleAdd("ops"),
        Entry::RoleAdd("dev"),
        Entry::GrantPerm("dev", Permission::new(ReadWrite, "/dev/", "/dev0")),
        Entry::GrantPerm("dev", Permission::new(Read, "/a", "")),
        Entry::GrantPerm("ops", Permission::new(Read, "\0", "\0")),
        Entry::GrantPerm("dev", Permission::new(Write, "/a", "")),
        Entry::Grant("zed", "ops"),
        Entry::Grant("zed", "dev"),
        Entry::Grant("amy", "dev"),
        Entry::Enable,
        Entry::Authenticate("zed", gen_token_prefix(&mut rng)),
        Entry::UserDelete("root"), // fails: invalid auth management
        Entry::RevokePerm("dev", b"/a", b""),
        Entry::ChangePassword("zed", h("z2")),
        Entry::RoleDelete("ops"),
        Entry::Revoke("amy", "ops"), // fails: not granted
        Entry::Authenticate("zed", gen_token_prefix(&mut rng)),
        Entry::Disable,
        Entry::UserDelete("amy"),
        Entry::Enable,
    ]
}

fn replay(entries: &[Entry], start_index: u64, mut s: AuthState) -> (AuthState, Vec<Result<String>>) {
    let mut tokens = SimpleTokens::default();
    let answers = entries
        .iter()
        .enumerate()
        .map(|(i, e)| apply(&mut s, &mut tokens, start_index + i as u64, e, secs(i as u64)))
        .collect();
    (s, answers)
}

#[test]
fn the_same_log_gives_byte_identical_states_and_answers() {
    let entries = log();
    let (a, answers_a) = replay(&entries, 1, AuthState::new());
    let (b, answers_b) = replay(&entries, 1, AuthState::new());
    assert_eq!(answers_a, answers_b);
    let bytes_a = bincode::serialize(&a).unwrap();
    let bytes_b = bincode::serialize(&b).unwrap();
    assert_eq!(bytes_a, bytes_b);

    // Spot-check the outcome, so the log is known to exercise what it claims.
    assert_eq!(answers_a[3], Err(UserAlreadyExist));
    assert_eq!(answers_a[4], Err(RootRoleNotExist));
    assert!(answers_a[16].as_ref().unwrap().ends_with(".17"));
    assert_eq!(answers_a[17], Err(InvalidAuthMgmt));
    assert_eq!(answers_a[21], Err(RoleNotGranted));
    assert!(a.is_enabled());
    assert_eq!(a.user_list(), ["root", "zed"]);
    assert_eq!(a.user_get("zed").unwrap(), ["dev"]);
    assert_eq!(a.role_get("dev").unwrap(), [Permission::new(ReadWrite, "/dev/", "/dev0")]);

    // A member restored from a snapshot taken midway ends in the same bytes.
    let (mid, _) = replay(&entries[..12], 1, AuthState::new());
    let restored: AuthState = bincode::deserialize(&bincode::serialize(&mid).unwrap()).unwrap();
    let (c, answers_c) = replay(&entries[12..], 13, restored);
    assert_eq!(answers_c, answers_a[12..]);
    assert_eq!(bincode::serialize(&c).unwrap(), bytes_a);
}
