//! Service account tokens (kube's `serviceaccount-token-controller`): a Secret of type
//! `kubernetes.io/service-account-token` naming a ServiceAccount
//! (`kubernetes.io/service-account.name`) gets its token — a JWT signed with the service
//! account signing key (ES256; `kid` the SHA-256 of the public key, as kube derives it), with
//! kube's legacy claims — the cluster's CA (`ca.crt`) and its namespace, and the account's uid
//! in `kubernetes.io/service-account.uid`. A token Secret whose account is gone (or was made
//! again, another uid) is deleted, as kube deletes it. Checking such tokens on requests is
//! authentication's work (issue 11), with the same key.

use std::sync::Arc;

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use sha2::Digest;

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key, Change};
use super::{Failure, Queue};
use crate::meta;
use crate::rest::{Selectors, Target};

pub const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
pub const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
pub const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";
/// The issuer of kube's legacy service account tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// The service account signing key and the CA tokens come with.
pub struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// The key's id: base64url of the SHA-256 of its public key (PKIX DER), as kube's.
    pub kid: String,
    /// The cluster's CA (PEM), a token Secret's `ca.crt`.
    pub ca: String,
}

impl Signer {
    /// A signer from a PEM private key (ECDSA P-256, PKCS#8 or SEC1 as rcgen reads them).
    pub fn from_pem(pem: &str, ca: String) -> Result<Signer, String> {
        let pair = rcgen::KeyPair::from_pem(pem).map_err(|e| format!("reading the service account key: {e}"))?;
        if !pair.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
            return Err("the service account key must be an ECDSA P-256 key".into());
        }
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pair.serialize_der(), &rng)
            .map_err(|e| format!("the service account key: {e}"))?;
        let kid = b64url(&sha2::Sha256::digest(pair.public_key_der()));
        Ok(Signer { key, rng, kid, ca })
    }

    /// A JWT (ES256) of `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, Failure> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let input = format!("{}.{}", b64url(header.to_string().as_bytes()), b64url(claims.to_string().as_bytes()));
        let sig = self.key.sign(&self.rng, input.as_bytes()).map_err(|_| Failure::local("signing a token failed"))?;
        Ok(format!("{input}.{}", b64url(sig.as_ref())))
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// kube's legacy token claims for account `sa` (uid `uid`) through Secret `secret` in `ns`.
pub fn legacy_claims(ns: &str, secret: &str, sa: &str, uid: &str) -> Value {
    json!({
        "iss": LEGACY_ISSUER,
        "kubernetes.io/serviceaccount/namespace": ns,
        "kubernetes.io/serviceaccount/secret.name": secret,
        "kubernetes.io/serviceaccount/service-account.name": sa,
        "kubernetes.io/serviceaccount/service-account.uid": uid,
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
    })
}

pub async fn run(client: Client, signer: Option<Arc<Signer>>) {
    let Some(signer) = signer else { return std::future::pending().await };
    let queue = Queue::new();
    let (secrets, accounts) = (resource("", "v1", "secrets"), resource("", "v1", "serviceaccounts"));
    let q = queue.clone();
    let secret_watch = informer::run(client.cache(secrets).clone(), Selectors::everything(), move |ch| {
        if !matches!(ch, Change::Deleted(_)) && ch.object().json(secrets)["type"] == TOKEN_TYPE {
            q.add(key_of(ch.object()));
        }
    });
    // An account going (or changing) revisits its token Secrets.
    let (q, c) = (queue.clone(), client.clone());
    let sa_watch = informer::run(client.cache(accounts).clone(), Selectors::everything(), move |ch| {
        let name = key_of(ch.object());
        let name = split_key(&name).1.to_string();
        for s in c.cached_list(secrets, Some(&ch.object().namespace)) {
            let v = s.json(secrets);
            if v["type"] == TOKEN_TYPE
                && v.pointer("/metadata/annotations").and_then(|a| a.get(ACCOUNT_NAME)) == Some(&json!(name))
            {
                q.add(key_of(&s));
            }
        }
    });
    let work = queue.clone().work("serviceaccount-token-controller", 2, move |key| {
        let (client, signer) = (client.clone(), signer.clone());
        async move { sync(&client, &signer, &key).await }
    });
    super::together(vec![Box::pin(secret_watch), Box::pin(sa_watch), Box::pin(work)]).await;
}

async fn sync(client: &Client, signer: &Signer, key: &str) -> Result<(), Failure> {
    let (secrets, accounts) = (resource("", "v1", "secrets"), resource("", "v1", "serviceaccounts"));
    let (ns, name) = split_key(key);
    let Some(o) = client.cached(secrets, ns, name) else { return Ok(()) };
    let secret = o.value(secrets);
    let ns = ns.unwrap_or("");
    let note = |k: &str| {
        secret.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str).map(str::to_string)
    };
    if secret["type"] != TOKEN_TYPE || secret.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let Some(sa_name) = note(ACCOUNT_NAME) else { return Ok(()) };
    // The account, from the store when the cache does not have it (it may be behind).
    let sa = match client.cached(accounts, Some(ns), &sa_name) {
        Some(a) => Some(a.value(accounts)),
        None => {
            let target = Target::Object { namespace: Some(ns.into()), name: sa_name.clone(), sub: None };
            match client.call(accounts, http::Method::GET, target, &[], None).await {
                Ok(v) => Some(v),
                Err(e) if e.is("NotFound") => None,
                Err(e) => return Err(e),
            }
        }
    };
    let uid = sa.as_ref().map(|a| meta::get(a, "uid").to_string());
    let stale = match (&uid, note(ACCOUNT_UID)) {
        (None, _) => true,
        (Some(u), Some(noted)) => *u != noted,
        _ => false,
    };
    if stale {
        let options = json!({"preconditions": {"uid": meta::get(&secret, "uid")}});
        return match client.delete(secrets, Some(ns), name, &options).await {
            Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
            _ => Ok(()),
        };
    }
    let uid = uid.unwrap_or_default();
    let has = |k: &str| {
        secret.pointer("/data").and_then(|d| d.get(k)).is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    };
    if has("token") && has("ca.crt") && has("namespace") && note(ACCOUNT_UID).is_some() {
        return Ok(());
    }
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let token = signer.sign(&legacy_claims(ns, name, &sa_name, &uid))?;
    let mut updated = secret.clone();
    updated["metadata"]["annotations"][ACCOUNT_UID] = json!(uid);
    let data = updated.as_object_mut().expect("an object").entry("data").or_insert_with(|| json!({}));
    if !has("token") {
        data["token"] = json!(b64(&token));
    }
    data["ca.crt"] = json!(b64(&signer.ca));
    data["namespace"] = json!(b64(ns));
    match client.update(secrets, Some(ns), name, None, &updated).await {
        Err(e) if !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_es256_jwts_with_kubes_claims_and_key_id() {
        let key = rcgen::KeyPair::generate().unwrap();
        let signer = Signer::from_pem(&key.serialize_pem(), "CA".into()).unwrap();
        let token = signer.sign(&legacy_claims("d", "tok", "robot", "u1")).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |p: &str| -> Value {
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap()
        };
        assert_eq!(decode(parts[0]), json!({"alg": "ES256", "kid": signer.kid}));
        let claims = decode(parts[1]);
        assert_eq!(claims["sub"], "system:serviceaccount:d:robot");
        assert_eq!(claims["iss"], LEGACY_ISSUER);
        // The signature checks with the public key.
        let public =
            ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, key.public_key_raw());
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        assert!(public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig).is_ok());
        let rsa_like = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(Signer::from_pem(rsa_like, String::new()).is_err());
    }
}
