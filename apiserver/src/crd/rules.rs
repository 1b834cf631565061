//! CustomResourceDefinition validation rules: the CEL expressions a schema node lists under
//! `x-kubernetes-validations`, which every write of a custom object must hold. Each sees `self`,
//! the object's value at that node, and, on an update, `oldSelf`, the value the node had before;
//! what fails is worded as kube-apiserver (1.33) words it.
//!
//! Two checks, one per moment:
//!
//! ```text
//!  CRD create/update ─► rule_errors: every entry well-formed (rule, message, reason, fieldPath),
//!                                    every rule and messageExpression compiling
//!  object write ──────► validate: schema, new and old walked together
//!                         node with rules ─► self = new value typed by the schema
//!                                            oldSelf = the correlated old value, if any
//!                           rule true ───────► nothing
//!                           rule in error ───► `<path>: Invalid value: "<type>": <why> evaluating rule: <rule>`
//!                           rule false ──┬───► ratcheted (node unchanged, rule not a transition): nothing
//!                                        └───► an error by `reason`, at the node (or its `fieldPath`)
//! ```
//!
//! What holds:
//! - Old values correlate as kube correlates them: through object properties and map keys, and
//!   through `x-kubernetes-list-type: map` lists by their keys; never through atomic or set lists.
//!   A transition rule (one naming `oldSelf`) runs only where an old value correlates, unless it
//!   is `optionalOldSelf`, when `oldSelf` is an optional.
//! - Values are typed by the schema, as kube's `UnstructuredToVal` types them: integers are CEL
//!   ints, numbers doubles, `date-time`/`date`/`duration`/`byte` strings timestamps, durations
//!   and bytes; an object's properties are named with kube's escapes (`a-b` is `a__dash__b`); at
//!   a resource root (and an embedded resource) `metadata` shows only `name` and `generateName`.
//! - A failure at a node whose value is unchanged since the old object (kube's ratcheting) is no
//!   error; kube warns of it, keel drops it.
//! - Programs are compiled once per source, in ValidatingAdmissionPolicy's environment and cache.
//!
//! Not kube's: rules are parsed and their variables checked, but not type-checked against the
//! schema, so a rule naming a field the schema lacks, or not giving a bool, is refused only when
//! it runs; no cost limits; kube's CEL libraries (quantity, url, ip, …) only as far as the `cel`
//! crate has them; `==` on set and map lists heeds their order.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use cel::objects::OptionalValue;
use serde_json::{json, Map, Value};

use crate::admission::policy;
use crate::status::{go_quote, FieldError, FieldErrorType};

const SELF: &str = "self";
const OLD_SELF: &str = "oldSelf";

/// The variables a rule (or its messageExpression) may name.
const DECLARED: [&str; 2] = [SELF, OLD_SELF];

/// The reasons a rule may give, sorted as kube lists them.
const REASONS: [&str; 4] = ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];

/// The longest message a messageExpression may make (kube's MaxEvaluatedMessageExpressionSizeBytes).
const MAX_MESSAGE: usize = 5 * 1024;

/// Names CEL reserves, which a property is escaped from (`__namespace__`).
const RESERVED: &str = "true false null in as break const continue else for function if import let loop package \
    namespace return var void while";

/// What kube's CRD validation refuses in the `x-kubernetes-validations` of `schema` (a version's
/// `openAPIV3Schema`), at paths below `at`: malformed entries first (a rule missing, a message
/// empty or broken across lines, an unknown reason, a `fieldPath` naming no field), then, where a
/// subtree has none of those, what does not compile (with kube's `apiextensions.ValidationRule`
/// rendering of the entry), `oldSelf` below an atomic or set list, and `optionalOldSelf` on a
/// rule without `oldSelf`. Rules under `not`, `allOf`, `anyOf` and `oneOf` are only checked for form.
pub fn rule_errors(schema: &Value, at: &str) -> Vec<FieldError> {
    let mut found = Found::default();
    check(schema, at, None, true, &mut found);
    found.form.extend(found.compiled);
    found.form
}

/// The rule failures of the custom object `new` (as stored: apiVersion, kind, metadata, …)
/// against `schema`, `old` being the object before an update (none on create). Each is kube's
/// error for it: by the rule's `reason` (Invalid unless said), at the node's path (or its
/// `fieldPath` below it; `<nil>` at the root), showing the node's schema type, with the rule's
/// message, its evaluated messageExpression, or `failed rule: <rule>`. Never panics.
pub fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut out = Vec::new();
    if has_rules(schema) {
        let old = old.filter(|o| !o.is_null());
        let ratchet = Ratchet { current: old.map(|old| Correlated { schema, new, old }), parent: None };
        walk(&Node { rules: schema, schema, new, old, path: None, root: true, ratchet }, &mut out);
    }
    out
}

// ---- The entries as written ----

/// One `x-kubernetes-validations` entry (absent fields empty).
struct Rule<'a> {
    rule: &'a str,
    message: &'a str,
    message_expression: &'a str,
    reason: Option<&'a str>,
    field_path: &'a str,
    optional_old_self: Option<bool>,
}

impl<'a> Rule<'a> {
    fn of(v: &'a Value) -> Self {
        Rule {
            rule: text(v, "rule"),
            message: text(v, "message"),
            message_expression: text(v, "messageExpression"),
            reason: v.get("reason").and_then(Value::as_str),
            field_path: text(v, "fieldPath"),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// What kube names the rule by in errors (its `ruleErrorString`): its message, else its rule.
    fn error_text(&self) -> &'a str {
        let text = if self.message.is_empty() { self.rule } else { self.message };
        text.trim()
    }

    /// The detail of a failure without a messageExpression (kube's `ruleMessageOrDefault`).
    fn default_message(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule.trim())
        } else {
            self.message.trim().to_string()
        }
    }

    /// Go's `%#v` of the entry as kube's internal type. Go prints a set pointer as its address;
    /// a fixed one stands in for it.
    fn go(&self) -> String {
        let pointer = |set: bool, of: &str| format!("({of})({})", if set { "0xc000000000" } else { "nil" });
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{}, FieldPath:{}, OptionalOldSelf:{}}}",
            go_quote(self.rule),
            go_quote(self.message),
            go_quote(self.message_expression),
            pointer(self.reason.is_some(), "*apiextensions.FieldValueErrorReason"),
            go_quote(self.field_path),
            pointer(self.optional_old_self.is_some(), "*bool"),
        )
    }
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

fn array<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn type_name(schema: &Value) -> &str {
    text(schema, "type")
}

fn list_type(schema: &Value) -> &str {
    text(schema, "x-kubernetes-list-type")
}

fn flag(schema: &Value, field: &str) -> bool {
    schema.get(field).and_then(Value::as_bool) == Some(true)
}

/// A schema's properties, when it has any (kube's structural `Properties != nil`).
fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty())
}

fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

fn items(schema: &Value) -> Option<&Value> {
    schema.get("items").filter(|i| i.is_object())
}

fn has_rules(schema: &Value) -> bool {
    !array(schema, "x-kubernetes-validations").is_empty()
        || items(schema).is_some_and(has_rules)
        || additional(schema).is_some_and(has_rules)
        || properties(schema).is_some_and(|p| p.values().any(has_rules))
        || array(schema, "allOf").iter().any(has_rules)
}

// ---- Paths ----

/// kube's `field.Path` as text; `None` is the nil path of an object's root.
type Path = Option<String>;

fn child(path: Option<&str>, name: &str) -> Path {
    Some(match path {
        Some(p) => format!("{p}.{name}"),
        None => name.to_string(),
    })
}

fn subscript(path: Option<&str>, key: &str) -> Path {
    Some(format!("{}[{key}]", path.unwrap_or("")))
}

/// The nil path as Go prints it.
fn shown(path: &Path) -> &str {
    path.as_deref().unwrap_or("<nil>")
}

/// kube's `ValidFieldPath`: a rule's `fieldPath` (`.a.b`, `.a['b.c']`, `.map.key`) followed
/// through `schema`'s properties and additionalProperties, as the path it names; none if it
/// names nothing there.
fn field_path(fp: &str, schema: &Value) -> Option<String> {
    let split = tokens(fp);
    let mut tokens = split.iter().copied();
    let mut path: Path = None;
    let mut at = Some(schema);
    while let Some(token) = tokens.next() {
        let name = match token {
            "[" => {
                let quoted = tokens.next()?;
                let name = unescape(quoted.strip_prefix('\'')?.strip_suffix('\'')?)?;
                if tokens.next()? != "]" {
                    return None;
                }
                name
            }
            "." => tokens.next()?.to_string(),
            _ => return None,
        };
        let node = at?;
        if let Some(props) = properties(node) {
            at = Some(props.get(&name)?);
            path = child(path.as_deref(), &name);
        } else if let Some(ap) = node.get("additionalProperties").filter(|a| !a.is_null()) {
            at = ap.is_object().then_some(ap);
            path = subscript(path.as_deref(), &name);
        } else {
            return None;
        }
    }
    path
}

/// A fieldPath split as kube's scanner splits it: `.`, `[` and `]` alone, a single-quoted
/// string whole, and the text between.
fn tokens(fp: &str) -> Vec<&str> {
    let bytes = fp.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let rest = &bytes[start..];
        let len = if rest[0] == b'\'' {
            (1..rest.len()).find(|&i| rest[i] == b'\'' && rest[i - 1] != b'\\').map_or(rest.len(), |i| i + 1)
        } else {
            match rest.iter().position(|b| matches!(b, b'.' | b'[' | b']')) {
                Some(0) => 1,
                Some(i) => i,
                None => rest.len(),
            }
        };
        out.push(&fp[start..start + len]);
        start += len;
    }
    out
}

/// A single-quoted fieldPath segment's escapes undone; none for an escape kube does not know.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            None => out.push('\\'),
            Some('\n') => out.push_str("\\\n"),
            // Go's escapes a, b, f, n, r, t, v, the quote and the backslash.
            Some(d) => out.push(['\x07', '\x08', '\x0c', '\n', '\r', '\t', '\x0b', '\'', '\\'][r"abfnrtv'\".find(d)?]),
        }
    }
    Some(out)
}

// ---- Compiling ----

/// `source` compiled with `self` and `oldSelf` declared, or cel-go's words for its issues (what
/// kube writes after `compilation failed: `).
fn compiled(source: &str) -> Result<Arc<cel::Program>, String> {
    policy::compile(source, &DECLARED).map_err(|why| match policy::ENV.compile(source) {
        Ok(program) => {
            undeclared(source, &program).unwrap_or_else(|| why.trim_start_matches("compilation failed: ").to_string())
        }
        // cel-go indents its snippet lines by a space.
        Err(parse) => parse.to_string().replace("\n| ", "\n | "),
    })
}

/// Whether a program names `oldSelf` (a transition rule).
fn names_old_self(program: &cel::Program) -> bool {
    let mut names = Vec::new();
    policy::free_variables(program.expression(), &mut Vec::new(), &mut names);
    names.iter().any(|n| n == OLD_SELF)
}

/// cel-go's checker errors for the variables a program names and does not declare, each where
/// it is named.
fn undeclared(source: &str, program: &cel::Program) -> Option<String> {
    let mut names = Vec::new();
    policy::free_variables(program.expression(), &mut Vec::new(), &mut names);
    names.retain(|n| !DECLARED.contains(&n.as_str()));
    let mut at: Vec<(usize, &str)> = idents(program.expression())
        .into_iter()
        .filter(|(name, _)| names.iter().any(|n| n.as_str() == *name))
        .map(|(name, id)| (program.source_info().offset_for(id).map_or(0, |(start, _)| start as usize), name))
        .collect();
    at.sort_unstable();
    at.dedup();
    let errors: Vec<String> = at
        .into_iter()
        .map(|(offset, name)| located(source, offset, &format!("undeclared reference to '{name}' (in container '')")))
        .collect();
    (!errors.is_empty()).then(|| errors.join("\n"))
}

/// Every identifier in an expression, with its node's id.
fn idents(root: &cel::IdedExpr) -> Vec<(&str, u64)> {
    use cel::common::ast::{EntryExpr, Expr, MapExpr, StructExpr};
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        match &e.expr {
            Expr::Ident(name) => out.push((name.as_str(), e.id)),
            Expr::Call(c) => {
                stack.extend(c.target.as_deref());
                stack.extend(&c.args);
            }
            Expr::Comprehension(c) => {
                stack.extend([&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]);
            }
            Expr::List(l) => stack.extend(&l.elements),
            Expr::Map(MapExpr { entries, .. }) | Expr::Struct(StructExpr { entries, .. }) => {
                for entry in entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push(&f.value),
                        EntryExpr::MapEntry(m) => stack.extend([&m.key, &m.value]),
                    }
                }
            }
            Expr::Select(s) => stack.push(&*s.operand),
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    out
}

/// cel-go's rendering of an error at byte `offset` of `source` (its `ToDisplayString`): the
/// place (line, and column in characters), the message, the line and a caret under the place.
fn located(source: &str, offset: usize, message: &str) -> String {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.chars().rev().take_while(|c| *c != '\n').count();
    let mut out = format!("ERROR: <input>:{line}:{}: {message}", column + 1);
    if let Some(snippet) = source.split('\n').nth(line - 1).filter(|s| s.len() <= 16384) {
        let snippet = snippet.replace('\t', " ");
        let wide = |c: char| c.len_utf8() > 1;
        let mut caret: String = snippet.chars().take(column).map(|c| if wide(c) { '．' } else { '.' }).collect();
        caret.push(if snippet.chars().nth(column).is_some_and(wide) { '＾' } else { '^' });
        let _ = write!(out, "\n | {snippet}\n | {caret}");
    }
    out
}

// ---- At CRD create ----

/// What `check` finds: malformed entries, and compile failures (which kube lists after).
#[derive(Default)]
struct Found {
    form: Vec<FieldError>,
    compiled: Vec<FieldError>,
}

/// Checks the rules of `schema` (at `at`) and below, children first as kube visits them.
/// `uncorrelatable` is the highest atomic or set list (or non-correlatable map) above, where
/// `oldSelf` cannot be used; `compiling` is whether rules here are compiled (not under `not`,
/// `allOf`, `anyOf`, `oneOf`).
fn check(schema: &Value, at: &str, uncorrelatable: Option<&str>, compiling: bool, found: &mut Found) {
    if !schema.is_object() {
        return;
    }
    let before = found.form.len();
    if let Some(ap) = additional(schema) {
        check(ap, &format!("{at}.additionalProperties"), uncorrelatable, compiling, found);
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let map_type = schema.get("x-kubernetes-map-type").and_then(Value::as_str);
        let correlatable = matches!(map_type, None | Some("granular" | "atomic"));
        let within = uncorrelatable.or((!correlatable).then_some(at));
        for (name, p) in props {
            check(p, &format!("{at}.properties[{name}]"), within, compiling, found);
        }
    }
    if let Some(not) = schema.get("not") {
        check(not, &format!("{at}.not"), uncorrelatable, false, found);
    }
    for keyword in ["allOf", "oneOf", "anyOf"] {
        for (i, s) in array(schema, keyword).iter().enumerate() {
            check(s, &format!("{at}.{keyword}[{i}]"), uncorrelatable, false, found);
        }
    }
    let within = uncorrelatable.or((list_type(schema) != "map").then_some(at));
    match schema.get("items") {
        Some(Value::Array(list)) => {
            for (i, s) in list.iter().enumerate() {
                check(s, &format!("{at}.items[{i}]"), within, compiling, found);
            }
        }
        Some(item) => check(item, &format!("{at}.items"), within, compiling, found),
        None => {}
    }
    let rules = array(schema, "x-kubernetes-validations");
    for (i, raw) in rules.iter().enumerate() {
        form_errors(&Rule::of(raw), &format!("{at}.x-kubernetes-validations[{i}]"), schema, &mut found.form);
    }
    // kube compiles nothing in a subtree whose entries are malformed.
    if compiling && found.form.len() == before {
        for (i, raw) in rules.iter().enumerate() {
            let here = format!("{at}.x-kubernetes-validations[{i}]");
            compile_errors(&Rule::of(raw), &here, uncorrelatable, &mut found.compiled);
        }
    }
}

/// An entry's form, as kube's `ValidateCustomResourceDefinitionOpenAPISchema` checks it.
fn form_errors(rule: &Rule<'_>, here: &str, schema: &Value, out: &mut Vec<FieldError>) {
    let (source, message) = (rule.rule.trim(), rule.message.trim());
    let at = |field: &str| format!("{here}.{field}");
    if source.is_empty() {
        out.push(FieldError::new(FieldErrorType::Required, &at("rule"), None, "rule is not specified"));
    } else if !rule.message.is_empty() && message.is_empty() {
        out.push(FieldError::invalid(&at("message"), json!(rule.message), "message must be non-empty if specified"));
    } else if message.contains('\n') {
        out.push(FieldError::invalid(&at("message"), json!(rule.message), "message must not contain line breaks"));
    } else if source.contains('\n') && message.is_empty() {
        let why = "message must be specified if rule contains line breaks";
        out.push(FieldError::new(FieldErrorType::Required, &at("message"), None, why));
    }
    if !rule.message_expression.is_empty() && rule.message_expression.trim().is_empty() {
        let why = "messageExpression must be non-empty if specified";
        out.push(FieldError::new(FieldErrorType::Required, &at("messageExpression"), None, why));
    }
    if let Some(reason) = rule.reason.filter(|r| !REASONS.contains(r)) {
        out.push(FieldError::not_supported(&at("reason"), reason, &REASONS));
    }
    let fp = rule.field_path;
    if !fp.is_empty() && fp.trim().is_empty() {
        out.push(FieldError::invalid(&at("fieldPath"), json!(fp), "fieldPath must be non-empty if specified"));
    }
    if fp.contains('\n') {
        out.push(FieldError::invalid(&at("fieldPath"), json!(fp), "fieldPath must not contain line breaks"));
    }
    if !fp.is_empty() && field_path(fp, schema).is_none() {
        out.push(FieldError::invalid(&at("fieldPath"), json!(fp), "fieldPath must be a valid path"));
    }
}

/// An entry's compile errors, as kube's CRD validation reports `cel.Compile`'s results.
fn compile_errors(rule: &Rule<'_>, here: &str, uncorrelatable: Option<&str>, out: &mut Vec<FieldError>) {
    let mut transition = false;
    if !rule.rule.trim().is_empty() {
        match compiled(rule.rule) {
            Err(issues) => out.push(FieldError::verbatim(
                FieldErrorType::Invalid,
                &format!("{here}.rule"),
                rule.go(),
                &format!("compilation failed: {issues}"),
            )),
            Ok(program) => {
                transition = names_old_self(&program);
                if !rule.message_expression.is_empty() {
                    if let Err(issues) = compiled(rule.message_expression) {
                        out.push(FieldError::verbatim(
                            FieldErrorType::Invalid,
                            &format!("{here}.messageExpression"),
                            rule.go(),
                            &format!("messageExpression compilation failed: {issues}"),
                        ));
                    }
                }
            }
        }
    }
    if transition {
        if let Some(within) = uncorrelatable {
            let why = format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {within}");
            out.push(FieldError::invalid(&format!("{here}.rule"), json!(rule.rule), &why));
        }
    } else if let Some(set) = rule.optional_old_self {
        let why = "may not be set if oldSelf is not used in rule";
        out.push(FieldError::invalid(&format!("{here}.optionalOldSelf"), json!(set), why));
    }
}

// ---- At object writes ----

/// A node of the walk: the schema whose rules apply (the node's own, or one of its `allOf`),
/// the node's schema, its new value, the old value correlated to it, and where it is.
#[derive(Clone)]
struct Node<'a> {
    rules: &'a Value,
    schema: &'a Value,
    new: &'a Value,
    old: Option<&'a Value>,
    path: Path,
    /// The object's root (an embedded resource is told by its schema).
    root: bool,
    ratchet: Ratchet<'a>,
}

/// A value correlated to an old one, with the schema of both.
#[derive(Clone, Copy)]
struct Correlated<'a> {
    schema: &'a Value,
    new: &'a Value,
    old: &'a Value,
}

/// kube's ratcheting state at a node: the node's own correlation (none under an atomic or set
/// list, or with no old value), and the nearest correlated ancestor's.
#[derive(Clone, Copy, Default)]
struct Ratchet<'a> {
    current: Option<Correlated<'a>>,
    parent: Option<Correlated<'a>>,
}

impl<'a> Ratchet<'a> {
    /// Whether a failure here is ratcheted: the node, or else its nearest correlated ancestor,
    /// is unchanged.
    fn holds(&self) -> bool {
        self.current.or(self.parent).is_some_and(|c| unchanged(c.schema, c.new, c.old))
    }

    /// The state at field `name` (of schema `schema`); the root's apiVersion and kind never ratchet.
    fn key(self, name: &str, schema: &'a Value) -> Self {
        let Some(current) = self.current else { return self };
        if self.parent.is_none() && (name == "apiVersion" || name == "kind") {
            return Ratchet::default();
        }
        let child = match (current.new.get(name), current.old.get(name)) {
            (Some(new), Some(old)) => Some(Correlated { schema, new, old }),
            _ => None,
        };
        Ratchet { current: child, parent: Some(current) }
    }

    /// The state at a list item, `old` its correlated old item.
    fn index(self, new: &'a Value, old: Option<&'a Value>, schema: &'a Value) -> Self {
        let Some(current) = self.current else { return self };
        Ratchet { current: old.map(|old| Correlated { schema, new, old }), parent: Some(current) }
    }
}

/// kube's `CachedDeepEqual`: objects equal field by field (a field without a schema is a
/// change), map lists item by correlated item, anything else as JSON.
fn unchanged(schema: &Value, new: &Value, old: &Value) -> bool {
    match (new, old) {
        (Value::Array(n), Value::Array(o)) => {
            if n.len() != o.len() {
                return false;
            }
            match items(schema) {
                Some(item) if list_type(schema) == "map" => {
                    n.iter().all(|x| correlated_item(schema, Some(old), x).is_some_and(|ox| unchanged(item, x, ox)))
                }
                _ => n == o,
            }
        }
        (Value::Object(n), Value::Object(o)) => {
            n.len() == o.len()
                && n.iter().all(|(k, v)| {
                    let field = properties(schema).and_then(|p| p.get(k)).or_else(|| additional(schema));
                    matches!((o.get(k), field), (Some(ov), Some(s)) if unchanged(s, v, ov))
                })
        }
        _ => new == old,
    }
}

/// The first old item of an `x-kubernetes-list-type: map` list with `item`'s key values (kube's
/// `MapList.Get`); none for other lists, or an item without scalar keys.
fn correlated_item<'a>(schema: &Value, old: Option<&'a Value>, item: &Value) -> Option<&'a Value> {
    if type_name(schema) != "array" || list_type(schema) != "map" {
        return None;
    }
    let keys: Vec<&str> = array(schema, "x-kubernetes-list-map-keys").iter().filter_map(Value::as_str).collect();
    if keys.is_empty() {
        return None;
    }
    let wanted = list_key(&keys, item)?;
    old?.as_array()?.iter().find(|o| list_key(&keys, o).as_ref() == Some(&wanted))
}

fn list_key<'v>(keys: &[&str], item: &'v Value) -> Option<Vec<&'v Value>> {
    let fields = item.as_object()?;
    keys.iter()
        .map(|k| fields.get(*k).filter(|v| matches!(v, Value::Bool(_) | Value::Number(_) | Value::String(_))))
        .collect()
}

/// kube's `Validator.validate`: a node's rules, its `allOf`'s, then its children's.
fn walk(node: &Node<'_>, out: &mut Vec<FieldError>) {
    if node.new.is_null() {
        return;
    }
    evaluate(node, out);
    for sub in array(node.rules, "allOf").iter().filter(|s| has_rules(s)) {
        // kube ratchets allOf failures only by the node's correlated ancestor.
        let ratchet = Ratchet { current: None, parent: node.ratchet.parent };
        walk(&Node { rules: sub, ratchet, ..node.clone() }, out);
    }
    match node.new {
        Value::Object(fields) => {
            let old = node.old.and_then(Value::as_object);
            for (k, v) in fields {
                let path = node.path.as_deref();
                let (rules, schema, path) = match (additional(node.rules), additional(node.schema)) {
                    (Some(r), Some(s)) => (r, s, subscript(path, k)),
                    _ => match (
                        properties(node.rules).and_then(|p| p.get(k)),
                        properties(node.schema).and_then(|p| p.get(k)),
                    ) {
                        (Some(r), Some(s)) => (r, s, child(path, k)),
                        _ => continue,
                    },
                };
                if has_rules(rules) {
                    let old = old.and_then(|o| o.get(k)).filter(|o| !o.is_null());
                    let ratchet = node.ratchet.key(k, schema);
                    walk(&Node { rules, schema, new: v, old, path, root: false, ratchet }, out);
                }
            }
        }
        Value::Array(list) => {
            let (Some(rules), Some(schema)) = (items(node.rules), items(node.schema)) else { return };
            if !has_rules(rules) {
                return;
            }
            for (i, v) in list.iter().enumerate() {
                let old = correlated_item(node.schema, node.old, v);
                let path = subscript(node.path.as_deref(), &i.to_string());
                let ratchet = node.ratchet.index(v, old, schema);
                walk(&Node { rules, schema, new: v, old, path, root: false, ratchet }, out);
            }
        }
        _ => {}
    }
}

/// kube's `validateExpressions`: the rules at one node, over its typed values.
fn evaluate(node: &Node<'_>, out: &mut Vec<FieldError>) {
    let rules = array(node.rules, "x-kubernetes-validations");
    if rules.is_empty() {
        return;
    }
    let ty = type_name(node.schema);
    let field = shown(&node.path);
    let this = typed(node.schema, node.new, node.root);
    let before = node.old.map(|o| typed(node.schema, o, node.root));
    for raw in rules {
        let rule = Rule::of(raw);
        if rule.rule.trim().is_empty() {
            continue;
        }
        let program = match compiled(rule.rule) {
            Ok(p) => p,
            Err(issues) => {
                let why = format!("rule compile error: compilation failed: {issues}");
                out.push(FieldError::invalid(field, json!(ty), &why));
                continue;
            }
        };
        let transition = names_old_self(&program);
        let optional = rule.optional_old_self == Some(true);
        // A transition rule runs only where there is an old value, unless it takes none.
        if transition && before.is_none() && !optional {
            continue;
        }
        let mut plain = vec![(SELF, this.clone())];
        plain.extend(before.clone().map(|b| (OLD_SELF, b)));
        let outcome = if optional {
            let old = before.clone().map_or_else(OptionalValue::none, OptionalValue::of);
            eval(&program, &[(SELF, this.clone()), (OLD_SELF, cel::Value::Opaque(Arc::new(old)))])
        } else {
            eval(&program, &plain)
        };
        match outcome {
            Ok(cel::Value::Bool(true)) => continue,
            Ok(_) => {}
            Err(e) => {
                out.push(FieldError::invalid(field, json!(ty), &evaluation_error(&e, rule.error_text())));
                continue;
            }
        }
        if !transition && node.ratchet.holds() {
            continue;
        }
        let at = match rule.field_path {
            "" => node.path.clone(),
            fp => {
                field_path(fp, node.schema).map_or_else(|| node.path.clone(), |rel| child(node.path.as_deref(), &rel))
            }
        };
        let detail = message(&rule, &plain).unwrap_or_else(|| rule.default_message());
        out.push(for_reason(rule.reason, shown(&at), ty, &detail));
    }
}

/// A failed rule's message from its messageExpression: a non-empty one-line string of at most
/// 5 KiB, trimmed; none (the rule's own message then) if it gives no such string.
fn message(rule: &Rule<'_>, vars: &[(&'static str, cel::Value)]) -> Option<String> {
    if rule.message_expression.is_empty() {
        return None;
    }
    let program = compiled(rule.message_expression).ok()?;
    let cel::Value::String(s) = eval(&program, vars).ok()? else { return None };
    let s = s.trim();
    (!s.is_empty() && s.len() <= MAX_MESSAGE && !s.contains('\n')).then(|| s.to_string())
}

/// kube's `fieldErrorForReason`: the error a failure gives, by the rule's reason.
fn for_reason(reason: Option<&str>, field: &str, ty: &str, detail: &str) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError::forbidden(field, detail),
        Some("FieldValueRequired") => FieldError::new(FieldErrorType::Required, field, None, detail),
        Some("FieldValueDuplicate") => FieldError::new(FieldErrorType::Duplicate, field, Some(json!(ty)), ""),
        _ => FieldError::invalid(field, json!(ty), detail),
    }
}

/// kube's detail for a rule that could not be evaluated, cel-go's words for the error.
fn evaluation_error(e: &cel::ExecutionError, rule: &str) -> String {
    use cel::ExecutionError as E;
    let why = match e {
        E::NoSuchKey(key) => format!("no such key: {key}"),
        E::IndexOutOfBounds(cel::Value::Int(i)) => format!("index out of bounds: {i}"),
        E::DivisionByZero(_) => "division by zero".to_string(),
        E::RemainderByZero(_) => "modulus by zero".to_string(),
        E::Overflow(..) => "integer overflow".to_string(),
        E::NoSuchOverload(_)
        | E::ValuesNotComparable(..)
        | E::UnsupportedBinaryOperator(..)
        | E::UnexpectedType { .. } => {
            return format!(
                "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule}"
            );
        }
        other => other.to_string(),
    };
    format!("{why} evaluating rule: {rule}")
}

/// `program` evaluated with `vars` bound.
fn eval(program: &cel::Program, vars: &[(&'static str, cel::Value)]) -> Result<cel::Value, cel::ExecutionError> {
    let mut ctx = cel::Context::with_env(policy::ENV.clone());
    for (name, v) in vars {
        ctx.add_variable_from_value(*name, v.clone());
    }
    program.execute(&ctx)
}

// ---- Values ----

/// `v` as a rule sees it under `schema` (kube's `UnstructuredToVal`); JSON that does not fit the
/// schema is taken as it comes.
fn typed(schema: &Value, v: &Value, root: bool) -> cel::Value {
    if v.is_null() {
        return cel::Value::Null;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        return untyped(v);
    }
    match (type_name(schema), v) {
        ("object", Value::Object(fields)) => {
            object(schema, fields, root || flag(schema, "x-kubernetes-embedded-resource"))
        }
        ("array", Value::Array(list)) => {
            let item = items(schema);
            cel::Value::List(Arc::new(
                list.iter().map(|x| item.map_or_else(|| untyped(x), |s| typed(s, x, false))).collect(),
            ))
        }
        ("string", Value::String(s)) => string_value(schema, s),
        ("number", Value::Number(n)) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        ("integer", Value::Number(n)) => number(n),
        ("boolean", Value::Bool(b)) => cel::Value::Bool(*b),
        _ => untyped(v),
    }
}

/// An object: its properties by their escaped names (a resource's apiVersion, kind and metadata
/// name and generateName with them), or a map by its keys, or (neither) an empty map.
fn object(schema: &Value, fields: &Map<String, Value>, resource: bool) -> cel::Value {
    let props = properties(schema);
    let mut out: HashMap<String, cel::Value> = HashMap::new();
    if resource || props.is_some() {
        for (k, v) in fields.iter().filter(|(_, v)| !v.is_null()) {
            let value = match k.as_str() {
                "apiVersion" | "kind" if resource => untyped(v),
                "metadata" if resource => {
                    let mut meta: HashMap<String, cel::Value> = HashMap::new();
                    for f in ["name", "generateName"] {
                        if let Some(s) = v.get(f).and_then(Value::as_str) {
                            meta.insert(f.to_string(), text_value(s));
                        }
                    }
                    cel::Value::from(meta)
                }
                _ => match props.and_then(|p| p.get(k)) {
                    Some(s) => typed(s, v, false),
                    None => continue,
                },
            };
            if let Some(name) = escape(k) {
                out.insert(name, value);
            }
        }
    } else if let Some(s) = additional(schema) {
        out.extend(fields.iter().map(|(k, v)| (k.clone(), typed(s, v, false))));
    }
    cel::Value::from(out)
}

/// A string by its format: `date-time` and `date` timestamps, `duration` a duration, `byte`
/// bytes; a string when it is none of these or does not parse.
fn string_value(schema: &Value, s: &str) -> cel::Value {
    let parsed = match text(schema, "format") {
        "date-time" => converted("timestamp(s)", s.to_string()),
        "date" => converted("timestamp(s)", format!("{s}T00:00:00Z")),
        "duration" => converted("duration(s)", s.to_string()),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).ok().map(|b| cel::Value::Bytes(Arc::new(b))),
        _ => None,
    };
    parsed.unwrap_or_else(|| text_value(s))
}

/// `s` through a CEL conversion (`timestamp(s)`, `duration(s)`).
fn converted(source: &str, s: String) -> Option<cel::Value> {
    let program = policy::compile(source, &["s"]).ok()?;
    eval(&program, &[("s", cel::Value::String(Arc::new(s)))]).ok()
}

fn text_value(s: &str) -> cel::Value {
    cel::Value::String(Arc::new(s.to_string()))
}

/// A JSON number: an int when it is one, else a double.
fn number(n: &serde_json::Number) -> cel::Value {
    let float = || cel::Value::Float(n.as_f64().unwrap_or(f64::NAN));
    n.as_i64().map(cel::Value::Int).or_else(|| n.as_u64().map(cel::Value::UInt)).unwrap_or_else(float)
}

/// JSON without a schema to type it (int-or-string, preserved unknown fields).
fn untyped(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => number(n),
        Value::String(s) => text_value(s),
        Value::Array(list) => cel::Value::List(Arc::new(list.iter().map(untyped).collect())),
        Value::Object(fields) => cel::Value::from(
            fields.iter().map(|(k, v)| (k.clone(), untyped(v))).collect::<HashMap<String, cel::Value>>(),
        ),
    }
}

/// kube's `Escape`: a property name as a rule names it (`a-b` is `a__dash__b`, `namespace` is
/// `__namespace__`); none for a name no rule can name.
fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.split_whitespace().any(|r| r == name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
    }

    /// Replicas up to max (a message), max under 100 (none), mode immutable (a
    /// messageExpression), ports keyed by name whose port is immutable.
    fn widgets() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.max", "message": "replicas must not exceed max"},
                {"rule": "self.max < 100"},
                {"rule": "self.mode == oldSelf.mode", "messageExpression": "'mode is immutable, was ' + oldSelf.mode"}],
            "properties": {"replicas": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}}}}}})
    }

    // kube's validateExpressions: field.Invalid(fldPath, sts.Type, detail), the detail the
    // message or ruleMessageOrDefault's "failed rule: <rule>"; field.Error prints
    // `<path>: Invalid value: "<type>": <detail>`.
    #[test]
    fn a_false_rule_gives_its_message_or_failed_rule() {
        let bad = widget(json!({"replicas": 5, "max": 3, "mode": "a"}));
        let errors = texts(&validate(&widgets(), &bad, None));
        assert_eq!(errors, ["spec: Invalid value: \"object\": replicas must not exceed max"]);
        let over = widget(json!({"replicas": 1, "max": 200, "mode": "a"}));
        let errors = texts(&validate(&widgets(), &over, None));
        assert_eq!(errors, ["spec: Invalid value: \"object\": failed rule: self.max < 100"]);
        // Ratcheting (CRDValidationRatcheting, GA in 1.33): an unchanged node's failure is no error.
        assert!(validate(&widgets(), &bad, Some(&bad)).is_empty());
    }

    // kube's validateExpressions skips a rule that UsesOldSelf when oldObj is nil; a
    // messageExpression's trimmed string is the detail.
    #[test]
    fn a_transition_rule_runs_on_update_only() {
        let old = widget(json!({"replicas": 1, "max": 3, "mode": "a"}));
        let new = widget(json!({"replicas": 1, "max": 3, "mode": "b"}));
        assert!(validate(&widgets(), &new, None).is_empty());
        let errors = texts(&validate(&widgets(), &new, Some(&old)));
        assert_eq!(errors, ["spec: Invalid value: \"object\": mode is immutable, was a"]);
    }

    // kube's validateArray correlates map-list items by key (MapList.Get); an item with no old
    // counterpart runs no transition rule.
    #[test]
    fn map_list_items_correlate_by_key_not_position() {
        let old = widget(json!({"replicas": 1, "max": 3, "mode": "a",
            "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}));
        let new = widget(json!({"replicas": 1, "max": 3, "mode": "a",
            "ports": [{"name": "https", "port": 8443}, {"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]}));
        let errors = texts(&validate(&widgets(), &new, Some(&old)));
        assert_eq!(errors, ["spec.ports[0]: Invalid value: \"object\": port is immutable"]);
    }

    // kube's fieldErrorForReason (Forbidden and Required with the detail, Duplicate with the
    // node's type) at the fieldPath ValidFieldPath normalizes (Child, and Key for a map's key).
    #[test]
    fn reason_and_field_path_shape_the_error() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"replicas": {"type": "integer"}, "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string",
                    "x-kubernetes-validations": [{"rule": "size(self) <= 3", "reason": "FieldValueForbidden"}]}}},
            "x-kubernetes-validations": [
                {"rule": "self.replicas >= 0", "fieldPath": ".replicas", "reason": "FieldValueRequired",
                    "message": "replicas must not be negative"},
                {"rule": "self.name != 'dup'", "fieldPath": ".name", "reason": "FieldValueDuplicate"},
                {"rule": "!('bad' in self.labels)", "fieldPath": ".labels['bad']", "message": "label bad is reserved"}]}}});
        let new = widget(json!({"replicas": -1, "name": "dup", "labels": {"bad": "x", "long": "toolong"}}));
        assert_eq!(
            texts(&validate(&schema, &new, None)),
            [
                "spec.replicas: Required value: replicas must not be negative",
                "spec.name: Duplicate value: \"object\"",
                "spec.labels[bad]: Invalid value: \"object\": label bad is reserved",
                "spec.labels[long]: Forbidden: failed rule: size(self) <= 3",
            ]
        );
    }

    // kube: the root's path is nil (`<nil>`), its metadata only name and generateName
    // (WithTypeAndObjectMeta); an evaluation error is "<err> evaluating rule: <rule>", cel-go's
    // "no such key: <key>" (kube's validation_test expects it).
    #[test]
    fn the_root_sees_little_metadata_and_errors_say_what_failed() {
        let schema = json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "!has(self.metadata.namespace) && self.metadata.name == 'x'"}],
            "properties": {"spec": {"type": "object", "properties": {"mode": {"type": "string"}},
                "x-kubernetes-validations": [{"rule": "self.mode == 'a'"}]}}});
        let new = json!({"metadata": {"name": "y", "namespace": "ns"}, "spec": {}});
        assert_eq!(
            texts(&validate(&schema, &new, None)),
            [
                "<nil>: Invalid value: \"object\": failed rule: !has(self.metadata.namespace) && self.metadata.name == 'x'",
                "spec: Invalid value: \"object\": no such key: mode evaluating rule: self.mode == 'a'",
            ]
        );
    }

    const AT: &str = "spec.versions[0].schema.openAPIV3Schema";

    // kube's ValidateCustomResourceDefinitionOpenAPISchema: the entry checks and their words.
    #[test]
    fn malformed_entries_are_refused_in_kube_s_words() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": " "}, {"rule": "self.a == 'x'", "reason": "Bogus", "fieldPath": ".nope"}]}}});
        let at = format!("{AT}.properties[spec].x-kubernetes-validations");
        assert_eq!(
            texts(&rule_errors(&schema, AT)),
            [
                format!("{at}[0].rule: Required value: rule is not specified"),
                format!("{at}[1].reason: Unsupported value: \"Bogus\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""),
                format!("{at}[1].fieldPath: Invalid value: \".nope\": fieldPath must be a valid path"),
            ]
        );
    }

    // kube's compileRule: "compilation failed: " and cel-go's issues (ToDisplayString; the
    // checker's "undeclared reference to '<name>' (in container '')"), the entry shown as Go's
    // %#v of apiextensions.ValidationRule; oldSelf under an atomic list, and optionalOldSelf
    // without oldSelf, refused as ValidateCustomResourceDefinitionOpenAPISchema refuses them.
    #[test]
    fn rules_that_do_not_compile_are_refused_in_kube_s_words() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"replicas": {"type": "integer"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.n == oldSelf.n"}]}}},
            "x-kubernetes-validations": [
                {"rule": "self.replicas >"},
                {"rule": "self.replicas > minReplicas"},
                {"rule": "self.replicas > 0", "optionalOldSelf": true},
                {"rule": "self.replicas > 0", "messageExpression": "'x' +"}]}}});
        let errors = texts(&rule_errors(&schema, AT));
        let spec = format!("{AT}.properties[spec]");
        let go = |rule: &str, me: &str| {
            format!("apiextensions.ValidationRule{{Rule:\"{rule}\", Message:\"\", MessageExpression:\"{me}\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}")
        };
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert_eq!(
            errors[0],
            format!("{spec}.properties[list].items.x-kubernetes-validations[0].rule: Invalid value: \"self.n == oldSelf.n\": oldSelf cannot be used on the uncorrelatable portion of the schema within {spec}.properties[list]")
        );
        let parse = format!(
            "{spec}.x-kubernetes-validations[0].rule: Invalid value: {}: compilation failed: ERROR: <input>:1:",
            go("self.replicas >", "")
        );
        assert!(errors[1].starts_with(&parse), "{}", errors[1]);
        assert!(
            errors[1].contains("Syntax error: ") && errors[1].contains("\n | self.replicas >\n | "),
            "{}",
            errors[1]
        );
        let undeclared = "ERROR: <input>:1:17: undeclared reference to 'minReplicas' (in container '')\n | self.replicas > minReplicas\n | ................^";
        let rule = go("self.replicas > minReplicas", "");
        assert_eq!(
            errors[2],
            format!("{spec}.x-kubernetes-validations[1].rule: Invalid value: {rule}: compilation failed: {undeclared}")
        );
        assert_eq!(
            errors[3],
            format!("{spec}.x-kubernetes-validations[2].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule")
        );
        let message = format!("{spec}.x-kubernetes-validations[3].messageExpression: Invalid value: {}: messageExpression compilation failed: ERROR: <input>:1:", go("self.replicas > 0", "'x' +"));
        assert!(errors[4].starts_with(&message), "{}", errors[4]);
        // At run time the same rule is kube's "rule compile error".
        let only = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.replicas > minReplicas"}]}}});
        let errors = texts(&validate(&only, &widget(json!({"replicas": 1})), None));
        assert_eq!(
            errors,
            [format!("spec: Invalid value: \"object\": rule compile error: compilation failed: {undeclared}")]
        );
    }

    // kube's escaping.go (Escape) and ValidFieldPath.
    #[test]
    fn names_and_field_paths_follow_kube_s_rules() {
        assert_eq!(escape("x-y").as_deref(), Some("x__dash__y"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("a__b.c/d").as_deref(), Some("a__underscores__b__dot__c__slash__d"));
        assert_eq!((escape("1a"), escape("a b")), (None, None));
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"bbb.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}}}});
        assert_eq!(field_path(".a['bbb.c']", &schema).as_deref(), Some("a.bbb.c"));
        assert_eq!(field_path(".m.k", &schema).as_deref(), Some("m[k]"));
        for invalid in ["a", ".a['bbb.c'", ".", ".a.x", ".a['\\q']"] {
            assert_eq!(field_path(invalid, &schema), None, "{invalid}");
        }
    }
}
