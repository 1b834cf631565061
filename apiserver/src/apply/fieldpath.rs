//! Field paths and sets of them, as structured-merge-diff's `fieldpath` package has them, and
//! their two renderings: FieldsV1 (the JSON trie in `metadata.managedFields`) and the text kube
//! prints in conflict messages (`.spec.containers[name="nginx"].image`).
//!
//! A [`Set`] is a tree: each node holds the elements that are members of the set and, apart
//! from that, the elements under which deeper members live. Being a parent of a member does
//! not make an element a member; FieldsV1 writes a node that is both as `{".":{},...}`:
//!
//! ```text
//! .metadata.labels        (member)        {"f:metadata":{"f:labels":{".":{},"f:app":{}}}}
//! .metadata.labels.app    (member)
//! ```
//!
//! Elements sort as SMD sorts them: field names, then keys, then values, then indexes; values
//! by SMD's total order (numbers numerically, then strings, booleans, lists, maps, null). Every
//! walk here follows that order, so FieldsV1 comes out byte for byte as kube writes it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Number, Value};

/// One step into an object: a field of a map, an item of a map list by its key fields, an item
/// of a set list by its value, or an item of an atomic list by its index.
#[derive(Debug, Clone)]
pub enum PathElement {
    Field(String),
    /// Key fields, sorted by name.
    Key(Vec<(String, Value)>),
    Value(Value),
    Index(i64),
}

impl PathElement {
    /// A key element; the fields are sorted by name (stably, as SMD does).
    pub fn key(fields: impl IntoIterator<Item = (String, Value)>) -> Self {
        let mut fields: Vec<(String, Value)> = fields.into_iter().collect();
        fields.sort_by(|(a, _), (b, _)| a.cmp(b));
        PathElement::Key(fields)
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The element as a FieldsV1 key: `f:name`, `k:{"name":"x"}`, `v:"x"`, `i:3` (compact JSON,
    /// object keys sorted, Go's escaping).
    pub fn to_fields_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut s = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    write_str(name, &mut s);
                    s.push(':');
                    write_json(value, &mut s);
                }
                s.push('}');
                s
            }
            PathElement::Value(value) => {
                let mut s = String::from("v:");
                write_json(value, &mut s);
                s
            }
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Reads a FieldsV1 key; `Ok(None)` for a type this version does not know (kube drops
    /// those), an error for a malformed one (SMD's `DeserializePathElement`).
    pub fn from_fields_key(key: &str) -> Result<Option<Self>, String> {
        let b = key.as_bytes();
        if b.len() < 2 {
            return Err("key must be 2 characters long:".into());
        }
        if b[1] != b':' {
            return Err(format!("missing colon: {key}"));
        }
        // b[1] is ASCII, so 2 is a character boundary.
        let rest = &key[2..];
        let parse = |s: &str| serde_json::from_str::<Value>(s).map_err(|e| e.to_string());
        match b[0] {
            b'f' => Ok(Some(PathElement::Field(rest.to_string()))),
            b'v' => Ok(Some(PathElement::Value(parse(rest)?))),
            b'k' => match parse(rest)? {
                Value::Object(m) => Ok(Some(PathElement::key(m))),
                Value::Null => Ok(Some(PathElement::Key(Vec::new()))),
                _ => Err(format!("key is not a JSON object: {key}")),
            },
            b'i' => rest.parse::<i64>().map(|i| Some(PathElement::Index(i))).map_err(|e| e.to_string()),
            _ => Ok(None),
        }
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((an, av), (bn, bv)) in a.iter().zip(b) {
                    let c = an.cmp(bn).then_with(|| compare_values(av, bv));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// kube's rendering (`fieldpath.PathElement.String`): `.name`, `[k="v",n=1]`, `[="v"]`, `[3]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", value_string(value))?;
                }
                f.write_str("]")
            }
            PathElement::Value(value) => write!(f, "[={}]", value_string(value)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root; it prints as kube prints it in conflicts.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of field names only (`["spec", "replicas"]` is `.spec.replicas`).
    pub fn fields(names: &[&str]) -> Self {
        Path(names.iter().map(|n| PathElement::Field((*n).to_string())).collect())
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|pe| write!(f, "{pe}"))
    }
}

/// A set of field paths (SMD's `fieldpath.Set`). The empty path is never a member: nobody owns
/// the whole object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Self {
        Set::default()
    }

    /// Adds `path`; its parents do not become members.
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, parents)) = path.split_last() else { return };
        let mut node = self;
        for pe in parents {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.members.insert(last.clone());
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        let Some((last, parents)) = path.split_last() else { return false };
        let mut node = self;
        for pe in parents {
            match node.children.get(pe) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.members.contains(last)
    }

    /// No member anywhere in the tree.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len() + self.children.values().map(Set::len).sum::<usize>()
    }

    /// The members of this node (paths of length one).
    pub fn members(&self) -> &BTreeSet<PathElement> {
        &self.members
    }

    /// The subtree under `pe`, if any.
    pub fn child(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    /// The subtrees, by element.
    pub fn children(&self) -> &BTreeMap<PathElement, Set> {
        &self.children
    }

    pub(crate) fn from_parts(members: BTreeSet<PathElement>, children: BTreeMap<PathElement, Set>) -> Self {
        Set { members, children }
    }

    /// Members of either set.
    pub fn union(&self, other: &Set) -> Set {
        let mut children = self.children.clone();
        for (pe, theirs) in &other.children {
            let merged = match children.get(pe) {
                Some(ours) => ours.union(theirs),
                None => theirs.clone(),
            };
            children.insert(pe.clone(), merged);
        }
        Set { members: self.members.union(&other.members).cloned().collect(), children }
    }

    /// Members of both sets; empty subtrees are dropped.
    pub fn intersection(&self, other: &Set) -> Set {
        let mut children = BTreeMap::new();
        for (pe, ours) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = ours.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        Set { members: self.members.intersection(&other.members).cloned().collect(), children }
    }

    /// Members of `self` not in `other`, leaf by leaf: a member of `other` does not take away
    /// what lies under it in `self` (SMD's `Difference`).
    pub fn difference(&self, other: &Set) -> Set {
        self.without(other, false)
    }

    /// Like [`Set::difference`], but a member of `other` also takes away everything under it
    /// (SMD's `RecursiveDifference`, how reset fields are filtered out).
    pub fn recursive_difference(&self, other: &Set) -> Set {
        self.without(other, true)
    }

    /// `self` less `other`; `recursive`: a member of `other` takes its subtree in `self` too.
    fn without(&self, other: &Set, recursive: bool) -> Set {
        let mut children = BTreeMap::new();
        for (pe, ours) in &self.children {
            if recursive && other.members.contains(pe) {
                continue;
            }
            match other.children.get(pe) {
                Some(theirs) => {
                    let rest = ours.without(theirs, recursive);
                    if !rest.is_empty() {
                        children.insert(pe.clone(), rest);
                    }
                }
                None => {
                    children.insert(pe.clone(), ours.clone());
                }
            }
        }
        Set { members: self.members.difference(&other.members).cloned().collect(), children }
    }

    /// The members that have nothing under them (SMD's `Leaves`).
    pub fn leaves(&self) -> Set {
        Set {
            members: self.members.iter().filter(|pe| !self.children.contains_key(*pe)).cloned().collect(),
            children: self.children.iter().map(|(pe, c)| (pe.clone(), c.leaves())).collect(),
        }
    }

    /// Every member, in SMD's iteration order: a node's members, then its subtrees.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            prefix.push(pe.clone());
            out.push(Path(prefix.clone()));
            prefix.pop();
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The set as FieldsV1 text, byte for byte as kube writes it (`{}` when empty).
    pub fn to_fields_v1(&self) -> String {
        let mut out = String::new();
        self.emit(false, &mut out);
        out
    }

    /// The set as a FieldsV1 JSON value (same content; key order is the map's, not kube's).
    pub fn to_fields_v1_value(&self) -> Value {
        serde_json::from_str(&self.to_fields_v1()).unwrap_or_else(|_| Value::Object(Map::new()))
    }

    fn emit(&self, include_self: bool, out: &mut String) {
        out.push('{');
        let mut first = true;
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            out.push_str("\".\":{}");
            first = false;
        }
        let mut elements: Vec<&PathElement> = self.members.iter().chain(self.children.keys()).collect();
        elements.sort();
        elements.dedup();
        for pe in elements {
            if !first {
                out.push(',');
            }
            first = false;
            write_str(&pe.to_fields_key(), out);
            out.push(':');
            match self.children.get(pe) {
                Some(child) => child.emit(self.members.contains(pe), out),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }

    /// Reads FieldsV1 text (SMD's `Set.FromJSON`).
    pub fn from_fields_v1_str(text: &str) -> Result<Set, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Set::from_fields_v1(&value)
    }

    /// Reads a FieldsV1 value: unknown key types are dropped, an empty or `null` node is a
    /// member, and `"."` marks a node with children as a member too.
    pub fn from_fields_v1(value: &Value) -> Result<Set, String> {
        match value {
            Value::Null => Ok(Set::default()),
            Value::Object(m) => Ok(read_node(m)?.0.unwrap_or_default()),
            other => Err(format!("managedFields parsing: expected an object, got {other}")),
        }
    }
}

/// One FieldsV1 node: its subtree (if it names any child) and whether the node is a member.
fn read_node(node: &Map<String, Value>) -> Result<(Option<Set>, bool), String> {
    let mut children: Option<Set> = None;
    let mut is_member = false;
    for (key, value) in node {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(pe) = PathElement::from_fields_key(key).map_err(|e| format!("parsing key as path element: {e}"))?
        else {
            continue;
        };
        let (grandchildren, child_is_member) = match value {
            Value::Object(m) => read_node(m)?,
            Value::Null => (None, true),
            other => return Err(format!("managedFields parsing: expected an object at {key:?}, got {other}")),
        };
        if child_is_member {
            children.get_or_insert_with(Set::default).members.insert(pe.clone());
        }
        if let Some(g) = grandchildren {
            children.get_or_insert_with(Set::default).children.insert(pe, g);
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children, is_member))
}

/// SMD's total order of values: numbers (integers and floats numerically), then strings,
/// booleans, lists, maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = compare_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => compare_maps(x, y),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_numbers(x: &Number, y: &Number) -> Ordering {
    let int = |n: &Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
    match (int(x), int(y)) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => {
            let (a, b) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            a.partial_cmp(&b).unwrap_or(Ordering::Equal)
        }
    }
}

/// SMD's `MapCompare`: the union of keys in order; the first difference decides.
fn compare_maps(l: &Map<String, Value>, r: &Map<String, Value>) -> Ordering {
    if l.is_empty() && r.is_empty() {
        return Ordering::Equal;
    }
    let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
    for (i, key) in keys.into_iter().enumerate() {
        let c = if i == l.len() {
            Ordering::Less
        } else if i == r.len() {
            Ordering::Greater
        } else {
            match (l.get(key), r.get(key)) {
                (None, _) => Ordering::Greater,
                (_, None) => Ordering::Less,
                (Some(a), Some(b)) => compare_values(a, b),
            }
        };
        if c != Ordering::Equal {
            return c;
        }
    }
    Ordering::Equal
}

/// SMD's `value.ToString`, used in rendered paths: strings quoted as Go's `%q`, numbers and
/// booleans bare, lists `[a,b]`, maps `k=v` run together.
pub fn value_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => crate::status::go_quote(s),
        Value::Array(items) => format!("[{}]", items.iter().map(value_string).collect::<Vec<_>>().join(",")),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}={}", value_string(v))).collect::<Vec<_>>().concat(),
    }
}

/// Go's `%v` of a float64: the shortest digits, in exponent form below 1e-4 or from 1e6 up.
pub(crate) fn go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// A value as Go's `encoding/json` writes it: compact, map keys sorted, `<`, `>`, `&` escaped,
/// floats without a needless fraction.
pub(crate) fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(key, out);
                out.push(':');
                if let Some(value) = m.get(key) {
                    write_json(value, out);
                }
            }
            out.push('}');
        }
    }
}

fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let sci = format!("{f:e}");
        match sci.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => sci,
        }
    } else {
        format!("{f}")
    }
}

/// A JSON string as Go writes it (HTML-safe).
pub(crate) fn write_str(s: &str, out: &mut String) {
    let encoded = crate::status::go_json(&s);
    out.push_str(String::from_utf8_lossy(&encoded).trim_end_matches('\n'));
}
