//! kube's errors as clients see them: a `metav1.Status` object, written as kube-apiserver writes
//! it (its field order, compact JSON with Go's HTML escaping and a trailing newline; clients and
//! tests compare these bodies), built by constructors that word each error as
//! `k8s.io/apimachinery/pkg/api/errors` does.

use std::fmt;

use serde::Serialize;

/// A resource and its group, printed as kube prints a GroupResource: `namespaces`,
/// `deployments.apps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupResource<'a> {
    pub group: &'a str,
    pub resource: &'a str,
}

impl fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group {
            "" => f.write_str(self.resource),
            g => write!(f, "{}.{g}", self.resource),
        }
    }
}

/// A kind and its group, printed as kube prints a GroupKind: `Namespace`, `Deployment.apps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupKind<'a> {
    pub group: &'a str,
    pub kind: &'a str,
}

impl fmt::Display for GroupKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group {
            "" => f.write_str(self.kind),
            g => write!(f, "{}.{g}", self.kind),
        }
    }
}

/// `metav1.Status`, fields in kube's order (`metadata` is always written, as `{}` when empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    kind: Named<KIND>,
    #[serde(rename = "apiVersion")]
    api_version: Named<API_VERSION>,
    pub metadata: ListMeta,
    pub status: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// kube's reasons, or (a webhook's denial) whatever reason the webhook gave.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub reason: std::borrow::Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<Details>>,
    #[serde(skip_serializing_if = "is_zero")]
    pub code: u16,
}

const KIND: u8 = 0;
const API_VERSION: u8 = 1;

/// `kind` and `apiVersion`, always `Status` and `v1`: written, not stored (a Status travels in
/// every error result, so it is kept small).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Named<const WHICH: u8>;

impl<const WHICH: u8> Serialize for Named<WHICH> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if WHICH == KIND { "Status" } else { "v1" })
    }
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

/// `metav1.ListMeta` as a Status carries it (a continue token to restart an expired list).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ListMeta {
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// `metav1.StatusDetails`, fields in kube's order, all left out when empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Details {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cause {
    pub reason: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    /// A failure with `code`, `reason` and `message`.
    pub fn failure(code: u16, reason: &'static str, message: impl Into<String>, details: Option<Details>) -> Self {
        Status {
            kind: Named,
            api_version: Named,
            metadata: ListMeta::default(),
            status: "Failure",
            message: message.into(),
            reason: reason.into(),
            details: details.map(Box::new),
            code,
        }
    }

    /// Success (a DELETE that removed the object at once), with the deleted object's details
    /// and, as kube leaves it, no code.
    pub fn success(details: Details) -> Self {
        Status { status: "Success", ..Self::failure(0, "", "", Some(details)) }
    }

    /// The body kube writes: compact JSON, `<`, `>` and `&` escaped as Go escapes them, and a
    /// newline.
    pub fn to_json(&self) -> Vec<u8> {
        go_json(self)
    }
}

/// JSON as Go's `json.Encoder` writes it: compact, HTML characters escaped, a trailing newline.
/// Fields come in the order `value` serializes them.
pub fn go_json(value: &impl Serialize) -> Vec<u8> {
    let text = serde_json::to_string(value).expect("a value serializes");
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out.into_bytes()
}

fn named(gr: GroupResource<'_>, name: &str) -> Option<Details> {
    Some(Details { name: name.into(), group: gr.group.into(), kind: gr.resource.into(), ..Default::default() })
}

/// 404: `namespaces "x" not found`.
pub fn not_found(gr: GroupResource<'_>, name: &str) -> Status {
    Status::failure(404, "NotFound", format!("{gr} {} not found", go_quote(name)), named(gr, name))
}

/// 409: `namespaces "x" already exists`.
pub fn already_exists(gr: GroupResource<'_>, name: &str) -> Status {
    Status::failure(409, "AlreadyExists", format!("{gr} {} already exists", go_quote(name)), named(gr, name))
}

/// kube's words for a write at a stale resourceVersion.
pub const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// 409: `Operation cannot be fulfilled on namespaces "x": <why>`.
pub fn conflict(gr: GroupResource<'_>, name: &str, why: &str) -> Status {
    let message = format!("Operation cannot be fulfilled on {gr} {}: {why}", go_quote(name));
    Status::failure(409, "Conflict", message, named(gr, name))
}

/// 403 Forbidden: `<resource> "<name>" is forbidden: <why>`.
pub fn forbidden(gr: GroupResource<'_>, name: &str, why: &str) -> Status {
    let message = format!("{gr} {} is forbidden: {why}", go_quote(name));
    Status::failure(403, "Forbidden", message, named(gr, name))
}

/// 410 Expired (a continue token or resourceVersion the store has compacted).
pub fn expired(message: impl Into<String>) -> Status {
    Status::failure(410, "Expired", message, None)
}

/// kube's 504 for a resourceVersion the server has not reached (`NewTooLargeResourceVersionError`).
pub fn too_large_resource_version(want: i64, current: i64) -> Status {
    let details = Details {
        causes: vec![Cause {
            reason: "ResourceVersionTooLarge",
            message: "Too large resource version".into(),
            field: String::new(),
        }],
        retry_after_seconds: Some(1),
        ..Default::default()
    };
    Status::failure(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {want}, current: {current}"),
        Some(details),
    )
}

/// kube's 429 (`NewTooManyRequests`), asking the client to come back after `retry_after` seconds.
pub fn too_many_requests(message: &str, retry_after: i32) -> Status {
    // kube leaves a zero retry out (and sends no Retry-After header).
    let details = Details { retry_after_seconds: (retry_after > 0).then_some(retry_after), ..Default::default() };
    Status::failure(429, "TooManyRequests", message, Some(details))
}

/// 400 BadRequest.
pub fn bad_request(message: impl Into<String>) -> Status {
    Status::failure(400, "BadRequest", message, None)
}

/// 405: `<verb> is not supported on resources of kind "<gr>"`.
pub fn method_not_supported(verb: &str, gr: GroupResource<'_>) -> Status {
    let message = format!("{verb} is not supported on resources of kind {}", go_quote(&gr.to_string()));
    Status::failure(
        405,
        "MethodNotAllowed",
        message,
        Some(Details { group: gr.group.into(), kind: gr.resource.into(), ..Default::default() }),
    )
}

/// 413: `Request entity too large: <why>`.
pub fn too_large(why: &str) -> Status {
    Status::failure(413, "RequestEntityTooLarge", format!("Request entity too large: {why}"), None)
}

/// 404 for a path a served group-version does not have (go-restful's answer in kube).
pub fn no_such_resource() -> Status {
    Status::failure(404, "NotFound", "the server could not find the requested resource", Some(Details::default()))
}

/// What kind of field error (kube's `field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl FieldErrorType {
    fn text(self) -> &'static str {
        use FieldErrorType::*;
        match self {
            NotFound => "Not found",
            Required => "Required value",
            Duplicate => "Duplicate value",
            Invalid | TypeInvalid => "Invalid value",
            NotSupported => "Unsupported value",
            Forbidden => "Forbidden",
            TooLong => "Too long",
            TooMany => "Too many",
            Internal => "Internal error",
        }
    }

    fn cause(self) -> &'static str {
        use FieldErrorType::*;
        match self {
            NotFound => "FieldValueNotFound",
            Required => "FieldValueRequired",
            Duplicate => "FieldValueDuplicate",
            Invalid => "FieldValueInvalid",
            NotSupported => "FieldValueNotSupported",
            Forbidden => "FieldValueForbidden",
            TooLong => "FieldValueTooLong",
            TooMany => "FieldValueTooMany",
            Internal => "InternalError",
            TypeInvalid => "FieldValueTypeInvalid",
        }
    }
}

/// One invalid field (kube's `field.Error`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorType,
    /// The field's path, e.g. `metadata.name`, `spec.template.spec.containers[0].image`.
    pub field: String,
    /// The offending value (not printed for Required, Forbidden, TooLong and Internal).
    pub value: Option<serde_json::Value>,
    pub detail: String,
    /// The value is Go's own rendering (`%#v` of a map or struct), printed as it is.
    pub verbatim: bool,
}

impl FieldError {
    pub fn new(kind: FieldErrorType, field: &str, value: Option<serde_json::Value>, detail: &str) -> Self {
        FieldError { kind, field: field.into(), value, detail: detail.into(), verbatim: false }
    }

    /// kube's `field.NotSupported`: `value` is not one of `values`.
    pub fn not_supported(field: &str, value: &str, values: &[&str]) -> Self {
        let list = values.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>().join(", ");
        Self::new(
            FieldErrorType::NotSupported,
            field,
            Some(serde_json::Value::String(value.into())),
            &format!("supported values: {list}"),
        )
    }

    /// kube's `field.Invalid`.
    pub fn invalid(field: &str, value: serde_json::Value, detail: &str) -> Self {
        Self::new(FieldErrorType::Invalid, field, Some(value), detail)
    }

    /// kube's `field.Forbidden`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(FieldErrorType::Forbidden, field, None, detail)
    }

    /// kube's `field.Required` without a detail.
    pub fn required(field: &str) -> Self {
        Self::new(FieldErrorType::Required, field, None, "")
    }

    /// An error whose value is shown as Go renders it (`go`, e.g. `map[string]string{"a":"b"}`).
    pub fn verbatim(kind: FieldErrorType, field: &str, go: String, detail: &str) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value: Some(serde_json::Value::String(go)),
            detail: detail.into(),
            verbatim: true,
        }
    }

    /// The error without its field, as kube's `ErrorBody` words it.
    pub fn body(&self) -> String {
        use FieldErrorType::*;
        let mut s = self.kind.text().to_string();
        if !matches!(self.kind, Required | Forbidden | TooLong | Internal) {
            if let Some(v) = &self.value {
                s.push_str(": ");
                s.push_str(&match v {
                    serde_json::Value::String(t) if self.verbatim => t.clone(),
                    serde_json::Value::String(t) => go_quote(t),
                    serde_json::Value::Null => "null".into(),
                    other => other.to_string(),
                });
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// 422: `<Kind> "<name>" is invalid: <errors>`, one cause per error.
pub fn invalid(gk: GroupKind<'_>, name: &str, errors: &[FieldError]) -> Status {
    let mut texts: Vec<String> = Vec::new();
    for e in errors {
        let t = e.to_string();
        if !texts.contains(&t) {
            texts.push(t);
        }
    }
    let all = match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes =
        errors.iter().map(|e| Cause { reason: e.kind.cause(), message: e.body(), field: e.field.clone() }).collect();
    let details =
        Details { name: name.into(), group: gk.group.into(), kind: gk.kind.into(), causes, ..Default::default() };
    Status::failure(422, "Invalid", format!("{gk} {} is invalid: {all}", go_quote(name)), Some(details))
}

/// Go's `%#v` of a `[]string` holding `items`.
pub fn go_strings<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    format!("[]string{{{}}}", items.into_iter().map(go_quote).collect::<Vec<_>>().join(", "))
}

/// Go's `%q` of a string: double quotes, with `"`, `\` and control characters escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &Status) -> String {
        String::from_utf8(s.to_json()).unwrap()
    }

    const NS: GroupResource = GroupResource { group: "", resource: "namespaces" };
    const DEPLOY: GroupResource = GroupResource { group: "apps", resource: "deployments" };

    #[test]
    fn bodies_are_kubes_byte_for_byte() {
        assert_eq!(
            body(&not_found(NS, "x")),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"namespaces \\\"x\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"kind\":\"namespaces\"},\"code\":404}\n"
        );
        assert_eq!(
            body(&not_found(DEPLOY, "web")),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"deployments.apps \\\"web\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"web\",\"group\":\"apps\",\"kind\":\"deployments\"},\"code\":404}\n"
        );
        assert_eq!(
            body(&already_exists(NS, "x")),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"namespaces \\\"x\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"x\",\"kind\":\"namespaces\"},\"code\":409}\n"
        );
        assert_eq!(
            body(&conflict(NS, "x", OPTIMISTIC_LOCK)),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Operation cannot be fulfilled on namespaces \\\"x\\\": the object has been modified; please apply your changes to the latest version and try again\",\"reason\":\"Conflict\",\"details\":{\"name\":\"x\",\"kind\":\"namespaces\"},\"code\":409}\n"
        );
        assert_eq!(
            body(&no_such_resource()),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server could not find the requested resource\",\"reason\":\"NotFound\",\"details\":{},\"code\":404}\n"
        );
        let mut gone = expired(crate::storage::EXPIRED_CONTINUE);
        gone.metadata.continue_token = Some("abc".into());
        assert!(body(&gone).starts_with(
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{\"continue\":\"abc\"},\"status\":\"Failure\",\"message\":\"The provided continue parameter is too old"
        ));
        assert!(body(&gone).ends_with("\"reason\":\"Expired\",\"code\":410}\n"));
        let deleted = Details { name: "x".into(), kind: "namespaces".into(), uid: "u-1".into(), ..Default::default() };
        assert_eq!(
            body(&Status::success(deleted)),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"details\":{\"name\":\"x\",\"kind\":\"namespaces\",\"uid\":\"u-1\"}}\n"
        );
        assert_eq!(
            body(&method_not_supported("create", GroupResource { group: "", resource: "bindings" })),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"create is not supported on resources of kind \\\"bindings\\\"\",\"reason\":\"MethodNotAllowed\",\"details\":{\"kind\":\"bindings\"},\"code\":405}\n"
        );
    }

    #[test]
    fn invalid_objects_are_worded_as_kube_words_them() {
        let rfc1123 = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
        let e = FieldError::new(FieldErrorType::Invalid, "metadata.name", Some("X_y".into()), rfc1123);
        let s = invalid(GroupKind { group: "", kind: "Namespace" }, "X_y", &[e]);
        assert_eq!(
            body(&s),
            format!("{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"Namespace \\\"X_y\\\" is invalid: metadata.name: Invalid value: \\\"X_y\\\": {rfc1123}\",\"reason\":\"Invalid\",\"details\":{{\"name\":\"X_y\",\"kind\":\"Namespace\",\"causes\":[{{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"X_y\\\": {rfc1123}\",\"field\":\"metadata.name\"}}]}},\"code\":422}}\n")
        );
        // Several errors: "[e1, e2]", the same one once; Required shows no value; numbers bare.
        let errors = [
            FieldError::new(FieldErrorType::Required, "spec.selector", None, ""),
            FieldError::new(
                FieldErrorType::Invalid,
                "spec.replicas",
                Some((-1).into()),
                "must be greater than or equal to 0",
            ),
            FieldError::new(FieldErrorType::Required, "spec.selector", None, ""),
        ];
        let s = invalid(GroupKind { group: "apps", kind: "Deployment" }, "web", &errors);
        assert_eq!(
            s.message,
            "Deployment.apps \"web\" is invalid: [spec.selector: Required value, spec.replicas: Invalid value: -1: must be greater than or equal to 0]"
        );
        assert_eq!(s.details.as_ref().unwrap().causes.len(), 3);
    }

    #[test]
    fn go_escapes_html_characters() {
        assert_eq!(go_json(&serde_json::json!({"a": "<b>&"})), b"{\"a\":\"\\u003cb\\u003e\\u0026\"}\n".to_vec());
        assert_eq!(go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }
}
