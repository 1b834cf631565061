//! Encryption at rest (`--encryption-provider-config`, kube's `EncryptionConfiguration`): the
//! values of the resources a rule names are written by the rule's first provider and read by
//! whichever provider's prefix they carry, in kube's formats, so a store written by
//! kube-apiserver reads here and the other way round:
//!
//! ```text
//! aescbc     k8s:enc:aescbc:v1:<key name>:    IV (16) | AES-CBC, PKCS#7 padding
//! aesgcm     k8s:enc:aesgcm:v1:<key name>:    nonce (12) | AES-GCM sealed, the etcd key as additional data
//! secretbox  k8s:enc:secretbox:v1:<key name>: nonce (24) | XSalsa20-Poly1305 sealed
//! identity   the value as it is
//! ```
//! Key rotation is kube's: a new key first, the old one after it, then every object re-written
//! (`kubectl get secrets -A -o json | kubectl replace -f -`).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use base64::Engine as _;
use rand::RngCore;
use serde_json::Value;

/// One provider of a rule.
#[derive(Clone)]
enum Provider {
    Identity,
    AesCbc(Vec<(String, Vec<u8>)>),
    AesGcm(Vec<(String, Vec<u8>)>),
    Secretbox(Vec<(String, Vec<u8>)>),
}

impl Provider {
    fn name(&self) -> &'static str {
        match self {
            Provider::Identity => "identity",
            Provider::AesCbc(_) => "aescbc",
            Provider::AesGcm(_) => "aesgcm",
            Provider::Secretbox(_) => "secretbox",
        }
    }

    fn keys(&self) -> &[(String, Vec<u8>)] {
        match self {
            Provider::Identity => &[],
            Provider::AesCbc(k) | Provider::AesGcm(k) | Provider::Secretbox(k) => k,
        }
    }
}

/// The resources' key prefixes and the providers of each rule, in the configuration's order.
#[derive(Clone, Default)]
pub struct Encryption {
    rules: Vec<(Vec<String>, Vec<Provider>)>,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption").field("rules", &self.rules.len()).finish()
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

fn aes_cbc_encrypt(key: &[u8], iv: &[u8; 16], plain: &[u8]) -> Result<Vec<u8>, String> {
    use cbc::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
    Ok(match key.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        32 => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        n => return Err(format!("invalid key size {n}")),
    })
}

fn aes_cbc_decrypt(key: &[u8], iv: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    use cbc::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
    let bad = |_| "invalid PKCS7 data (empty or not padded)".to_string();
    match key.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data)
            .map_err(bad),
        24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data)
            .map_err(bad),
        32 => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data)
            .map_err(bad),
        n => Err(format!("invalid key size {n}")),
    }
}

/// An AES-GCM key's seal (`true`) or open (`false`) of a message with a nonce and additional
/// data.
type Gcm = Box<dyn Fn(bool, &[u8], &[u8], &[u8]) -> Option<Vec<u8>>>;

fn aes_gcm(key: &[u8]) -> Result<Gcm, String> {
    fn with<C: KeyInit + Aead + 'static>(key: &[u8]) -> Result<Gcm, String> {
        let c = C::new_from_slice(key).map_err(|e| e.to_string())?;
        Ok(Box::new(move |seal, nonce, msg, aad| {
            let nonce = aes_gcm::Nonce::<C::NonceSize>::from_slice(nonce);
            let payload = Payload { msg, aad };
            if seal {
                c.encrypt(nonce, payload).ok()
            } else {
                c.decrypt(nonce, payload).ok()
            }
        }))
    }
    match key.len() {
        16 => with::<aes_gcm::Aes128Gcm>(key),
        24 => with::<aes_gcm::AesGcm<aes::Aes192, aes_gcm::aead::consts::U12>>(key),
        32 => with::<aes_gcm::Aes256Gcm>(key),
        n => Err(format!("invalid key size {n}")),
    }
}

impl Encryption {
    /// The configuration of `yaml` (kube's `EncryptionConfiguration`, apiserver.config.k8s.io
    /// v1), for objects kept under `prefix` (`--etcd-prefix`).
    pub fn parse(yaml: &str, prefix: &str) -> Result<Encryption, String> {
        let v: Value = serde_yaml_ng::from_str(yaml).map_err(|e| format!("error while parsing file: {e}"))?;
        if v.get("kind").and_then(Value::as_str) != Some("EncryptionConfiguration") {
            return Err("the configuration is not an EncryptionConfiguration".into());
        }
        let mut rules = Vec::new();
        for (i, r) in v.get("resources").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let mut prefixes = Vec::new();
            for name in r.get("resources").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                let (plural, group) = name.split_once('.').unwrap_or((name, ""));
                let matching: Vec<&crate::resources::Resource> = crate::resources::RESOURCES
                    .iter()
                    .filter(|x| {
                        x.stored() && (plural == "*" || x.plural == plural) && (group == "*" || x.group == group)
                    })
                    .collect();
                if matching.is_empty() {
                    return Err(format!("resources[{i}].resources: {name:?} is not a resource keel-apiserver serves"));
                }
                for x in matching {
                    let p = super::keys::collection(prefix, &x.key_prefix(), None);
                    if !prefixes.contains(&p) {
                        prefixes.push(p);
                    }
                }
            }
            let mut providers = Vec::new();
            for p in r.get("providers").and_then(Value::as_array).into_iter().flatten() {
                let keys = |kind: &str, sizes: &[usize]| -> Result<Vec<(String, Vec<u8>)>, String> {
                    let mut out = Vec::new();
                    for k in p.pointer(&format!("/{kind}/keys")).and_then(Value::as_array).into_iter().flatten() {
                        let name = k.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                        let secret = k.get("secret").and_then(Value::as_str).unwrap_or("");
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(secret)
                            .map_err(|e| format!("{kind} key {name:?}: secret is not valid base64: {e}"))?;
                        if !sizes.contains(&bytes.len()) {
                            return Err(format!("{kind} key {name:?}: secret is not of the expected length, got {}, expected one of {sizes:?}", bytes.len()));
                        }
                        if name.is_empty() {
                            return Err(format!("{kind}: a key needs a name"));
                        }
                        out.push((name, bytes));
                    }
                    if out.is_empty() {
                        return Err(format!("{kind}: at least one key is required"));
                    }
                    Ok(out)
                };
                let provider = if p.get("identity").is_some() {
                    Provider::Identity
                } else if p.get("aescbc").is_some() {
                    Provider::AesCbc(keys("aescbc", &[16, 24, 32])?)
                } else if p.get("aesgcm").is_some() {
                    Provider::AesGcm(keys("aesgcm", &[16, 24, 32])?)
                } else if p.get("secretbox").is_some() {
                    Provider::Secretbox(keys("secretbox", &[32])?)
                } else {
                    let kind = p.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default();
                    return Err(format!(
                        "provider {kind:?} is not supported by keel-apiserver (identity, aescbc, aesgcm, secretbox)"
                    ));
                };
                providers.push(provider);
            }
            if providers.is_empty() {
                return Err(format!("resources[{i}].providers: at least one provider is required"));
            }
            rules.push((prefixes, providers));
        }
        Ok(Encryption { rules })
    }

    /// The providers of the first rule whose resources hold `key`.
    fn providers(&self, key: &[u8]) -> Option<&[Provider]> {
        self.rules.iter().find(|(ps, _)| ps.iter().any(|p| key.starts_with(p.as_bytes()))).map(|(_, p)| p.as_slice())
    }

    /// The value to store at `key`: `plain` through the first provider of its rule.
    pub fn seal(&self, key: &str, plain: Vec<u8>) -> Vec<u8> {
        let Some([first, ..]) = self.providers(key.as_bytes()) else { return plain };
        let Some((name, k)) = first.keys().first() else { return plain };
        let mut out = format!("k8s:enc:{}:v1:{name}:", first.name()).into_bytes();
        match first {
            Provider::Identity => return plain,
            Provider::AesCbc(_) => {
                let iv = random::<16>();
                let Ok(sealed) = aes_cbc_encrypt(k, &iv, &plain) else { return plain };
                out.extend_from_slice(&iv);
                out.extend(sealed);
            }
            Provider::AesGcm(_) => {
                let nonce = random::<12>();
                let Some(sealed) = aes_gcm(k).ok().and_then(|c| c(true, &nonce, &plain, key.as_bytes())) else {
                    return plain;
                };
                out.extend_from_slice(&nonce);
                out.extend(sealed);
            }
            Provider::Secretbox(_) => {
                use crypto_secretbox::aead::Aead as _;
                use crypto_secretbox::KeyInit as _;
                let nonce = random::<24>();
                let Ok(c) = crypto_secretbox::XSalsa20Poly1305::new_from_slice(k) else { return plain };
                let Ok(sealed) = c.encrypt(crypto_secretbox::Nonce::from_slice(&nonce), plain.as_slice()) else {
                    return plain;
                };
                out.extend_from_slice(&nonce);
                out.extend(sealed);
            }
        }
        out
    }

    /// The value stored at `key`, opened by the provider its prefix names (an unprefixed value
    /// only where identity is a provider), or kube's error.
    pub fn open(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, String> {
        let Some(providers) = self.providers(key) else { return Ok(stored) };
        let unable = |why: &str| format!("unable to transform key {:?}: {why}", String::from_utf8_lossy(key));
        if !stored.starts_with(b"k8s:enc:") {
            return match providers.iter().any(|p| matches!(p, Provider::Identity)) {
                true => Ok(stored),
                false => Err(unable("no matching prefix found")),
            };
        }
        for p in providers {
            for (name, k) in p.keys() {
                let prefix = format!("k8s:enc:{}:v1:{name}:", p.name());
                let Some(rest) = stored.strip_prefix(prefix.as_bytes()) else { continue };
                let opened = match p {
                    Provider::Identity => None,
                    Provider::AesCbc(_) => rest.get(..16).and_then(|iv| aes_cbc_decrypt(k, iv, &rest[16..]).ok()),
                    Provider::AesGcm(_) => {
                        rest.get(..12).and_then(|n| aes_gcm(k).ok().and_then(|c| c(false, n, &rest[12..], key)))
                    }
                    Provider::Secretbox(_) => rest.get(..24).and_then(|n| {
                        use crypto_secretbox::aead::Aead as _;
                        use crypto_secretbox::KeyInit as _;
                        let c = crypto_secretbox::XSalsa20Poly1305::new_from_slice(k).ok()?;
                        c.decrypt(crypto_secretbox::Nonce::from_slice(n), &rest[24..]).ok()
                    }),
                };
                return opened.ok_or_else(|| unable("the value could not be decrypted"));
            }
        }
        Err(unable("no matching prefix found"))
    }

    /// Whether `raw`, stored at `key`, is sealed otherwise than a write would seal it now (kube's
    /// stale read: a re-write moves it under the first key).
    pub fn stale(&self, key: &[u8], raw: &[u8]) -> bool {
        let Some([first, ..]) = self.providers(key) else { return false };
        match first.keys().first() {
            None => raw.starts_with(b"k8s:enc:"),
            Some((name, _)) => !raw.starts_with(format!("k8s:enc:{}:v1:{name}:", first.name()).as_bytes()),
        }
    }

    /// Whether any rule is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(providers: &str) -> Encryption {
        let yaml = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
        );
        Encryption::parse(&yaml, "/registry").unwrap()
    }

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
    const K2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXowMTIzNDU="; // 32 bytes

    #[test]
    fn every_provider_seals_what_it_opens_under_kubes_prefixes() {
        let key = "/registry/secrets/default/s";
        for kind in ["aescbc", "aesgcm", "secretbox"] {
            let e = config(&format!("  - {kind}:\n      keys:\n      - name: key1\n        secret: {K1}\n"));
            let sealed = e.seal(key, b"{\"data\":\"plain\"}".to_vec());
            assert!(sealed.starts_with(format!("k8s:enc:{kind}:v1:key1:").as_bytes()), "{kind}");
            assert!(!sealed.windows(5).any(|w| w == b"plain"), "{kind}");
            assert_eq!(e.open(key.as_bytes(), sealed.clone()).unwrap(), b"{\"data\":\"plain\"}", "{kind}");
            assert!(e.open(key.as_bytes(), b"{}".to_vec()).unwrap_err().contains("no matching prefix found"));
            if kind == "aesgcm" {
                assert!(e.open(b"/registry/secrets/default/other", sealed).is_err(), "bound to its key");
            }
        }
        // Other resources are left alone.
        let e = config(&format!("  - aescbc:\n      keys:\n      - name: key1\n        secret: {K1}\n"));
        assert_eq!(e.seal("/registry/configmaps/default/c", b"x".to_vec()), b"x");
    }

    #[test]
    fn rotation_reads_old_keys_and_writes_the_first() {
        let old = config(&format!(
            "  - aesgcm:\n      keys:\n      - name: key1\n        secret: {K1}\n  - identity: {{}}\n"
        ));
        let key = "/registry/secrets/a/b";
        let sealed = old.seal(key, b"v".to_vec());
        let new = config(&format!(
            "  - aesgcm:\n      keys:\n      - name: key2\n        secret: {K2}\n      - name: key1\n        secret: {K1}\n  - identity: {{}}\n"
        ));
        assert_eq!(new.open(key.as_bytes(), sealed).unwrap(), b"v");
        assert_eq!(
            new.open(key.as_bytes(), b"plain".to_vec()).unwrap(),
            b"plain",
            "identity reads what is unencrypted"
        );
        assert!(new.seal(key, b"v".to_vec()).starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        assert!(new.stale(key.as_bytes(), &old.seal(key, b"v".to_vec())) && new.stale(key.as_bytes(), b"plain"));
        assert!(!new.stale(key.as_bytes(), &new.seal(key, b"v".to_vec())));
        let bad = Encryption::parse("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n", "/registry");
        assert!(bad.unwrap_err().contains("not of the expected length"));
    }
}
