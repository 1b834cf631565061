//! `metadata.managedFields`: who owns which fields, as kube's `managedfields` package decodes,
//! keeps and writes them.
//!
//! An entry is identified by kube's manager identifier, the JSON of its manager, operation,
//! subresource and (for `Update` only) apiVersion: an applier keeps one entry across versions,
//! an updater one per version. Entries are kept by identifier and written sorted as kube sorts
//! them (operation, time, manager, apiVersion, subresource); an entry with no fields is never
//! kept.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fieldpath::{write_str, Set};

/// The manager kube gives the fields of an object first applied to without managed fields.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";
/// The manager the oldest update entries are folded into beyond [`MAX_UPDATE_MANAGERS`].
pub const ANCIENT_CHANGES: &str = "ancient-changes";
/// kube's cap on update entries (`DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// How a manager wrote its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub subresource: String,
    /// RFC 3339, as kube writes it; absent when kube would leave it out.
    pub time: Option<String>,
    pub fields: Set,
}

impl ManagedEntry {
    /// kube's manager identifier for this entry (`BuildManagerIdentifier`).
    pub fn identifier(&self) -> String {
        identifier(&self.manager, self.operation, &self.api_version, &self.subresource)
    }

    /// The entry as kube writes it. `fieldsV1` becomes a JSON value, whose keys serde_json orders
    /// as strings; [`Set::to_fields_v1`] has kube's exact bytes.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        let mut text = |key: &str, value: &str| {
            if !value.is_empty() {
                m.insert(key.into(), Value::String(value.into()));
            }
        };
        text("manager", &self.manager);
        text("operation", self.operation.as_str());
        text("apiVersion", &self.api_version);
        text("time", self.time.as_deref().unwrap_or(""));
        text("fieldsType", "FieldsV1");
        text("subresource", &self.subresource);
        m.insert("fieldsV1".into(), self.fields.to_fields_v1_value());
        Value::Object(m)
    }
}

/// kube's manager identifier: `{"manager":"m","operation":"Update","apiVersion":"v1"}`, empty
/// parts left out, the apiVersion only for updates.
pub fn identifier(manager: &str, operation: Operation, api_version: &str, subresource: &str) -> String {
    let api_version = if operation == Operation::Apply { "" } else { api_version };
    let mut out = String::from("{");
    let parts = [
        ("manager", manager),
        ("operation", operation.as_str()),
        ("apiVersion", api_version),
        ("subresource", subresource),
    ];
    for (key, value) in parts.into_iter().filter(|(_, v)| !v.is_empty()) {
        if out.len() > 1 {
            out.push(',');
        }
        write_str(key, &mut out);
        out.push(':');
        write_str(value, &mut out);
    }
    out.push('}');
    out
}

/// The managed fields of an object, by manager identifier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedFields {
    entries: BTreeMap<String, ManagedEntry>,
}

impl ManagedFields {
    /// Decodes a `managedFields` list as kube's `DecodeManagedFields` does, with its errors; a
    /// later entry with the same identifier replaces an earlier one.
    pub fn decode(list: &Value) -> Result<Self, String> {
        let items = match list {
            Value::Null => return Ok(ManagedFields::default()),
            Value::Array(items) => items,
            _ => return Err("managedFields must be a list".into()),
        };
        let mut out = ManagedFields::default();
        for (i, item) in items.iter().enumerate() {
            let Value::Object(m) = item else { return Err(format!("managed fields entry {i} is not an object")) };
            let text = |key: &str| m.get(key).and_then(Value::as_str).unwrap_or("");
            let operation = match text("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err("operation must be `Apply` or `Update`".into()),
            };
            if text("apiVersion").is_empty() {
                return Err("apiVersion must not be empty".into());
            }
            match text("fieldsType") {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => {
                    return Err(format!(
                        "invalid fieldsType {} in managed fields entry {i}",
                        crate::status::go_quote(other)
                    ))
                }
            }
            let fields = Set::from_fields_v1(m.get("fieldsV1").unwrap_or(&Value::Null))
                .map_err(|e| format!("error decoding versioned set from entry {i}: error decoding set: {e}"))?;
            let entry = ManagedEntry {
                manager: text("manager").into(),
                operation,
                api_version: text("apiVersion").into(),
                subresource: text("subresource").into(),
                time: m.get("time").and_then(Value::as_str).map(str::to_string),
                fields,
            };
            out.entries.insert(entry.identifier(), entry);
        }
        Ok(out)
    }

    /// The managed fields of `obj` (`metadata.managedFields`).
    pub fn from_object(obj: &Value) -> Result<Self, String> {
        ManagedFields::decode(obj.pointer("/metadata/managedFields").unwrap_or(&Value::Null))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries in kube's order: operation, time (in seconds), manager, apiVersion,
    /// subresource.
    pub fn entries(&self) -> Vec<&ManagedEntry> {
        let mut out: Vec<&ManagedEntry> = self.entries.values().collect();
        out.sort_by(|a, b| {
            a.operation
                .as_str()
                .cmp(b.operation.as_str())
                .then_with(|| seconds(a.time.as_deref()).cmp(&seconds(b.time.as_deref())))
                .then_with(|| a.manager.cmp(&b.manager))
                .then_with(|| a.api_version.cmp(&b.api_version))
                .then_with(|| a.subresource.cmp(&b.subresource))
        });
        out
    }

    /// The entry of `manager` with `operation` (any version and subresource).
    pub fn find(&self, manager: &str, operation: Operation) -> Option<&ManagedEntry> {
        self.entries.values().find(|e| e.manager == manager && e.operation == operation)
    }

    /// The list kube writes; `None` when there are no entries (kube leaves the field out).
    pub fn encode(&self) -> Option<Value> {
        (!self.is_empty()).then(|| Value::Array(self.entries().into_iter().map(ManagedEntry::to_value).collect()))
    }

    /// Writes the list into `obj`'s metadata, or removes it when empty.
    pub fn write_to(&self, obj: &mut Value) {
        let Some(o) = obj.as_object_mut() else { return };
        match self.encode() {
            None => {
                if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("managedFields");
                }
            }
            Some(list) => {
                if let Some(meta) = o.entry("metadata").or_insert_with(|| Value::Object(Map::new())).as_object_mut() {
                    meta.insert("managedFields".into(), list);
                }
            }
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&ManagedEntry> {
        self.entries.get(id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &ManagedEntry)> {
        self.entries.iter()
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<ManagedEntry> {
        self.entries.remove(id)
    }

    /// Stores `entry`, keeping the time of the entry it replaces when it has none; returns its
    /// identifier.
    pub(crate) fn put(&mut self, mut entry: ManagedEntry) -> String {
        let id = entry.identifier();
        if entry.time.is_none() {
            entry.time = self.entries.get(&id).and_then(|old| old.time.clone());
        }
        self.entries.insert(id.clone(), entry);
        id
    }

    /// Replaces the fields of entry `id`, dropping it when none are left.
    pub(crate) fn set_fields(&mut self, id: &str, fields: Set) {
        if fields.is_empty() {
            self.entries.remove(id);
        } else if let Some(entry) = self.entries.get_mut(id) {
            entry.fields = fields;
        }
    }

    pub(crate) fn set_time(&mut self, id: &str, now: &str) {
        if let Some(entry) = self.entries.get_mut(id) {
            entry.time = Some(now.to_string());
        }
    }

    /// Every manager's fields together.
    pub(crate) fn union_all(&self) -> Set {
        self.entries.values().fold(Set::new(), |all, e| all.union(&e.fields))
    }

    /// Folds the oldest update entries into per-version `ancient-changes` entries until at most
    /// `max` update entries remain (kube's `capUpdateManagers`, quirks included).
    pub(crate) fn cap_update_managers(&mut self, max: usize) {
        let mut updaters: Vec<String> =
            self.entries.iter().filter(|(_, e)| e.operation == Operation::Update).map(|(id, _)| id.clone()).collect();
        if updaters.len() <= max {
            return;
        }
        let time_of = |id: &String| seconds(self.entries.get(id).and_then(|e| e.time.as_deref()));
        updaters.sort_by(|a, b| time_of(a).cmp(&time_of(b)).then_with(|| a.cmp(b)));
        let mut first_of_version: BTreeMap<String, String> = BTreeMap::new();
        let mut length = updaters.len();
        for id in &updaters {
            if length <= max {
                break;
            }
            let Some(entry) = self.entries.get(id).cloned() else { continue };
            let bucket = identifier(ANCIENT_CHANGES, Operation::Update, &entry.api_version, "");
            let Some(first) = first_of_version.get(&entry.api_version) else {
                first_of_version.insert(entry.api_version.clone(), id.clone());
                continue;
            };
            if !self.entries.contains_key(&bucket) {
                if let Some(moved) = self.entries.remove(first) {
                    let moved = ManagedEntry {
                        manager: ANCIENT_CHANGES.into(),
                        subresource: String::new(),
                        operation: Operation::Update,
                        ..moved
                    };
                    self.entries.insert(bucket.clone(), moved);
                }
            }
            let fields = match self.entries.get(&bucket) {
                Some(b) => entry.fields.union(&b.fields),
                None => entry.fields.clone(),
            };
            self.entries.insert(
                bucket,
                ManagedEntry {
                    manager: ANCIENT_CHANGES.into(),
                    operation: Operation::Update,
                    api_version: entry.api_version.clone(),
                    subresource: String::new(),
                    time: entry.time.clone(),
                    fields,
                },
            );
            self.entries.remove(id);
            length -= 1;
        }
    }
}

/// The managed fields a write starts from (kube's `decodeLiveOrNew`): a subresource write, or a
/// request whose list cannot be decoded or is empty, keeps the stored object's; a request with
/// `managedFields: []` (or one empty entry) resets them.
pub fn decode_live_or_new(live: &Value, new: &Value, subresource: bool) -> ManagedFields {
    let stored = || ManagedFields::from_object(live).unwrap_or_default();
    if subresource {
        return stored();
    }
    let requested = new.pointer("/metadata/managedFields");
    if let Some(Value::Array(items)) = requested {
        if items.is_empty() || (items.len() == 1 && is_zero_entry(&items[0])) {
            return ManagedFields::default();
        }
    }
    match requested.map(ManagedFields::decode) {
        Some(Ok(m)) if !m.is_empty() => m,
        _ => stored(),
    }
}

/// An entry with nothing set (`metav1.ManagedFieldsEntry{}`).
fn is_zero_entry(entry: &Value) -> bool {
    let Value::Object(m) = entry else { return false };
    ["manager", "operation", "apiVersion", "fieldsType", "subresource"]
        .iter()
        .all(|k| m.get(*k).is_none_or(|v| v.is_null() || v.as_str() == Some("")))
        && ["time", "fieldsV1"].iter().all(|k| m.get(*k).is_none_or(Value::is_null))
}

/// Seconds since the epoch of an RFC 3339 time; 0 when absent or unreadable (kube sorts a
/// missing time as zero).
fn seconds(time: Option<&str>) -> i64 {
    time.and_then(parse_rfc3339).unwrap_or(0)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = s.get(from..to)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let mut rest = s.get(19..)?;
    if let Some(fraction) = rest.strip_prefix('.') {
        rest = fraction.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match *rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}
