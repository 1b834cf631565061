//! etcd's `simple` token provider: opaque tokens mapped to user names, kept in memory only.
//!
//! A token is `<prefix>.<index>`: the prefix is 16 random ASCII letters drawn by the member that
//! received the Authenticate call ([`gen_token_prefix`]), and the index is the Raft log index of
//! the Authenticate entry. The prefix travels inside the entry, so every member that applies it
//! registers the same token for the same user, and a client may present it to any member once
//! that member has applied the entry ([`token_index`] tells which index to wait for, as etcd's
//! `indexWaiter` does).
//!
//! Tokens are not part of the replicated [`crate::AuthState`] and are not in snapshots: as in
//! etcd, a restarted member forgets them. Each lives for a TTL (`--auth-token-ttl`, 300 s by
//! default) that every successful lookup restarts; a token is valid while `now <= expiry`. Time is
//! an argument (`now`, a [`Duration`] on any monotonic clock the caller keeps), never read here,
//! so expiry is exact and testable. etcd sweeps expired tokens once a second; [`SimpleTokens::expire`]
//! is that sweep, and a lookup of an expired token fails even before the sweep.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;

/// etcd's default `--auth-token-ttl`.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);
/// Letters in a simple token's random prefix.
pub const SIMPLE_TOKEN_PREFIX_LEN: usize = 16;

const LETTERS: &[u8; 52] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// A fresh token prefix: 16 letters drawn uniformly from `[a-zA-Z]`. Called by the proposer
/// before the Authenticate entry is proposed, never during apply.
pub fn gen_token_prefix<R: Rng + ?Sized>(rng: &mut R) -> String {
    (0..SIMPLE_TOKEN_PREFIX_LEN).map(|_| LETTERS[rng.random_range(0..LETTERS.len())] as char).collect()
}

/// The Raft index a simple token was issued at, or `None` if the string is not shaped like one
/// (exactly one `.`, a decimal number after it); such a token is invalid without a lookup.
pub fn token_index(token: &str) -> Option<u64> {
    let (_, index) = token.split_once('.')?;
    if index.contains('.') {
        return None;
    }
    index.parse().ok()
}

#[derive(Debug, Clone)]
struct Issued {
    user: String,
    expires_at: Duration,
}

/// The member-local token table: token → user, with expiry.
#[derive(Debug, Clone)]
pub struct SimpleTokens {
    ttl: Duration,
    tokens: BTreeMap<String, Issued>,
}

impl Default for SimpleTokens {
    fn default() -> Self {
        SimpleTokens::new(DEFAULT_TOKEN_TTL)
    }
}

impl SimpleTokens {
    /// An empty table whose tokens live `ttl` after issue or last use; a zero `ttl` means the
    /// default 300 s, as in etcd.
    pub fn new(ttl: Duration) -> SimpleTokens {
        let ttl = if ttl.is_zero() { DEFAULT_TOKEN_TTL } else { ttl };
        SimpleTokens { ttl, tokens: BTreeMap::new() }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Registers `<prefix>.<index>` for `user`, valid until `now + ttl`, and returns it.
    /// Applying the same entry twice registers the same token again (etcd panics instead).
    pub(crate) fn assign(&mut self, user: &str, prefix: &str, index: u64, now: Duration) -> String {
        let token = format!("{prefix}.{index}");
        self.tokens.insert(token.clone(), Issued { user: user.to_owned(), expires_at: now + self.ttl });
        token
    }

    /// The user `token` was issued to, if it is registered and unexpired at `now`; a hit restarts
    /// the token's TTL. An expired token is dropped.
    pub fn lookup(&mut self, token: &str, now: Duration) -> Option<String> {
        let issued = self.tokens.get_mut(token)?;
        if now > issued.expires_at {
            self.tokens.remove(token);
            return None;
        }
        issued.expires_at = now + self.ttl;
        Some(issued.user.clone())
    }

    /// Drops every token of `user` (after UserDelete and UserChangePassword).
    pub fn invalidate_user(&mut self, user: &str) {
        self.tokens.retain(|_, issued| issued.user != user);
    }

    /// Drops every token (after AuthDisable).
    pub fn clear(&mut self) {
        self.tokens.clear();
    }

    /// Drops the tokens expired at `now` and returns how many there were.
    pub fn expire(&mut self, now: Duration) -> usize {
        let before = self.tokens.len();
        self.tokens.retain(|_, issued| now <= issued.expires_at);
        before - self.tokens.len()
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn prefixes_are_sixteen_letters_and_follow_the_seed() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let a = gen_token_prefix(&mut rng);
        let b = gen_token_prefix(&mut rng);
        assert_eq!(a.len(), SIMPLE_TOKEN_PREFIX_LEN);
        assert!(a.bytes().all(|c| c.is_ascii_alphabetic()), "{a}");
        assert_ne!(a, b);
        let mut again = ChaCha8Rng::seed_from_u64(7);
        assert_eq!(gen_token_prefix(&mut again), a, "same seed, same prefix");
    }

    #[test]
    fn token_index_parses_etcds_shape() {
        assert_eq!(token_index("abcdefghijklmnop.42"), Some(42));
        assert_eq!(token_index("x.0"), Some(0));
        assert_eq!(token_index("abc"), None);
        assert_eq!(token_index("a.b.3"), None);
        assert_eq!(token_index("abc.x"), None);
        assert_eq!(token_index("abc.-1"), None);
        assert_eq!(token_index("abc."), None);
    }

    #[test]
    fn tokens_expire_after_the_ttl() {
        let mut t = SimpleTokens::new(S(10));
        let tok = t.assign("alice", "AbCdEfGhIjKlMnOp", 5, S(100));
        assert_eq!(tok, "AbCdEfGhIjKlMnOp.5");
        assert_eq!(t.clone().lookup(&tok, S(110)).as_deref(), Some("alice"), "valid at exactly the TTL");
        assert_eq!(t.lookup(&tok, S(111)), None, "expired one second later");
        assert!(t.is_empty(), "the expired token was dropped");
    }

    #[test]
    fn use_renews_the_ttl() {
        let mut t = SimpleTokens::new(S(10));
        let tok = t.assign("alice", "p", 1, S(0));
        for now in [8, 16, 24, 32] {
            assert_eq!(t.lookup(&tok, S(now)).as_deref(), Some("alice"), "used at {now}s");
        }
        // Last use at 32 s: valid through 42 s, gone after.
        assert_eq!(t.expire(S(42)), 0);
        assert_eq!(t.expire(S(43)), 1);
        assert_eq!(t.lookup(&tok, S(43)), None);
    }

    #[test]
    fn sweep_drops_only_expired_tokens() {
        let mut t = SimpleTokens::new(S(10));
        let old = t.assign("a", "p", 1, S(0));
        let new = t.assign("b", "p", 2, S(5));
        assert_eq!(t.expire(S(12)), 1);
        assert_eq!(t.lookup(&old, S(12)), None);
        assert_eq!(t.lookup(&new, S(12)).as_deref(), Some("b"));
    }

    #[test]
    fn invalidate_and_clear() {
        let mut t = SimpleTokens::default();
        assert_eq!(t.ttl(), DEFAULT_TOKEN_TTL);
        let a1 = t.assign("alice", "p", 1, S(0));
        let a2 = t.assign("alice", "q", 2, S(0));
        let b = t.assign("bob", "r", 3, S(0));
        t.invalidate_user("alice");
        assert_eq!(t.lookup(&a1, S(1)), None);
        assert_eq!(t.lookup(&a2, S(1)), None);
        assert_eq!(t.lookup(&b, S(1)).as_deref(), Some("bob"));
        t.clear();
        assert_eq!(t.lookup(&b, S(1)), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn zero_ttl_means_default() {
        assert_eq!(SimpleTokens::new(Duration::ZERO).ttl(), S(300));
    }
}
