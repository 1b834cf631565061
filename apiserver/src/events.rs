//! `events.k8s.io/v1` Events over the core Events kube keeps them as (kube stores both APIs'
//! events under one key space, in the core form, and converts: `pkg/apis/events/v1`'s
//! conversions): fields renamed one to one, the rest as they are.

use serde_json::{Map, Value};

/// Core field and its `events.k8s.io/v1` name.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// `v` with its fields renamed from core names to `events.k8s.io/v1` names (`to_v1`) or back.
fn renamed(v: Value, to_v1: bool) -> Value {
    let Value::Object(m) = v else { return v };
    let out: Map<String, Value> = m
        .into_iter()
        .map(|(k, x)| {
            let pair = RENAMED.iter().find(|(core, v1)| k == if to_v1 { *core } else { *v1 });
            match pair {
                Some((core, v1)) => ((if to_v1 { *v1 } else { *core }).to_string(), x),
                None => (k, x),
            }
        })
        .collect();
    Value::Object(out)
}

/// A stored (core) event as `events.k8s.io/v1` shows it.
pub fn from_storage(v: Value) -> Value {
    renamed(v, true)
}

/// An `events.k8s.io/v1` event as it is stored (core).
pub fn to_storage(v: Value) -> Value {
    renamed(v, false)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_convert_as_kube_converts_them() {
        let core = json!({
            "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "started",
            "reason": "Started",
            "source": {"component": "kubelet"},
            "count": 2,
            "reportingComponent": "kubelet",
            "reportingInstance": "node-1",
            "type": "Normal"
        });
        let v1 = from_storage(core.clone());
        assert_eq!(
            v1,
            json!({
                "metadata": {"name": "e"},
                "regarding": {"kind": "Pod", "name": "p"},
                "note": "started",
                "reason": "Started",
                "deprecatedSource": {"component": "kubelet"},
                "deprecatedCount": 2,
                "reportingController": "kubelet",
                "reportingInstance": "node-1",
                "type": "Normal"
            })
        );
        assert_eq!(to_storage(v1), core);
    }
}
