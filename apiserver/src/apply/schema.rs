//! Types from OpenAPI v3 schemas, as kube-openapi's `schemaconv` turns them into SMD types:
//! what a node of an object is (a scalar, a map or struct, a list, or any of them) and how its
//! parts merge and are owned.
//!
//! Resolution is lazy: a [`TypeRef`] points at a schema node and is resolved one step at a
//! time as a walk descends a value, so a recursive schema (`JSONSchemaProps` holds itself) costs
//! no more than the value's depth, and a chain of `$ref`s is followed a bounded number of hops.
//!
//! The rules, kube's:
//! - `$ref` (or `allOf: [{$ref}]`) names a definition in `components.schemas`; an
//!   `x-kubernetes-map-type` next to it overrides the definition's. `Quantity` is a scalar,
//!   `RawExtension` untyped.
//! - `x-kubernetes-int-or-string` is a scalar; `integer`, `number`, `boolean`, `string` are.
//! - `object`: `properties` are its fields; other keys take `additionalProperties`' type, or are
//!   deduced when there is none and either no properties or `x-kubernetes-preserve-unknown-fields`
//!   (which its inline descendants inherit), and are not allowed otherwise. It is atomic with
//!   `x-kubernetes-map-type: atomic`, granular by default.
//! - `array`: `x-kubernetes-list-type` `atomic`, `set`, or `map` keyed by
//!   `x-kubernetes-list-map-keys`; without one, `x-kubernetes-patch-strategy: merge` makes a map
//!   list keyed by `x-kubernetes-patch-merge-key` (a set without a key); otherwise atomic.
//! - No `type`: any of scalar, map, list, whichever the value is.
//! - Deduced (no schema at all): maps granular with deduced values, lists atomic.

use serde_json::{Map, Value};

/// How many `$ref`s in a row resolution follows before calling the type deduced.
const MAX_REF_HOPS: usize = 16;
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// The named schemas (`components.schemas`) that `$ref`s point into.
#[derive(Debug, Clone, Copy, Default)]
pub struct Types<'a> {
    schemas: Option<&'a Map<String, Value>>,
}

/// A reference to a type: a schema node, or SMD's deduced or untyped types.
#[derive(Debug, Clone, Copy)]
pub struct TypeRef<'a> {
    ty: Ty<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Ty<'a> {
    /// A schema node; `preserve` is `x-kubernetes-preserve-unknown-fields` inherited from an
    /// inline ancestor.
    Schema {
        node: &'a Value,
        preserve: bool,
    },
    Deduced,
    Untyped,
}

/// What kind of scalar a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    Numeric,
    String,
    Boolean,
    Untyped,
}

/// A resolved type: one shape, or (no `type`, deduced, untyped) any of three, picked by the
/// value.
#[derive(Debug, Clone, Copy)]
pub enum Atom<'a> {
    Scalar(Scalar),
    Map(MapType<'a>),
    List(ListType<'a>),
    Any(Scalar, MapType<'a>, ListType<'a>),
}

/// A map or struct.
#[derive(Debug, Clone, Copy)]
pub struct MapType<'a> {
    props: Option<&'a Map<String, Value>>,
    /// The type of keys that are not fields; `None` when there may be none.
    elem: Option<TypeRef<'a>>,
    atomic: bool,
    preserve: bool,
}

/// A list and how its items are told apart.
#[derive(Debug, Clone, Copy)]
pub struct ListType<'a> {
    kind: ListKind<'a>,
    elem: TypeRef<'a>,
}

#[derive(Debug, Clone, Copy)]
pub enum ListKind<'a> {
    /// Replaced whole, owned as one field.
    Atomic,
    /// Scalars, each owned by value.
    Set,
    /// Maps, each owned by its key fields.
    Map(Keys<'a>),
}

/// The key fields of a map list.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a>(KeyNames<'a>);

#[derive(Debug, Clone, Copy)]
enum KeyNames<'a> {
    One(&'a str),
    Many(&'a [Value]),
}

impl<'a> Keys<'a> {
    /// The key fields' names, in the schema's order.
    pub fn names(self) -> Vec<&'a str> {
        match self.0 {
            KeyNames::One(k) => vec![k],
            KeyNames::Many(keys) => keys.iter().filter_map(Value::as_str).collect(),
        }
    }
}

impl<'a> TypeRef<'a> {
    /// SMD's deduced type: maps granular with deduced values, lists atomic, any scalar.
    pub const DEDUCED: Self = TypeRef { ty: Ty::Deduced };
    /// SMD's untyped type: anything, atomic.
    pub const UNTYPED: Self = TypeRef { ty: Ty::Untyped };

    /// The type a schema node describes.
    pub fn schema(node: &'a Value) -> Self {
        TypeRef { ty: Ty::Schema { node, preserve: false } }
    }

    fn inline(node: &'a Value, preserve: bool) -> Self {
        TypeRef { ty: Ty::Schema { node, preserve } }
    }
}

impl<'a> MapType<'a> {
    /// Replaced whole and owned as one field.
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// Whether `name` is one of the struct's declared fields.
    pub fn declares(&self, name: &str) -> bool {
        self.props.is_some_and(|p| p.contains_key(name))
    }

    /// Whether keys other than the declared fields may appear.
    pub fn allows_other_keys(&self) -> bool {
        self.elem.is_some()
    }

    /// The type of key `name`: the field's, else the map's value type, else deduced.
    pub fn child(&self, name: &str) -> TypeRef<'a> {
        match self.props.and_then(|p| p.get(name)) {
            Some(node) => TypeRef::inline(node, self.preserve),
            None => self.elem.unwrap_or(TypeRef::DEDUCED),
        }
    }

    fn default_of(&self, name: &str) -> Option<&'a Value> {
        self.props?.get(name)?.get("default")
    }
}

impl<'a> ListType<'a> {
    pub fn kind(&self) -> ListKind<'a> {
        self.kind
    }

    pub fn is_atomic(&self) -> bool {
        matches!(self.kind, ListKind::Atomic)
    }

    /// The items' type.
    pub fn elem(&self) -> TypeRef<'a> {
        self.elem
    }
}

impl<'a> Types<'a> {
    /// Types whose `$ref`s resolve in `schemas` (an OpenAPI document's `components.schemas`).
    pub fn new(schemas: &'a Map<String, Value>) -> Self {
        Types { schemas: Some(schemas) }
    }

    /// The types of an OpenAPI v3 document (none if it has no `components.schemas`).
    pub fn of_document(doc: &'a Value) -> Self {
        Types { schemas: doc.pointer("/components/schemas").and_then(Value::as_object) }
    }

    /// The definition called `name`.
    pub fn named(&self, name: &str) -> Option<TypeRef<'a>> {
        self.schemas?.get(name).map(TypeRef::schema)
    }

    /// What `tr` is, following references.
    pub fn resolve(&self, tr: TypeRef<'a>) -> Atom<'a> {
        let (mut node, mut preserve) = match tr.ty {
            Ty::Deduced => return deduced(),
            Ty::Untyped => return untyped(),
            Ty::Schema { node, preserve } => (node, preserve),
        };
        let mut map_override = None;
        for _ in 0..MAX_REF_HOPS {
            let Some(name) = ref_name(node) else { break };
            if map_override.is_none() {
                map_override = map_type(node);
            }
            match name {
                QUANTITY => return Atom::Scalar(Scalar::Untyped),
                RAW_EXTENSION => return untyped(),
                _ => {}
            }
            match self.schemas.and_then(|s| s.get(name)) {
                Some(def) => {
                    node = def;
                    // A named type does not inherit its referrer's preserve-unknown-fields.
                    preserve = false;
                }
                None => return deduced(),
            }
        }
        if ref_name(node).is_some() {
            return deduced();
        }
        if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            preserve = true;
        }
        let mut atom = parse(node, preserve);
        if let Some(atomic) = map_override {
            if let Atom::Map(m) | Atom::Any(_, m, _) = &mut atom {
                m.atomic = atomic;
            }
        }
        atom
    }

    /// The default of map-list key field `key`, from the items' schema.
    pub(crate) fn key_default(&self, list: &ListType<'a>, key: &str) -> Option<&'a Value> {
        match self.resolve(list.elem) {
            Atom::Map(m) | Atom::Any(_, m, _) => m.default_of(key),
            _ => None,
        }
    }
}

fn deduced<'a>() -> Atom<'a> {
    Atom::Any(
        Scalar::Untyped,
        MapType { props: None, elem: Some(TypeRef::DEDUCED), atomic: false, preserve: false },
        ListType { kind: ListKind::Atomic, elem: TypeRef::UNTYPED },
    )
}

fn untyped<'a>() -> Atom<'a> {
    Atom::Any(
        Scalar::Untyped,
        MapType { props: None, elem: Some(TypeRef::UNTYPED), atomic: true, preserve: false },
        ListType { kind: ListKind::Atomic, elem: TypeRef::UNTYPED },
    )
}

/// The definition a node refers to: the last segment of its `$ref`, or of the `$ref` of its
/// single `allOf`.
fn ref_name(node: &Value) -> Option<&str> {
    let r = match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r,
        None => match node.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
            Some([only]) => only.get("$ref").and_then(Value::as_str)?,
            _ => return None,
        },
    };
    r.rsplit('/').next().filter(|n| !n.is_empty())
}

/// `x-kubernetes-map-type`: `Some(true)` atomic, `Some(false)` granular.
fn map_type(node: &Value) -> Option<bool> {
    match node.get("x-kubernetes-map-type").and_then(Value::as_str) {
        Some("atomic") => Some(true),
        Some("granular") => Some(false),
        _ => None,
    }
}

fn parse(node: &Value, preserve: bool) -> Atom<'_> {
    if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Atom::Scalar(Scalar::Untyped);
    }
    let ty = match node.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or(""),
        _ => "",
    };
    match ty {
        "" => Atom::Any(Scalar::Untyped, parse_object(node, preserve), parse_list(node, preserve)),
        "object" => Atom::Map(parse_object(node, preserve)),
        "array" => Atom::List(parse_list(node, preserve)),
        "integer" | "number" => Atom::Scalar(Scalar::Numeric),
        "boolean" => Atom::Scalar(Scalar::Boolean),
        "string" => match node.get("format").and_then(Value::as_str).unwrap_or("") {
            "" | "byte" => Atom::Scalar(Scalar::String),
            _ => Atom::Scalar(Scalar::Untyped),
        },
        _ => Atom::Scalar(Scalar::Untyped),
    }
}

fn parse_object(node: &Value, preserve: bool) -> MapType<'_> {
    let props = node.get("properties").and_then(Value::as_object);
    let has_props = props.is_some_and(|p| !p.is_empty());
    let elem = match node.get("additionalProperties") {
        None | Some(Value::Null) => (preserve || !has_props).then_some(TypeRef::DEDUCED),
        Some(Value::Bool(allowed)) => allowed.then_some(TypeRef::DEDUCED),
        Some(schema @ Value::Object(_)) => Some(TypeRef::inline(schema, preserve)),
        Some(_) => Some(TypeRef::DEDUCED),
    };
    MapType { props, elem, atomic: map_type(node) == Some(true), preserve }
}

fn parse_list(node: &Value, preserve: bool) -> ListType<'_> {
    let elem = match node.get("items") {
        Some(schema @ Value::Object(_)) => TypeRef::inline(schema, preserve),
        Some(_) => TypeRef::DEDUCED,
        None => TypeRef::UNTYPED,
    };
    ListType { kind: list_kind(node), elem }
}

/// kube's `getListElementRelationship`.
fn list_kind(node: &Value) -> ListKind<'_> {
    let text = |key: &str| node.get(key).and_then(Value::as_str);
    if let Some(list_type) = node.get("x-kubernetes-list-type") {
        return match list_type.as_str() {
            Some("set") => ListKind::Set,
            Some("map") => match node.get("x-kubernetes-list-map-keys") {
                Some(Value::Array(keys)) if keys.iter().any(Value::is_string) => {
                    ListKind::Map(Keys(KeyNames::Many(keys.as_slice())))
                }
                _ => ListKind::Set,
            },
            _ => ListKind::Atomic,
        };
    }
    match text("x-kubernetes-patch-strategy") {
        Some("merge" | "merge,retainKeys") => match text("x-kubernetes-patch-merge-key") {
            Some(key) => ListKind::Map(Keys(KeyNames::One(key))),
            None => ListKind::Set,
        },
        _ => ListKind::Atomic,
    }
}
