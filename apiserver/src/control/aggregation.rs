//! ClusterRole aggregation (kube's `clusterrole-aggregation-controller`): a ClusterRole with an
//! `aggregationRule` holds the rules of every other ClusterRole its `clusterRoleSelectors`
//! select, in name order, each rule once — as `admin`, `edit` and `view` gather the rules of
//! roles labelled `rbac.authorization.k8s.io/aggregate-to-*`. Any ClusterRole's change looks at
//! every aggregating one again.

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of};
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;

pub async fn run(client: Client) {
    let queue = Queue::new();
    let roles = resource("rbac.authorization.k8s.io", "v1", "clusterroles");
    let (q, c) = (queue.clone(), client.clone());
    let watch = informer::run(client.cache(roles).clone(), Selectors::everything(), move |_| {
        for r in c.cached_list(roles, None) {
            if r.json(roles).get("aggregationRule").is_some_and(|a| !a.is_null()) {
                q.add(key_of(&r));
            }
        }
    });
    let work = queue.clone().work("clusterrole-aggregation-controller", 1, move |name| {
        let client = client.clone();
        async move { sync(&client, &name).await }
    });
    super::together(vec![Box::pin(watch), Box::pin(work)]).await;
}

/// The rules `role`'s aggregation rule gathers from `all` (the ClusterRoles, any order).
pub fn gathered(role: &Value, all: &[Value]) -> Vec<Value> {
    let selectors: Vec<Value> =
        role.pointer("/aggregationRule/clusterRoleSelectors").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut sources: Vec<&Value> = all
        .iter()
        .filter(|r| meta::get(r, "name") != meta::get(role, "name"))
        .filter(|r| selectors.iter().any(|s| crate::workloads::selects(s, r.pointer("/metadata/labels"))))
        .collect();
    sources.sort_by_key(|r| meta::get(r, "name").to_string());
    let mut rules: Vec<Value> = Vec::new();
    for r in sources {
        for rule in r.get("rules").and_then(Value::as_array).into_iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    rules
}

async fn sync(client: &Client, name: &str) -> Result<(), Failure> {
    let roles = resource("rbac.authorization.k8s.io", "v1", "clusterroles");
    let Some(o) = client.cached(roles, None, name) else { return Ok(()) };
    let role = o.value(roles);
    if role.get("aggregationRule").is_none_or(Value::is_null) {
        return Ok(());
    }
    let all: Vec<Value> = client.cached_list(roles, None).iter().map(|r| (*r.json(roles)).clone()).collect();
    let rules = gathered(&role, &all);
    let current = role.get("rules").cloned().unwrap_or_else(|| json!([]));
    if current == Value::Array(rules.clone()) || (rules.is_empty() && current.is_null()) {
        return Ok(());
    }
    let mut updated = role.clone();
    updated["rules"] = Value::Array(rules);
    match client.update(roles, None, name, None, &updated).await {
        Err(e) if !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_roles_gather_the_selected_rules_once_in_name_order() {
        let agg = json!({"metadata": {"name": "monitoring"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"aggregate-to-monitoring": "true"}}]}});
        let read = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let list = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]});
        let all = vec![
            agg.clone(),
            json!({"metadata": {"name": "b", "labels": {"aggregate-to-monitoring": "true"}}, "rules": [list.clone(), read.clone()]}),
            json!({"metadata": {"name": "a", "labels": {"aggregate-to-monitoring": "true"}}, "rules": [read.clone()]}),
            json!({"metadata": {"name": "c"}, "rules": [json!({"verbs": ["*"]})]}),
        ];
        assert_eq!(gathered(&agg, &all), vec![read, list]);
    }
}
