//! Authentication, in kube-apiserver's order: a client certificate the client CA vouches for
//! (`--client-ca-file`: CN the user, O the groups), then a bearer token — a static one
//! (`--token-auth-file`) or a service account JWT (legacy or bound, checked against
//! `--service-account-key-file`, `--service-account-issuer` and `--api-audiences`, and against the
//! objects it names). A credential that is offered and fails is 401, never anonymous; a request
//! without one is `system:anonymous` when `--anonymous-auth` allows it. Then impersonation
//! (`Impersonate-*` headers), each impersonated attribute authorized with the `impersonate` verb.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::Engine as _;
use http::HeaderMap;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use serde_json::Value;
use sha2::Digest;

use super::{User, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use crate::rest::Api;
use crate::status::Status;

/// The user extra naming the credential a request came with.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// kube's 401.
pub fn unauthorized() -> Status {
    Status::failure(401, "Unauthorized", "Unauthorized", None)
}

/// A service account token's verification key.
#[derive(Clone)]
pub enum Key {
    /// ECDSA P-256: the uncompressed point.
    Es256(Vec<u8>),
    /// RSA: the PKCS#1 public key.
    Rs256(Vec<u8>),
}

impl Key {
    /// The public keys of a PEM file: public keys (SPKI), or the public halves of private keys.
    pub fn from_pem(pem: &str) -> Result<Vec<Key>, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::SubjectPublicKeyInfoDer;
        let mut keys = Vec::new();
        for spki in SubjectPublicKeyInfoDer::pem_slice_iter(pem.as_bytes()) {
            let spki = spki.map_err(|e| format!("reading a public key: {e}"))?;
            keys.push(Key::of_spki(spki.as_ref())?);
        }
        if pem.contains("PRIVATE KEY-----") {
            let pair = rcgen::KeyPair::from_pem(pem).map_err(|e| format!("reading a private key: {e}"))?;
            keys.push(Key::of_spki(&pair.public_key_der())?);
        }
        if keys.is_empty() {
            return Err("no public or private key in the file".into());
        }
        Ok(keys)
    }

    fn of_spki(der: &[u8]) -> Result<Key, String> {
        use x509_parser::prelude::FromDer;
        let (_, spki) =
            x509_parser::x509::SubjectPublicKeyInfo::from_der(der).map_err(|e| format!("a public key: {e}"))?;
        let bits = spki.subject_public_key.data.to_vec();
        match spki.algorithm.algorithm.to_id_string().as_str() {
            "1.2.840.10045.2.1" => Ok(Key::Es256(bits)),
            "1.2.840.113549.1.1.1" => Ok(Key::Rs256(bits)),
            other => Err(format!("unsupported public key algorithm {other}")),
        }
    }

    fn verifies(&self, alg: &str, input: &[u8], sig: &[u8]) -> bool {
        use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256};
        match (self, alg) {
            (Key::Es256(k), "ES256") => UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, k).verify(input, sig).is_ok(),
            (Key::Rs256(k), "RS256") => {
                UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, k).verify(input, sig).is_ok()
            }
            _ => false,
        }
    }
}

/// How service account tokens are checked.
#[derive(Clone, Default)]
pub struct ServiceAccounts {
    pub keys: Vec<Key>,
    /// `--service-account-issuer`: a bound token's `iss` must be one of them.
    pub issuers: Vec<String>,
    /// `--api-audiences`: a bound token's `aud` must name one of them.
    pub audiences: Vec<String>,
}

/// The authenticators configured.
#[derive(Default)]
pub struct Authenticator {
    /// `--client-ca-file`'s verifier.
    pub client_ca: Option<Arc<dyn ClientCertVerifier>>,
    /// `--token-auth-file`: token → user.
    pub tokens: HashMap<String, User>,
    pub service_accounts: ServiceAccounts,
    /// `--anonymous-auth`.
    pub anonymous: bool,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").field("tokens", &self.tokens.len()).field("anonymous", &self.anonymous).finish()
    }
}

/// An authenticator's answer: a user, nothing to say (the credential is not its kind), or an
/// error (the credential is its kind and is not good).
type Outcome = Result<Option<User>, String>;

impl Authenticator {
    /// Who sends a request with `headers` over a connection whose client presented `chain`.
    pub fn authenticate(
        &self,
        api: &Api,
        headers: &HeaderMap,
        chain: Option<&[CertificateDer<'static>]>,
    ) -> Result<User, Status> {
        let mut failed = false;
        for outcome in [self.certificate(chain), self.bearer(api, headers)] {
            match outcome {
                Ok(Some(user)) => return Ok(with_authenticated(user)),
                Ok(None) => {}
                Err(why) => {
                    tracing::debug!("authentication failed: {why}");
                    failed = true;
                }
            }
        }
        if failed || !self.anonymous {
            return Err(unauthorized());
        }
        Ok(User::anonymous())
    }

    /// The same authenticators without the client certificate one (for a token review).
    pub fn without_certificates(&self) -> Authenticator {
        Authenticator {
            client_ca: None,
            tokens: self.tokens.clone(),
            service_accounts: self.service_accounts.clone(),
            anonymous: self.anonymous,
        }
    }

    fn certificate(&self, chain: Option<&[CertificateDer<'static>]>) -> Outcome {
        let (Some(verifier), Some([leaf, intermediates @ ..])) = (&self.client_ca, chain) else { return Ok(None) };
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| format!("verifying a client certificate: {e}"))?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("a client certificate: {e}"))?;
        let name = cert.subject().iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or("");
        if name.is_empty() {
            return Ok(None);
        }
        let groups = cert.subject().iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
        let id = sha2::Sha256::digest(leaf.as_ref()).iter().map(|b| format!("{b:02x}")).collect::<String>();
        let extra = BTreeMap::from([(CREDENTIAL_ID.to_string(), vec![format!("X509SHA256={id}")])]);
        Ok(Some(User { name: name.to_string(), groups, extra, ..User::default() }))
    }

    fn bearer(&self, api: &Api, headers: &HeaderMap) -> Outcome {
        let Some(auth) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
            return Ok(None);
        };
        let mut parts = auth.split_whitespace();
        let (Some(scheme), Some(token)) = (parts.next(), parts.next()) else { return Ok(None) };
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Ok(None);
        }
        if let Some(user) = self.tokens.get(token) {
            return Ok(Some(user.clone()));
        }
        match self.service_account(api, token)? {
            Some(user) => Ok(Some(user)),
            None => Err("invalid bearer token".into()),
        }
    }

    /// A service account JWT's user: none if the token is not a JWT of an issuer this server
    /// knows, an error if it is one and does not hold.
    fn service_account(&self, api: &Api, token: &str) -> Outcome {
        let Some(jwt) = Jwt::parse(token) else { return Ok(None) };
        let iss = jwt.claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let legacy = iss == crate::control::tokens::LEGACY_ISSUER;
        if !legacy && !self.service_accounts.issuers.iter().any(|i| i == iss) {
            return Ok(None);
        }
        if !self.service_accounts.keys.iter().any(|k| k.verifies(&jwt.alg, jwt.input.as_bytes(), &jwt.signature)) {
            return Err("token signature is not valid".into());
        }
        if legacy {
            legacy_user(api, token, &jwt.claims).map(Some)
        } else {
            bound_user(api, &jwt.claims, &self.service_accounts.audiences).map(Some)
        }
    }
}

/// kube's authenticated group adder: every authenticated user is in `system:authenticated`.
fn with_authenticated(mut user: User) -> User {
    let marked = user.groups.iter().any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED);
    if !marked && user.name != ANONYMOUS {
        user.groups.push(AUTHENTICATED.to_string());
    }
    user
}

/// A decoded JWT, its signature unchecked.
struct Jwt {
    alg: String,
    claims: Value,
    input: String,
    signature: Vec<u8>,
}

impl Jwt {
    fn parse(token: &str) -> Option<Jwt> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut parts = token.split('.');
        let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&b64.decode(h).ok()?).ok()?;
        let claims: Value = serde_json::from_slice(&b64.decode(c).ok()?).ok()?;
        claims.is_object().then_some(())?;
        Some(Jwt {
            alg: header.get("alg")?.as_str()?.to_string(),
            claims,
            input: format!("{h}.{c}"),
            signature: b64.decode(s).ok()?,
        })
    }
}

/// The cached object of a core resource (its JSON), or why it is missing.
fn cached(api: &Api, plural: &str, ns: &str, name: &str) -> Result<Arc<Value>, String> {
    let r = crate::resources::find("", "v1", plural).expect("a core resource");
    let found = api.cached(r, Some(ns), name).ok_or_else(|| format!("{plural} {ns}/{name} not found"))?;
    Ok(found.json(r))
}

fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

fn account_user(ns: &str, name: &str, uid: &str) -> User {
    let mut user = User::internal(&format!("{}{ns}:{name}", super::SERVICE_ACCOUNT_PREFIX));
    user.groups.retain(|g| g != AUTHENTICATED);
    user.uid = uid.to_string();
    user
}

/// A legacy token's user: its Secret still holds it and its account still exists.
fn legacy_user(api: &Api, token: &str, claims: &Value) -> Result<User, String> {
    let claim = |k: &str| claims.get(format!("kubernetes.io/serviceaccount/{k}")).and_then(Value::as_str).unwrap_or("");
    let (ns, secret, sa, uid) =
        (claim("namespace"), claim("secret.name"), claim("service-account.name"), claim("service-account.uid"));
    if ns.is_empty() || secret.is_empty() || sa.is_empty() {
        return Err("a legacy service account token without its claims".into());
    }
    let s = cached(api, "secrets", ns, secret)?;
    let held = s
        .pointer("/data/token")
        .and_then(Value::as_str)
        .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok());
    if held.as_deref() != Some(token.as_bytes()) {
        return Err("Token does not match server's copy".into());
    }
    let a = cached(api, "serviceaccounts", ns, sa)?;
    if !uid.is_empty() && uid_of(&a) != uid {
        return Err("Token has been invalidated".into());
    }
    Ok(account_user(ns, sa, uid_of(&a)))
}

/// Seconds since the epoch now.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// How far a bound token's times may be off (kube's leeway).
const LEEWAY: i64 = 60;

/// A bound token's user: its audience, times, account and the object it is bound to hold.
fn bound_user(api: &Api, claims: &Value, audiences: &[String]) -> Result<User, String> {
    let aud: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !aud.iter().any(|a| audiences.iter().any(|b| b == a)) {
        return Err("token audiences are not this server's".into());
    }
    let now = now();
    let time = |k: &str| claims.get(k).and_then(Value::as_i64);
    match time("exp") {
        Some(exp) if now <= exp + LEEWAY => {}
        _ => return Err("token has expired".into()),
    }
    if time("nbf").is_some_and(|nbf| now + LEEWAY < nbf) {
        return Err("token is not valid yet".into());
    }
    let private = claims.get("kubernetes.io").ok_or("a token without kubernetes.io claims")?;
    let text = |p: &str| private.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = text("/namespace");
    let (sa, sa_uid) = (text("/serviceaccount/name"), text("/serviceaccount/uid"));
    let a = cached(api, "serviceaccounts", ns, sa)?;
    if uid_of(&a) != sa_uid {
        return Err(format!("service account UID ({sa_uid}) does not match claim ({})", uid_of(&a)));
    }
    let mut user = account_user(ns, sa, sa_uid);
    let mut extra = BTreeMap::new();
    for (kind, plural) in [("pod", "pods"), ("secret", "secrets")] {
        let (name, uid) = (text(&format!("/{kind}/name")), text(&format!("/{kind}/uid")));
        if name.is_empty() {
            continue;
        }
        let o = cached(api, plural, ns, name).map_err(|_| format!("{kind} {name} is gone"))?;
        if uid_of(&o) != uid {
            return Err(format!("{kind} {name} was made again (uid {})", uid_of(&o)));
        }
        if kind == "pod" {
            extra.insert("authentication.kubernetes.io/pod-name".to_string(), vec![name.to_string()]);
            extra.insert("authentication.kubernetes.io/pod-uid".to_string(), vec![uid.to_string()]);
        }
    }
    if let Some(jti) = claims.get("jti").and_then(Value::as_str) {
        extra.insert(CREDENTIAL_ID.to_string(), vec![format!("JTI={jti}")]);
    }
    user.extra = extra;
    Ok(user)
}

/// The users of a `--token-auth-file` (kube's CSV: `token,user,uid[,"group1,group2"]`).
pub fn token_file(text: &str) -> Result<HashMap<String, User>, String> {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let mut users = HashMap::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| e.to_string())?;
        if record.len() < 3 {
            return Err(format!("must have at least 3 columns (token, user name, user uid), found {}", record.len()));
        }
        let token = record[0].trim();
        if token.is_empty() {
            tracing::warn!("line {} of the token file has an empty token: skipped", i + 1);
            continue;
        }
        let groups = match record.get(3) {
            Some(g) => g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(str::to_string).collect(),
            None => Vec::new(),
        };
        let user = User { name: record[1].to_string(), uid: record[2].to_string(), groups, ..User::default() };
        users.insert(token.to_string(), user);
    }
    Ok(users)
}

/// The user a request acts as: `user` itself, or whom its `Impersonate-*` headers name once
/// `user` may impersonate each of them (`authorize` decides one `impersonate` request).
pub fn impersonated(
    user: User,
    headers: &HeaderMap,
    authorize: impl Fn(&User, &super::Request) -> Result<(), Status>,
) -> Result<User, Status> {
    let values = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
    };
    let name = values("Impersonate-User").into_iter().next();
    let groups = values("Impersonate-Group");
    let uid = values("Impersonate-Uid").into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix("impersonate-extra-") {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy().into_owned();
            if let Ok(v) = v.to_str() {
                extra.entry(key).or_default().push(v.to_string());
            }
        }
    }
    let Some(name) = name else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(user);
        }
        let mut asked: Vec<String> = groups.iter().map(|g| format!("{{Group {g}}}")).collect();
        asked.extend(uid.iter().map(|u| format!("{{UID {u}}}")));
        asked.extend(extra.iter().flat_map(|(k, vs)| vs.iter().map(move |v| format!("{{UserExtra {k}={v}}}"))));
        let message = format!("requested [{}] without impersonating a user", asked.join(" "));
        return Err(crate::rest::internal_error(message));
    };
    let check = |resource: &str, group: &str, namespace: &str, name: &str| {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let req = super::Request {
            resource_request: true,
            verb: "impersonate".into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        };
        authorize(&user, &req)
    };
    let mut acting = User { name: name.clone(), ..User::default() };
    match super::service_account(&name) {
        Some((ns, sa)) => {
            check("serviceaccounts", "", ns, sa)?;
            if groups.is_empty() {
                acting.groups = account_user(ns, sa, "").groups;
            }
        }
        None => check("users", "", "", &name)?,
    }
    for g in &groups {
        check("groups", "", "", g)?;
        acting.groups.push(g.clone());
    }
    if let Some(uid) = uid {
        check("uids", "authentication.k8s.io", "", &uid)?;
        acting.uid = uid;
    }
    for (k, vs) in &extra {
        for v in vs {
            check(&format!("userextras/{k}"), "authentication.k8s.io", "", v)?;
        }
    }
    acting.extra = extra;
    if name == ANONYMOUS {
        if !acting.groups.iter().any(|g| g == UNAUTHENTICATED) {
            acting.groups.push(UNAUTHENTICATED.into());
        }
    } else if !acting.groups.iter().any(|g| g == AUTHENTICATED) {
        acting.groups.push(AUTHENTICATED.into());
    }
    Ok(acting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_read_as_kube_reads_them() {
        let users = token_file("t1,alice,1,\"dev,ops\"\nt2,bob,2\n,nobody,3\n").unwrap();
        assert_eq!(users["t1"].name, "alice");
        assert_eq!(users["t1"].groups, ["dev", "ops"]);
        assert_eq!(users["t2"].uid, "2");
        assert!(users["t2"].groups.is_empty());
        assert_eq!(users.len(), 2);
        assert!(token_file("t1,alice\n").unwrap_err().contains("at least 3 columns"));
    }

    #[test]
    fn impersonation_asks_for_each_attribute() {
        let admin = User { name: "admin".into(), groups: vec![AUTHENTICATED.into()], ..User::default() };
        let mut h = HeaderMap::new();
        h.insert("Impersonate-User", "bob".parse().unwrap());
        h.append("Impersonate-Group", "dev".parse().unwrap());
        let asked = std::sync::Mutex::new(Vec::new());
        let acting = impersonated(admin.clone(), &h, |_, r| {
            asked.lock().unwrap().push((r.resource.clone(), r.name.clone()));
            Ok(())
        })
        .unwrap();
        assert_eq!(acting.name, "bob");
        assert_eq!(acting.groups, ["dev", AUTHENTICATED]);
        assert_eq!(*asked.lock().unwrap(), [("users".to_string(), "bob".to_string()), ("groups".into(), "dev".into())]);
        let refused = impersonated(admin.clone(), &h, |_, _| Err(Status::failure(403, "Forbidden", "no", None)));
        assert_eq!(refused.unwrap_err().code, 403);
        let mut sa = HeaderMap::new();
        sa.insert("Impersonate-User", "system:serviceaccount:a:b".parse().unwrap());
        let acting = impersonated(admin.clone(), &sa, |_, r| {
            assert_eq!((r.resource.as_str(), r.namespace.as_str(), r.name.as_str()), ("serviceaccounts", "a", "b"));
            Ok(())
        })
        .unwrap();
        assert_eq!(acting.groups, ["system:serviceaccounts", "system:serviceaccounts:a", AUTHENTICATED]);
        assert_eq!(impersonated(admin.clone(), &HeaderMap::new(), |_, _| unreachable!()).unwrap(), admin);
    }
}
