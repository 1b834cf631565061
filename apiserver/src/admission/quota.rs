//! ResourceQuota admission: a create that would take a namespace past a quota's `hard` is
//! refused with kube's message; one that fits is charged to the quota's `status.used` in the
//! same store transaction that creates the object, on condition that the quota is still at the
//! version the charge was computed from — so creates racing on one quota are admitted one at a
//! time, an object is never stored uncharged nor charged unstored, and the quota is never
//! exceeded. The quota controller recounts at a revision that includes every charge it
//! overwrites (giving back what deletions freed).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{forbidden, Attributes};
use crate::control::milli;
use crate::control::quota::{charge, counted, format};
use crate::rest::Api;
use crate::status::Status;

/// `key=value` pairs, sorted by key, comma-joined (kube's `prettyPrint`).
fn pretty(items: &BTreeMap<String, String>) -> String {
    items.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A quota's charge for a create: the quota's key, its new stored form, and the version it
/// must still be at.
#[derive(Debug, Clone)]
pub struct Charge {
    pub key: String,
    pub value: Vec<u8>,
    pub rev: i64,
}

impl Charge {
    /// (key, value, revision), as the store's transaction takes it.
    pub fn write(&self) -> (String, Vec<u8>, i64) {
        (self.key.clone(), self.value.clone(), self.rev)
    }
}

/// The charges a create makes to its namespace's quotas, or kube's refusal.
pub async fn admit(api: &Api, a: &Attributes<'_>) -> Result<Vec<Charge>, Status> {
    let mut charges = Vec::new();
    let Some(object) = a.object else { return Ok(charges) };
    if a.operation != "CREATE" || !a.subresource.is_empty() || a.namespace.is_empty() || !a.r.namespaced {
        return Ok(charges);
    }
    let quotas = crate::resources::find("", "v1", "resourcequotas").expect("resourcequotas are served");
    let names: Vec<String> = api
        .cached_list(quotas, Some(a.namespace))
        .iter()
        .map(|o| crate::meta::get(&o.json(quotas), "name").to_string())
        .collect();
    for name in names {
        charges.extend(charge_one(api, a, object, &name).await?);
    }
    Ok(charges)
}

/// What `object` costs quota `name`: nothing, a charge, or kube's refusal.
async fn charge_one(api: &Api, a: &Attributes<'_>, object: &Value, name: &str) -> Result<Option<Charge>, Status> {
    let quotas = crate::resources::find("", "v1", "resourcequotas").expect("resourcequotas are served");
    let k = crate::rest::key(api, quotas, Some(a.namespace), name);
    {
        let stored = match crate::rest::read(api, quotas, &k, name).await {
            Ok(s) => s,
            Err(s) if s.code == 404 => return Ok(None),
            Err(s) => return Err(s),
        };
        let mut quota = crate::rest::shown(quotas, &stored)?;
        let hard: BTreeMap<String, String> =
            serde_json::from_value(quota.pointer("/spec/hard").cloned().unwrap_or_default()).unwrap_or_default();
        let scopes: Vec<String> =
            serde_json::from_value(quota.pointer("/spec/scopes").cloned().unwrap_or_default()).unwrap_or_default();
        let used: BTreeMap<String, String> =
            serde_json::from_value(quota.pointer("/status/used").cloned().unwrap_or_default()).unwrap_or_default();
        let asked: BTreeMap<&String, i64> = hard
            .keys()
            .filter(|n| {
                counted(n).is_some_and(|r| std::ptr::eq(r, a.r) || (r.plural == a.r.plural && r.group == a.r.group))
            })
            .map(|n| (n, charge(a.r, object, &scopes, n)))
            .filter(|(_, c)| *c > 0)
            .collect();
        if asked.is_empty() {
            return Ok(None);
        }
        let unknown: Vec<&str> = asked.keys().filter(|n| !used.contains_key(**n)).map(|n| n.as_str()).collect();
        if !unknown.is_empty() {
            return Err(forbidden(a, &format!("status unknown for quota: {name}, resource: {}", unknown.join(","))));
        }
        let (mut requested, mut now_used, mut limited) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut next = BTreeMap::new();
        for (n, c) in &asked {
            let have = milli(&used[*n]).unwrap_or(0);
            let cap = milli(&hard[*n]).unwrap_or(0);
            next.insert((*n).clone(), have + c);
            if have + c > cap {
                requested.insert((*n).clone(), format(n, *c));
                now_used.insert((*n).clone(), used[*n].clone());
                limited.insert((*n).clone(), hard[*n].clone());
            }
        }
        if !requested.is_empty() {
            return Err(forbidden(
                a,
                &format!(
                    "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                    pretty(&requested),
                    pretty(&now_used),
                    pretty(&limited)
                ),
            ));
        }
        for (n, v) in next {
            quota["status"]["used"][&n] = json!(format(&n, v));
        }
        Ok(Some(Charge { key: k, value: crate::rest::stored_bytes(quotas, quota), rev: stored.rev }))
    }
}
