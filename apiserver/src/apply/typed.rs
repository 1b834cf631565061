//! Walks of a JSON value along its type, as SMD's `typed` package does them: the field set a
//! value holds ([`to_field_set`]), what changed between two values ([`compare`]), a config
//! merged over a live object ([`merge`]), items taken out ([`remove_items`]), and the checks an
//! applied configuration must pass ([`validate`]).
//!
//! Each walk recurses once per level of the value, never more, and resolves types lazily, so
//! recursive schemas cost nothing extra. Absent (`None`) and `null` are different things here,
//! as they are to SMD: a `null` field is present, and owned. Values that do not fit their type
//! are walked leniently (a scalar where a map belongs counts as no map); [`validate`] is where
//! they are refused.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::fieldpath::{compare_values, value_string, Path, PathElement, Set};
use super::schema::{Atom, ListKind, ListType, MapType, Scalar, TypeRef, Types};

static NULL: Value = Value::Null;

/// Whether two values are equal as SMD sees it (integers and floats numerically).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    compare_values(a, b) == Ordering::Equal
}

#[derive(Clone, Copy)]
enum Shape<'a> {
    Scalar(Scalar),
    Map(MapType<'a>),
    List(ListType<'a>),
}

/// The shape of `atom` that value `v` takes (SMD's `deduceAtom`, then `handleAtom`'s choice:
/// a map first when the value does not decide).
fn deduce<'a>(atom: Atom<'a>, v: Option<&Value>) -> Atom<'a> {
    match (atom, v) {
        (Atom::Any(s, _, _), Some(Value::Number(_) | Value::String(_) | Value::Bool(_))) => Atom::Scalar(s),
        (Atom::Any(_, m, _), Some(Value::Object(_))) => Atom::Map(m),
        (Atom::Any(_, _, l), Some(Value::Array(_))) => Atom::List(l),
        _ => atom,
    }
}

fn shape(atom: Atom<'_>) -> Shape<'_> {
    match atom {
        Atom::Scalar(s) => Shape::Scalar(s),
        Atom::Map(m) | Atom::Any(_, m, _) => Shape::Map(m),
        Atom::List(l) => Shape::List(l),
    }
}

fn variant(atom: &Atom<'_>) -> u8 {
    match atom {
        Atom::Scalar(_) => 0,
        Atom::Map(_) => 1,
        Atom::List(_) => 2,
        Atom::Any(..) => 3,
    }
}

fn empty_map(m: Option<&Map<String, Value>>) -> bool {
    m.is_none_or(Map::is_empty)
}

fn empty_list(l: Option<&Vec<Value>>) -> bool {
    l.is_none_or(Vec::is_empty)
}

fn union_keys<'v>(l: Option<&'v Map<String, Value>>, r: Option<&'v Map<String, Value>>) -> BTreeSet<&'v String> {
    l.into_iter().flat_map(Map::keys).chain(r.into_iter().flat_map(Map::keys)).collect()
}

/// The element that identifies `item` in a set or map list (SMD's `listItemToPathElement`),
/// with kube's messages for items that have none.
pub(crate) fn item_element<'a>(types: &Types<'a>, list: &ListType<'a>, item: &Value) -> Result<PathElement, String> {
    match list.kind() {
        ListKind::Atomic => Err("invalid indexing of non-associative list".into()),
        ListKind::Map(keys) => {
            let fields = match item {
                Value::Object(m) => m,
                Value::Null => return Err("associative list with keys may not have a null element".into()),
                _ => return Err("associative list with keys may not have non-map elements".into()),
            };
            let names = keys.names();
            let mut key = Vec::new();
            for name in &names {
                if let Some(v) = fields.get(*name).or_else(|| types.key_default(list, name)) {
                    key.push(((*name).to_string(), v.clone()));
                }
            }
            if key.is_empty() {
                let quoted: Vec<String> = names.iter().map(|n| crate::status::go_quote(n)).collect();
                return Err(format!(
                    "associative list with keys has an element that omits all key fields [{}] (and doesn't have default values for any key fields)",
                    quoted.join(" ")
                ));
            }
            Ok(PathElement::key(key))
        }
        ListKind::Set => match item {
            Value::Object(_) => Err("associative list without keys has an element that's a map type".into()),
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => Err("associative list without keys has an element that's an explicit null".into()),
            scalar => Ok(PathElement::Value(scalar.clone())),
        },
    }
}

/// Every leaf of `v` and every item of its set and map lists (SMD's `ToFieldSet`): scalars,
/// atomic maps and lists, `null`s, empty maps, keys that are not declared fields, and list
/// items. An item that appears twice is owned as one field, not descended into.
pub fn to_field_set<'a>(types: &Types<'a>, tr: TypeRef<'a>, v: &Value) -> Set {
    let mut set = Set::new();
    field_set_walk(types, tr, v, &mut Vec::new(), &mut set);
    set
}

fn field_set_walk<'a>(types: &Types<'a>, tr: TypeRef<'a>, v: &Value, path: &mut Vec<PathElement>, set: &mut Set) {
    match shape(deduce(types.resolve(tr), Some(v))) {
        Shape::Scalar(_) => set.insert(path),
        Shape::List(list) => {
            if list.is_atomic() {
                set.insert(path);
                return;
            }
            let Some(items) = v.as_array() else { return };
            let elements: Vec<Option<PathElement>> =
                items.iter().map(|item| item_element(types, &list, item).ok()).collect();
            let mut seen = BTreeSet::new();
            let mut duplicates = BTreeSet::new();
            for pe in elements.iter().flatten() {
                if !seen.insert(pe) && duplicates.insert(pe) {
                    path.push(pe.clone());
                    set.insert(path);
                    path.pop();
                }
            }
            for (item, pe) in items.iter().zip(&elements) {
                let Some(pe) = pe else { continue };
                if duplicates.contains(pe) {
                    continue;
                }
                path.push(pe.clone());
                field_set_walk(types, list.elem(), item, path, set);
                set.insert(path);
                path.pop();
            }
        }
        Shape::Map(map) => {
            if map.is_atomic() {
                set.insert(path);
                return;
            }
            let Some(fields) = v.as_object() else { return };
            for (key, value) in fields {
                path.push(PathElement::Field(key.clone()));
                field_set_walk(types, map.child(key), value, path, set);
                let empty = value.as_object().is_some_and(Map::is_empty);
                if value.is_null() || empty || !map.declares(key) {
                    set.insert(path);
                }
                path.pop();
            }
        }
    }
}

/// What changed from `lhs` to `rhs`; no field is in two of the sets (SMD's `Comparison`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    pub removed: Set,
    pub modified: Set,
    pub added: Set,
}

impl Comparison {
    /// Nothing changed.
    pub fn is_same(&self) -> bool {
        self.removed.is_empty() && self.modified.is_empty() && self.added.is_empty()
    }

    /// Drops `reset` and everything under it from all three sets (SMD's exclude filter).
    pub fn exclude(&mut self, reset: &Set) {
        if reset.is_empty() {
            return;
        }
        self.removed = self.removed.recursive_difference(reset);
        self.modified = self.modified.recursive_difference(reset);
        self.added = self.added.recursive_difference(reset);
    }
}

/// The fields removed, modified and added from `lhs` to `rhs` (SMD's `Compare`). A map or list
/// that appears or disappears is itself added or removed, besides its contents.
pub fn compare<'a>(types: &Types<'a>, tr: TypeRef<'a>, lhs: &Value, rhs: &Value) -> Comparison {
    let mut out = Comparison::default();
    compare_walk(types, tr, Some(lhs), Some(rhs), &mut Vec::new(), &mut out);
    out
}

fn compare_walk<'a>(
    types: &Types<'a>,
    tr: TypeRef<'a>,
    l: Option<&Value>,
    r: Option<&Value>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let atom = types.resolve(tr);
    let (al, ar) = (deduce(atom, l), deduce(atom, r));
    let in_leaf = if r.is_none() {
        compare_shape(types, shape(al), l, r, path, out)
    } else if l.is_none() || variant(&al) == variant(&ar) {
        compare_shape(types, shape(ar), l, r, path, out)
    } else {
        // The value changed shape: each side is walked as its own shape.
        compare_shape(types, shape(al), l, r, path, out);
        compare_shape(types, shape(ar), l, r, path, out)
    };
    if !in_leaf {
        if l.is_none() {
            out.added.insert(path);
        } else if r.is_none() {
            out.removed.insert(path);
        }
    }
}

fn compare_leaf(l: Option<&Value>, r: Option<&Value>, path: &[PathElement], out: &mut Comparison) {
    match (l, r) {
        (None, _) => out.added.insert(path),
        (_, None) => out.removed.insert(path),
        (Some(a), Some(b)) if !values_equal(a, b) => out.modified.insert(path),
        _ => {}
    }
}

/// Compares as `shape`; true when the node was a leaf.
fn compare_shape<'a>(
    types: &Types<'a>,
    shape: Shape<'a>,
    l: Option<&Value>,
    r: Option<&Value>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) -> bool {
    match shape {
        Shape::Scalar(_) => {
            compare_leaf(l, r, path, out);
            true
        }
        Shape::Map(map) => {
            let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
            if map.is_atomic() || (empty_map(lm) && empty_map(rm)) {
                compare_leaf(l, r, path, out);
                return true;
            }
            for key in union_keys(lm, rm) {
                path.push(PathElement::Field(key.clone()));
                let (lv, rv) = (lm.and_then(|m| m.get(key)), rm.and_then(|m| m.get(key)));
                compare_walk(types, map.child(key), lv, rv, path, out);
                path.pop();
            }
            false
        }
        Shape::List(list) => {
            let (ll, rl) = (l.and_then(Value::as_array), r.and_then(Value::as_array));
            if list.is_atomic() || (empty_list(ll) && empty_list(rl)) {
                compare_leaf(l, r, path, out);
                return true;
            }
            compare_items(types, &list, ll, rl, path, out);
            false
        }
    }
}

/// Items are matched by element; an element that appears more than once on a side is treated
/// as one atomic field (SMD's handling of duplicates).
fn compare_items<'a>(
    types: &Types<'a>,
    list: &ListType<'a>,
    ll: Option<&Vec<Value>>,
    rl: Option<&Vec<Value>>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let mut order: Vec<PathElement> = Vec::new();
    let mut lv: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    for item in ll.into_iter().flatten() {
        let Ok(pe) = item_element(types, list, item) else { continue };
        if let Some(items) = lv.get_mut(&pe) {
            items.push(item);
        } else {
            order.push(pe.clone());
            lv.insert(pe, vec![item]);
        }
    }
    let mut rv: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    for item in rl.into_iter().flatten() {
        let Ok(pe) = item_element(types, list, item) else { continue };
        if let Some(items) = rv.get_mut(&pe) {
            items.push(item);
        } else {
            if !lv.contains_key(&pe) {
                order.push(pe.clone());
            }
            rv.insert(pe, vec![item]);
        }
    }
    for pe in order {
        let lefts = lv.get(&pe).map(Vec::as_slice).unwrap_or(&[]);
        let rights = rv.get(&pe).map(Vec::as_slice).unwrap_or(&[]);
        path.push(pe.clone());
        match (lefts.len(), rights.len()) {
            (0, 0) => {}
            (a, b) if a <= 1 && b <= 1 => {
                compare_walk(types, list.elem(), lefts.first().copied(), rights.first().copied(), path, out);
            }
            (a, b) if a >= 2 && b >= 2 => {
                let same = a == b && lefts.iter().zip(rights).all(|(x, y)| values_equal(x, y));
                if !same {
                    out.modified.insert(path);
                }
            }
            (a, _) if a >= 2 => {
                if let Some(first) = rights.first() {
                    compare_walk(types, list.elem(), None, Some(*first), path, out);
                }
                out.removed.insert(path);
            }
            _ => {
                if let Some(first) = lefts.first() {
                    compare_walk(types, list.elem(), Some(*first), None, path, out);
                }
                out.added.insert(path);
            }
        }
        path.pop();
    }
}

/// `rhs` merged over `lhs` (SMD's `Merge` with "keep the right-hand side"): maps merge key by
/// key, set and map lists item by item, and scalars, atomic maps and atomic lists are
/// replaced. Nothing is removed. A merged list keeps `lhs`'s items in place and puts `rhs`'s in
/// `rhs`'s order: items only in `lhs` stay where they were relative to the ones around them.
pub fn merge<'a>(types: &Types<'a>, tr: TypeRef<'a>, lhs: &Value, rhs: &Value) -> Value {
    merge_walk(types, tr, Some(lhs), Some(rhs)).unwrap_or(Value::Null)
}

fn keep_rhs(l: Option<&Value>, r: Option<&Value>) -> Option<Value> {
    r.or(l).cloned()
}

fn merge_walk<'a>(types: &Types<'a>, tr: TypeRef<'a>, l: Option<&Value>, r: Option<&Value>) -> Option<Value> {
    let atom = types.resolve(tr);
    // When the two sides differ in shape, the right-hand side's decides the result.
    let atom = if r.is_none() { deduce(atom, l) } else { deduce(atom, r) };
    match shape(atom) {
        Shape::Scalar(_) => keep_rhs(l, r),
        Shape::Map(map) => {
            let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
            if map.is_atomic() || (empty_map(lm) && empty_map(rm)) {
                return keep_rhs(l, r);
            }
            let mut out = Map::new();
            for key in union_keys(lm, rm) {
                let (lv, rv) = (lm.and_then(|m| m.get(key)), rm.and_then(|m| m.get(key)));
                if let Some(v) = merge_walk(types, map.child(key), lv, rv) {
                    out.insert(key.clone(), v);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Shape::List(list) => {
            let (ll, rl) = (l.and_then(Value::as_array), r.and_then(Value::as_array));
            if list.is_atomic() || (empty_list(ll) && empty_list(rl)) {
                return keep_rhs(l, r);
            }
            merge_items(types, &list, ll, rl)
        }
    }
}

/// SMD's `visitListItems` for merging, step for step.
fn merge_items<'a>(
    types: &Types<'a>,
    list: &ListType<'a>,
    ll: Option<&Vec<Value>>,
    rl: Option<&Vec<Value>>,
) -> Option<Value> {
    let elem = list.elem();
    let mut rpes: Vec<PathElement> = Vec::new();
    let mut robs: BTreeMap<PathElement, &Value> = BTreeMap::new();
    for item in rl.into_iter().flatten() {
        let Ok(pe) = item_element(types, list, item) else { continue };
        if !robs.contains_key(&pe) {
            robs.insert(pe.clone(), item);
            rpes.push(pe);
        }
    }
    let mut lpes: Vec<(PathElement, &Value)> = Vec::new();
    let mut lobs: BTreeMap<PathElement, &Value> = BTreeMap::new();
    for item in ll.into_iter().flatten() {
        let Ok(pe) = item_element(types, list, item) else { continue };
        match lobs.get_mut(&pe) {
            // A duplicated live item is not merged with the config's: it merges as null.
            Some(slot) => *slot = &NULL,
            None => {
                lobs.insert(pe.clone(), item);
            }
        }
        lpes.push((pe, item));
    }

    let mut shared = rpes.iter().filter(|pe| lobs.contains_key(*pe));
    let mut next_shared = shared.next();
    let mut merged_rhs: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::new();
    let (mut li, mut ri) = (0, 0);
    while li < lpes.len() || ri < rpes.len() {
        let before = (li, ri);
        if li < lpes.len() && ri < rpes.len() {
            let pe = &lpes[li].0;
            if *pe == rpes[ri] {
                merged_rhs.insert(&rpes[ri]);
                if let Some(v) = merge_walk(types, elem, lobs.get(pe).copied(), robs.get(pe).copied()) {
                    out.push(v);
                }
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if robs.contains_key(pe) && next_shared.is_some_and(|s| s != pe) {
                // A shared item, but not the next one the config orders: it comes later.
                li += 1;
                continue;
            }
        }
        if li < lpes.len() {
            let (pe, item) = &lpes[li];
            if !robs.contains_key(pe) {
                if let Some(v) = merge_walk(types, elem, Some(*item), None) {
                    out.push(v);
                }
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
            }
        }
        if ri < rpes.len() {
            let pe = &rpes[ri];
            merged_rhs.insert(pe);
            if let Some(v) = merge_walk(types, elem, lobs.get(pe).copied(), robs.get(pe).copied()) {
                out.push(v);
            }
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
        if (li, ri) == before {
            // Cannot happen (every round consumes an item); keeps the loop finite regardless.
            li += 1;
        }
    }
    (!out.is_empty()).then_some(Value::Array(out))
}

/// `v` without the fields and items in `to_remove` (SMD's `RemoveItems`). As in SMD, a map or
/// list left with nothing becomes `null` rather than disappearing, and an atomic one that
/// `to_remove` reaches into is dropped whole.
pub fn remove_items<'a>(types: &Types<'a>, tr: TypeRef<'a>, v: &Value, to_remove: &Set) -> Value {
    match shape(deduce(types.resolve(tr), Some(v))) {
        Shape::Scalar(_) => v.clone(),
        Shape::List(list) => {
            let Some(items) = v.as_array() else { return Value::Null };
            if items.is_empty() || list.is_atomic() {
                return Value::Null;
            }
            let mut out = Vec::new();
            for item in items {
                let Ok(pe) = item_element(types, &list, item) else {
                    out.push(item.clone());
                    continue;
                };
                if to_remove.members().contains(&pe) {
                    continue;
                }
                match to_remove.child(&pe) {
                    Some(sub) if !sub.is_empty() => out.push(remove_items(types, list.elem(), item, sub)),
                    _ => out.push(item.clone()),
                }
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Array(out)
            }
        }
        Shape::Map(map) => {
            let Some(fields) = v.as_object() else { return Value::Null };
            if fields.is_empty() || map.is_atomic() {
                return Value::Null;
            }
            let mut out = Map::new();
            for (key, value) in fields {
                let pe = PathElement::Field(key.clone());
                if to_remove.members().contains(&pe) {
                    continue;
                }
                let value = match to_remove.child(&pe) {
                    Some(sub) if !sub.is_empty() => remove_items(types, map.child(key), value, sub),
                    _ => value.clone(),
                };
                out.insert(key.clone(), value);
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Object(out)
            }
        }
    }
}

/// `s` with every declared struct field that has members under it made a member too (SMD's
/// `EnsureNamedFieldsAreMembers`), so that pruning can take a whole struct away.
pub fn ensure_named_fields_are_members<'a>(types: &Types<'a>, tr: TypeRef<'a>, s: &Set) -> Set {
    let (map, list) = match types.resolve(tr) {
        Atom::Map(m) => (Some(m), None),
        Atom::List(l) => (None, Some(l)),
        Atom::Any(_, m, l) => (Some(m), Some(l)),
        Atom::Scalar(_) => (None, None),
    };
    let mut members = s.members().clone();
    let mut children = BTreeMap::new();
    for (pe, child) in s.children() {
        let child_type = match (pe, map, list) {
            (PathElement::Field(name), Some(m), _) => {
                if m.declares(name) {
                    members.insert(pe.clone());
                }
                Some(m.child(name))
            }
            (PathElement::Key(_), _, Some(l)) => Some(l.elem()),
            _ => None,
        };
        let child = match child_type {
            Some(ct) => ensure_named_fields_are_members(types, ct, child),
            None => child.clone(),
        };
        children.insert(pe.clone(), child);
    }
    Set::from_parts(members, children)
}

/// How strictly [`validate`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// An applied configuration: types must fit, fields must be declared, no duplicates.
    Config,
    /// A stored object: only list items that cannot be told apart are refused (duplicates are
    /// allowed, as kube allows them in live objects).
    Live,
}

/// Checks `v` against its type as SMD's validation does, with its messages: one error as
/// `<path>: <message>`, several as `errors:` and one indented line each.
pub fn validate<'a>(types: &Types<'a>, tr: TypeRef<'a>, v: &Value, strictness: Strictness) -> Result<(), String> {
    let mut errors = Vec::new();
    validate_walk(types, tr, v, strictness, &mut Vec::new(), &mut errors);
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(one.clone()),
        many => Err(format!("errors:\n  {}", many.join("\n  "))),
    }
}

fn report(path: &[PathElement], message: String, errors: &mut Vec<String>) {
    if path.is_empty() {
        errors.push(message);
    } else {
        errors.push(format!("{}: {message}", Path(path.to_vec())));
    }
}

fn validate_walk<'a>(
    types: &Types<'a>,
    tr: TypeRef<'a>,
    v: &Value,
    strictness: Strictness,
    path: &mut Vec<PathElement>,
    errors: &mut Vec<String>,
) {
    let strict = strictness == Strictness::Config;
    match shape(deduce(types.resolve(tr), Some(v))) {
        Shape::Scalar(kind) => {
            if let Some(message) = scalar_error(kind, v).filter(|_| strict) {
                report(path, message, errors);
            }
        }
        Shape::List(list) => {
            let items = match v {
                Value::Null => return,
                Value::Array(items) => items,
                other => {
                    if strict {
                        report(path, format!("expected list, got &{{{}}}", go_v(other)), errors);
                    }
                    return;
                }
            };
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = if list.is_atomic() {
                    PathElement::Index(i64::try_from(i).unwrap_or(i64::MAX))
                } else {
                    match item_element(types, &list, item) {
                        Ok(pe) => pe,
                        Err(e) => {
                            report(path, format!("element {i}: {e}"), errors);
                            return;
                        }
                    }
                };
                if !seen.insert(pe.clone()) && strict && !list.is_atomic() {
                    report(path, format!("duplicate entries for key {pe}"), errors);
                }
                path.push(pe);
                validate_walk(types, list.elem(), item, strictness, path, errors);
                path.pop();
            }
        }
        Shape::Map(map) => {
            let fields = match v {
                Value::Null => return,
                Value::Object(fields) => fields,
                other => {
                    if strict {
                        report(path, format!("expected map, got &{{{}}}", go_v(other)), errors);
                    }
                    return;
                }
            };
            for (key, value) in fields {
                path.push(PathElement::Field(key.clone()));
                if !map.declares(key) && !map.allows_other_keys() && strict {
                    report(path, "field not declared in schema".into(), errors);
                    path.pop();
                    break;
                }
                validate_walk(types, map.child(key), value, strictness, path, errors);
                path.pop();
            }
        }
    }
}

fn scalar_error(kind: Scalar, v: &Value) -> Option<String> {
    match (kind, v) {
        (_, Value::Null)
        | (Scalar::Numeric, Value::Number(_))
        | (Scalar::String, Value::String(_))
        | (Scalar::Boolean, Value::Bool(_))
        | (Scalar::Untyped, Value::Number(_) | Value::String(_) | Value::Bool(_)) => None,
        (Scalar::Numeric, other) => Some(format!("expected numeric (int or float), got {}", go_type(other))),
        (Scalar::String, other) => {
            Some(format!("expected string, got &value.valueUnstructured{{Value:{}}}", go_v(other)))
        }
        (Scalar::Boolean, other) => Some(format!("expected boolean, got &{{{}}}", go_v(other))),
        (Scalar::Untyped, other) => Some(format!("expected any scalar, got &{{{}}}", go_v(other))),
    }
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of a decoded JSON value (`map[a:1 b:x]`, `[1 2]`).
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            format!("map[{}]", m.iter().map(|(k, v)| format!("{k}:{}", go_v(v))).collect::<Vec<_>>().join(" "))
        }
        other => value_string(other),
    }
}
