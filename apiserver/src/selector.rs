//! Label and field selectors, with kube's grammar and matching rules (`k8s.io/apimachinery`
//! `labels.Parse` and `fields.ParseSelector`).

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Label {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A label selector: every requirement must hold. The empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Label>);

/// Splits `s` on commas outside parentheses.
fn requirements(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() {
        return Err("found '', expected: identifier".into());
    }
    if k.contains(|c: char| c.is_whitespace() || "=!()<>,".contains(c)) {
        return Err(format!("unable to parse requirement: invalid label key {k:?}"));
    }
    Ok(k.to_string())
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.contains(|c: char| c.is_whitespace() || "=!()<>,".contains(c)) {
        return Err(format!("unable to parse requirement: invalid label value: {v:?}"));
    }
    Ok(v.to_string())
}

fn set(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner =
        s.strip_prefix('(').and_then(|s| s.strip_suffix(')')).ok_or_else(|| format!("found '{s}', expected: '('"))?;
    inner.split(',').map(value).collect()
}

impl LabelSelector {
    /// Parses a `labelSelector` query value; the error is kube's (without its field prefix).
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let mut reqs = Vec::new();
        for r in requirements(s) {
            let r = r.trim();
            let req = if let Some(k) = r.strip_prefix('!') {
                Label::NotExists(key(k)?)
            } else if let Some((k, v)) = r.split_once("!=") {
                Label::NotIn(key(k)?, vec![value(v)?])
            } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
                Label::In(key(k)?, vec![value(v)?])
            } else if let Some((k, v)) = r.split_once('>') {
                Label::Gt(
                    key(k)?,
                    v.trim()
                        .parse()
                        .map_err(|_| format!("for 'Gt', 'Lt' operators, the value must be an integer: {}", v.trim()))?,
                )
            } else if let Some((k, v)) = r.split_once('<') {
                Label::Lt(
                    key(k)?,
                    v.trim()
                        .parse()
                        .map_err(|_| format!("for 'Gt', 'Lt' operators, the value must be an integer: {}", v.trim()))?,
                )
            } else if let Some(i) = r.find(" notin ").or_else(|| r.find(" notin(")) {
                Label::NotIn(key(&r[..i])?, set(&r[i + " notin".len()..])?)
            } else if let Some(i) = r.find(" in ").or_else(|| r.find(" in(")) {
                Label::In(key(&r[..i])?, set(&r[i + " in".len()..])?)
            } else {
                Label::Exists(key(r)?)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A `metav1.LabelSelector` (matchLabels and matchExpressions) as requirements, as kube's
    /// `LabelSelectorAsSelector` reads it; None for an operator it does not take (In, NotIn,
    /// Exists and DoesNotExist only), which selects nothing. An absent selector is the caller's
    /// to decide.
    pub fn of_api(sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Option<LabelSelector> {
        let mut reqs: Vec<Label> = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Label::In(k.clone(), vec![v.clone()]));
        }
        for e in sel.match_expressions.iter().flatten() {
            reqs.push(requirement(&e.key, &e.operator, e.values.as_deref().unwrap_or_default(), false)?);
        }
        Some(LabelSelector(reqs))
    }

    /// The same from a selector's JSON (an object's `spec.selector`); anything but an object
    /// selects everything, as an empty selector does.
    pub fn of_value(sel: &Value) -> Option<LabelSelector> {
        let mut reqs: Vec<Label> = Vec::new();
        for (k, v) in sel.get("matchLabels").and_then(Value::as_object).into_iter().flatten() {
            reqs.push(match v.as_str() {
                Some(v) => Label::In(k.clone(), vec![v.to_string()]),
                // A value that is no string matches only where the label is absent.
                None => Label::NotExists(k.clone()),
            });
        }
        for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
            let text = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("");
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(requirement(text("key"), text("operator"), &values, false)?);
        }
        Some(LabelSelector(reqs))
    }

    /// A node selector term's `matchExpressions` (operators In, NotIn, Exists, DoesNotExist, Gt,
    /// Lt).
    pub fn of_node_requirements(reqs: &[k8s_openapi::api::core::v1::NodeSelectorRequirement]) -> Option<LabelSelector> {
        reqs.iter()
            .map(|r| requirement(&r.key, &r.operator, r.values.as_deref().unwrap_or_default(), true))
            .collect::<Option<Vec<_>>>()
            .map(LabelSelector)
    }

    /// Whether labels held as a map are selected.
    pub fn matches_map(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether an object with `labels` (its `metadata.labels`) is selected.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Label::Exists(k) => get(k).is_some(),
            Label::NotExists(k) => get(k).is_none(),
            Label::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Label::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            Label::Gt(k, n) => get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Label::Lt(k, n) => get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

/// One requirement of an API selector (`In`, `NotIn`, `Exists`, `DoesNotExist`, and with
/// `numeric` — a node selector's — `Gt` and `Lt`).
fn requirement(key: &str, op: &str, values: &[String], numeric: bool) -> Option<Label> {
    let (k, vs) = (key.to_string(), values.to_vec());
    let number = || values.first().and_then(|v| v.parse::<i64>().ok());
    Some(match op {
        "In" => Label::In(k, vs),
        "NotIn" => Label::NotIn(k, vs),
        "Exists" => Label::Exists(k),
        "DoesNotExist" => Label::NotExists(k),
        "Gt" if numeric => Label::Gt(k, number()?),
        "Lt" if numeric => Label::Lt(k, number()?),
        _ => return None,
    })
}

/// A field selector: `field=value`, `field==value` or `field!=value` terms, all of which must
/// hold, over the fields a resource supports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses a `fieldSelector` query value against the supported `fields`; the error is kube's.
    pub fn parse(s: &str, fields: &[&str]) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for t in s.split(',') {
            let (f, eq, v) = if let Some((f, v)) = t.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{t}'"));
            };
            let f = f.trim();
            if !fields.contains(&f) {
                return Err(format!("field label not supported: {f}"));
            }
            terms.push((f.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first `field=value` term, if there is one (what a watcher can be indexed by).
    pub fn exact(&self) -> Option<(&str, &str)> {
        self.0.iter().find(|(_, eq, _)| *eq).map(|(f, _, v)| (f.as_str(), v.as_str()))
    }

    /// Whether an object whose supported fields read as `field` gives them is selected.
    pub fn matches(&self, field: impl Fn(&str) -> String) -> bool {
        self.0.iter().all(|(f, eq, v)| (field(f) == *v) == *eq)
    }
}

/// The value of a dotted field path (`metadata.name`, `status.phase`) in `obj`, empty if absent.
pub fn field_of(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for p in path.split('.') {
        match v.get(p) {
            Some(x) => v = x,
            None => return String::new(),
        }
    }
    v.as_str().map(str::to_string).unwrap_or_else(|| if v.is_null() { String::new() } else { v.to_string() })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn label_selectors_parse_and_match_as_kube() {
        let labels = json!({"app": "web", "tier": "front", "n": "5"});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&labels));
        assert!(m(""));
        assert!(m("app=web") && m("app==web") && m("app = web"));
        assert!(!m("app=db") && m("app!=db") && m("missing!=x"));
        assert!(m("app in (web, db)") && !m("app notin (web)") && m("missing notin (x)"));
        assert!(m("app,tier=front") && !m("app,!tier") && m("!missing"));
        assert!(m("n>4") && !m("n<5") && !m("missing>1"));
        assert!(!LabelSelector::parse("app=web").unwrap().matches(None));
        for bad in ["a b=c", "app in web", "n>x", "=x"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} taken");
        }
    }

    #[test]
    fn api_selectors_take_kubes_operators_and_node_selectors_numbers() {
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]});
        let s = LabelSelector::of_value(&sel).unwrap();
        assert!(s.matches(Some(&json!({"app": "web"}))));
        assert!(!s.matches(Some(&json!({"app": "web", "tier": "db"}))));
        assert!(LabelSelector::of_value(&json!(null)).unwrap().matches(None));
        let gt = json!({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]});
        assert!(LabelSelector::of_value(&gt).is_none(), "Gt is no label selector operator");
        let node: Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement> =
            serde_json::from_value(gt["matchExpressions"].clone()).unwrap();
        let by_node = LabelSelector::of_node_requirements(&node).unwrap();
        assert!(by_node.matches(Some(&json!({"n": "2"}))) && !by_node.matches(Some(&json!({"n": "1"}))));
    }

    #[test]
    fn field_selectors_know_their_fields() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Active"}});
        let fields = ["metadata.name", "metadata.namespace"];
        let sel = FieldSelector::parse("metadata.name=a,metadata.namespace!=other", &fields).unwrap();
        assert!(sel.matches(|f| field_of(&obj, f)));
        assert!(!FieldSelector::parse("metadata.name==b", &fields).unwrap().matches(|f| field_of(&obj, f)));
        assert_eq!(FieldSelector::parse("spec.x=1", &fields).unwrap_err(), "field label not supported: spec.x");
        assert_eq!(field_of(&obj, "status.phase"), "Active");
    }
}
