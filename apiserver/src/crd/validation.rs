//! Defaulting and validation of CustomResourceDefinitions (`apiextensions.k8s.io/v1`) as kube
//! 1.33 does them: `v1/defaults.go`, then `ValidateCustomResourceDefinition` and
//! `ValidateCustomResourceDefinitionUpdate` with kube's texts and field paths.
//!
//! kube validates the *internal* CRD, converted from v1, and that shows in its paths. The
//! conversion lifts a per-version field to the spec when every version has the same value: one
//! schema shared by all versions is reported at `spec.validation.openAPIV3Schema…`, differing ones
//! at `spec.versions[i].schema.openAPIV3Schema…`; likewise `spec.subresources`,
//! `spec.additionalPrinterColumns` and `spec.selectableFields`. The conversion webhook is reported
//! under its internal names (`spec.conversion.webhookClientConfig`,
//! `spec.conversion.conversionReviewVersions`), the first version's name once more as
//! `spec.version`. `View` is that lifting, read off the JSON:
//!
//! ```text
//!   v1 JSON ──► View { versions, lifted: schema? subresources? columns? selectableFields? }
//!     spec:   group, scope, schemas required, each version (name, deprecation, own schema,
//!             subresources, columns, selectable fields), storage, names, lifted fields, conversion
//!     status: acceptedNames, storedVersions, API approval, preserveUnknownFields
//! ```
//!
//! A schema's own checks are `super::schema` and `super::rules`' (CEL rules only of a schema with
//! no other errors, as kube compiles them); this module says where each schema is checked and
//! adds what needs the CRD around it: a status subresource narrows the schema's root, and the
//! root may not be nullable. What every kind's metadata gets (name form, labels, annotations) is
//! the generic registry's; only the CRD's own rule for its name is here. `status.storedVersions`
//! is checked as kube's strategy leaves it, whatever the request says: on create the storage
//! version alone, on update the stored CRD's list plus the storage version.

use serde_json::{json, Value};

use super::rules::rule_errors;
use super::schema::schema_errors;
use crate::meta;
use crate::resources::Names;
use crate::status::{go_quote, go_strings, FieldError, FieldErrorType};

const IMMUTABLE: &str = "field is immutable";
/// The annotation a CRD of a protected group (`*.k8s.io`, `*.kubernetes.io`) needs.
const APPROVAL: &str = "api-approved.kubernetes.io";
const PRINTER_TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
const PRINTER_FORMATS: [&str; 8] = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"];
const MAX_SELECTABLE_FIELDS: usize = 8;
const NOT_WEBHOOK: &str = "should not be set when strategy is not set to Webhook";
const URL_FORM: &str = "; desired format: https://host[/path]";
/// The root fields kube allows a schema whose version has a status subresource (Go's names).
const ROOT_ALLOWED: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";
/// [`ROOT_ALLOWED`] by JSON names.
const ROOT_ALLOWED_JSON: &str = "description type format title maximum exclusiveMaximum minimum exclusiveMinimum \
    maxLength minLength pattern maxItems minItems uniqueItems multipleOf required items properties externalDocs example \
    x-kubernetes-preserve-unknown-fields x-kubernetes-validations";
/// `JSONSchemaProps`' fields in Go's order, by JSON names.
const ROOT_FIELDS: &str = "id $schema $ref description type nullable format title default maximum exclusiveMaximum \
    minimum exclusiveMinimum maxLength minLength pattern maxItems minItems uniqueItems multipleOf enum maxProperties \
    minProperties required items allOf oneOf anyOf not properties additionalProperties patternProperties dependencies \
    additionalItems definitions externalDocs example x-kubernetes-preserve-unknown-fields \
    x-kubernetes-embedded-resource x-kubernetes-int-or-string x-kubernetes-list-map-keys x-kubernetes-list-type \
    x-kubernetes-map-type x-kubernetes-validations";
/// Fields that are strings or bools in JSON but pointers in Go: set even when empty or false.
const ROOT_POINTERS: [&str; 4] =
    ["$ref", "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields"];

static NULL: Value = Value::Null;

/// kube's v1 defaults of a CRD (`SetObjectDefaults_CustomResourceDefinition`): `names.singular`
/// the lowercased kind, `names.listKind` the kind + `List`, `conversion` `{strategy: None}`, a
/// conversion service's port 443, and `status.storedVersions` the storage version when empty.
pub fn defaults(crd: &mut Value) {
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = names.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
            let blank = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
            if !kind.is_empty() && blank(names.get("singular")) {
                names.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if !kind.is_empty() && blank(names.get("listKind")) {
                names.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
        if spec.get("conversion").is_none_or(Value::is_null) {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
        let service = spec.get_mut("conversion").and_then(|c| c.pointer_mut("/webhook/clientConfig/service"));
        if let Some(service) = service.and_then(Value::as_object_mut) {
            if service.get("port").is_none_or(Value::is_null) {
                service.insert("port".into(), json!(443));
            }
        }
    }
    let Some(version) = storage_version(crd).map(str::to_string) else { return };
    let Some(o) = crd.as_object_mut() else { return };
    let status = o.entry("status").or_insert_with(|| json!({}));
    if status.is_null() {
        *status = json!({});
    }
    if let Some(status) = status.as_object_mut().filter(|s| list(s.get("storedVersions")).is_empty()) {
        status.insert("storedVersions".into(), json!([version]));
    }
}

/// The CRD's storage version: the first version with `storage: true`.
pub fn storage_version(crd: &Value) -> Option<&str> {
    list(crd.pointer("/spec/versions")).iter().find(|v| flag(v, "storage")).map(|v| text(v, "name"))
}

/// What kube's `ValidateCustomResourceDefinition` refuses in a new CRD (after [`defaults`]),
/// beyond what every object's metadata is checked for.
pub fn errors(crd: &Value) -> Vec<FieldError> {
    let cx = Context { old: None, known_review_version: true, require_schema: true };
    let mut out = name_errors(crd);
    out.extend(spec_errors(crd, &cx));
    // The strategy empties the status on create: no acceptedNames to check.
    out.extend(stored_version_errors(stored_versions(None, crd).as_deref(), crd));
    out.extend(approval_errors(crd, None));
    out.extend(preserve_errors(crd, None));
    out
}

/// What kube's `ValidateCustomResourceDefinitionUpdate` refuses in `new` replacing `old` (the whole
/// list): the spec's checks, relaxed where `old` already broke them (schemas required only if
/// `old` had them all, unknown conversionReview versions kept, a schema equal to the stored one
/// not checked again); `spec.group` and `spec.names.plural` immutable, `spec.scope` and
/// `spec.names.kind` too once `old` is Established; every stored version still in `spec.versions`.
pub fn update_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    let old_review = strings(old.pointer("/spec/conversion/webhook/conversionReviewVersions"));
    let old_versions = list(old.pointer("/spec/versions"));
    let cx = Context {
        old: Some(old),
        known_review_version: old_review.is_empty() || old_review.iter().copied().any(known_review_version),
        require_schema: old_versions.iter().all(|v| present(v.pointer("/schema/openAPIV3Schema")).is_some()),
    };
    let mut out = spec_errors(new, &cx);
    let established = list(old.pointer("/status/conditions"))
        .iter()
        .any(|c| text(c, "type") == "Established" && text(c, "status") == "True");
    // Scope and kind only once the CRD is Established; group and plural always.
    let fixed = [
        ("/spec/scope", "spec.scope"),
        ("/spec/names/kind", "spec.names.kind"),
        ("/spec/group", "spec.group"),
        ("/spec/names/plural", "spec.names.plural"),
    ];
    for (pointer, field) in fixed.into_iter().skip(if established { 0 } else { 2 }) {
        let now = text_at(new, pointer);
        if now != text_at(old, pointer) {
            out.push(invalid(field, now, IMMUTABLE));
        }
    }
    out.extend(names_errors(old.pointer("/status/acceptedNames").unwrap_or(&NULL), "status.acceptedNames"));
    out.extend(stored_version_errors(stored_versions(Some(old), new).as_deref(), new));
    out.extend(approval_errors(new, Some(old)));
    out.extend(preserve_errors(new, Some(old)));
    out
}

/// What an update relaxes, read off the stored CRD (kube's `validationOptions`).
struct Context<'a> {
    old: Option<&'a Value>,
    /// conversionReviewVersions must name one kube sends (v1, v1beta1).
    known_review_version: bool,
    /// Every version needs a schema (else only served ones do, unless unknown fields are kept).
    require_schema: bool,
}

impl Context<'_> {
    /// Whether version `name`'s schema is the stored CRD's.
    fn unchanged(&self, name: &str, schema: Option<&Value>) -> bool {
        let old = self.old.map(|o| list(o.pointer("/spec/versions"))).unwrap_or_default();
        old.iter().any(|o| text(o, "name") == name && same(o.get("schema"), schema))
    }
}

/// Which per-version fields kube's conversion lifts to the spec: those every version has alike.
#[derive(Debug, Clone, Copy, Default)]
struct Lifted {
    schema: bool,
    subresources: bool,
    columns: bool,
    selectable: bool,
}

/// A v1 spec as kube's internal CRD holds it.
struct View<'a> {
    versions: &'a [Value],
    lifted: Lifted,
}

impl<'a> View<'a> {
    fn of(spec: &'a Value) -> Self {
        let versions = list(spec.get("versions"));
        let Some((first, rest)) = versions.split_first() else { return View { versions, lifted: Lifted::default() } };
        let alike = |key: &str| rest.iter().all(|v| same(v.get(key), first.get(key)));
        let alike_list = |key: &str| rest.iter().all(|v| same_list(v.get(key), first.get(key)));
        let lifted = Lifted {
            schema: alike("schema"),
            subresources: alike("subresources"),
            columns: alike_list("additionalPrinterColumns"),
            selectable: alike_list("selectableFields"),
        };
        View { versions, lifted }
    }

    /// The spec-level value of a field (kube's `spec.validation`, `spec.subresources`, …).
    fn top(&self, key: &str, lifted: bool) -> Option<&'a Value> {
        self.versions.first().filter(|_| lifted).and_then(|v| present(v.get(key)))
    }
}

/// A version's own value of a field: none when the field is lifted to the spec.
fn own<'v>(v: &'v Value, key: &str, lifted: bool) -> Option<&'v Value> {
    present(v.get(key)).filter(|_| !lifted)
}

/// `metadata.name` (and a `generateName`) must be `<plural>.<group>`.
fn name_errors(crd: &Value) -> Vec<FieldError> {
    let wanted = format!("{}.{}", text_at(crd, "/spec/names/plural"), text_at(crd, "/spec/group"));
    let why = r#"must be spec.names.plural+"."+spec.group"#;
    let wrong = |f: &str| Some(meta::get(crd, f)).filter(|n| !n.is_empty() && *n != wanted);
    ["generateName", "name"]
        .into_iter()
        .filter_map(|f| wrong(f).map(|n| invalid(&format!("metadata.{f}"), n, why)))
        .collect()
}

/// kube's `validateCustomResourceDefinitionSpec`, in its order.
fn spec_errors(crd: &Value, cx: &Context<'_>) -> Vec<FieldError> {
    let spec = crd.get("spec").unwrap_or(&NULL);
    let view = View::of(spec);
    let mut out = Vec::new();
    let group = text(spec, "group");
    let problems = meta::name_problems(Names::Subdomain, group);
    if group.is_empty() {
        out.push(FieldError::required("spec.group"));
    } else if !problems.is_empty() {
        out.push(invalid("spec.group", group, &problems.join(",")));
    } else if !group.contains('.') {
        out.push(invalid("spec.group", group, "should be a domain with at least one dot"));
    }
    match text(spec, "scope") {
        "" => out.push(FieldError::required("spec.scope")),
        "Cluster" | "Namespaced" => {}
        other => out.push(FieldError::not_supported("spec.scope", other, &["Cluster", "Namespaced"])),
    }
    let preserve = flag(spec, "preserveUnknownFields");
    for (i, v) in view.versions.iter().enumerate() {
        if present(v.pointer("/schema/openAPIV3Schema")).is_some() {
            continue;
        }
        let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if cx.require_schema {
            out.push(required(&at, "schemas are required"));
        } else if !preserve && flag(v, "served") {
            out.push(required(&at, "because otherwise all fields are pruned"));
        }
    }
    if preserve && view.versions.iter().any(|v| v.pointer("/schema/openAPIV3Schema").is_some_and(has_default)) {
        let why = "must be false in order to use defaults in the schema";
        out.push(FieldError::invalid("spec.preserveUnknownFields", Value::Bool(true), why));
    }
    let names: Vec<&str> = view.versions.iter().map(|v| text(v, "name")).collect();
    for (i, v) in view.versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        out.extend(label_error(&format!("{at}.name"), names[i]));
        out.extend(version_errors(view.lifted, v, &at, cx));
    }
    let shown = || go_versions(spec.get("versions"), view.lifted);
    if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
        let why = "must contain unique version names";
        out.push(FieldError::verbatim(FieldErrorType::Invalid, "spec.versions", shown(), why));
    }
    if view.versions.iter().filter(|v| flag(v, "storage")).count() != 1 {
        let why = "must have exactly one version marked as storage version";
        out.push(FieldError::verbatim(FieldErrorType::Invalid, "spec.versions", shown(), why));
    }
    // The conversion copies the first version's name to the internal `spec.version`.
    out.extend(names.first().filter(|n| !n.is_empty()).and_then(|n| label_error("spec.version", n)));
    let spec_names = spec.get("names").unwrap_or(&NULL);
    for key in ["plural", "singular", "kind", "listKind"].into_iter().filter(|k| text(spec_names, k).is_empty()) {
        out.push(FieldError::required(&format!("spec.names.{key}")));
    }
    out.extend(names_errors(spec_names, "spec.names"));
    let schema = view.top("schema", view.lifted.schema);
    let unchanged = view.versions.first().is_some_and(|v| cx.unchanged(text(v, "name"), v.get("schema")));
    let any_status = view.versions.iter().any(has_status);
    out.extend(validation_errors(schema, any_status, "spec.validation", unchanged));
    out.extend(subresource_errors(view.top("subresources", view.lifted.subresources), "spec.subresources"));
    for (j, c) in list(view.top("additionalPrinterColumns", view.lifted.columns)).iter().enumerate() {
        out.extend(column_errors(c, &format!("spec.additionalPrinterColumns[{j}]")));
    }
    let fields = list(view.top("selectableFields", view.lifted.selectable));
    match schema {
        _ if fields.is_empty() => {}
        None => {
            let why = "selectableFields may only be set when validations.schema is included";
            out.push(invalid("spec.selectableFields", "", why));
        }
        Some(s) => {
            out.extend(selectable_errors(fields, s.get("openAPIV3Schema").unwrap_or(&NULL), "spec.selectableFields"))
        }
    }
    let conversion = present(spec.get("conversion"));
    if let Some(strategy) = conversion.map(|c| text(c, "strategy")).filter(|s| *s != "None" && preserve) {
        out.push(invalid("spec.conversion.strategy", strategy, "must be None if spec.preserveUnknownFields is true"));
    }
    out.extend(conversion.map(|c| conversion_errors(c, cx)).unwrap_or_default());
    out
}

/// kube's `validateCustomResourceDefinitionVersion`: what a version holds of its own.
fn version_errors(lifted: Lifted, v: &Value, at: &str, cx: &Context<'_>) -> Vec<FieldError> {
    let mut out = deprecation_errors(v, at);
    let schema = own(v, "schema", lifted.schema);
    let unchanged = cx.unchanged(text(v, "name"), v.get("schema"));
    out.extend(validation_errors(schema, has_status(v), &format!("{at}.schema"), unchanged));
    out.extend(subresource_errors(own(v, "subresources", lifted.subresources), &format!("{at}.subresources")));
    for (j, c) in list(own(v, "additionalPrinterColumns", lifted.columns)).iter().enumerate() {
        out.extend(column_errors(c, &format!("{at}.additionalPrinterColumns[{j}]")));
    }
    let fields = list(own(v, "selectableFields", lifted.selectable));
    let field = format!("{at}.selectableFields");
    // A lifted schema is not the version's own: kube finds none here.
    match schema.and_then(|s| present(s.get("openAPIV3Schema"))) {
        _ if fields.is_empty() => {}
        None => {
            let why = "selectableFields may only be set when version.schema.openAPIV3Schema is not included";
            out.push(invalid(&field, "", why));
        }
        Some(s) => out.extend(selectable_errors(fields, s, &field)),
    }
    out
}

fn deprecation_errors(v: &Value, at: &str) -> Vec<FieldError> {
    let Some(warning) = v.get("deprecationWarning").and_then(Value::as_str) else { return Vec::new() };
    let field = format!("{at}.deprecationWarning");
    if !flag(v, "deprecated") {
        return vec![invalid(&field, warning, "can only be set for deprecated versions")];
    }
    let mut why = Vec::new();
    if warning.len() > 256 {
        why.push("must be <= 256 characters long".to_string());
    }
    if warning.is_empty() {
        why.push("must not be an empty string".to_string());
    }
    // Go's `unicode.IsPrint`, near enough: no controls, no spaces but ' ', no format characters.
    let unprintable = |c: char| {
        c != ' '
            && (c.is_control()
                || c.is_whitespace()
                || matches!(c, '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}')
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}')
                || matches!(c, '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{e000}'..='\u{f8ff}'))
    };
    if let Some((i, _)) = warning.char_indices().find(|(_, c)| unprintable(*c)) {
        why.push(format!("must only contain printable UTF-8 characters; non-printable character found at index {i}"));
    }
    why.iter().map(|w| invalid(&field, warning, w)).collect()
}

/// kube's `validateCustomResourceDefinitionValidation` of `schema` (`{openAPIV3Schema}`) at `at`;
/// an unchanged schema's own errors are not looked for again.
fn validation_errors(schema: Option<&Value>, status: bool, at: &str, unchanged: bool) -> Vec<FieldError> {
    let mut out = Vec::new();
    let Some(root) = schema.and_then(|s| present(s.get("openAPIV3Schema"))) else { return out };
    let at = format!("{at}.openAPIV3Schema");
    if status {
        out.extend(status_root_error(root, &at));
    }
    if flag(root, "nullable") {
        out.push(FieldError::forbidden(&format!("{at}.nullable"), "nullable cannot be true at the root"));
    }
    if !unchanged {
        let errors = schema_errors(root, &at);
        out.extend(if errors.is_empty() { rule_errors(root, &at) } else { errors });
    }
    out
}

/// With a status subresource, a schema's root may only be an object with a few fields (status is
/// `properties.status`); kube reports the first field, in Go's order, that breaks this.
fn status_root_error(root: &Value, at: &str) -> Option<FieldError> {
    for key in ROOT_FIELDS.split_whitespace() {
        let Some(v) = present(root.get(key)) else { continue };
        let zero = *v == Value::Bool(false) || v.as_str() == Some("");
        if (zero && !ROOT_POINTERS.contains(&key)) || (key == "type" && v.as_str() == Some("object")) {
            continue;
        }
        if key == "type" {
            let why = r#"only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#;
            return Some(FieldError::invalid(&format!("{at}.type"), v.clone(), why));
        }
        if !ROOT_ALLOWED_JSON.split_whitespace().any(|a| a == key) {
            let why = format!(
                "only {ROOT_ALLOWED} fields are allowed at the root of the schema if the status subresource is enabled"
            );
            let go = "apiextensions.JSONSchemaProps{…}".to_string();
            return Some(FieldError::verbatim(FieldErrorType::Invalid, at, go, &why));
        }
    }
    None
}

/// kube's `ValidateCustomResourceSelectableFields` against the version's schema.
fn selectable_errors(fields: &[Value], schema: &Value, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let field = format!("{at}[{i}].jsonPath");
        let path = text(f, "jsonPath");
        let (printed, found) = match resolve(path, schema) {
            _ if path.is_empty() => {
                out.push(FieldError::required(&field));
                continue;
            }
            Ok(r) => r,
            Err(why) => {
                out.push(invalid(&field, path, &format!("is an invalid path: {why}")));
                continue;
            }
        };
        if printed == "metadata" || printed.starts_with("metadata.") || printed.starts_with("metadata[") {
            out.push(invalid(&field, path, "must not point to fields in metadata"));
        }
        if !matches!(text(found, "type"), "string" | "boolean" | "integer") {
            let why = "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.";
            out.push(invalid(&field, path, why));
        }
        if seen.contains(&printed) {
            out.push(FieldError::new(FieldErrorType::Duplicate, &field, Some(json!(path)), ""));
        } else {
            seen.push(printed);
        }
    }
    if seen.len() > MAX_SELECTABLE_FIELDS {
        let why = format!("must have at most {MAX_SELECTABLE_FIELDS} items");
        out.push(FieldError::new(FieldErrorType::TooMany, at, Some(json!(seen.len())), &why));
    }
    out
}

/// kube's `cel.ValidFieldPath` without array notation: the field path `path` names, as kube
/// prints it, and the schema found there.
fn resolve<'s>(path: &str, schema: &'s Value) -> Result<(String, &'s Value), String> {
    let (mut rest, mut at, mut printed) = (path, schema, String::new());
    while let Some(c) = rest.chars().next() {
        match c {
            '.' => rest = &rest[1..],
            '[' => return Err("array notation is not allowed".into()),
            _ => return Err(format!("expected [ or . but got: {}", token(&mut rest))),
        }
        if rest.is_empty() {
            return Err("unexpected end of JSON path".into());
        }
        let name = token(&mut rest);
        if let Some(properties) = at.get("properties").and_then(Value::as_object) {
            at = properties.get(name).ok_or_else(|| "does not refer to a valid field".to_string())?;
            if !printed.is_empty() {
                printed.push('.');
            }
            printed.push_str(name);
        } else if let Some(more) = present(at.get("additionalProperties")) {
            at = if more.is_object() { more } else { &NULL };
            printed.push_str(&format!("[{name}]"));
        } else {
            return Err("does not refer to a valid field".into());
        }
    }
    Ok((printed, at))
}

/// The next token of a field path as kube's scanner cuts it: a delimiter (`.`, `[`, `]`) alone,
/// a single-quoted string, or the text up to the next delimiter.
fn token<'p>(rest: &mut &'p str) -> &'p str {
    let s = *rest;
    let b = s.as_bytes();
    let end = match s.find(['.', '[', ']']) {
        _ if s.starts_with('\'') => {
            (1..b.len()).find(|&i| b[i] == b'\'' && b[i - 1] != b'\\').map_or(s.len(), |i| i + 1)
        }
        Some(0) => 1,
        Some(i) => i,
        None => s.len(),
    };
    let (tok, tail) = s.split_at(end);
    *rest = tail;
    tok
}

/// kube's `ValidateCustomResourceDefinitionSubresources`.
fn subresource_errors(subresources: Option<&Value>, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let Some(scale) = subresources.and_then(|s| present(s.get("scale"))) else { return out };
    let paths = [
        ("specReplicasPath", &[".spec."][..], "should be a json path under .spec"),
        ("statusReplicasPath", &[".status."][..], "should be a json path under .status"),
        ("labelSelectorPath", &[".spec.", ".status."][..], "should be a json path under either .spec or .status"),
    ];
    for (key, under, why) in paths {
        let field = format!("{at}.scale.{key}");
        let path = text(scale, key);
        if path.is_empty() {
            // The label selector path is optional.
            out.extend((key != "labelSelectorPath").then(|| FieldError::required(&field)));
        } else if let Some(e) = simple_path_error(path, &field) {
            out.push(e);
        } else if !under.iter().any(|u| path.starts_with(*u)) {
            out.push(invalid(&field, path, why));
        }
    }
    out
}

/// kube's `validateSimpleJSONPath`.
fn simple_path_error(path: &str, field: &str) -> Option<FieldError> {
    match path.chars().next() {
        None => Some(invalid(field, path, "must not be empty")),
        Some('.') => None,
        Some(_) => Some(invalid(field, path, "must be a simple json path starting with .")),
    }
}

/// kube's `ValidateCustomResourceColumnDefinition` (its path says `JSONPath`, as kube's does).
fn column_errors(c: &Value, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    if text(c, "name").is_empty() {
        out.push(FieldError::required(&format!("{at}.name")));
    }
    let types = format!("must be one of {}", PRINTER_TYPES.join(","));
    match text(c, "type") {
        "" => out.push(required(&format!("{at}.type"), &types)),
        t if !PRINTER_TYPES.contains(&t) => out.push(invalid(&format!("{at}.type"), t, &types)),
        _ => {}
    }
    let format = text(c, "format");
    if !format.is_empty() && !PRINTER_FORMATS.contains(&format) {
        out.push(invalid(&format!("{at}.format"), format, &format!("must be one of {}", PRINTER_FORMATS.join(","))));
    }
    match text(c, "jsonPath") {
        "" => out.push(FieldError::required(&format!("{at}.JSONPath"))),
        path => out.extend(simple_path_error(path, &format!("{at}.JSONPath"))),
    }
    out
}

/// kube's `ValidateCustomResourceDefinitionNames` of `names` at `at`.
fn names_errors(names: &Value, at: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    for key in ["plural", "singular"].into_iter().filter(|k| !text(names, k).is_empty()) {
        out.extend(label_error(&format!("{at}.{key}"), text(names, key)));
    }
    for key in ["kind", "listKind"] {
        let name = text(names, key);
        let problems = meta::name_problems(Names::Dns1035, &name.to_lowercase());
        if !name.is_empty() && !problems.is_empty() {
            let why = format!("may have mixed case, but should otherwise match: {}", problems.join(","));
            out.push(invalid(&format!("{at}.{key}"), name, &why));
        }
    }
    let each = |key: &str| -> Vec<FieldError> {
        let names = strings(names.get(key));
        names.iter().enumerate().filter_map(|(i, n)| label_error(&format!("{at}.{key}[{i}]"), n)).collect()
    };
    out.extend(each("shortNames"));
    let kind = text(names, "kind");
    if !kind.is_empty() && kind == text(names, "listKind") {
        out.push(invalid(&format!("{at}.listKind"), kind, "kind and listKind may not be the same"));
    }
    out.extend(each("categories"));
    out
}

/// kube's `validateCustomResourceConversion`, at the internal type's paths.
fn conversion_errors(conversion: &Value, cx: &Context<'_>) -> Vec<FieldError> {
    const AT: &str = "spec.conversion.webhookClientConfig";
    const VERSIONS: &str = "spec.conversion.conversionReviewVersions";
    let mut out = Vec::new();
    let strategy = text(conversion, "strategy");
    match strategy {
        "" => out.push(FieldError::required("spec.conversion.strategy")),
        "None" | "Webhook" => {}
        other => out.push(FieldError::not_supported("spec.conversion.strategy", other, &["None", "Webhook"])),
    }
    let webhook = present(conversion.get("webhook"));
    let client = webhook.and_then(|w| present(w.get("clientConfig")));
    let versions = strings(webhook.and_then(|w| w.get("conversionReviewVersions")));
    if strategy != "Webhook" {
        out.extend(client.map(|_| FieldError::forbidden(AT, NOT_WEBHOOK)));
        out.extend((!versions.is_empty()).then(|| FieldError::forbidden(VERSIONS, NOT_WEBHOOK)));
        return out;
    }
    match client.map(|c| (c.get("url").and_then(Value::as_str), present(c.get("service")))) {
        None => out.push(required(AT, "required when strategy is set to Webhook")),
        Some((Some(url), None)) => out.extend(url_errors(&format!("{AT}.url"), url)),
        Some((None, Some(service))) => out.extend(service_errors(&format!("{AT}.service"), service)),
        Some(_) => out.push(required(AT, "exactly one of url or service is required")),
    }
    // validateConversionReviewVersions.
    if versions.is_empty() {
        out.push(FieldError::required(VERSIONS));
        return out;
    }
    for (i, v) in versions.iter().enumerate() {
        let field = format!("{VERSIONS}[{i}]");
        if versions[..i].contains(v) {
            out.push(invalid(&field, v, "duplicate version"));
        } else {
            out.extend(meta::name_problems(Names::Dns1035, v).iter().map(|p| invalid(&field, v, p)));
        }
    }
    if cx.known_review_version && !versions.iter().copied().any(known_review_version) {
        let go = go_strings(versions.iter().copied());
        out.push(FieldError::verbatim(
            FieldErrorType::Invalid,
            VERSIONS,
            go,
            "must include at least one of v1, v1beta1",
        ));
    }
    out
}

fn known_review_version(v: &str) -> bool {
    v == "v1" || v == "v1beta1"
}

/// kube's `ValidateWebhookURL` with HTTPS required, over Go's `url.Parse` of `url`.
fn url_errors(field: &str, url: &str) -> Vec<FieldError> {
    let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
    let (scheme, rest) = match rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))) {
        Some(0) if rest.starts_with(':') => {
            let why = format!("url must be a valid URL: parse {}: missing protocol scheme{URL_FORM}", go_quote(url));
            return vec![required(field, &why)];
        }
        Some(i) if rest[i..].starts_with(':') && rest.starts_with(|c: char| c.is_ascii_alphabetic()) => {
            (rest[..i].to_ascii_lowercase(), &rest[i + 1..])
        }
        _ => (String::new(), rest),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = rest.strip_prefix("//").filter(|_| !scheme.is_empty() || !rest.starts_with("///"));
    let authority = authority.map(|a| a.split('/').next().unwrap_or(""));
    let (user, host) = authority.map_or((None, ""), |a| a.rsplit_once('@').map_or((None, a), |(u, h)| (Some(u), h)));
    let mut out = Vec::new();
    if scheme != "https" {
        out.push(invalid(field, &scheme, &format!("'https' is the only allowed URL scheme{URL_FORM}")));
    }
    if host.is_empty() {
        out.push(invalid(field, host, &format!("host must be specified{URL_FORM}")));
    }
    out.extend(user.map(|u| invalid(field, u, "user information is not permitted in the URL")));
    out.extend((!fragment.is_empty()).then(|| invalid(field, fragment, "fragments are not permitted in the URL")));
    out.extend((!query.is_empty()).then(|| invalid(field, query, "query parameters are not permitted in the URL")));
    out
}

/// kube's `ValidateWebhookService`. kube passes the service's name where the namespace is
/// expected and the reverse, so a missing namespace is reported as the name and the reverse.
fn service_errors(at: &str, service: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    if text(service, "namespace").is_empty() {
        out.push(required(&format!("{at}.name"), "service name is required"));
    }
    if text(service, "name").is_empty() {
        out.push(required(&format!("{at}.namespace"), "service namespace is required"));
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        let why = "port is not valid: must be between 1 and 65535, inclusive";
        out.push(FieldError::invalid(&format!("{at}.port"), json!(port), why));
    }
    let path = service.get("path").and_then(Value::as_str).unwrap_or("");
    let field = format!("{at}.path");
    if path.is_empty() || path == "/" {
        return out;
    }
    if path == "//" {
        out.push(invalid(&field, path, "segment[0] may not be empty"));
        return out;
    }
    if !path.starts_with('/') {
        out.push(invalid(&field, path, "must start with a '/'"));
    }
    let trimmed = path.char_indices().nth(1).map_or("", |(i, _)| &path[i..]);
    for (i, segment) in trimmed.strip_suffix('/').unwrap_or(trimmed).split('/').enumerate() {
        if segment.is_empty() {
            out.push(invalid(&field, path, &format!("segment[{i}] may not be empty")));
            continue;
        }
        for p in meta::name_problems(Names::Subdomain, segment) {
            out.push(invalid(&field, path, &format!("segment[{i}]: {p}")));
        }
    }
    out
}

/// kube's `ValidateCustomResourceDefinitionStoredVersions` of `stored` (None: Go's nil list).
fn stored_version_errors(stored: Option<&[String]>, crd: &Value) -> Vec<FieldError> {
    const AT: &str = "status.storedVersions";
    let go = |s: &[String]| go_strings(s.iter().map(String::as_str));
    let Some(stored) = stored.filter(|s| !s.is_empty()) else {
        let shown = stored.map_or_else(|| "[]string(nil)".to_string(), go);
        return vec![FieldError::verbatim(FieldErrorType::Invalid, AT, shown, "must have at least one stored version")];
    };
    let versions = list(crd.pointer("/spec/versions"));
    let mut out = Vec::new();
    for name in versions.iter().filter(|v| flag(v, "storage")).map(|v| text(v, "name")) {
        if !stored.iter().any(|s| s.as_str() == name) {
            let why = format!("must have the storage version {name}");
            out.push(FieldError::verbatim(FieldErrorType::Invalid, AT, go(stored), &why));
        }
    }
    for (i, s) in stored.iter().enumerate() {
        // kube keys the list by version: a repeated one is reported at its last index.
        if stored[i + 1..].contains(s) || versions.iter().any(|v| text(v, "name") == s) {
            continue;
        }
        let why = format!("missing from spec.versions; {s} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {s} and removes {s} from status.storedVersions");
        out.push(invalid(&format!("{AT}[{i}]"), s, &why));
    }
    out
}

/// `status.storedVersions` as kube's strategy leaves them: on create the storage version alone,
/// on update `old`'s list with the storage version added (None: Go's nil list).
pub fn stored_versions(old: Option<&Value>, crd: &Value) -> Option<Vec<String>> {
    let old = old.and_then(|o| o.pointer("/status/storedVersions")).and_then(Value::as_array);
    let mut stored: Option<Vec<String>> = old.map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect());
    if let Some(v) = storage_version(crd) {
        let s = stored.get_or_insert_with(Vec::new);
        if !s.iter().any(|x| x.as_str() == v) {
            s.push(v.to_string());
        }
    }
    stored
}

/// kube's `APIApprovalState`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    Missing,
    /// A reason starting "unapproved".
    Bypassed,
    /// A URL with a scheme and a host.
    Approved,
    Invalid,
}

/// kube's `GetAPIApprovalState`: the state of a CRD's approval annotation, and the annotation.
fn approval(crd: &Value) -> (Approval, &str) {
    let a = crd.pointer(&format!("/metadata/annotations/{APPROVAL}")).and_then(Value::as_str).unwrap_or("");
    let url = a.split_once("://").is_some_and(|(scheme, rest)| {
        let host = rest.split(['/', '?']).next().unwrap_or("");
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !host.is_empty()
            && !host.contains(' ')
            && !a.chars().any(|c| c.is_ascii_control())
    });
    let state = match (a.is_empty(), a.starts_with("unapproved"), url) {
        (true, _, _) => Approval::Missing,
        (_, true, _) => Approval::Bypassed,
        (_, _, true) => Approval::Approved,
        _ => Approval::Invalid,
    };
    (state, a)
}

/// kube's `validateAPIApproval`: a CRD in a protected group needs an approval annotation, unless
/// the update leaves its state as it was.
fn approval_errors(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let group = text_at(crd, "/spec/group");
    let protected = ["k8s.io", "kubernetes.io"].iter().any(|d| group == *d || group.ends_with(&format!(".{d}")));
    let (state, value) = approval(crd);
    if !protected || old.is_some_and(|o| approval(o).0 == state) {
        return Vec::new();
    }
    let field = format!("metadata.annotations[{APPROVAL}]");
    let (pr, quoted) = ("see https://github.com/kubernetes/enhancements/pull/1111", go_quote(APPROVAL));
    match state {
        Approval::Missing => {
            vec![required(&field, &format!("protected groups must have approval annotation {quoted}, {pr}"))]
        }
        Approval::Invalid => {
            let why = format!("protected groups must have approval annotation {quoted} with either a URL or a reason starting with \"unapproved\", {pr}");
            vec![invalid(&field, value, &why)]
        }
        Approval::Bypassed | Approval::Approved => Vec::new(),
    }
}

/// kube's `validatePreserveUnknownFields`: v1 CRDs may not turn it on (one that has it keeps it).
fn preserve_errors(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let on = |c: &Value| c.pointer("/spec/preserveUnknownFields").and_then(Value::as_bool).unwrap_or(false);
    if old.is_some_and(on) || !on(crd) {
        return Vec::new();
    }
    let why = "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead";
    vec![FieldError::invalid("spec.preserveUnknownFields", Value::Bool(true), why)]
}

fn has_status(v: &Value) -> bool {
    present(v.pointer("/subresources/status")).is_some()
}

/// Whether a default is set anywhere in schema `s` (kube's `SchemaHas` walk).
fn has_default(s: &Value) -> bool {
    let Some(o) = s.as_object() else { return false };
    let any = |v: &Value| v.as_array().is_some_and(|a| a.iter().any(has_default));
    let map = |v: &Value| v.as_object().is_some_and(|m| m.values().any(has_default));
    present(o.get("default")).is_some()
        || o.iter().any(|(k, v)| match k.as_str() {
            "items" => has_default(v) || any(v),
            "not" | "additionalProperties" | "additionalItems" => has_default(v),
            "allOf" | "anyOf" | "oneOf" => any(v),
            "properties" | "patternProperties" | "definitions" | "dependencies" => map(v),
            _ => false,
        })
}

/// Whether two optional values are alike as kube's `Semantic.DeepEqual` sees the Go values
/// they decode to: absent is null, and a member that is null, false, "" or [] is absent.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (present(a), present(b)) {
        (None, None) => true,
        (Some(a), Some(b)) => same_value(a, b),
        _ => false,
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys().chain(y.keys()).all(|k| match (member(x.get(k)), member(y.get(k))) {
                (None, None) => true,
                (Some(p), Some(q)) => same_value(p, q),
                _ => false,
            })
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q)),
        _ => a == b,
    }
}

/// An object's member as Go sees it: none when null, false, "" or [].
fn member(v: Option<&Value>) -> Option<&Value> {
    let zero = |v: &&Value| matches!(v, Value::Null | Value::Bool(false)) || v.as_str() == Some("");
    v.filter(|v| !zero(v) && v.as_array().is_none_or(|a| !a.is_empty()))
}

/// Lists alike, an empty one as none.
fn same_list(a: Option<&Value>, b: Option<&Value>) -> bool {
    let (a, b) = (list(a), list(b));
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| same_value(p, q))
}

/// Go's `%#v` of the internal versions kube reports (a set pointer shown by a stand-in address).
fn go_versions(versions: Option<&Value>, lifted: Lifted) -> String {
    let pointer = |ty: &str, set: bool| format!("(*{ty})({})", if set { "0xc000000000" } else { "nil" });
    let version = |v: &Value| {
        let columns = go_list(
            "CustomResourceColumnDefinition",
            own(v, "additionalPrinterColumns", lifted.columns),
            |c| {
                let q = |k: &str| go_quote(text(c, k));
                let priority = c.get("priority").and_then(Value::as_i64).unwrap_or(0);
                let (name, kind, format, about, path) =
                    (q("name"), q("type"), q("format"), q("description"), q("jsonPath"));
                format!("Name:{name}, Type:{kind}, Format:{format}, Description:{about}, Priority:{priority}, JSONPath:{path}")
            },
        );
        let fields = go_list("SelectableField", own(v, "selectableFields", lifted.selectable), |f| {
            format!("JSONPath:{}", go_quote(text(f, "jsonPath")))
        });
        let warning = pointer("string", v.get("deprecationWarning").is_some_and(Value::is_string));
        let schema = pointer("apiextensions.CustomResourceValidation", own(v, "schema", lifted.schema).is_some());
        let sub =
            pointer("apiextensions.CustomResourceSubresources", own(v, "subresources", lifted.subresources).is_some());
        let (name, served, storage, deprecated) =
            (go_quote(text(v, "name")), flag(v, "served"), flag(v, "storage"), flag(v, "deprecated"));
        format!("Name:{name}, Served:{served}, Storage:{storage}, Deprecated:{deprecated}, DeprecationWarning:{warning}, Schema:{schema}, Subresources:{sub}, AdditionalPrinterColumns:{columns}, SelectableFields:{fields}")
    };
    go_list("CustomResourceDefinitionVersion", versions, version)
}

/// Go's `%#v` of a `[]apiextensions.<ty>`, each struct's fields shown by `item`.
fn go_list(ty: &str, items: Option<&Value>, item: impl Fn(&Value) -> String) -> String {
    let Some(items) = items.and_then(Value::as_array) else { return format!("[]apiextensions.{ty}(nil)") };
    let shown: Vec<String> = items.iter().map(|x| format!("apiextensions.{ty}{{{}}}", item(x))).collect();
    format!("[]apiextensions.{ty}{{{}}}", shown.join(", "))
}

/// An Invalid error at `field` when `name` is no DNS-1035 label, kube's problems joined.
fn label_error(field: &str, name: &str) -> Option<FieldError> {
    let problems = meta::name_problems(Names::Dns1035, name);
    (!problems.is_empty()).then(|| invalid(field, name, &problems.join(",")))
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn text_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn list(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    list(v).iter().filter_map(Value::as_str).collect()
}

fn required(field: &str, detail: &str) -> FieldError {
    FieldError::new(FieldErrorType::Required, field, None, detail)
}

fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError::invalid(field, Value::String(value.into()), detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Texts from kube 1.33's apiextensions validation.go (function named in each test) unless
    // the test says otherwise; the schema and rule modules find nothing wrong in `crd()`'s schema.

    fn crd() -> Value {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}});
        let scale = json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"});
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}, "scale": scale}}]}
        })
    }

    /// `crd()` changed by `change`, defaulted, and its errors.
    fn checked(change: impl FnOnce(&mut Value)) -> Vec<String> {
        let mut c = crd();
        change(&mut c);
        defaults(&mut c);
        errors(&c).iter().map(ToString::to_string).collect()
    }

    /// A second version, `v2`, like `v1` but not stored.
    fn add_v2(c: &mut Value) {
        let mut v2 = c["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        c["spec"]["versions"].as_array_mut().unwrap().push(v2);
    }

    #[test]
    fn defaults_are_kubes() {
        let mut c = crd();
        c["spec"]["conversion"] =
            json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s"}}}});
        defaults(&mut c);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c.pointer("/spec/conversion/webhook/clientConfig/service/port"), Some(&json!(443)));
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
        let mut c = crd();
        defaults(&mut c);
        assert_eq!(c["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(storage_version(&c), Some("v1"));
        assert!(checked(|_| {}).is_empty());
    }

    #[test]
    fn name_group_scope_and_names() {
        // ValidateCustomResourceDefinition's nameValidationFn.
        assert_eq!(
            checked(|c| c["metadata"]["name"] = json!("gadgets.example.com")),
            ["metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group"]
        );
        // validateCustomResourceDefinitionSpec.
        let dotless = checked(|c| {
            c["spec"]["group"] = json!("example");
            c["metadata"]["name"] = json!("widgets.example");
        });
        assert_eq!(dotless, ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]);
        assert_eq!(
            checked(|c| c["spec"]["scope"] = json!("Global")),
            ["spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""]
        );
        // ValidateCustomResourceDefinitionNames, with IsDNS1035Label's text.
        assert_eq!(
            checked(|c| c["spec"]["names"]["shortNames"] = json!(["w_1"])),
            ["spec.names.shortNames[0]: Invalid value: \"w_1\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]
        );
    }

    #[test]
    fn exactly_one_storage_version() {
        // validateCustomResourceDefinitionSpec; ValidateCustomResourceDefinitionStoredVersions.
        assert_eq!(
            checked(|c| c["spec"]["versions"][0]["storage"] = json!(false)),
            [
                "spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{apiextensions.CustomResourceDefinitionVersion{Name:\"v1\", Served:true, Storage:false, Deprecated:false, DeprecationWarning:(*string)(nil), Schema:(*apiextensions.CustomResourceValidation)(nil), Subresources:(*apiextensions.CustomResourceSubresources)(nil), AdditionalPrinterColumns:[]apiextensions.CustomResourceColumnDefinition(nil), SelectableFields:[]apiextensions.SelectableField(nil)}}: must have exactly one version marked as storage version",
                "status.storedVersions: Invalid value: []string(nil): must have at least one stored version",
            ]
        );
        let two = checked(|c| {
            add_v2(c);
            c["spec"]["versions"][1]["storage"] = json!(true);
        });
        assert_eq!(two.len(), 2, "{two:?}");
        assert!(two[0].starts_with("spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{"));
        assert!(two[0].ends_with(": must have exactly one version marked as storage version"));
        assert_eq!(two[1], "status.storedVersions: Invalid value: []string{\"v1\"}: must have the storage version v2");
    }

    #[test]
    fn schemas_columns_and_scale() {
        // validateCustomResourceDefinitionSpec.
        assert_eq!(
            checked(|c| c["spec"]["versions"][0]["schema"] = Value::Null),
            ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
        );
        // ValidateCustomResourceColumnDefinition: one version's columns are lifted to the spec.
        let bad = json!([{"name": "Replicas", "type": "float", "jsonPath": ".spec.replicas"}]);
        let why = "Invalid value: \"float\": must be one of boolean,date,integer,number,string";
        let one = checked(|c| c["spec"]["versions"][0]["additionalPrinterColumns"] = bad.clone());
        assert_eq!(one, [format!("spec.additionalPrinterColumns[0].type: {why}")]);
        let per_version = checked(|c| {
            add_v2(c);
            c["spec"]["versions"][0]["additionalPrinterColumns"] = bad.clone();
        });
        assert_eq!(per_version, [format!("spec.versions[0].additionalPrinterColumns[0].type: {why}")]);
        // ValidateCustomResourceDefinitionSubresources.
        assert_eq!(
            checked(|c| c["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] = json!(".status.replicas")),
            ["spec.subresources.scale.specReplicasPath: Invalid value: \".status.replicas\": should be a json path under .spec"]
        );
    }

    #[test]
    fn conversion_and_preserve_unknown_fields() {
        // validateCustomResourceConversion.
        assert_eq!(
            checked(|c| c["spec"]["conversion"] = json!({"strategy": "Webhook"})),
            [
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
                "spec.conversion.conversionReviewVersions: Required value",
            ]
        );
        // k8s.io/apiserver's ValidateWebhookURL.
        let hook = json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "http://h/p?q#f"}, "conversionReviewVersions": ["v1"]}});
        assert_eq!(
            checked(|c| c["spec"]["conversion"] = hook),
            [
                "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "spec.conversion.webhookClientConfig.url: Invalid value: \"f\": fragments are not permitted in the URL",
                "spec.conversion.webhookClientConfig.url: Invalid value: \"q\": query parameters are not permitted in the URL",
            ]
        );
        // validatePreserveUnknownFields.
        assert_eq!(
            checked(|c| c["spec"]["preserveUnknownFields"] = json!(true)),
            ["spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"]
        );
    }

    #[test]
    fn updates() {
        // ValidateCustomResourceDefinitionStoredVersions: a stored version stays in the versions.
        let mut old = crd();
        add_v2(&mut old);
        old["spec"]["versions"][1]["name"] = json!("v1beta1");
        defaults(&mut old);
        old["status"]["storedVersions"] = json!(["v1beta1", "v1"]);
        let mut new = crd();
        defaults(&mut new);
        let texts = |old: &Value, new: &Value| -> Vec<String> {
            update_errors(old, new).iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            texts(&old, &new),
            ["status.storedVersions[0]: Invalid value: \"v1beta1\": missing from spec.versions; v1beta1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1beta1 and removes v1beta1 from status.storedVersions"]
        );
        // validateCustomResourceDefinitionSpecUpdate: scope is immutable once Established.
        let mut old = new.clone();
        new["spec"]["scope"] = json!("Cluster");
        assert!(texts(&old, &new).is_empty());
        old["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
        assert_eq!(texts(&old, &new), ["spec.scope: Invalid value: \"Cluster\": field is immutable"]);
    }

    #[test]
    fn status_roots_and_selectable_fields() {
        // validateCustomResourceDefinitionValidation.
        let at = "spec.validation.openAPIV3Schema";
        let e = status_root_error(&json!({"type": "object", "enum": [{}]}), at).map(|e| e.to_string());
        assert!(e.unwrap().ends_with(&format!(
            "only {ROOT_ALLOWED} fields are allowed at the root of the schema if the status subresource is enabled"
        )));
        assert_eq!(
            status_root_error(&json!({"type": "array"}), at).map(|e| e.to_string()).as_deref(),
            Some("spec.validation.openAPIV3Schema.type: Invalid value: \"array\": only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled")
        );
        assert!(status_root_error(&json!({"type": "object", "nullable": false, "description": ""}), at).is_none());
        // ValidateCustomResourceSelectableFields, with cel.ValidFieldPath's texts.
        let schema =
            json!({"properties": {"spec": {"properties": {"color": {"type": "string"}, "size": {"type": "object"}}}}});
        let fields = json!([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}, {"jsonPath": ".spec.hue"}, {"jsonPath": ".spec.color"}, {"jsonPath": ".spec[0]"}]);
        let got: Vec<String> =
            selectable_errors(fields.as_array().unwrap(), &schema, "f").iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "f[1].jsonPath: Invalid value: \".spec.size\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
                "f[2].jsonPath: Invalid value: \".spec.hue\": is an invalid path: does not refer to a valid field",
                "f[3].jsonPath: Duplicate value: \".spec.color\"",
                "f[4].jsonPath: Invalid value: \".spec[0]\": is an invalid path: array notation is not allowed",
            ]
        );
    }
}
