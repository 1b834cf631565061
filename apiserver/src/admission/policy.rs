//! ValidatingAdmissionPolicy: CEL expressions that every write their policy's match constraints
//! and a binding's match resources take must hold, evaluated in process (the `cel` crate) with
//! kube's variables — `object`, `oldObject`, `request`, `params`, `namespaceObject` and
//! `variables` — and their failures dealt with as each binding's `validationActions` say: Deny
//! refuses the write, Warn warns its client, Audit notes it in the audit record.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::{json, Value};

use super::webhooks::{self, Rule};
use super::Attributes;
use crate::rest::Api;
use crate::status::{self, FieldError, FieldErrorType, Status};

/// The variables an expression may name (`params` only with a `paramKind`; `authorizer` is
/// declared but not evaluated by keel — an expression that uses it fails as an error).
const VARIABLES: [&str; 7] = ["object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"];

/// kube's CEL environment as far as the `cel` crate carries it: the standard library, optional
/// values, the strings and lists extensions; a map literal repeating a key keeps its last
/// value, as cel-go does.
pub(crate) static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    env.set_error_on_duplicate_map_keys(false);
    Arc::new(env)
});

/// Programs compiled, by source (policies are few, and their expressions are evaluated on every
/// write they match).
static PROGRAMS: LazyLock<parking_lot::Mutex<HashMap<String, Arc<cel::Program>>>> = LazyLock::new(Default::default);

/// The most programs kept compiled.
const KEPT_PROGRAMS: usize = 4096;

/// `source` compiled, or kube's `compilation failed: …` words for why not (with the
/// variables it names that are not declared).
pub(crate) fn compile(source: &str, declared: &[&str]) -> Result<Arc<cel::Program>, String> {
    let kept = PROGRAMS.lock().get(source).cloned();
    let program = match kept {
        Some(p) => p,
        None => {
            let p = Arc::new(ENV.compile(source).map_err(|e| format!("compilation failed: {e}"))?);
            let mut kept = PROGRAMS.lock();
            if kept.len() >= KEPT_PROGRAMS {
                kept.clear();
            }
            kept.insert(source.to_string(), p.clone());
            p
        }
    };
    let mut names = Vec::new();
    free_variables(program.expression(), &mut Vec::new(), &mut names);
    if let Some(name) = names.iter().find(|n| !declared.contains(&n.as_str())) {
        return Err(format!(
            "compilation failed: ERROR: <input>:1:1: undeclared reference to '{name}' (in container '')"
        ));
    }
    Ok(program)
}

/// The variables `e` names that are not bound inside it (a macro's iteration and accumulator
/// variables are), each once, in the order they come.
pub(crate) fn free_variables(e: &cel::IdedExpr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    use cel::common::ast::{EntryExpr, Expr};
    let entries = |entries: &[cel::common::ast::IdedEntryExpr], bound: &mut Vec<String>, out: &mut Vec<String>| {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => free_variables(&f.value, bound, out),
                EntryExpr::MapEntry(m) => {
                    free_variables(&m.key, bound, out);
                    free_variables(&m.value, bound, out);
                }
            }
        }
    };
    match &e.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) && !out.contains(name) {
                out.push(name.clone());
            }
        }
        Expr::Call(c) => {
            for x in c.target.iter().map(|t| &**t).chain(&c.args) {
                free_variables(x, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            free_variables(&c.iter_range, bound, out);
            free_variables(&c.accu_init, bound, out);
            let outer = bound.len();
            bound.extend([Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)].into_iter().flatten().cloned());
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                free_variables(x, bound, out);
            }
            bound.truncate(outer);
        }
        Expr::List(l) => {
            for x in &l.elements {
                free_variables(x, bound, out);
            }
        }
        Expr::Map(m) => entries(&m.entries, bound, out),
        Expr::Struct(st) => entries(&st.entries, bound, out),
        Expr::Select(sel) => free_variables(&sel.operand, bound, out),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// What an evaluation sees.
struct Activation {
    values: Vec<(&'static str, cel::Value)>,
}

impl Activation {
    /// `program` evaluated over these values.
    fn eval(&self, program: &cel::Program) -> Result<cel::Value, String> {
        let mut ctx = cel::Context::with_env(ENV.clone());
        for (name, v) in &self.values {
            ctx.add_variable_from_value(*name, v.clone());
        }
        program.execute(&ctx).map_err(|e| e.to_string())
    }
}

/// A JSON value as CEL sees it.
fn cel_of(v: &Value) -> cel::Value {
    cel::to_value(v).unwrap_or(cel::Value::Null)
}

/// The variables a webhook's match conditions may name.
pub(super) const CONDITION_VARIABLES: [&str; 4] = ["object", "oldObject", "request", "authorizer"];

/// A write's `object`, `oldObject` and `request`, as every expression sees them.
fn activation_of(a: &Attributes<'_>, object: Option<&Value>) -> Activation {
    Activation {
        values: vec![
            ("object", cel_of(&webhooks::typed(a, object))),
            ("oldObject", cel_of(&webhooks::typed(a, a.old))),
            ("request", cel_of(&Value::Object(webhooks::request_of(a)))),
        ],
    }
}

/// Whether match conditions hold for the write `a` of `object`: not when one is false (whatever
/// the others did), an error (each failure, kube's `[a, b]` for several) when none is false and
/// one could not be evaluated.
pub(super) fn conditions_hold(
    a: &Attributes<'_>,
    object: Option<&Value>,
    conditions: &[reg::MatchCondition],
) -> Result<bool, String> {
    if conditions.is_empty() {
        return Ok(true);
    }
    conditions_of(&activation_of(a, object), conditions, &CONDITION_VARIABLES)
}

/// Match conditions evaluated over `activation`.
fn conditions_of(
    activation: &Activation,
    conditions: &[reg::MatchCondition],
    declared: &[&str],
) -> Result<bool, String> {
    let mut errors = Vec::new();
    for c in conditions {
        let expr = c.expression.trim();
        match compile(&c.expression, declared).and_then(|p| activation.eval(&p)) {
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => errors.push(format!("expression '{expr}' resulted in error: no such overload")),
            Err(e) => errors.push(format!("expression '{expr}' resulted in error: {e}")),
        }
    }
    match errors.len() {
        0 => Ok(true),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// A webhook's or policy's `matchConditions` at `at`: at most 64, each named (uniquely) and
/// compiling with the variables `declared`.
pub(super) fn condition_errors(at: &str, conditions: &[Value], declared: &[&str]) -> Vec<FieldError> {
    let mut out = Vec::new();
    if conditions.len() > 64 {
        out.push(FieldError::new(
            FieldErrorType::TooMany,
            at,
            Some(json!(conditions.len())),
            "must have at most 64 items",
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            out.push(FieldError::required(&format!("{here}.name")));
        } else {
            for p in crate::validation::qualified_name_problems(name) {
                out.push(FieldError::invalid(&format!("{here}.name"), json!(name), &p));
            }
            if names.contains(&name) {
                out.push(FieldError::new(FieldErrorType::Duplicate, &format!("{here}.name"), Some(json!(name)), ""));
            }
            names.push(name);
        }
        let expr = c.get("expression").and_then(Value::as_str).unwrap_or("");
        if expr.trim().is_empty() {
            out.push(FieldError::required(&format!("{here}.expression")));
        } else {
            out.extend(expression_errors(&format!("{here}.expression"), expr, declared, "expression"));
        }
    }
    out
}

/// One failed validation, and what its binding does with failures.
struct Failure {
    message: String,
    reason: String,
    index: usize,
}

/// The policies bound to the write `a`, evaluated; the first failure a Deny binding refuses
/// is the answer.
pub async fn validate(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    if excluded(a) {
        return Ok(());
    }
    let (Some(policies), Some(bindings)) =
        (resource("validatingadmissionpolicies"), resource("validatingadmissionpolicybindings"))
    else {
        return Ok(());
    };
    let mut all: Vec<_> = api
        .cached_list(bindings, None)
        .iter()
        .filter_map(|o| o.decoded::<reg::ValidatingAdmissionPolicyBinding>())
        .collect();
    all.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
    for binding in all {
        let Some(spec) = &binding.spec else { continue };
        let Some(policy_name) = spec.policy_name.as_deref() else { continue };
        let Some(policy) =
            api.cached(policies, None, policy_name).and_then(|o| o.decoded::<reg::ValidatingAdmissionPolicy>())
        else {
            continue;
        };
        let Some(pspec) = &policy.spec else { continue };
        let Some(constraints) = &pspec.match_constraints else { continue };
        if !matches_resources(api, constraints, a) {
            continue;
        }
        if let Some(m) = &spec.match_resources {
            if !matches_resources(api, m, a) {
                continue;
            }
        }
        let binding_name = binding.metadata.name.as_deref().unwrap_or("");
        let denied_by =
            format!("ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request");
        let fail_closed = pspec.failure_policy.as_deref() != Some("Ignore");
        let actions: Vec<&str> = spec.validation_actions.iter().flatten().map(String::as_str).collect();
        let params = match params(api, pspec, spec, a) {
            Ok(p) => p,
            Err(why) if fail_closed => {
                return Err(denied(a, &format!("{denied_by}: failed to configure binding: {why}"), "Invalid"));
            }
            Err(_) => continue,
        };
        for p in params {
            let failures = evaluate(api, policy_name, pspec, a, p, fail_closed);
            for f in failures {
                if actions.contains(&"Deny") {
                    return Err(denied(a, &format!("{denied_by}: {}", f.message), &f.reason));
                }
                if actions.contains(&"Warn") {
                    super::warn(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {}",
                        f.message
                    ));
                }
                if actions.contains(&"Audit") {
                    let record = json!([{"message": f.message, "policy": policy_name, "binding": binding_name,
                        "expressionIndex": f.index, "validationActions": actions}]);
                    super::annotate_once(AUDIT_KEY, record.to_string());
                }
            }
        }
    }
    Ok(())
}

/// The audit annotation of a failure an Audit binding notes.
const AUDIT_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// The review APIs, which no policy sees (kube's exclusion list).
fn excluded(a: &Attributes<'_>) -> bool {
    matches!(
        (a.r.group, a.r.plural),
        ("authentication.k8s.io", "selfsubjectreviews" | "tokenreviews")
            | (
                "authorization.k8s.io",
                "localsubjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
                    | "subjectaccessreviews"
            )
    )
}

fn resource(plural: &str) -> Option<&'static crate::resources::Resource> {
    crate::resources::find("admissionregistration.k8s.io", "v1", plural)
}

/// Whether match resources take the write: selectors, no excluding rule, a rule (none: all).
fn matches_resources(api: &Api, m: &reg::MatchResources, a: &Attributes<'_>) -> bool {
    let named = |rule: &reg::NamedRuleWithOperations| {
        webhooks::rule_matches(&Rule::from(rule), a)
            && rule.resource_names.as_ref().is_none_or(|n| n.is_empty() || n.iter().any(|x| x == a.name))
    };
    webhooks::namespace_matches(api, m.namespace_selector.as_ref(), a, a.object)
        && webhooks::selected(m.object_selector.as_ref(), [a.object, a.old])
        && !m.exclude_resource_rules.iter().flatten().any(named)
        && m.resource_rules.as_ref().is_none_or(|rules| rules.is_empty() || rules.iter().any(named))
}

/// The parameter objects a binding gives its policy: none (`params` is null) without a
/// `paramKind` or `paramRef`, else those `paramRef` names or selects.
fn params(
    api: &Api,
    policy: &reg::ValidatingAdmissionPolicySpec,
    binding: &reg::ValidatingAdmissionPolicyBindingSpec,
    a: &Attributes<'_>,
) -> Result<Vec<Value>, String> {
    let (Some(kind), Some(pref)) = (&policy.param_kind, &binding.param_ref) else { return Ok(vec![Value::Null]) };
    let api_version = kind.api_version.as_deref().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind_name = kind.kind.as_deref().unwrap_or("");
    let served = api.served();
    let Some(r) = served.into_iter().find(|r| r.group == group && r.version == version && r.kind == kind_name) else {
        return Err(format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'"));
    };
    let namespace = match (r.namespaced, pref.namespace.as_deref()) {
        (true, Some(ns)) if !ns.is_empty() => Some(ns.to_string()),
        (true, _) if !a.namespace.is_empty() => Some(a.namespace.to_string()),
        (true, _) => {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into())
        }
        (false, Some(ns)) if !ns.is_empty() => {
            return Err("paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into())
        }
        (false, _) => None,
    };
    let found: Vec<Value> = match (&pref.name, &pref.selector) {
        (Some(name), _) if !name.is_empty() => {
            api.cached(r, namespace.as_deref(), name).map(|o| (*o.json(r)).clone()).into_iter().collect()
        }
        (_, selector) => {
            let s = selector.as_ref().and_then(crate::selector::LabelSelector::of_api).unwrap_or_default();
            api.cached_list(r, namespace.as_deref())
                .iter()
                .map(|o| o.json(r))
                .filter(|v| s.matches(v.pointer("/metadata/labels")))
                .map(|v| (*v).clone())
                .collect()
        }
    };
    if !found.is_empty() {
        return Ok(found.into_iter().map(|v| with_type(r, v)).collect());
    }
    match pref.parameter_not_found_action.as_deref() {
        Some("Allow") => Ok(Vec::new()),
        _ => Err("no params found for policy binding with `Deny` parameterNotFoundAction".into()),
    }
}

fn with_type(r: &crate::resources::Resource, v: Value) -> Value {
    match v {
        Value::Object(m) => r.with_type(m),
        other => other,
    }
}

/// The policy's match conditions, validations and audit annotations over one parameter
/// object: the validations that failed (errors count as failures when the policy fails
/// closed). A match condition that is false skips the policy.
fn evaluate(
    api: &Api,
    name: &str,
    policy: &reg::ValidatingAdmissionPolicySpec,
    a: &Attributes<'_>,
    params: Value,
    fail_closed: bool,
) -> Vec<Failure> {
    let namespace = if a.r.namespaced && !a.namespace.is_empty() {
        super::namespace_of(api, a.namespace).map(|n| (*n).clone()).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let mut activation = activation_of(a, a.object);
    activation.values.extend([("params", cel_of(&params)), ("namespaceObject", cel_of(&namespace))]);
    // Variables in order, each seeing those before it; one that fails is left out, so an
    // expression that uses it fails in turn.
    let mut cel_variables: HashMap<String, cel::Value> = HashMap::new();
    for v in policy.variables.iter().flatten() {
        let program = compile(&v.expression, &VARIABLES);
        let with = Activation {
            values: activation.values.iter().cloned().chain([("variables", variables_value(&cel_variables))]).collect(),
        };
        if let Ok(value) = program.and_then(|p| with.eval(&p)) {
            cel_variables.insert(v.name.clone(), value);
        }
    }
    activation.values.push(("variables", variables_value(&cel_variables)));

    match conditions_of(&activation, policy.match_conditions.as_deref().unwrap_or_default(), &VARIABLES) {
        Ok(true) => {}
        Ok(false) => return Vec::new(),
        Err(_) if !fail_closed => return Vec::new(),
        Err(message) => return vec![Failure { message, reason: "Invalid".into(), index: 0 }],
    }

    let mut failures = Vec::new();
    for (index, v) in policy.validations.iter().flatten().enumerate() {
        let expr = v.expression.trim();
        let outcome = compile(&v.expression, &VARIABLES).and_then(|p| activation.eval(&p));
        let reason = v.reason.clone().unwrap_or_else(|| "Invalid".into());
        match outcome {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = message_of(v, &activation).unwrap_or_else(|| format!("failed expression: {expr}"));
                failures.push(Failure { message, reason, index });
            }
            Ok(other) if fail_closed => failures.push(Failure {
                message: format!("expression '{expr}' resulted in error: no such overload: {other:?}"),
                reason,
                index,
            }),
            Err(e) if fail_closed => failures.push(Failure {
                message: format!(
                    "expression '{expr}' resulted in error: {}",
                    e.trim_start_matches("compilation failed: ")
                ),
                reason,
                index,
            }),
            _ => {}
        }
    }

    // The policy's audit annotations: `<policy>/<key>` for each value that is a string.
    for an in policy.audit_annotations.iter().flatten() {
        if let Ok(cel::Value::String(s)) = compile(&an.value_expression, &VARIABLES).and_then(|p| activation.eval(&p)) {
            let s = s.trim();
            if !s.is_empty() {
                super::annotate(&format!("{name}/{}", an.key), s.to_string());
            }
        }
    }
    failures
}

/// The `variables` map of the values evaluated so far.
fn variables_value(vars: &HashMap<String, cel::Value>) -> cel::Value {
    cel::Value::from(vars.clone())
}

/// A failed validation's message from its `messageExpression` (a one-line string of at most
/// 5120 bytes), else its `message`; none if neither gives one.
fn message_of(v: &reg::Validation, activation: &Activation) -> Option<String> {
    if let Some(expr) = v.message_expression.as_deref().filter(|e| !e.trim().is_empty()) {
        if let Ok(cel::Value::String(s)) = compile(expr, &VARIABLES).and_then(|p| activation.eval(&p)) {
            let s = s.trim();
            if !s.is_empty() && s.len() <= 5120 && !s.contains(['\n', '\r']) {
                return Some(s.to_string());
            }
        }
    }
    v.message.as_deref().map(str::trim).filter(|m| !m.is_empty()).map(str::to_string)
}

/// kube's refusal for a policy's denial: Forbidden's message, the validation's reason and its
/// code (Invalid: 422), the message again as the one cause.
fn denied(a: &Attributes<'_>, msg: &str, reason: &str) -> Status {
    let mut s = super::forbidden(a, msg);
    let (code, reason) = match reason {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    s.code = code;
    s.reason = reason.into();
    if let Some(d) = s.details.as_mut() {
        d.causes = vec![status::Cause { reason: "", message: msg.to_string(), field: String::new() }];
    }
    s
}

/// The `expression` errors at `field`: required, and compiled with the variables declared.
fn expression_errors(field: &str, expr: &str, declared: &[&str], what: &str) -> Vec<FieldError> {
    if expr.trim().is_empty() {
        return vec![FieldError::new(FieldErrorType::Required, field, None, &format!("{what} is not specified"))];
    }
    match compile(expr, declared) {
        Ok(_) => Vec::new(),
        Err(why) => vec![FieldError::invalid(field, json!(expr), &why)],
    }
}

/// The variables a policy's expressions may name.
fn declared(v: &Value) -> Vec<&'static str> {
    let with_params = v.pointer("/spec/paramKind").is_some_and(|p| !p.is_null());
    VARIABLES.iter().copied().filter(|n| with_params || *n != "params").collect()
}

/// What kube's validation refuses in a ValidatingAdmissionPolicy.
pub fn policy_errors(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let declared = declared(v);
    let spec = v.get("spec").unwrap_or(&Value::Null);
    if let Some(fp) = spec.get("failurePolicy").and_then(Value::as_str) {
        if !["Fail", "Ignore"].contains(&fp) {
            out.push(FieldError::not_supported("spec.failurePolicy", fp, &["Fail", "Ignore"]));
        }
    }
    if let Some(pk) = spec.get("paramKind").filter(|p| !p.is_null()) {
        for f in ["apiVersion", "kind"] {
            if pk.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                out.push(FieldError::required(&format!("spec.paramKind.{f}")));
            }
        }
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => out.push(FieldError::required("spec.matchConstraints")),
        Some(m) => {
            out.extend(match_errors("spec.matchConstraints", m));
            if m.get("resourceRules").and_then(Value::as_array).is_none_or(Vec::is_empty) {
                out.push(FieldError::required("spec.matchConstraints.resourceRules"));
            }
        }
    }
    out.extend(condition_errors("spec.matchConditions", items(spec, "matchConditions"), &declared));
    for (i, var) in items(spec, "variables").iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let name = var.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            out.push(FieldError::new(FieldErrorType::Required, &format!("{at}.name"), None, "name is not specified"));
        } else if !cel_identifier(name) {
            out.push(FieldError::invalid(&format!("{at}.name"), json!(name), "name is not a valid CEL identifier"));
        }
        let expr = var.get("expression").and_then(Value::as_str).unwrap_or("");
        out.extend(expression_errors(&format!("{at}.expression"), expr, &declared, "expression"));
    }
    let (validations, audits) = (items(spec, "validations"), items(spec, "auditAnnotations"));
    if validations.is_empty() && audits.is_empty() {
        let why = "validations or auditAnnotations must contain at least one item";
        out.push(FieldError::new(FieldErrorType::Required, "spec.validations", None, why));
        out.push(FieldError::new(FieldErrorType::Required, "spec.auditAnnotations", None, why));
    }
    for (i, val) in validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        let text = |f: &str| val.get(f).and_then(Value::as_str);
        out.extend(expression_errors(
            &format!("{at}.expression"),
            text("expression").unwrap_or(""),
            &declared,
            "expression",
        ));
        if let Some(me) = text("messageExpression") {
            if me.trim().is_empty() {
                out.push(FieldError::invalid(
                    &format!("{at}.messageExpression"),
                    json!(me),
                    "must be non-empty if specified",
                ));
            } else {
                let without_authorizer: Vec<&str> = declared.iter().copied().filter(|n| *n != "authorizer").collect();
                out.extend(expression_errors(
                    &format!("{at}.messageExpression"),
                    me,
                    &without_authorizer,
                    "expression",
                ));
            }
        }
        if let Some(m) = text("message") {
            if m.trim().is_empty() {
                out.push(FieldError::invalid(
                    &format!("{at}.message"),
                    json!(m),
                    "message must be non-empty if specified",
                ));
            } else if m.contains(['\n', '\r']) {
                out.push(FieldError::invalid(
                    &format!("{at}.message"),
                    json!(m),
                    "message must not contain line breaks",
                ));
            }
        }
        if let Some(r) = text("reason") {
            let reasons = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
            if !reasons.contains(&r) {
                out.push(FieldError::not_supported(&format!("{at}.reason"), r, &reasons));
            }
        }
    }
    for (i, an) in audits.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        let expr = an.get("valueExpression").and_then(Value::as_str).unwrap_or("");
        out.extend(expression_errors(&format!("{at}.valueExpression"), expr, &declared, "valueExpression"));
    }
    out
}

fn items<'a>(v: &'a Value, f: &str) -> &'a [Value] {
    v.get(f).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// kube's CEL identifier: a letter or `_`, then letters, digits and `_`, and no reserved word.
fn cel_identifier(s: &str) -> bool {
    const RESERVED: [&str; 23] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
        "int",
        "uint",
    ];
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&s)
}

/// A MatchResources' errors at `at`: its policy, selectors and rules.
fn match_errors(at: &str, m: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(mp) = m.get("matchPolicy").and_then(Value::as_str) {
        if !["Equivalent", "Exact"].contains(&mp) {
            out.push(FieldError::not_supported(&format!("{at}.matchPolicy"), mp, &["Equivalent", "Exact"]));
        }
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        out.extend(crate::validation::selector_errors(m, &format!("/{sel}"), &format!("{at}.{sel}")));
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in items(m, list).iter().enumerate() {
            out.extend(webhooks::rule_errors(&format!("{at}.{list}[{i}]"), rule));
        }
    }
    out
}

/// What kube's validation refuses in a ValidatingAdmissionPolicyBinding.
pub fn binding_errors(v: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let spec = v.get("spec").unwrap_or(&Value::Null);
    let policy = spec.get("policyName").and_then(Value::as_str).unwrap_or("");
    if policy.is_empty() {
        out.push(FieldError::required("spec.policyName"));
    } else {
        for p in crate::meta::name_problems(crate::resources::Names::Subdomain, policy) {
            out.push(FieldError::invalid("spec.policyName", json!(policy), &p));
        }
    }
    if let Some(pref) = spec.get("paramRef").filter(|p| !p.is_null()) {
        let name = pref.get("name").and_then(Value::as_str).unwrap_or("");
        let selector = pref.get("selector").filter(|s| !s.is_null());
        match (name.is_empty(), selector) {
            (false, Some(_)) => {
                let why = "name and selector are mutually exclusive";
                out.push(FieldError::forbidden("spec.paramRef.name", why));
                out.push(FieldError::forbidden("spec.paramRef.selector", why));
            }
            (true, None) => out.push(FieldError::new(
                FieldErrorType::Required,
                "spec.paramRef",
                None,
                "one of name or selector must be specified",
            )),
            _ => {}
        }
        match pref.get("parameterNotFoundAction").and_then(Value::as_str).unwrap_or("") {
            "" => out.push(FieldError::required("spec.paramRef.parameterNotFoundAction")),
            "Deny" | "Allow" => {}
            other => {
                let e = FieldError::not_supported("spec.paramRef.parameterNotFoundAction", other, &["Deny", "Allow"]);
                out.push(e);
            }
        }
    }
    if let Some(m) = spec.get("matchResources").filter(|m| !m.is_null()) {
        // kube names this path with its typo.
        out.extend(match_errors("spec.matchResouces", m));
    }
    let actions: Vec<&str> = items(spec, "validationActions").iter().filter_map(Value::as_str).collect();
    if actions.is_empty() {
        out.push(FieldError::new(
            FieldErrorType::Required,
            "spec.validationActions",
            None,
            "at least one validation action is required",
        ));
    }
    for (i, act) in actions.iter().enumerate() {
        let at = format!("spec.validationActions[{i}]");
        if !["Audit", "Deny", "Warn"].contains(act) {
            out.push(FieldError::not_supported(&at, act, &["Audit", "Deny", "Warn"]));
        } else if actions[..i].contains(act) {
            out.push(FieldError::new(FieldErrorType::Duplicate, &at, Some(json!(act)), ""));
        }
    }
    if actions.contains(&"Deny") && actions.contains(&"Warn") {
        let go = status::go_strings(actions.iter().copied()).replacen(
            "[]string",
            "[]admissionregistration.ValidationAction",
            1,
        );
        out.push(FieldError::verbatim(
            FieldErrorType::Invalid,
            "spec.validationActions",
            go,
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    out
}

/// kube's v1 defaults of a policy's or binding's match resources.
pub fn defaults(v: &mut Value, policy: bool) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if policy && spec.get("failurePolicy").is_none_or(Value::is_null) {
        spec.insert("failurePolicy".into(), json!("Fail"));
    }
    let field = if policy { "matchConstraints" } else { "matchResources" };
    let Some(m) = spec.get_mut(field).and_then(Value::as_object_mut) else { return };
    for (k, d) in
        [("matchPolicy", json!("Equivalent")), ("namespaceSelector", json!({})), ("objectSelector", json!({}))]
    {
        if m.get(k).is_none_or(Value::is_null) {
            m.insert(k.into(), d);
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for rule in m.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(r) = rule.as_object_mut() {
                if r.get("scope").is_none_or(Value::is_null) {
                    r.insert("scope".into(), json!("*"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undeclared_names_are_refused_but_a_macro_s_own_variables_are_not() {
        let declared = ["object"];
        assert!(compile("object.spec.containers.all(c, c.image != '')", &declared).is_ok());
        assert!(compile("object.spec.containers.exists(c, c.name == x)", &declared)
            .is_err_and(|e| e.contains("undeclared reference to 'x'")));
        assert!(compile("params.max > 1", &declared).is_err_and(|e| e.contains("undeclared reference to 'params'")));
        assert!(compile("object.spec.replicas <=", &declared)
            .is_err_and(|e| e.starts_with("compilation failed: ERROR: <input>:1:")));
    }

    #[test]
    fn expressions_see_kube_s_values() {
        let activation = Activation {
            values: vec![
                ("object", cel_of(&json!({"spec": {"replicas": 4}, "metadata": {"labels": {"a": "b"}}}))),
                ("params", cel_of(&json!({"data": {"max": "3"}}))),
            ],
        };
        let eval = |e: &str| activation.eval(&compile(e, &VARIABLES).unwrap());
        assert_eq!(eval("object.spec.replicas <= int(params.data.max)"), Ok(cel::Value::Bool(false)));
        assert_eq!(eval("'a' in object.metadata.labels && has(object.spec.replicas)"), Ok(cel::Value::Bool(true)));
        assert_eq!(
            eval("'replicas ' + string(object.spec.replicas)"),
            Ok(cel::Value::String(Arc::new("replicas 4".into())))
        );
        assert!(eval("object.spec.missing > 1").is_err());
    }
}
