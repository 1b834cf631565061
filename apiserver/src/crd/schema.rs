//! CustomResourceDefinition schemas as kube-apiserver 1.33 reads and enforces them: the rules a
//! CRD version's `schema.openAPIV3Schema` must follow, and the steps every write of a custom
//! object goes through.
//!
//! ```text
//!   CRD write      schema_errors(json, at)   NewStructural + ValidateStructural, ValidateDefaults,
//!                                            ValidateCustomResourceDefinitionOpenAPISchema
//!   object write   body ─▶ prune ─▶ default ─▶ (admission) ─▶ validate ─▶ store
//!                          │        │                          └ kube-openapi value checks,
//!                          │        │                            embedded resources, list sets/maps
//!                          │        └ missing fields and non-nullable nulls get their defaults
//!                          └ unknown fields dropped (their paths are kube's unknown-field warnings),
//!                            then non-nullable nulls without a default
//! ```
//!
//! What holds:
//! - Error texts, kinds and field paths are kube's, quirks included: value errors name the path
//!   twice (`spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"`),
//!   failed `anyOf`/`oneOf`/`allOf`/`not` are reported at `<nil>`, a default's errors sit at the
//!   default (`…default: Invalid value: "string":  in body must be of type integer: "string"`).
//! - Values are shown as Go shows them (`%v` floats such as `1e+06`, `%#v` maps such as
//!   `map[string]interface {}{"a":1}`): keel's [`FieldError`] prints what it is given.
//! - Values are checked by kube-openapi's validators in their order (type, junctors, string,
//!   format, number, array, enum, object) with its match counting, so a failed `anyOf` reports
//!   the alternative kube reports. Where kube walks a Go map, keys come in order here.
//! - Nothing panics on any JSON; recursion follows the nesting of the JSON and the schema.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv6Addr;
use std::sync::LazyLock;

use serde_json::{Map, Number, Value};

use crate::meta;
use crate::resources::Names;
use crate::status::{go_quote, go_strings, FieldError, FieldErrorType};

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const LIST_TYPE: &str = "x-kubernetes-list-type";
const LIST_MAP_KEYS: &str = "x-kubernetes-list-map-keys";
const MAP_TYPE: &str = "x-kubernetes-map-type";
const VALIDATIONS: &str = "x-kubernetes-validations";

/// The fields a resource root and an embedded resource keep whatever their schema says.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];
/// The types a schema may name (`openapiV3Types`, in kube's order).
const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];
/// The formats custom objects are checked against in 1.33, without dashes
/// (`supportedVersionedFormats`); other formats are stripped from the validator.
const CRD_FORMATS: &str = "bsonobjectid uri email hostname ipv4 ipv6 cidr mac uuid uuid3 uuid4 uuid5 isbn isbn10 \
    isbn13 creditcard ssn hexcolor rgbcolor byte password date duration datetime";
/// The JSONSchemaProps keywords a structural schema keeps: `example`, `externalDocs` and unknown
/// keys change nothing.
const KEYWORDS: &str = "id $schema $ref description type format title default maximum exclusiveMaximum minimum \
    exclusiveMinimum maxLength minLength pattern maxItems minItems uniqueItems multipleOf enum maxProperties \
    minProperties required items allOf oneOf anyOf not properties additionalProperties patternProperties \
    dependencies additionalItems definitions nullable x-kubernetes-preserve-unknown-fields \
    x-kubernetes-embedded-resource x-kubernetes-int-or-string x-kubernetes-list-map-keys x-kubernetes-list-type \
    x-kubernetes-map-type x-kubernetes-validations";

fn listed(words: &str, word: &str) -> bool {
    words.split_whitespace().any(|w| w == word)
}

/// A structural schema node parsed from a CRD version's `schema.openAPIV3Schema` (JSON, camelCase
/// as in apiextensions v1 JSONSchemaProps). A keyword of the wrong JSON type reads as unset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    /// `type` (empty when unset; likewise `format` and `pattern`).
    pub type_: String,
    pub format: String,
    pub nullable: bool,
    /// `default` (a JSON null is no default, as in kube).
    pub default: Option<Value>,
    /// `enum` (empty: any value).
    pub enum_values: Vec<Value>,
    pub pattern: String,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub required: Vec<String>,
    pub properties: BTreeMap<String, Schema>,
    /// `items` as a schema (an array of schemas is not structural and reads as unset).
    pub items: Option<Box<Schema>>,
    /// `additionalProperties` as a schema.
    pub additional_properties: Option<Box<Schema>>,
    /// `additionalProperties` as a boolean (`Some(false)` closes the object).
    pub additional_properties_allowed: Option<bool>,
    pub int_or_string: bool,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    /// The junctors: values are checked against them, never pruned or defaulted by them.
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
}

impl Schema {
    /// Parses a JSONSchemaProps JSON value (unknown keys ignored). Never panics on any JSON.
    pub fn parse(v: &Value) -> Schema {
        let word = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let float = |k: &str| v.get(k).and_then(Value::as_f64);
        let int = |k: &str| {
            v.get(k).and_then(|x| x.as_i64().or_else(|| x.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)))
        };
        let names = |k: &str| list(v, k).iter().filter_map(Value::as_str).map(str::to_string).collect();
        let schemas = |k: &str| list(v, k).iter().map(Schema::parse).collect();
        let boxed = |k: &str| schema_at(v, k).map(|x| Box::new(Schema::parse(x)));
        Schema {
            type_: text(v, "type").to_string(),
            format: text(v, "format").to_string(),
            nullable: on(v, "nullable"),
            default: v.get("default").filter(|d| !d.is_null()).cloned(),
            enum_values: list(v, "enum").to_vec(),
            pattern: text(v, "pattern").to_string(),
            maximum: float("maximum"),
            exclusive_maximum: on(v, "exclusiveMaximum"),
            minimum: float("minimum"),
            exclusive_minimum: on(v, "exclusiveMinimum"),
            multiple_of: float("multipleOf"),
            max_length: int("maxLength"),
            min_length: int("minLength"),
            max_items: int("maxItems"),
            min_items: int("minItems"),
            unique_items: on(v, "uniqueItems"),
            max_properties: int("maxProperties"),
            min_properties: int("minProperties"),
            required: names("required"),
            properties: entries(v, "properties").into_iter().map(|(k, x)| (k.clone(), Schema::parse(x))).collect(),
            items: boxed("items"),
            additional_properties: boxed("additionalProperties"),
            additional_properties_allowed: v.get("additionalProperties").and_then(Value::as_bool),
            int_or_string: on(v, INT_OR_STRING),
            preserve_unknown_fields: on(v, PRESERVE),
            embedded_resource: on(v, EMBEDDED),
            list_type: word(LIST_TYPE),
            list_map_keys: names(LIST_MAP_KEYS),
            map_type: word(MAP_TYPE),
            all_of: schemas("allOf"),
            any_of: schemas("anyOf"),
            one_of: schemas("oneOf"),
            not: boxed("not"),
        }
    }

    /// Whether `additionalProperties` is given at all (as a schema or a boolean).
    fn has_additional(&self) -> bool {
        self.additional_properties.is_some() || self.additional_properties_allowed.is_some()
    }

    /// The types values are checked against: int-or-string is `integer,string` in objects, and no
    /// type when a default is checked (kube builds that validator without it).
    fn types(&self, mode: Mode) -> Vec<&str> {
        match (self.int_or_string && mode == Mode::Object, self.type_.as_str()) {
            (true, _) => vec!["integer", "string"],
            (false, "") => Vec::new(),
            (false, t) => vec![t],
        }
    }

    /// The format values are checked against (objects drop the formats CRDs do not support).
    fn format_in(&self, mode: Mode) -> &str {
        let kept = mode == Mode::Default || listed(CRD_FORMATS, &self.format.replace('-', ""));
        if kept {
            &self.format
        } else {
            ""
        }
    }
}

/// Go-ish type of a JSON value for messages ("string", "integer", "number", "boolean", "object",
/// "array", "null"); integers are the numbers that fit an int64, as kube decodes them.
pub fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.as_i64().is_some() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------
// What kube's CRD validation says of a version's openAPIV3Schema.

/// What kube's CRD validation says of a version's openAPIV3Schema, each error at its path below
/// `at` (e.g. `spec.versions[0].schema.openAPIV3Schema`): a nullable root; the structural errors
/// (sorted, as kube sorts them), or else the errors of the defaults; the keyword rules (`$ref is
/// not supported`, list and map types, …); and, only when nothing else is wrong, why the schema
/// cannot be made structural at all.
pub fn schema_errors(v: &Value, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    if on(v, "nullable") {
        out.push(FieldError::forbidden(&child(at, "nullable"), "nullable cannot be true at the root"));
    }
    let unstructural = init_error(v);
    if unstructural.is_none() {
        let mut errors = Vec::new();
        invariants(v, Level::Root, at, &mut errors);
        completeness(v, v, at, at, &mut errors);
        errors.sort_by_cached_key(ToString::to_string);
        if errors.is_empty() {
            default_errors(&Schema::parse(v), at, true, false, &mut out);
        }
        out.extend(errors);
    }
    keyword_errors(v, at, &Scope::default(), true, &mut out);
    match unstructural {
        Some(why) if out.is_empty() => vec![FieldError::invalid(at, Value::String(String::new()), why)],
        _ => out,
    }
}

/// Why kube's `NewStructural` cannot convert the schema, if it cannot.
fn init_error(v: &Value) -> Option<&'static str> {
    let unsupported = [
        (!text(v, "id").is_empty(), "OpenAPIV3Schema 'id' is not supported"),
        (!text(v, "$schema").is_empty(), "OpenAPIV3Schema 'schema' is not supported"),
        (!text(v, "$ref").is_empty(), "OpenAPIV3Schema '$ref' is not supported"),
        (!entries(v, "patternProperties").is_empty(), "OpenAPIV3Schema 'patternProperties' is not supported"),
        (!entries(v, "dependencies").is_empty(), "OpenAPIV3Schema 'dependencies' is not supported"),
        (given(v, "additionalItems"), "OpenAPIV3Schema 'additionalItems' is not supported"),
        (!entries(v, "definitions").is_empty(), "OpenAPIV3Schema 'definitions' is not supported"),
        (
            v.get(PRESERVE) == Some(&Value::Bool(false)),
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined",
        ),
        (!list(v, "items").is_empty(), "OpenAPIV3Schema 'items' must be a schema, but is an array"),
    ];
    if let Some(&(_, why)) = unsupported.iter().find(|(set, _)| *set) {
        return Some(why);
    }
    let below =
        [schema_at(v, "not"), schema_at(v, "items"), schema_at(v, "additionalProperties")].into_iter().flatten();
    let junctors = ["allOf", "anyOf", "oneOf"].into_iter().flat_map(|k| list(v, k));
    below.chain(junctors).chain(entries(v, "properties").into_iter().map(|(_, p)| p)).find_map(init_error)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// kube's `validateStructuralInvariants` of schema `s` at `at`.
fn invariants(s: &Value, level: Level, at: &str, out: &mut Vec<FieldError>) {
    let here = |k: &str| child(at, k);
    let t = text(s, "type");
    let items = schema_at(s, "items");
    if t == "array" && items.is_none() {
        out.push(required(&here("items"), "must be specified"));
    }
    if let Some(i) = items {
        invariants(i, Level::Item, &here("items"), out);
    }
    for (k, p) in entries(s, "properties") {
        invariants(p, Level::Field, &property(at, k), out);
    }
    let extra = additional(s);
    if extra.is_some() && level == Level::Root {
        out.push(FieldError::forbidden(&here("additionalProperties"), "must not be used at the root"));
    }
    if let Some(x) = extra.filter(|x| x.is_object()) {
        invariants(x, Level::Field, &here("additionalProperties"), out);
    }
    let (int_or_string, keep, embedded) = (on(s, INT_OR_STRING), on(s, PRESERVE), on(s, EMBEDDED));
    for (k, set) in [(PRESERVE, keep), (EMBEDDED, embedded)] {
        if int_or_string && set {
            out.push(FieldError::invalid(
                &here(k),
                Value::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
    }
    value_rules(s, int_or_string_any_of(s), list(s, "allOf").first().is_some_and(int_or_string_any_of), at, out);
    if embedded && t != "object" {
        let why = "must be object if x-kubernetes-embedded-resource is true";
        out.push(if t.is_empty() { required(&here("type"), why) } else { invalid(&here("type"), t, why) });
    } else if t.is_empty() && !int_or_string && !keep {
        let why = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        out.push(required(&here("type"), why));
    }
    if embedded && extra.is_some() {
        out.push(FieldError::forbidden(
            &here("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !t.is_empty() && t != "object" {
        out.push(invalid(&here("type"), t, "must be object at the root"));
    }
    let check_meta = level == Level::Root || embedded;
    let field = |name: &str| s.get("properties").and_then(|p| p.get(name));
    for (name, want) in [("kind", "string"), ("apiVersion", "string"), ("metadata", "object")] {
        if let Some(p) = field(name).filter(|p| check_meta && text(p, "type") != want) {
            out.push(invalid(&child(&property(at, name), "type"), text(p, "type"), &format!("must be {want}")));
        }
    }
    if field("metadata").is_some_and(|m| level == Level::Root && !metadata_is_plain(m)) {
        let why = "must not specify anything other than name and generateName, but metadata is implicitly specified";
        out.push(FieldError::forbidden(&property(at, "metadata"), why));
    }
    if embedded && !keep && entries(s, "properties").is_empty() {
        let why =
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields";
        out.push(required(&here("properties"), why));
    }
}

/// kube's `validateValueValidation`: the junctors below `v` must be structural and its pattern
/// must compile. The int-or-string `anyOf` (directly, or first in `allOf`) is exempt.
fn value_rules(v: &Value, skip_any_of: bool, skip_first_all_of: bool, at: &str, out: &mut Vec<FieldError>) {
    for (name, skip) in [("anyOf", skip_any_of), ("allOf", false), ("oneOf", false)] {
        for (i, x) in list(v, name).iter().enumerate().filter(|_| !skip) {
            nested_rules(x, name == "allOf" && i == 0 && skip_first_all_of, &index(&child(at, name), i), out);
        }
    }
    if let Some(n) = schema_at(v, "not") {
        nested_rules(n, false, &child(at, "not"), out);
    }
    let pattern = text(v, "pattern");
    if !pattern.is_empty() {
        if let Some(why) = pattern_error(pattern) {
            out.push(invalid(
                &child(at, "pattern"),
                pattern,
                &format!("must be a valid regular expression, but isn't: {why}"),
            ));
        }
    }
}

/// kube's `validateNestedValueValidation`: inside a junctor only value validations may appear.
fn nested_rules(v: &Value, skip_any_of: bool, at: &str, out: &mut Vec<FieldError>) {
    value_rules(v, skip_any_of, false, at, out);
    if let Some(i) = schema_at(v, "items") {
        nested_rules(i, false, &child(at, "items"), out);
    }
    for (k, p) in entries(v, "properties") {
        nested_rules(p, false, &property(at, k), out);
    }
    let rules = [
        ("type", "must be empty"),
        ("additionalProperties", "must be undefined"),
        ("default", "must be undefined"),
        ("title", "must be empty"),
        ("description", "must be empty"),
        ("nullable", "must be false"),
        (PRESERVE, "must be false"),
        (EMBEDDED, "must be false"),
        (INT_OR_STRING, "must be false"),
        (LIST_MAP_KEYS, "must be empty"),
        (LIST_TYPE, "must be undefined"),
        (MAP_TYPE, "must be undefined"),
        (VALIDATIONS, "must be empty"),
    ];
    for (k, rule) in rules {
        let set = match (k, v.get(k)) {
            ("default" | LIST_TYPE | MAP_TYPE, Some(x)) => !x.is_null(),
            (_, Some(x)) => !inert(k, x),
            (_, None) => false,
        };
        if set {
            out.push(FieldError::forbidden(&child(at, k), &format!("{rule} to be structural")));
        }
    }
    if v.get("properties").and_then(|p| p.get("metadata")).is_some() {
        out.push(FieldError::forbidden(&property(at, "metadata"), "must not be specified in a nested context"));
    }
}

/// Whether `v` is `anyOf: [{type: integer}, {type: string}]`, the int-or-string exception.
fn int_or_string_any_of(v: &Value) -> bool {
    let only = |x: &Value, t: &str| {
        text(x, "type") == t && x.as_object().is_some_and(|o| o.iter().all(|(k, x)| k == "type" || inert(k, x)))
    };
    matches!(list(v, "anyOf"), [a, b] if only(a, "integer") && only(b, "string"))
}

/// Whether keyword `k` set to `x` leaves a structural schema as if unset: zero values, keywords
/// the structural schema drops (`example`, `externalDocs`), and keys that are no keywords.
fn inert(k: &str, x: &Value) -> bool {
    !listed(KEYWORDS, k)
        || x.is_null()
        || *x == Value::Bool(false)
        || x.as_str() == Some("")
        || x.as_array().is_some_and(Vec::is_empty)
}

/// Whether the root's `metadata` schema restricts at most `name` and `generateName`.
fn metadata_is_plain(m: &Value) -> bool {
    m.as_object().is_none_or(|o| {
        o.iter().all(|(k, x)| match k.as_str() {
            "type" | "default" => true,
            "properties" => x.as_object().is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName")),
            _ => inert(k, x),
        })
    })
}

/// kube's `validateStructuralCompleteness` (of the root's junctors only, as kube checks): what a
/// junctor of `v` specifies must be specified by `s` too.
fn completeness(v: &Value, s: &Value, s_at: &str, v_at: &str, out: &mut Vec<FieldError>) {
    let not = schema_at(v, "not").map(|n| (n, child(v_at, "not")));
    let junctors = ["allOf", "anyOf", "oneOf"]
        .into_iter()
        .flat_map(|k| list(v, k).iter().enumerate().map(move |(i, x)| (x, index(&child(v_at, k), i))));
    for (x, x_at) in not.into_iter().chain(junctors) {
        nested_completeness(x, s, s_at, &x_at, out);
    }
}

/// kube's `validateNestedValueValidationCompleteness` of junctor `x` against `s`.
fn nested_completeness(x: &Value, s: &Value, s_at: &str, x_at: &str, out: &mut Vec<FieldError>) {
    completeness(x, s, s_at, x_at, out);
    let missing = |s_at: &str, x_at: &str| required(s_at, &format!("because it is defined in {x_at}"));
    if let Some(xi) = schema_at(x, "items") {
        let (si_at, xi_at) = (child(s_at, "items"), child(x_at, "items"));
        match schema_at(s, "items") {
            Some(si) => nested_completeness(xi, si, &si_at, &xi_at, out),
            None => out.push(missing(&si_at, &xi_at)),
        }
    }
    for (k, xf) in entries(x, "properties") {
        let (sf_at, xf_at) = (property(s_at, k), property(x_at, k));
        match s.get("properties").and_then(|p| p.get(k.as_str())) {
            Some(sf) => nested_completeness(xf, sf, &sf_at, &xf_at, out),
            None => out.push(missing(&sf_at, &xf_at)),
        }
    }
}

/// kube's `ValidateDefaults`: every default (outside resource metadata) must be pruned already,
/// make valid embedded resources, and validate against its own schema.
fn default_errors(s: &Schema, at: &str, embedded: bool, inside_meta: bool, out: &mut Vec<FieldError>) {
    let embedded = embedded || s.embedded_resource;
    let inside_meta = inside_meta && !embedded;
    if let Some(d) = s.default.as_ref().filter(|_| !inside_meta) {
        let here = child(at, "default");
        let mut pruned = d.clone();
        prune_node(&mut pruned, Some(s), embedded, false, "", &mut Vec::new());
        if pruned != *d {
            out.push(bad(FieldErrorType::Invalid, &here, Some(d), "must not have unknown fields"));
        }
        let mut embedded_errors = Vec::new();
        resources(s, d, &here, embedded, &mut embedded_errors);
        if embedded_errors.is_empty() {
            out.extend(check(s, d, "", Mode::Default).errors.into_iter().map(|p| p.into_field(Some(here.as_str()))));
        }
        out.extend(embedded_errors);
    }
    if let Some(items) = s.items.as_deref() {
        default_errors(items, &child(at, "items"), false, inside_meta, out);
    }
    for (k, p) in &s.properties {
        let meta = inside_meta || (embedded && META_FIELDS.contains(&k.as_str()));
        default_errors(p, &property(at, k), false, meta, out);
    }
}

/// Where a schema sits, for the keyword rules: why defaults are forbidden there (if they are) and
/// whether it describes resource metadata.
#[derive(Clone, Default)]
struct Scope {
    no_defaults: Option<String>,
    in_meta: bool,
}

/// kube's `ValidateCustomResourceDefinitionOpenAPISchema` (CEL rules are not compiled here).
fn keyword_errors(v: &Value, at: &str, scope: &Scope, root: bool, out: &mut Vec<FieldError>) {
    if !v.is_object() {
        return;
    }
    let here = |k: &str| child(at, k);
    let t = text(v, "type");
    if !t.is_empty() && !TYPES.contains(&t) {
        out.push(FieldError::not_supported(&here("type"), t, &TYPES));
    }
    if let Some(reason) = scope.no_defaults.as_deref().filter(|_| given(v, "default")) {
        let why = if reason.is_empty() { "must not be set".to_string() } else { format!("must not be set {reason}") };
        out.push(FieldError::forbidden(&here("default"), &why));
    }
    let unsupported = [
        ("id", !text(v, "id").is_empty()),
        ("additionalItems", given(v, "additionalItems")),
        ("patternProperties", !entries(v, "patternProperties").is_empty()),
        ("definitions", !entries(v, "definitions").is_empty()),
        ("dependencies", given(v, "dependencies")),
        ("$ref", given(v, "$ref")),
    ];
    for (k, _) in unsupported.into_iter().filter(|(_, set)| *set) {
        out.push(FieldError::forbidden(&here(k), &format!("{k} is not supported")));
    }
    let forbidden = [
        (t == "null", "type", "type cannot be set to null, use nullable as an alternative"),
        (!list(v, "items").is_empty(), "items", "items must be a schema object and not an array"),
        (scope.in_meta && on(v, EMBEDDED), EMBEDDED, "must not be used inside of resource meta"),
        (
            on(v, "uniqueItems"),
            "uniqueItems",
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ),
    ];
    for (_, k, why) in forbidden.into_iter().filter(|(set, ..)| *set) {
        out.push(FieldError::forbidden(&here(k), why));
    }
    let props = entries(v, "properties");
    if let Some(extra) = additional(v) {
        if !props.is_empty() && (*extra == Value::Bool(false) || extra.is_object()) {
            out.push(FieldError::forbidden(
                &here("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let mut inner = scope.clone();
        if scope.in_meta {
            inner.no_defaults = Some("inside additionalProperties applying to object metadata".into());
        }
        keyword_errors(extra, &here("additionalProperties"), &inner, false, out);
    }
    for &(k, p) in &props {
        let mut inner = scope.clone();
        if (root || on(v, EMBEDDED)) && META_FIELDS.contains(&k.as_str()) {
            inner.in_meta = true;
            if root {
                inner.no_defaults = Some(format!("in top-level {k}"));
            }
        }
        keyword_errors(p, &property(at, k), &inner, false, out);
    }
    let mut below: Vec<(&Value, String)> = schema_at(v, "not").map(|n| (n, here("not"))).into_iter().collect();
    for name in ["allOf", "oneOf", "anyOf"] {
        below.extend(list(v, name).iter().enumerate().map(|(i, x)| (x, index(&here(name), i))));
    }
    below.extend(entries(v, "definitions").into_iter().map(|(k, d)| (d, key(&here("definitions"), k))));
    below.extend(schema_at(v, "items").map(|i| (i, here("items"))));
    below.extend(list(v, "items").iter().enumerate().map(|(i, x)| (x, index(&here("items"), i))));
    below.extend(entries(v, "dependencies").into_iter().map(|(k, d)| (d, key(&here("dependencies"), k))));
    for (x, x_at) in below {
        keyword_errors(x, &x_at, scope, false, out);
    }
    if v.get(PRESERVE) == Some(&Value::Bool(false)) {
        out.push(FieldError::invalid(&here(PRESERVE), Value::Bool(false), "must be true or undefined"));
    }
    list_and_map_rules(v, at, out);
}

/// The `x-kubernetes-map-type`, `x-kubernetes-list-type` and `x-kubernetes-list-map-keys` rules,
/// and `validateMapListKeysMapSet`.
fn list_and_map_rules(v: &Value, at: &str, out: &mut Vec<FieldError>) {
    let here = |k: &str| child(at, k);
    let t = text(v, "type");
    let type_rule =
        |why: &str| if t.is_empty() { required(&here("type"), why) } else { invalid(&here("type"), t, why) };
    let (map_type, list_type) = (v.get(MAP_TYPE).and_then(Value::as_str), v.get(LIST_TYPE).and_then(Value::as_str));
    let keys: Vec<&str> = list(v, LIST_MAP_KEYS).iter().filter_map(Value::as_str).collect();
    let (items, items_at) = (schema_at(v, "items"), here("items"));
    if map_type.is_some() && t != "object" {
        out.push(type_rule("must be object if x-kubernetes-map-type is specified"));
    }
    if let Some(m) = map_type.filter(|m| !matches!(*m, "atomic" | "granular")) {
        out.push(FieldError::not_supported(&here(MAP_TYPE), m, &["atomic", "granular"]));
    }
    let atomic = "must be atomic as item of a list with x-kubernetes-list-type=set";
    let item_list_type = items.and_then(|is| is.get(LIST_TYPE)).and_then(Value::as_str);
    if list_type.is_some() && t != "array" {
        out.push(type_rule("must be array if x-kubernetes-list-type is specified"));
    } else if let (Some("set"), Some(is)) = (list_type, items) {
        match text(is, "type") {
            "array" if item_list_type.is_some_and(|l| l != "atomic") => {
                out.push(invalid(&child(&items_at, LIST_TYPE), item_list_type.unwrap_or_default(), atomic));
            }
            "object" if is.get(MAP_TYPE).and_then(Value::as_str) != Some("atomic") => {
                out.push(invalid(&child(&items_at, MAP_TYPE), item_list_type.unwrap_or("null"), atomic));
            }
            _ => {}
        }
    }
    if let Some(l) = list_type.filter(|l| !matches!(*l, "atomic" | "set" | "map")) {
        out.push(FieldError::not_supported(&here(LIST_TYPE), l, &["atomic", "set", "map"]));
    }
    let map_keys = "must be map if x-kubernetes-list-map-keys is non-empty";
    match list_type.filter(|_| !keys.is_empty()) {
        None if !keys.is_empty() => out.push(required(&here(LIST_TYPE), map_keys)),
        Some(l) if l != "map" => out.push(invalid(&here(LIST_TYPE), l, map_keys)),
        _ => {}
    }
    let bad_keys = |why: &str| {
        FieldError::verbatim(FieldErrorType::Invalid, &here(LIST_MAP_KEYS), go_strings(keys.iter().copied()), why)
    };
    if list_type == Some("map") {
        if keys.is_empty() {
            out.push(required(&here(LIST_MAP_KEYS), "must not be empty if x-kubernetes-list-type is map"));
        }
        if !given(v, "items") {
            out.push(required(&items_at, "must have a schema if x-kubernetes-list-type is map"));
        }
        let item_type = items.map_or("", |is| text(is, "type"));
        if items.is_some() && item_type != "object" {
            out.push(invalid(
                &child(&items_at, "type"),
                item_type,
                "must be object if parent array's x-kubernetes-list-type is map",
            ));
        }
        for (i, k) in keys.iter().enumerate().filter(|_| item_type == "object") {
            match items.and_then(|is| is.get("properties")).and_then(|p| p.get(*k)) {
                Some(p) if matches!(text(p, "type"), "array" | "object") => {
                    let why = "must be a scalar type if parent array's x-kubernetes-list-type is map";
                    out.push(invalid(&child(&property(&items_at, k), "type"), item_type, why));
                }
                Some(_) => {}
                None => out.push(bad_keys("entries must all be names of item properties")),
            }
            if keys[..i].contains(k) {
                out.push(bad_keys("must not contain duplicate entries"));
            }
        }
    }
    let Some((is, l @ ("set" | "map"))) = items.zip(list_type) else { return };
    if on(is, "nullable") {
        out.push(FieldError::forbidden(
            &child(&items_at, "nullable"),
            &format!("cannot be nullable when x-kubernetes-list-type is {l}"),
        ));
    }
    let needed: Vec<&str> = list(is, "required").iter().filter_map(Value::as_str).collect();
    for k in keys.iter().filter(|_| l == "map") {
        let Some(p) = is.get("properties").and_then(|p| p.get(*k)) else { continue };
        let k_at = property(&items_at, k);
        if !needed.contains(k) && !given(p, "default") {
            let why =
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property";
            out.push(required(&child(&k_at, "default"), why));
        }
        if on(p, "nullable") {
            let why = "this property is in x-kubernetes-list-map-keys, so it cannot be nullable";
            out.push(FieldError::forbidden(&child(&k_at, "nullable"), why));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pruning and defaulting.

/// Removes from `v` (a whole custom object) every field the schema does not specify, as kube's
/// pruning does: `x-kubernetes-preserve-unknown-fields` keeps unknown fields (what the schema
/// specifies below is still pruned), the root and embedded resources keep apiVersion, kind and
/// metadata. Each pruned field's path (`spec.foo`, `spec.items[0].bar`) goes to `pruned`, in
/// order. Nulls of non-nullable fields without a default are dropped too, unreported, as kube
/// drops them right after pruning.
pub fn prune(schema: &Schema, v: &mut Value, pruned: &mut Vec<String>) {
    let mut unknown = Vec::new();
    prune_node(v, Some(schema), true, false, "", &mut unknown);
    unknown.sort();
    pruned.extend(unknown);
    prune_nulls(v, Some(schema));
}

/// kube's `prune` of `x` by `s` (`None`: nothing is specified, every field of an object goes);
/// `resource` marks the resource root, which keeps apiVersion, kind and metadata, and `keep` a
/// node below a preserving array, which keeps its unknown fields (kube's `skipPrune`).
fn prune_node(x: &mut Value, s: Option<&Schema>, resource: bool, keep: bool, at: &str, out: &mut Vec<String>) {
    let keep = keep || s.is_some_and(|s| s.preserve_unknown_fields);
    match (x, s) {
        (Value::Object(m), None) => {
            out.extend(m.keys().map(|k| child(at, k)));
            m.clear();
        }
        (Value::Object(m), Some(s)) => {
            let keep_meta = resource || s.embedded_resource;
            m.retain(|k, v| {
                if keep_meta && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                let at = child(at, k);
                match s.properties.get(k) {
                    Some(p) => prune_node(v, Some(p), false, false, &at, out),
                    None if s.has_additional() => {
                        prune_node(v, s.additional_properties.as_deref(), false, false, &at, out)
                    }
                    None if keep => {}
                    None => {
                        out.push(at);
                        return false;
                    }
                }
                true
            });
        }
        (Value::Array(items), s) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            if keep && item_schema.is_none() {
                return;
            }
            for (i, v) in items.iter_mut().enumerate() {
                prune_node(v, item_schema, false, keep, &index(at, i), out);
            }
        }
        _ => {}
    }
}

/// kube's `PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(x: &mut Value, s: Option<&Schema>) {
    let field = |k: &str| s.and_then(|s| s.properties.get(k).or(s.additional_properties.as_deref()));
    match x {
        Value::Object(m) => m.retain(|k, v| {
            if v.is_null() && field(k).is_some_and(|f| !f.nullable && f.default.is_none()) {
                return false;
            }
            prune_nulls(v, field(k));
            true
        }),
        Value::Array(items) => items.iter_mut().for_each(|v| prune_nulls(v, s.and_then(|s| s.items.as_deref()))),
        _ => {}
    }
}

/// Applies the schema's defaults to `v` (kube's structural defaulting): a missing property with a
/// default gets it, and so does a null one that is not nullable; a default is pruned by its own
/// schema first and then defaulted in turn. Items and additionalProperties values are recursed,
/// their non-nullable nulls defaulted too.
pub fn default(schema: &Schema, v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, p) in &schema.properties {
                let Some(d) = &p.default else { continue };
                if m.get(k).is_none_or(|x| x.is_null() && !p.nullable) {
                    m.insert(k.clone(), pruned_default(p, d));
                }
            }
            for (k, x) in m.iter_mut() {
                match (schema.properties.get(k), schema.additional_properties.as_deref()) {
                    (Some(p), _) => default(p, x),
                    (None, Some(a)) => {
                        fill_null(a, x);
                        default(a, x);
                    }
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.items.as_deref() {
                for x in items {
                    fill_null(s, x);
                    default(s, x);
                }
            }
        }
        _ => {}
    }
}

/// A non-nullable null gets the schema's default, if it has one.
fn fill_null(s: &Schema, x: &mut Value) {
    if let (Some(d), true) = (&s.default, x.is_null() && !s.nullable) {
        *x = pruned_default(s, d);
    }
}

/// A default as kube applies it: pruned by its own schema (kube's `PruneDefaults`).
fn pruned_default(s: &Schema, d: &Value) -> Value {
    let mut d = d.clone();
    prune_node(&mut d, Some(s), s.embedded_resource, false, "", &mut Vec::new());
    d
}

// ---------------------------------------------------------------------------------------------
// Validation of custom objects.

/// The errors of `v` (a whole custom object) against the schema, in the order kube's custom
/// resource strategy reports them: kube-openapi's value validation (`ValidateCustomResource`),
/// the embedded resources' apiVersion and kind (`objectmeta.Validate`), the duplicates
/// of `set` and `map` lists (`ValidateListSetsAndMaps`). The root's ObjectMeta, apiVersion and
/// kind are the server's to check; the schema's own constraints on them apply here, as in kube.
pub fn validate(schema: &Schema, v: &Value) -> Vec<FieldError> {
    let mut out: Vec<FieldError> =
        check(schema, v, "", Mode::Object).errors.into_iter().map(|p| p.into_field(None)).collect();
    resources(schema, v, "", false, &mut out);
    list_errors(schema, v, "", &mut out);
    out
}

/// What values are checked for: a custom object, or a default in a CRD (kube builds the two
/// validators slightly differently).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Object,
    Default,
}

/// kube-openapi's error codes, as apiextensions turns them into field errors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Code {
    Type,
    Required,
    TooLong,
    Enum,
    TooMany,
    Other,
    Composite,
}

/// One kube-openapi error: its path (`Name`), value, limit and message.
struct Problem {
    code: Code,
    name: String,
    value: Option<Value>,
    limit: i64,
    message: String,
}

fn problem(code: Code, name: &str, value: Option<Value>, message: String) -> Problem {
    Problem { code, name: name.to_string(), value, limit: -1, message }
}

fn invalid_type(name: &str, want: &str, got: &str) -> Problem {
    let message = format!("{name} in body must be of type {want}: {}", go_quote(got));
    problem(Code::Type, name, Some(Value::String(got.to_string())), message)
}

impl Problem {
    /// The field error apiextensions makes of it (`kubeOpenAPIResultToFieldErrors`), below
    /// `prefix` (`None`: kube's nil path, printed `<nil>`).
    fn into_field(self, prefix: Option<&str>) -> FieldError {
        let base = || prefix.unwrap_or("<nil>").to_string();
        let at = match self.name.strip_prefix('.').unwrap_or(&self.name) {
            "" => base(),
            name => prefix.map_or_else(|| name.to_string(), |p| format!("{p}.{name}")),
        };
        let empty = Value::String(String::new());
        let value = self.value.unwrap_or(empty);
        let (limit, kind) = (self.limit, FieldErrorType::TooLong);
        match self.code {
            Code::Composite => FieldError::invalid(&base(), value, &self.message),
            Code::Required => FieldError::required(&at),
            Code::Enum => bad(FieldErrorType::NotSupported, &at, Some(&value), &self.message),
            Code::TooLong if limit < 0 => FieldError::new(kind, &at, None, "value is too long"),
            Code::TooLong => FieldError::new(kind, &at, None, &format!("may not be more than {limit} bytes")),
            Code::TooMany if limit < 0 => bad(FieldErrorType::TooMany, &at, Some(&value), "has too many items"),
            Code::TooMany => {
                bad(FieldErrorType::TooMany, &at, Some(&value), &format!("must have at most {limit} items"))
            }
            Code::Type => bad(FieldErrorType::TypeInvalid, &at, Some(&value), &self.message),
            Code::Other => bad(FieldErrorType::Invalid, &at, Some(&value), &self.message),
        }
    }
}

/// A kube-openapi `Result`: its errors (each message once) and how many checks passed.
#[derive(Default)]
struct Outcome {
    errors: Vec<Problem>,
    matches: usize,
}

impl Outcome {
    fn of(p: Problem) -> Outcome {
        Outcome { errors: vec![p], matches: 0 }
    }

    fn passed() -> Outcome {
        Outcome { errors: Vec::new(), matches: 1 }
    }

    fn add(&mut self, p: Problem) {
        if !self.errors.iter().any(|e| e.name == p.name && e.message == p.message) {
            self.errors.push(p);
        }
    }

    fn merge(&mut self, other: Outcome) {
        other.errors.into_iter().for_each(|p| self.add(p));
        self.matches += other.matches;
    }

    /// Merges the outcome of one validator that applied.
    fn then(&mut self, other: Outcome) {
        self.merge(other);
        self.matches += 1;
    }
}

/// kube-openapi's `SchemaValidator.Validate` of `data` at path `at`.
fn check(s: &Schema, data: &Value, at: &str, mode: Mode) -> Outcome {
    let (types, format) = (s.types(mode), s.format_in(mode));
    let mut out = Outcome::default();
    if data.is_null() {
        out.merge(check_type(s, &types, format, data, at));
        out.errors.extend(check_enum(s, data, at));
        return out;
    }
    if !types.is_empty() || !format.is_empty() {
        out.then(check_type(s, &types, format, data, at));
    }
    out.then(check_junctors(s, data, at, mode));
    if let Value::String(text) = data {
        out.then(check_string(s, text, at));
        if let Some(ok) = format_ok(format, text) {
            out.then(if ok { Outcome::default() } else { Outcome::of(invalid_type(at, format, text)) });
        }
    }
    match data {
        Value::Number(n) => out.then(check_number(s, n, at)),
        Value::Array(items) => out.then(check_items(s, items, at, mode)),
        _ => {}
    }
    out.then(check_enum(s, data, at).map_or_else(Outcome::default, Outcome::of));
    if let Value::Object(m) = data {
        out.then(check_object(s, m, at, mode));
    }
    out.matches += 1;
    out
}

/// kube-openapi's type validator (a float with no fraction passes as an integer).
fn check_type(s: &Schema, types: &[&str], format: &str, data: &Value, at: &str) -> Outcome {
    let has = |t: &str| types.contains(&t);
    if data.is_null() {
        let fails = !types.is_empty() && !has("null") && !s.nullable;
        return if fails { Outcome::of(invalid_type(at, &types.join(","), "null")) } else { Outcome::passed() };
    }
    let kind = type_of(data);
    let got_format = match kind {
        "integer" => "int64",
        "number" => "float64",
        _ => "",
    };
    let float_int = kind == "number" && data.as_f64().is_some_and(is_json_integer) && has("integer");
    let typed = has(kind) || float_int || (kind == "integer" && has("number"));
    let textual = matches!(data, Value::String(_) | Value::Array(_));
    match (format.is_empty(), textual) {
        (false, false) if !typed && got_format != format => Outcome::of(invalid_type(at, format, got_format)),
        (false, true) if !(has("number") || has("integer")) => Outcome::passed(),
        _ if !typed => Outcome::of(invalid_type(at, &types.join(","), kind)),
        _ => Outcome::passed(),
    }
}

/// kube-openapi's `anyOf`, `oneOf`, `allOf` and `not`: failures are composite errors (which
/// apiextensions puts at the nil path), with the errors of the alternative that matched most.
fn check_junctors(s: &Schema, data: &Value, at: &str, mode: Mode) -> Outcome {
    let mut out = Outcome::default();
    let composite = |what: &str| problem(Code::Composite, "", None, format!("{} must {what}", go_quote(at)));
    let results = |subs: &[Schema]| subs.iter().map(|sub| check(sub, data, at, mode)).collect::<Vec<_>>();
    let most = |rs: Vec<Outcome>| {
        rs.into_iter().filter(|r| !r.errors.is_empty()).reduce(|b, r| if r.matches > b.matches { r } else { b })
    };
    if !s.any_of.is_empty() {
        let mut rs = results(&s.any_of);
        match rs.iter().position(|r| r.errors.is_empty()) {
            Some(i) => out.merge(rs.swap_remove(i)),
            None => {
                out.add(composite("validate at least one schema (anyOf)"));
                out.merge(most(rs).unwrap_or_default());
            }
        }
    }
    if !s.one_of.is_empty() {
        let mut rs = results(&s.one_of);
        match rs.iter().filter(|r| r.errors.is_empty()).count() {
            1 => out.merge(rs.swap_remove(rs.iter().position(|r| r.errors.is_empty()).unwrap_or_default())),
            0 => {
                out.add(composite("validate one and only one schema (oneOf). Found none valid"));
                out.merge(most(rs).unwrap_or_default());
            }
            n => out.add(composite(&format!("validate one and only one schema (oneOf). Found {n} valid alternatives"))),
        }
    }
    if !s.all_of.is_empty() {
        let rs = results(&s.all_of);
        let valid = rs.iter().filter(|r| r.errors.is_empty()).count();
        rs.into_iter().for_each(|r| out.merge(r));
        if valid != s.all_of.len() {
            out.add(composite(&format!(
                "validate all the schemas (allOf){}",
                if valid == 0 { ". None validated" } else { "" }
            )));
        }
    }
    if s.not.as_deref().is_some_and(|n| check(n, data, at, mode).errors.is_empty()) {
        out.add(composite("not validate the schema (not)"));
    }
    out.matches += 1;
    out
}

/// kube-openapi's string validator: the first of maxLength, minLength and pattern that fails.
fn check_string(s: &Schema, text: &str, at: &str) -> Outcome {
    let len = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
    let fail = |code, message| Outcome::of(problem(code, at, Some(Value::String(text.to_string())), message));
    if let Some(max) = s.max_length.filter(|max| len > *max) {
        let mut out = fail(Code::TooLong, format!("{at} in body should be at most {max} chars long"));
        out.errors.iter_mut().for_each(|p| p.limit = max);
        return out;
    }
    if let Some(min) = s.min_length.filter(|min| len < *min) {
        return fail(Code::Other, format!("{at} in body should be at least {min} chars long"));
    }
    if s.pattern.is_empty() {
        return Outcome::default();
    }
    let p = &s.pattern;
    match compiled(p) {
        Ok(re) if re.is_match(text) => Outcome::default(),
        Ok(_) => fail(Code::Other, format!("{at} in body should match '{p}'")),
        Err(why) => fail(Code::Other, format!("{at} in body should match '{p}, but pattern is invalid: {why}'")),
    }
}

/// A JSON number as kube decodes it: an int64 when it is one, else a float64.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(n: &Number) -> Num {
        n.as_i64().map_or_else(|| Num::Float(n.as_f64().unwrap_or_default()), Num::Int)
    }
}

/// kube-openapi's number validator: multipleOf, minimum, maximum, compared as integers when the
/// value is one (the bounds truncated, as Go converts them).
fn check_number(s: &Schema, n: &Number, at: &str) -> Outcome {
    let mut out = Outcome::passed();
    let value = Some(Value::Number(n.clone()));
    let data = Num::of(n);
    if let Some(factor) = s.multiple_of {
        let (factor, shown, fails) = match data {
            Num::Int(d) => (factor.trunc(), (factor as i64).to_string(), factor as i64 > 0 && d % (factor as i64) != 0),
            Num::Float(d) => (
                factor,
                go_float(factor),
                factor > 0.0 && !is_json_integer(if factor < 1.0 { 1.0 / factor * d } else { d / factor }),
            ),
        };
        let shown_factor = if matches!(data, Num::Int(_)) { Value::from(factor as i64) } else { Value::from(factor) };
        if factor <= 0.0 {
            out.add(problem(
                Code::Other,
                at,
                Some(shown_factor),
                format!("factor MultipleOf declared for {at} must be positive: {shown}"),
            ));
        } else if fails {
            out.add(problem(Code::Other, at, value.clone(), format!("{at} in body should be a multiple of {shown}")));
        }
    }
    for (bound, exclusive, lower) in [(s.minimum, s.exclusive_minimum, true), (s.maximum, s.exclusive_maximum, false)] {
        let Some(bound) = bound else { continue };
        let (order, shown) = match data {
            Num::Int(d) => (d.cmp(&(bound as i64)), (bound as i64).to_string()),
            Num::Float(d) => (d.partial_cmp(&bound).unwrap_or(Ordering::Equal), go_float(bound)),
        };
        let beyond = if lower { Ordering::Less } else { Ordering::Greater };
        if order == beyond || (exclusive && order == Ordering::Equal) {
            let relation = match (lower, exclusive) {
                (true, true) => "greater than",
                (true, false) => "greater than or equal to",
                (false, true) => "less than",
                (false, false) => "less than or equal to",
            };
            out.add(problem(Code::Other, at, value.clone(), format!("{at} in body should be {relation} {shown}")));
        }
    }
    out
}

/// kube-openapi's array validator: items, minItems, maxItems, uniqueItems.
fn check_items(s: &Schema, items: &[Value], at: &str, mode: Mode) -> Outcome {
    let mut out = Outcome::default();
    if let Some(schema) = s.items.as_deref() {
        for (i, v) in items.iter().enumerate() {
            out.merge(check(schema, v, &index(at, i), mode));
        }
    }
    let size = i64::try_from(items.len()).unwrap_or(i64::MAX);
    if let Some(min) = s.min_items.filter(|min| size < *min) {
        out.add(problem(Code::Other, at, Some(size.into()), format!("{at} in body should have at least {min} items")));
    }
    if let Some(max) = s.max_items.filter(|max| size > *max) {
        out.add(Problem {
            limit: max,
            ..problem(Code::TooMany, at, Some(size.into()), format!("{at} in body should have at most {max} items"))
        });
    }
    if s.unique_items && items.iter().enumerate().any(|(i, v)| items[..i].contains(v)) {
        out.add(problem(Code::Other, at, None, format!("{at} in body shouldn't contain duplicates")));
    }
    out.matches += 1;
    out
}

/// kube-openapi's enum check (values compared after Go's type conversions; null never matches).
/// The message is apiextensions' `supported values: …`.
fn check_enum(s: &Schema, data: &Value, at: &str) -> Option<Problem> {
    if s.enum_values.is_empty() || s.enum_values.iter().any(|e| enum_matches(data, e)) {
        return None;
    }
    let shown = |v: &Value| go_quote(&v.as_str().map_or_else(|| go_json(v), str::to_string));
    let supported = s.enum_values.iter().map(shown).collect::<Vec<_>>().join(", ");
    let value = if data.is_null() { Value::String("null".into()) } else { data.clone() };
    Some(problem(Code::Enum, at, Some(value), format!("supported values: {supported}")))
}

fn enum_matches(data: &Value, e: &Value) -> bool {
    match (data, e) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Number(d), Value::Number(x)) => match (Num::of(d), Num::of(x)) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Int(a), Num::Float(b)) => a as f64 == b,
            (Num::Float(a), Num::Int(b)) => a.is_finite() && a.trunc() as i64 == b,
            (Num::Float(a), Num::Float(b)) => a == b,
        },
        _ => data == e,
    }
}

/// kube-openapi's object validator: min/maxProperties, closed objects, properties,
/// additionalProperties, required.
fn check_object(s: &Schema, m: &Map<String, Value>, at: &str, mode: Mode) -> Outcome {
    let mut out = Outcome::default();
    let size = i64::try_from(m.len()).unwrap_or(i64::MAX);
    if let Some(min) = s.min_properties.filter(|min| size < *min) {
        out.add(problem(
            Code::Other,
            at,
            Some(size.into()),
            format!("{at} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = s.max_properties.filter(|max| size > *max) {
        out.add(Problem {
            limit: max,
            ..problem(
                Code::TooMany,
                at,
                Some(size.into()),
                format!("{at} in body should have at most {max} properties"),
            )
        });
    }
    for (k, v) in m.iter().filter(|(k, _)| !s.properties.contains_key(k.as_str())) {
        if s.additional_properties_allowed == Some(false) {
            out.add(problem(
                Code::Other,
                at,
                Some(k.as_str().into()),
                format!("{at}.{k} in body is a forbidden property"),
            ));
        } else if let Some(extra) = s.additional_properties.as_deref() {
            out.merge(check(extra, v, &format!("{at}.{k}"), mode));
        }
    }
    for (name, p) in &s.properties {
        if let Some(v) = m.get(name) {
            out.merge(check(p, v, &child(at, name), mode));
        }
    }
    for k in s.required.iter().filter(|k| !m.contains_key(k.as_str())) {
        out.add(problem(Code::Required, &format!("{at}.{k}"), None, format!("{at}.{k} in body is required")));
    }
    out
}

/// kube's `objectmeta.Validate`: embedded resources (and `x` itself when `resource`) need a
/// valid apiVersion and kind.
fn resources(s: &Schema, x: &Value, at: &str, resource: bool, out: &mut Vec<FieldError>) {
    match x {
        Value::Object(m) => {
            if resource || s.embedded_resource {
                resource_errors(m, at, out);
            }
            for (k, v) in m {
                match (s.properties.get(k), s.additional_properties.as_deref()) {
                    (Some(p), _) => resources(p, v, &child(at, k), false, out),
                    (None, Some(a)) => resources(a, v, &key(at, k), false, out),
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = s.items.as_deref() {
                for (i, v) in items.iter().enumerate() {
                    resources(s, v, &index(at, i), false, out);
                }
            }
        }
        _ => {}
    }
}

/// kube's `validateEmbeddedResource` (without ObjectMeta's own checks of the metadata).
fn resource_errors(m: &Map<String, Value>, at: &str, out: &mut Vec<FieldError>) {
    for k in ["apiVersion", "kind"].into_iter().filter(|k| !m.contains_key(*k)) {
        out.push(required(&child(at, k), "must not be empty"));
    }
    for (k, v) in m {
        let here = child(at, k);
        match (k.as_str(), v) {
            ("apiVersion" | "kind", Value::String(s)) if s.is_empty() => {
                out.push(invalid(&here, s, "must not be empty"))
            }
            ("apiVersion", Value::String(s)) if s != "/" && s.matches('/').count() > 1 => {
                out.push(invalid(&here, s, &format!("unexpected GroupVersion string: {s}")));
            }
            ("kind", Value::String(s)) => {
                let problems = meta::name_problems(Names::Dns1035, &s.to_lowercase());
                if !problems.is_empty() {
                    out.push(invalid(
                        &here,
                        s,
                        &format!("may have mixed case, but should otherwise match: {}", problems.join(",")),
                    ));
                }
            }
            ("apiVersion", Value::String(_)) => {}
            ("apiVersion" | "kind", _) => out.push(bad(FieldErrorType::Invalid, &here, Some(v), "must be a string")),
            _ => {}
        }
    }
}

/// kube's `ValidateListSetsAndMaps`: no duplicates in `set` lists, no duplicate keys in `map`
/// lists (the second occurrence of each is reported).
fn list_errors(s: &Schema, v: &Value, at: &str, out: &mut Vec<FieldError>) {
    match v {
        Value::Object(m) => {
            if let Some(a) = s.additional_properties.as_deref() {
                for (k, x) in m {
                    list_errors(a, x, &key(at, k), out);
                }
            }
            for (k, x) in m {
                if let Some(p) = s.properties.get(k) {
                    list_errors(p, x, &child(at, k), out);
                }
            }
        }
        Value::Array(items) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in repeated(&items.iter().map(identity).collect::<Vec<_>>()) {
                        out.push(bad(FieldErrorType::Duplicate, &index(at, i), items.get(i), ""));
                    }
                }
                Some("map") => map_list_errors(s, items, at, out),
                _ => {}
            }
            if let Some(s) = s.items.as_deref() {
                for (i, x) in items.iter().enumerate() {
                    list_errors(s, x, &index(at, i), out);
                }
            }
        }
        _ => {}
    }
}

/// kube's `validateListMap`: items are objects (or null), their keys unique.
fn map_list_errors(s: &Schema, items: &[Value], at: &str, out: &mut Vec<FieldError>) {
    if let Some((i, x)) = items.iter().enumerate().find(|(_, x)| !x.is_null() && !x.is_object()) {
        out.push(bad(
            FieldErrorType::Invalid,
            &index(at, i),
            Some(x),
            "must be an object for an array of list-type map",
        ));
        return;
    }
    let keys: Vec<Map<String, Value>> = items
        .iter()
        .map(|x| s.list_map_keys.iter().filter_map(|k| x.get(k).map(|v| (k.clone(), v.clone()))).collect())
        .collect();
    let ids: Vec<String> = match s.list_map_keys.as_slice() {
        // One key is compared by its value; a missing key is a value of its own.
        [one] => keys.iter().map(|k| k.get(one).map_or_else(|| "u".to_string(), identity)).collect(),
        _ => keys.iter().map(|k| identity(&Value::Object(k.clone()))).collect(),
    };
    for (i, k) in repeated(&ids).into_iter().filter_map(|i| Some((i, keys.get(i)?))) {
        out.push(bad(FieldErrorType::Duplicate, &index(at, i), Some(&Value::Object(k.clone())), ""));
    }
}

/// The identity of a list element as a Go map key sees it (compound values by their JSON).
fn identity(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => format!("c{}", go_json(v)),
        Value::Number(n) => match Num::of(n) {
            Num::Int(i) => format!("i{i}"),
            Num::Float(f) => format!("f{}", f + 0.0),
        },
        Value::String(s) => format!("s{s}"),
        Value::Bool(b) => format!("b{b}"),
        Value::Null => "n".to_string(),
    }
}

/// The indexes at which an identity shows up the second time.
fn repeated(ids: &[String]) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    ids.iter()
        .enumerate()
        .filter_map(|(i, id)| {
            let n = seen.entry(id.as_str()).or_default();
            *n += 1;
            (*n == 2).then_some(i)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Formats and patterns.

/// Whether `s` is valid for `format` (kube-openapi's strfmt checks, names without dashes), or
/// `None` for a format not checked here.
fn format_ok(format: &str, s: &str) -> Option<bool> {
    // `(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`, with the version
    // digit and (but for version 3) the variant checked.
    let uuid = |version: Option<u8>| {
        let (mut rest, mut hex) = (s, Vec::with_capacity(32));
        for (i, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
            rest = if i > 0 { rest.strip_prefix('-').unwrap_or(rest) } else { rest };
            let Some(group) = rest.get(..len).filter(|g| g.bytes().all(|c| c.is_ascii_hexdigit())) else {
                return false;
            };
            hex.extend(group.bytes().map(|c| c.to_ascii_lowercase()));
            rest = &rest[len..];
        }
        rest.is_empty()
            && version.is_none_or(|v| hex[12] == v && (v == b'3' || matches!(hex[16], b'8' | b'9' | b'a' | b'b')))
    };
    let ok = match format.replace('-', "").as_str() {
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => s.contains('.') && (ipv4(s).is_some() || (s.contains(':') && ipv6(s))),
        "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            let max = if ipv4(ip).is_some() {
                32
            } else if ipv6(ip) {
                128
            } else {
                0
            };
            max > 0
                && !bits.is_empty()
                && bits.bytes().all(|c| c.is_ascii_digit())
                && bits.parse::<u32>().is_ok_and(|n| n <= max)
        }),
        "uuid" => uuid(None),
        "uuid3" => uuid(Some(b'3')),
        "uuid4" => uuid(Some(b'4')),
        "uuid5" => uuid(Some(b'5')),
        "byte" => {
            let body = s.strip_suffix("==").or_else(|| s.strip_suffix('=')).unwrap_or(s);
            !s.is_empty()
                && s.len().is_multiple_of(4)
                && body.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
        }
        "password" => true,
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        _ => return None,
    };
    Some(ok)
}

/// An IPv4 address as kube's sloppy parser reads it (leading zeros allowed).
fn ipv4(s: &str) -> Option<[u8; 4]> {
    let parts: Vec<&str> = s.split('.').collect();
    let octet = |p: &&str| {
        let digits = p.trim_start_matches('0');
        let ok = !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && digits.len() <= 3;
        ok.then(|| u8::try_from(digits.parse::<u16>().unwrap_or(0)).ok()).flatten()
    };
    match parts.iter().map(octet).collect::<Option<Vec<u8>>>()?.as_slice() {
        &[a, b, c, d] => Some([a, b, c, d]),
        _ => None,
    }
}

/// An IPv6 address, its trailing IPv4 part read sloppily.
fn ipv6(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((head, tail)) if tail.contains('.') => ipv4(tail).is_some_and(|[a, b, c, d]| {
            let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
            format!("{head}:{hi:x}:{lo:x}").parse::<Ipv6Addr>().is_ok()
        }),
        _ => s.parse::<Ipv6Addr>().is_ok(),
    }
}

/// strfmt's `IsHostname`: one label, or dotted labels ending in a top-level domain of letters.
/// Unicode symbols (`\p{S}`) are approximated as printable characters that are no letter or digit.
fn is_hostname(s: &str) -> bool {
    let x = |c: char| {
        c.is_ascii_digit()
            || c.is_alphabetic()
            || "$+<=>^`|~".contains(c)
            || (!c.is_ascii() && !c.is_alphanumeric() && !c.is_whitespace() && !c.is_control())
    };
    let labels: Vec<Vec<char>> = s.split('.').map(|l| l.chars().collect()).collect();
    let label = |l: &Vec<char>| match l.as_slice() {
        [first, middle @ .., last] => {
            x(*first) && x(*last) && middle.len() <= 61 && middle.iter().all(|c| x(*c) || *c == '-')
        }
        [one] => x(*one),
        [] => false,
    };
    let shape = match labels.split_last() {
        // One label: a character, an optional dash, then at most 62 characters.
        Some((only, [])) => {
            let rest = only.get(1..).unwrap_or_default();
            let rest = rest.strip_prefix(&['-']).unwrap_or(rest);
            only.first().is_some_and(|c| x(*c)) && rest.len() <= 62 && rest.iter().all(|c| x(*c))
        }
        Some((tld, names)) => {
            names.iter().all(label) && (2..=63).contains(&tld.len()) && tld.iter().all(|c| c.is_alphabetic())
        }
        None => false,
    };
    shape && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// An approximation of Go's `net/mail.ParseAddress`: `local@domain`, or `Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    let dot_atom = |p: &str| !p.is_empty() && p.split('.').all(|a| !a.is_empty() && a.chars().all(atext));
    let quoted = |p: &str, open: char, close: char| p.len() >= 2 && p.starts_with(open) && p.ends_with(close);
    let addr_spec = |a: &str| {
        a.rsplit_once('@').is_some_and(|(local, domain)| {
            (quoted(local, '"', '"') || dot_atom(local)) && (quoted(domain, '[', ']') || dot_atom(domain))
        })
    };
    let s = s.trim_matches([' ', '\t']);
    addr_spec(s)
        || s.strip_suffix('>').and_then(|inner| inner.rsplit_once('<')).is_some_and(|(name, addr)| {
            let name = name.trim();
            addr_spec(addr.trim())
                && (quoted(name, '"', '"') || name.split_whitespace().all(|w| w.chars().all(|c| atext(c) || c == '.')))
        })
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let num = |r: std::ops::Range<usize>| {
        s.get(r).filter(|d| d.bytes().all(|c| c.is_ascii_digit())).and_then(|d| d.parse::<u32>().ok())
    };
    let (Some(year), Some(month), Some(day)) = (num(0..4), num(5..7), num(8..10)) else { return false };
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    s.len() == 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-' && (1..=days).contains(&day)
}

/// strfmt's `IsDateTime`: a date, `t`, then `hh:mm:ss[.frac](z|±hh:mm)`, case-insensitively.
fn is_date_time(s: &str) -> bool {
    let lower = s.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else { return false };
    let two = |i: usize| time.get(i..i + 2).filter(|d| d.bytes().all(|c| c.is_ascii_digit()));
    let (Some(h), Some(m), Some(sec)) = (two(0), two(3), two(6)) else { return false };
    let colons = time.as_bytes().get(2) == Some(&b':') && time.as_bytes().get(5) == Some(&b':');
    let rest = time.get(8..).unwrap_or("");
    let fraction = |f: &str| {
        let mut chars = f.chars();
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit());
        f.is_empty() || (chars.next().is_some_and(|c| c != '\n') && digits(chars.as_str()))
    };
    let zone = |z: &[u8]| {
        z.len() == 6
            && matches!(z[0], b'+' | b'-')
            && z[3] == b':'
            && [1, 2, 4, 5].iter().all(|i| z[*i].is_ascii_digit())
    };
    let split = rest.len().checked_sub(6).and_then(|i| rest.get(..i).zip(rest.get(i..)));
    let tail =
        rest.strip_suffix('z').is_some_and(fraction) || split.is_some_and(|(f, z)| zone(z.as_bytes()) && fraction(f));
    s.len() >= 4 && colons && is_date(date) && h <= "23" && m <= "59" && sec <= "59" && tail
}

type Compiled = Result<regex::Regex, String>;

/// Compiled schema patterns, by pattern (few per schema, matched on every write of an object).
static PATTERNS: LazyLock<parking_lot::Mutex<HashMap<String, Compiled>>> = LazyLock::new(Default::default);

/// `pattern` compiled with Go's meaning of `\d`, `\w` and `\s` (ASCII only), or why it does not
/// compile (in Go's words as far as they can be known: `error parsing regexp: …`). See the note
/// at [`pattern_matches`].
fn compiled(pattern: &str) -> Compiled {
    let mut kept = PATTERNS.lock();
    if let Some(c) = kept.get(pattern) {
        return c.clone();
    }
    if kept.len() >= 1024 {
        kept.clear();
    }
    let c = regex::Regex::new(&go_syntax(pattern)).map_err(|_| {
        let open = pattern.matches('(').count().saturating_sub(pattern.matches("\\(").count());
        let close = pattern.matches(')').count().saturating_sub(pattern.matches("\\)").count());
        let why = if open > close { "missing closing )" } else { "invalid or unsupported Perl syntax" };
        format!("error parsing regexp: {why}: `{pattern}`")
    });
    kept.insert(pattern.to_string(), c.clone());
    c
}

/// Whether `s` matches schema pattern `pattern` anywhere (Go's `regexp.MatchString`), or `None`
/// when the pattern does not compile.
///
/// NOTE: patterns are the one use of the `regex` crate here (`regex::Regex`, through
/// `compiled`): it needs `regex = "1"` among the apiserver's dependencies (the crate is in the
/// lockfile already, through `cel`).
pub fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    compiled(pattern).ok().map(|re| re.is_match(s))
}

fn pattern_error(pattern: &str) -> Option<String> {
    compiled(pattern).err()
}

/// `pattern` rewritten so that the `regex` crate reads it as Go does: `\d`, `\w`, `\s` and their
/// negations outside brackets become Go's ASCII classes.
fn go_syntax(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let (mut chars, mut in_class) = (pattern.chars(), false);
    while let Some(c) = chars.next() {
        let escaped = if c == '\\' { chars.next() } else { None };
        let class = match escaped.filter(|_| !in_class) {
            Some('d') => "[0-9]",
            Some('D') => "[^0-9]",
            Some('w') => "[0-9A-Za-z_]",
            Some('W') => "[^0-9A-Za-z_]",
            Some('s') => "[\\t\\n\\f\\r ]",
            Some('S') => "[^\\t\\n\\f\\r ]",
            _ => "",
        };
        match (class, escaped) {
            ("", Some(e)) => out.extend(['\\', e]),
            ("", None) => out.push(c),
            (class, _) => out.push_str(class),
        }
        in_class = match c {
            '[' if escaped.is_none() => true,
            ']' if escaped.is_none() => false,
            _ => in_class,
        };
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Go's ways of printing values.

/// Go's `%v` of a float64 (`100`, `1.5`, `1e+06`, `1e-05`).
fn go_float(f: f64) -> String {
    float_text(f, |a, exp| !(-4..6).contains(&exp) && a != 0.0, true)
}

/// Go's `encoding/json` rendering of a float64 (`2`, `1.5`, `1e+21`, `1e-7`).
fn go_json_float(f: f64) -> String {
    float_text(f, |a, _| a != 0.0 && !(1e-6..1e21).contains(&a), false)
}

/// `f` in its shortest digits, in exponent form when `exponent(|f|, exponent of the first digit)`
/// says so (with a two-digit exponent when `pad`, or when it is positive).
fn float_text(f: f64, exponent: impl Fn(f64, i32) -> bool, pad: bool) -> String {
    if !f.is_finite() {
        return (if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        })
        .to_string();
    }
    let e = format!("{:e}", f.abs());
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let (digits, exp) = (mantissa.replace('.', ""), exp.parse::<i32>().unwrap_or_default());
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let n = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let body = if exponent(f.abs(), exp) {
        let (first, rest) = digits.split_at(digits.len().min(1));
        let dot = if rest.is_empty() { "" } else { "." };
        let width: usize = if pad || exp >= 0 { 2 } else { 1 };
        format!("{first}{dot}{rest}e{}{:0width$}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
    } else if exp < 0 {
        format!("0.{}{digits}", "0".repeat(exp.unsigned_abs() as usize - 1))
    } else if exp + 1 >= n {
        format!("{digits}{}", "0".repeat((exp + 1 - n) as usize))
    } else {
        let (whole, fraction) = digits.split_at((exp + 1) as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{body}")
}

/// Go's `json.Marshal` of a JSON value (keys sorted, as serde_json's maps keep them; `<`, `>`,
/// `&` escaped).
fn go_json(v: &Value) -> String {
    let string = |s: &str| {
        serde_json::to_string(s)
            .unwrap_or_default()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    };
    match v {
        Value::Number(n) => match Num::of(n) {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => go_json_float(f),
        },
        Value::String(s) => string(s),
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter().map(|(k, v)| format!("{}:{}", string(k), go_json(v))).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// Go's `%#v` of a JSON value held in an `interface{}`.
fn go_syntax_value(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Number(n) if n.as_i64().is_none() => go_float(n.as_f64().unwrap_or_default()),
        Value::String(s) => go_quote(s),
        Value::Array(a) => {
            format!("[]interface {{}}{{{}}}", a.iter().map(go_syntax_value).collect::<Vec<_>>().join(", "))
        }
        Value::Object(o) => {
            let fields: Vec<String> =
                o.iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_syntax_value(v))).collect();
            format!("map[string]interface {{}}{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

/// A field error whose value is printed as kube's `ErrorBody` prints a decoded JSON value: strings
/// quoted, null as `"null"`, floats as `%v`, maps and slices as `%#v`.
fn bad(kind: FieldErrorType, field: &str, value: Option<&Value>, detail: &str) -> FieldError {
    match value {
        Some(Value::Null) => FieldError::new(kind, field, Some(Value::String("null".into())), detail),
        Some(v @ (Value::Object(_) | Value::Array(_))) => FieldError::verbatim(kind, field, go_syntax_value(v), detail),
        Some(Value::Number(n)) if n.as_i64().is_none() => {
            FieldError::verbatim(kind, field, go_float(n.as_f64().unwrap_or_default()), detail)
        }
        v => FieldError::new(kind, field, v.cloned(), detail),
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError::invalid(field, Value::String(value.to_string()), detail)
}

fn required(field: &str, detail: &str) -> FieldError {
    FieldError::new(FieldErrorType::Required, field, None, detail)
}

/// Field `name` of path `at` (kube's `Child`; at the root, just the name).
fn child(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

/// Key `k` of path `at` (kube's `Key`: `at[k]`).
fn key(at: &str, k: &str) -> String {
    format!("{at}[{k}]")
}

/// Property `k` of the schema at `at` (`at.properties[k]`).
fn property(at: &str, k: &str) -> String {
    format!("{at}.properties[{k}]")
}

fn index(at: &str, i: usize) -> String {
    format!("{at}[{i}]")
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn on(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

/// Whether keyword `k` is set (present and not null, as Go's decoder sees pointers).
fn given(v: &Value, k: &str) -> bool {
    v.get(k).is_some_and(|x| !x.is_null())
}

fn entries<'a>(v: &'a Value, k: &str) -> Vec<(&'a String, &'a Value)> {
    v.get(k).and_then(Value::as_object).map(|m| m.iter().collect()).unwrap_or_default()
}

fn list<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn schema_at<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.get(k).filter(|x| x.is_object())
}

/// `additionalProperties`, given as a schema or a boolean.
fn additional(v: &Value) -> Option<&Value> {
    v.get("additionalProperties").filter(|x| x.is_object() || x.is_boolean())
}

/// swag's `IsFloat64AJSONInteger`: a float within 2^53 that is an integer, or within a relative
/// 1e-9 of a positive one.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    let g = f.trunc();
    f.is_finite() && (-MAX..=MAX).contains(&f) && (f == g || (f > 0.0 && g != 0.0 && (f - g) / (f + g) < 1e-9))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const AT: &str = "spec.versions[0].schema.openAPIV3Schema";

    fn texts(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    /// What kube says of a CRD schema (an object with `properties`), paths shown below `AT`.
    fn crd(properties: &Value) -> Vec<String> {
        let errors = texts(&schema_errors(&json!({"type": "object", "properties": properties}), AT));
        errors.iter().map(|e| e.strip_prefix(AT).unwrap_or(e).to_string()).collect()
    }

    /// The errors of an object whose `spec` is `spec`, against a `spec` of schema `spec_schema`.
    fn errors_of(spec_schema: &Value, spec: Value) -> Vec<String> {
        let schema = Schema::parse(&json!({"type": "object", "properties": {"spec": spec_schema}}));
        texts(&validate(&schema, &json!({"apiVersion": "x.io/v1", "kind": "X", "spec": spec})))
    }

    // Texts: apiextensions' `validateStructuralInvariants`, `validateNestedValueValidation`,
    // `validateStructuralMetadataInvariants`, `NewStructural`, `specStandardValidatorV3.validate`,
    // `ValidateCustomResourceDefinitionOpenAPISchema`, `validateMapListKeysMapSet`, and the
    // defaulting package's `validate` (a default's errors from kube-openapi's `InvalidType`).
    #[test]
    fn crd_schemas_are_judged_with_kubes_words() {
        let map_list = |keys: Value| {
            let items = json!({"type": "object", "properties": {"name": {"type": "string"}}});
            json!({"p": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys, "items": items}})
        };
        let cases = [
            (json!({"spec": {"properties": {"n": {}}}}), vec![
                ".properties[spec].properties[n].type: Required value: must not be empty for specified object fields",
                ".properties[spec].type: Required value: must not be empty for specified object fields",
            ]),
            (json!({"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}), vec![
                ".properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
            ]),
            (json!({"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 9}}}}), vec![]),
            (json!({"metadata": {"type": "object", "default": {}}}), vec![
                ".properties[metadata].default: Forbidden: must not be set in top-level metadata",
            ]),
            (json!({"x": {"type": "string", "anyOf": [{"type": "string"}]}}), vec![
                ".properties[x].anyOf[0].type: Forbidden: must be empty to be structural",
            ]),
            (json!({"port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}), vec![]),
            (json!({"t": {"type": "object", "x-kubernetes-embedded-resource": true}}), vec![
                ".properties[t].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            ]),
            (json!({"spec": {"type": "object", "$ref": "#/definitions/x"}}), vec![".properties[spec].$ref: Forbidden: $ref is not supported"]),
            (json!({"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}), vec![
                ".properties[tags].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ]),
            (json!({"spec": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}}), vec![
                ".properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
            ]),
            (json!({"l": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"}}), vec![
                ".properties[l].x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\"",
            ]),
            (map_list(json!([])), vec![
                ".properties[p].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
            ]),
            (map_list(json!(["name"])), vec![
                ".properties[p].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ]),
            (json!({"spec": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}}}), vec![
                ".properties[spec].default: Invalid value: map[string]interface {}{\"a\":\"x\", \"b\":1}: must not have unknown fields",
            ]),
            (json!({"spec": {"type": "object", "properties": {"n": {"type": "integer", "default": "three"}}}}), vec![
                ".properties[spec].properties[n].default: Invalid value: \"string\":  in body must be of type integer: \"string\"",
            ]),
        ];
        for (properties, want) in cases {
            assert_eq!(crd(&properties), want, "{properties}");
        }
        let root = |schema: Value| texts(&schema_errors(&schema, AT));
        let at = |detail: &str| vec![format!("{AT}{detail}")];
        let extra = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(root(extra), at(".additionalProperties: Forbidden: must not be used at the root"));
        assert_eq!(root(json!({"type": "string"})), at(".type: Invalid value: \"string\": must be object at the root"));
        assert_eq!(
            root(json!({"type": "object", "nullable": true})),
            at(".nullable: Forbidden: nullable cannot be true at the root")
        );
        assert_eq!(
            root(json!({"type": "object", "$schema": "x"})),
            at(": Invalid value: \"\": OpenAPIV3Schema 'schema' is not supported")
        );
    }

    #[test]
    fn pruning_and_defaulting() {
        let schema = Schema::parse(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "default": {}, "properties": {
            "items": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer", "default": 80}}}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "pod": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "a": {"type": "string"}, "b": {"type": "string", "nullable": true}, "mode": {"type": "string", "default": "fast"},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": "x"}}}}}}),
        );
        let mut obj = json!({"apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "a", "foo": 1},
            "spec": {"foo": 1, "items": [{"port": 1, "bar": 2}, {}], "extra": {"any": true}, "a": null, "b": null, "mode": null,
                "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "any": 1}, "spec": {"x": 1}}, "labels": {"l": null}},
            "status": {"ready": true}});
        let mut pruned = Vec::new();
        prune(&schema, &mut obj, &mut pruned);
        assert_eq!(pruned, ["spec.foo", "spec.items[0].bar", "status"]);
        default(&schema, &mut obj);
        assert_eq!(
            obj,
            json!({"apiVersion": "x.io/v1", "kind": "X", "metadata": {"name": "a", "foo": 1},
            "spec": {"items": [{"port": 1}, {"port": 80}], "extra": {"any": true}, "b": null, "mode": "fast", "labels": {"l": "x"},
                "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "any": 1}, "spec": {"x": 1}}}})
        );
        let mut empty = json!({"kind": "X"});
        default(&schema, &mut empty);
        assert_eq!(empty["spec"], json!({"mode": "fast"}));
    }

    // Texts: kube-openapi's `errors.InvalidType`, `EnumFail`, `Required`, `ExceedsMaximum*`,
    // `ExceedsMinimum*`, `TooShort`, `TooFewItems`, `NotMultipleOf`, `FailedPattern`,
    // `mustValidateAtLeastOneSchemaMsg`, as apiextensions' `kubeOpenAPIResultToFieldErrors` turns
    // them into field errors (`field.NotSupported`, `field.TooLong`, `field.TooMany`); listtype's
    // `validateListSetsAndMaps` (`field.Duplicate`); objectmeta's `validateEmbeddedResource`.
    #[test]
    fn values_are_judged_with_kubes_words() {
        let spec = json!({"type": "object", "required": ["name"], "properties": {
            "replicas": {"type": "integer"}, "color": {"type": "string", "enum": ["red", "blue"]},
            "name": {"type": "string", "maxLength": 5, "minLength": 3, "pattern": "^a"},
            "size": {"type": "integer", "maximum": 100, "minimum": 0, "exclusiveMinimum": true},
            "ratio": {"type": "number", "maximum": 1.5}, "n": {"type": "integer", "multipleOf": 5},
            "items": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "minItems": 1},
            "id": {"type": "string", "format": "uuid"}, "at": {"type": "string", "format": "date-time"},
            "short": {"type": "string", "format": "k8s-short-name"}, "code": {"type": "string", "pattern": "^\\d+$"},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
            "pod": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}});
        let cases = [
            (json!({"replicas": "x"}), vec!["spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""]),
            (json!({"replicas": 1.5}), vec!["spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""]),
            (json!({"color": "pink"}), vec!["spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\""]),
            (json!({"size": 200}), vec!["spec.size: Invalid value: 200: spec.size in body should be less than or equal to 100"]),
            (json!({"size": 0}), vec!["spec.size: Invalid value: 0: spec.size in body should be greater than 0"]),
            (json!({"ratio": 2.5}), vec!["spec.ratio: Invalid value: 2.5: spec.ratio in body should be less than or equal to 1.5"]),
            (json!({"n": 7}), vec!["spec.n: Invalid value: 7: spec.n in body should be a multiple of 5"]),
            (json!({"items": ["a", "b", "c", "d"]}), vec!["spec.items: Too many: 4: must have at most 3 items"]),
            (json!({"items": []}), vec!["spec.items: Invalid value: 0: spec.items in body should have at least 1 items"]),
            (json!({"id": "nope", "short": "@"}), vec!["spec.id: Invalid value: \"nope\": spec.id in body must be of type uuid: \"nope\""]),
            (json!({"at": "2024-13-01T00:00:00Z"}), vec![
                "spec.at: Invalid value: \"2024-13-01T00:00:00Z\": spec.at in body must be of type date-time: \"2024-13-01T00:00:00Z\"",
            ]),
            (json!({"code": "١٢"}), vec!["spec.code: Invalid value: \"١٢\": spec.code in body should match '^\\d+$'"]),
            (json!({"port": true}), vec![
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "<nil>: Invalid value: \"\": \"spec.port\" must validate at least one schema (anyOf)",
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer: \"boolean\"",
            ]),
            (json!({"tags": ["a", "b", "a", "a"], "ports": [{"name": "http"}, {"name": "http"}]}), vec![
                "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"http\"}",
                "spec.tags[2]: Duplicate value: \"a\"",
            ]),
            (json!({"pod": {"metadata": {}}}), vec![
                "spec.pod.apiVersion: Required value: must not be empty",
                "spec.pod.kind: Required value: must not be empty",
            ]),
            (json!({"pod": {"apiVersion": "a/b/c", "kind": "Pod"}}), vec![
                "spec.pod.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c",
            ]),
            (json!({"replicas": 1.0, "size": 100, "at": "2024-01-02t03:04:05.5+01:00", "code": "12", "port": "http"}), vec![]),
        ];
        for (mut value, want) in cases {
            value["name"] = json!("abc");
            assert_eq!(errors_of(&spec, value.clone()), want, "{value}");
        }
        let names = [
            ("abcdefg", "Too long: may not be more than 5 bytes"),
            ("ab", "Invalid value: \"ab\": spec.name in body should be at least 3 chars long"),
            ("bcd", "Invalid value: \"bcd\": spec.name in body should match '^a'"),
        ];
        for (name, want) in names {
            assert_eq!(errors_of(&spec, json!({"name": name})), [format!("spec.name: {want}")]);
        }
        assert_eq!(errors_of(&spec, json!({})), ["spec.name: Required value"]);
        assert_eq!(
            errors_of(&json!({"type": "array", "items": {"type": "string"}}), json!([null])),
            ["spec[0]: Invalid value: \"null\": spec[0] in body must be of type string: \"null\"",]
        );
        assert_eq!(
            (pattern_matches("(a", "a"), pattern_error("(a")),
            (None, Some("error parsing regexp: missing closing ): `(a`".into()))
        );
    }

    #[test]
    fn go_renderings_and_formats() {
        let floats =
            [(100.0, "100"), (1.5, "1.5"), (1e6, "1e+06"), (123456.0, "123456"), (1e-5, "1e-05"), (-0.25, "-0.25")];
        for (f, want) in floats {
            assert_eq!(go_float(f), want);
        }
        assert_eq!([go_json_float(2.0), go_json_float(1e21), go_json_float(1e-7)], ["2", "1e+21", "1e-7"]);
        assert_eq!(go_json(&json!({"b": [1, 2.5], "a": "<x>"})), "{\"a\":\"\\u003cx\\u003e\",\"b\":[1,2.5]}");
        assert!(is_json_integer(3.0) && !is_json_integer(1.5) && !is_json_integer(-2.5));
        let checks = [
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "123e4567e89b12d3a456426614174000", true),
            ("uuid", "123e4567", false),
            ("uuid4", "123e4567-e89b-42d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "aGVsbG8", false),
            ("byte", "", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T25:00:00Z", false),
            ("ipv4", "010.0.0.1", true),
            ("ipv4", "::1", false),
            ("ipv6", "::ffff:1.2.3.4", true),
            ("ipv6", "1.2.3.4", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "2001:db8::/64", true),
            ("cidr", "10.0.0.0/33", false),
            ("hostname", "example.com", true),
            ("hostname", "localhost", true),
            ("hostname", "-bad.com", false),
            ("hostname", "a.b", false),
            ("email", "a@b.io", true),
            ("email", "A <a@b.io>", true),
            ("email", "nope", false),
        ];
        for (format, s, ok) in checks {
            assert_eq!(format_ok(format, s), Some(ok), "{format} {s}");
        }
        assert_eq!(format_ok("k8s-short-name", "x"), None);
    }
}
