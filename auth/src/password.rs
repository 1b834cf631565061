//! bcrypt password hashes, made where a request arrives and checked there too.
//!
//! Hashing is slow on purpose (cost 10 is tens of milliseconds) and salted at random, so it never
//! runs during apply: the member that receives UserAdd or UserChangePassword calls
//! [`hash_password`] and proposes the hash. Authenticate checks the password on the receiving
//! member with [`check_password`] before anything is proposed, as etcd's `CheckPassword` does;
//! only the user name and a token prefix enter the log, never the password.
//!
//! Hashes are in the `$2a$` form Go's `x/crypto/bcrypt` writes, so an etcd hash checks here and
//! the reverse. Like Go's bcrypt, only the first 72 bytes of a password count.

use rand::Rng;

use crate::error::{AuthError, Result};
use crate::state::AuthState;

/// etcd's default `--bcrypt-cost`.
pub const DEFAULT_BCRYPT_COST: u32 = 10;
/// The smallest cost bcrypt accepts; tests use it.
pub const MIN_BCRYPT_COST: u32 = 4;
/// The largest cost bcrypt accepts.
pub const MAX_BCRYPT_COST: u32 = 31;

/// A bcrypt hash of `password` with a fresh random salt. A `cost` outside 4..=31 is replaced by
/// the default 10, as etcd does with an invalid `--bcrypt-cost`.
pub fn hash_password(password: &str, cost: u32) -> String {
    let mut salt = [0u8; 16];
    rand::rng().fill(&mut salt);
    hash_password_with_salt(password, cost, salt)
}

/// [`hash_password`] with the salt given, for simulations that draw every random byte from a seed.
pub fn hash_password_with_salt(password: &str, cost: u32, salt: [u8; 16]) -> String {
    let cost = if (MIN_BCRYPT_COST..=MAX_BCRYPT_COST).contains(&cost) { cost } else { DEFAULT_BCRYPT_COST };
    bcrypt::hash_with_salt(password, cost, salt)
        .expect("bcrypt cannot fail for a cost in 4..=31")
        .format_for_version(bcrypt::Version::TwoA)
}

/// Checks `name`'s password and returns the auth revision it was checked against, as etcd's
/// `CheckPassword`. Auth off: AuthNotEnabled. Unknown user or wrong password: AuthFailed (the
/// client cannot tell which). A user created with `no_password`: NoPasswordUser, even after a
/// password change. The caller proposes Authenticate only on success, and etcd retries the
/// whole exchange if the auth revision moved between this check and the apply.
pub fn check_password(state: &AuthState, name: &str, password: &str) -> Result<u64> {
    if !state.is_enabled() {
        return Err(AuthError::AuthNotEnabled);
    }
    let user = state.user(name).ok_or(AuthError::AuthFailed)?;
    if user.no_password() {
        return Err(AuthError::NoPasswordUser);
    }
    let hash = user.password_hash().ok_or(AuthError::AuthFailed)?;
    match bcrypt::verify(password, hash) {
        Ok(true) => Ok(state.revision()),
        Ok(false) | Err(_) => Err(AuthError::AuthFailed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::UserPassword;
    use crate::token::SimpleTokens;

    fn enabled_with(users: &[(&str, UserPassword)]) -> AuthState {
        let mut s = AuthState::new();
        s.user_add("root", UserPassword::Hashed(hash_password("rootpw", MIN_BCRYPT_COST))).unwrap();
        s.user_grant_role("root", "root").unwrap();
        for (name, pw) in users {
            s.user_add(name, pw.clone()).unwrap();
        }
        s.auth_enable().unwrap();
        s
    }

    #[test]
    fn hashes_are_salted_go_style_bcrypt() {
        let a = hash_password("secret", MIN_BCRYPT_COST);
        let b = hash_password("secret", MIN_BCRYPT_COST);
        assert!(a.starts_with("$2a$04$"), "{a}");
        assert_eq!(a.len(), 60);
        assert_ne!(a, b, "fresh salt each time");
        assert!(bcrypt::verify("secret", &a).unwrap());
        let salt = [9u8; 16];
        assert_eq!(hash_password_with_salt("x", 4, salt), hash_password_with_salt("x", 4, salt));
        assert!(hash_password_with_salt("x", 0, salt).starts_with("$2a$10$"), "bad cost → default");
        assert!(hash_password_with_salt("x", 32, salt).starts_with("$2a$10$"), "bad cost → default");
    }

    #[test]
    fn checks_a_hash_made_by_gos_bcrypt() {
        // golang.org/x/crypto/bcrypt's interoperability vector: "allmine" at cost 10.
        let go_hash = "$2a$10$XajjQvNhvvRt5GSeFk1xFeyqRrsxkhBkUiQeg0dt.wU1qD4aFDcga";
        let s = enabled_with(&[("u", UserPassword::Hashed(go_hash.into()))]);
        assert_eq!(check_password(&s, "u", "allmine"), Ok(s.revision()));
        assert_eq!(check_password(&s, "u", "allmind"), Err(AuthError::AuthFailed));
    }

    #[test]
    fn check_password_errors() {
        let s = enabled_with(&[
            ("alice", UserPassword::Hashed(hash_password("pw", MIN_BCRYPT_COST))),
            ("svc", UserPassword::NoPassword),
            ("broken", UserPassword::Hashed("not a bcrypt hash".into())),
        ]);
        assert_eq!(check_password(&s, "alice", "pw"), Ok(s.revision()));
        assert_eq!(check_password(&s, "alice", "wrong"), Err(AuthError::AuthFailed));
        assert_eq!(check_password(&s, "nobody", "pw"), Err(AuthError::AuthFailed));
        assert_eq!(check_password(&s, "svc", ""), Err(AuthError::NoPasswordUser));
        assert_eq!(check_password(&s, "broken", "x"), Err(AuthError::AuthFailed));

        let mut off = s.clone();
        off.auth_disable(&mut SimpleTokens::default());
        assert_eq!(check_password(&off, "alice", "pw"), Err(AuthError::AuthNotEnabled));
    }

    #[test]
    fn a_no_password_user_stays_one_after_a_password_change() {
        let mut s = enabled_with(&[("svc", UserPassword::NoPassword)]);
        s.user_change_password("svc", hash_password("now", MIN_BCRYPT_COST), &mut SimpleTokens::default()).unwrap();
        assert_eq!(check_password(&s, "svc", "now"), Err(AuthError::NoPasswordUser));
    }

    #[test]
    fn only_72_bytes_count() {
        let long = "p".repeat(72);
        let h = hash_password(&long, MIN_BCRYPT_COST);
        assert!(bcrypt::verify(format!("{long}extra"), &h).unwrap());
    }
}
