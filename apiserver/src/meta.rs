//! Object metadata as kube-apiserver's generic registry handles it (`rest.BeforeCreate`,
//! `rest.BeforeUpdate`, `ValidateObjectMeta`): names and generated names, namespaces from the
//! path, uid and creationTimestamp set by the server, resourceVersion from the store.

use serde_json::{Map, Value};

use crate::resources::Names;
use crate::status::{FieldError, FieldErrorType};

/// kube's `maxNameLength` for generated names: a generated suffix is 5 characters.
const GENERATED_SUFFIX: usize = 5;
/// The alphabet of generated suffixes (`k8s.io/apimachinery/pkg/util/rand`: no vowels, no
/// look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && alnum(&b[0]) && alnum(&b[b.len() - 1]) && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// kube's `IsDNS1123Label` / `IsDNS1123Subdomain`: the messages of what is wrong with `name`.
pub fn name_problems(names: Names, name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (max, ok, msg) = match names {
        Names::Label => (DNS1123_LABEL_MAX, is_label(name), DNS1123_LABEL_MSG),
        Names::PathSegment => return path_segment_problems(name),
        Names::Dns1035 => {
            (DNS1123_LABEL_MAX, is_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()), DNS1035_LABEL_MSG)
        }
        Names::Subdomain => (DNS1123_SUBDOMAIN_MAX, name.split('.').all(is_label), DNS1123_SUBDOMAIN_MSG),
    };
    if name.len() > max {
        problems.push(format!("must be no more than {max} characters"));
    }
    if !ok {
        problems.push(msg.to_string());
    }
    problems
}

/// kube's `IsValidPathSegmentName` (RBAC objects' names and role references): the messages of
/// what is wrong with `name`.
pub fn path_segment_problems(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"].iter().filter(|c| name.contains(**c)).map(|c| format!("may not contain '{c}'")).collect()
}

/// `metadata` of an object (created empty if missing or not an object).
pub fn metadata(obj: &mut Value) -> &mut Map<String, Value> {
    let Value::Object(o) = obj else { unreachable!("objects are JSON objects") };
    let m = o.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("an object")
}

/// A string field of `metadata`, empty if absent.
pub fn get<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

/// Sets (or with an empty value, removes) a string field of `metadata`.
pub fn set(obj: &mut Value, field: &str, value: &str) {
    let m = metadata(obj);
    if value.is_empty() {
        m.remove(field);
    } else {
        m.insert(field.into(), Value::String(value.into()));
    }
}

/// A name made from `generateName`, as kube's `SimpleNameGenerator` makes it.
pub fn generate_name(base: &str) -> String {
    let max = DNS1123_SUBDOMAIN_MAX.min(DNS1123_LABEL_MAX) - GENERATED_SUFFIX;
    let base: String = base.chars().take(max).collect();
    let suffix: String =
        (0..GENERATED_SUFFIX).map(|_| SUFFIX_ALPHABET[rand::random_range(0..SUFFIX_ALPHABET.len())] as char).collect();
    format!("{base}{suffix}")
}

/// The field errors of an object's name (kube's `ValidateObjectMeta`, the name part).
pub fn name_errors(names: Names, obj: &Value) -> Vec<FieldError> {
    let name = get(obj, "name");
    if name.is_empty() {
        let gen = get(obj, "generateName");
        if gen.is_empty() {
            return vec![FieldError::new(
                FieldErrorType::Required,
                "metadata.name",
                None,
                "name or generateName is required",
            )];
        }
        return Vec::new();
    }
    name_problems(names, name)
        .into_iter()
        .map(|p| FieldError::new(FieldErrorType::Invalid, "metadata.name", Some(Value::String(name.into())), &p))
        .collect()
}

/// The current time as kube writes a `metav1.Time` (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    after(0)
}

/// The time `secs` seconds from now, written as `now` writes it.
pub fn after(secs: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let ts = k8s_openapi::jiff::Timestamp::from_second(now + secs).expect("a time near now is a timestamp");
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A fresh object uid.
pub fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_kube_checks_them() {
        assert!(name_problems(Names::Subdomain, "a.b-c.d1").is_empty());
        assert_eq!(name_problems(Names::Subdomain, "A"), vec![DNS1123_SUBDOMAIN_MSG.to_string()]);
        assert_eq!(name_problems(Names::Label, "a.b"), vec![DNS1123_LABEL_MSG.to_string()]);
        assert!(name_problems(Names::Label, &"a".repeat(63)).is_empty());
        assert_eq!(
            name_problems(Names::Label, &"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
        for bad in ["-a", "a-", "", "a..b", ".a", "a_b"] {
            assert!(!name_problems(Names::Subdomain, bad).is_empty(), "{bad:?} taken");
        }
    }

    #[test]
    fn generated_names_keep_the_base_and_add_five_characters() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
        assert!(n[4..].bytes().all(|c| SUFFIX_ALPHABET.contains(&c)));
        assert_eq!(generate_name(&"x".repeat(100)).len(), 63);
        assert!(now().ends_with('Z') && now().len() == 20, "{}", now());
    }
}
