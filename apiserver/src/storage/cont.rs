//! kube's LIST continue token: base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":<list
//! resourceVersion>,"start":"<next key, relative to the listed prefix>"}`. A token is opaque to
//! clients but not to other apiservers on the same store, so keel writes and reads kube's exact
//! format, and refuses a bad one with kube's words.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

const VERSION: &str = "meta.k8s.io/v1";

#[derive(Serialize, Deserialize)]
struct Token {
    #[serde(rename = "v")]
    version: String,
    #[serde(rename = "rv")]
    resource_version: i64,
    start: String,
    /// Written by newer kube-apiservers; read and ignored.
    #[serde(rename = "rc", default, skip_serializing)]
    _remaining: i64,
}

/// The token that goes on from `next_key` (a key under `prefix`) at `resource_version`.
pub fn encode(next_key: &str, prefix: &str, resource_version: i64) -> Option<String> {
    let start = next_key.strip_prefix(prefix)?;
    let token = Token { version: VERSION.into(), resource_version, start: start.into(), _remaining: 0 };
    Some(URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("a token serializes")))
}

/// The key to go on from and the resourceVersion to read at (negative: the latest), or kube's
/// message for a token it would refuse.
pub fn decode(token: &str, prefix: &str) -> Result<(String, i64), String> {
    const INVALID: &str = "continue key is not valid";
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|e| format!("{INVALID}: {}", go_base64_error(&e)))?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|e| format!("{INVALID}: {e}"))?;
    if t.version != VERSION {
        return Err(format!("{INVALID}: server does not recognize this encoded version {:?}", t.version));
    }
    if t.resource_version == 0 {
        return Err(format!("{INVALID}: incorrect encoded start resourceVersion (version {VERSION})"));
    }
    if t.start.is_empty() {
        return Err(format!("{INVALID}: encoded start key empty (version {VERSION})"));
    }
    // As kube: the start key must be a clean path, so it cannot reach above the prefix.
    let key = if t.start.starts_with('/') { t.start.clone() } else { format!("/{}", t.start) };
    if clean(&key) != key {
        return Err(format!("{INVALID}: {}", t.start));
    }
    Ok((format!("{prefix}{}", &key[1..]), t.resource_version))
}

/// Go's words for a base64 decoding error.
fn go_base64_error(e: &base64::DecodeError) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => *at,
        base64::DecodeError::InvalidLength(at) => *at,
        base64::DecodeError::InvalidPadding => 0,
    };
    format!("illegal base64 data at input byte {at}")
}

/// Go's `path.Clean` of a rooted path: the shortest equivalent, without `.`, `..` or repeated
/// and trailing slashes.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kubes() {
        let token = encode("/registry/pods/default/web-1\0", "/registry/pods/", 42).unwrap();
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(&token).unwrap()).unwrap();
        assert_eq!(json, r#"{"v":"meta.k8s.io/v1","rv":42,"start":"default/web-1\u0000"}"#);
        assert_eq!(decode(&token, "/registry/pods/").unwrap(), ("/registry/pods/default/web-1\0".into(), 42));
        assert_eq!(encode("/registry/other", "/registry/pods/", 1), None);

        let made = |json: &str| URL_SAFE_NO_PAD.encode(json);
        let refused = |json: &str| decode(&made(json), "/registry/pods/").unwrap_err();
        assert_eq!(
            refused(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        );
        assert_eq!(
            refused(r#"{"v":"meta.k8s.io/v1","rv":3,"start":""}"#),
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        );
        assert_eq!(
            refused(r#"{"v":"v2","rv":3,"start":"a"}"#),
            "continue key is not valid: server does not recognize this encoded version \"v2\""
        );
        assert_eq!(
            refused(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}"#),
            "continue key is not valid: ../secrets/x"
        );
        assert_eq!(refused(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"a//b"}"#), "continue key is not valid: a//b");
        assert!(decode("!!", "/registry/pods/").unwrap_err().starts_with("continue key is not valid: illegal base64"));
        // A newer kube-apiserver's remaining count is read and ignored; rv -1 means the latest.
        assert_eq!(
            decode(&made(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"ns/b","rc":7}"#), "/registry/pods/").unwrap(),
            ("/registry/pods/ns/b".into(), -1)
        );
    }
}
