//! Events the control plane writes about objects (`kubectl describe`'s Events), as client-go's
//! event recorder writes them: core/v1 Events named `<object>.<hex nanoseconds>`, and a repeat
//! of the same event (same object, type, reason and message) counted on the first one
//! (`count`, `lastTimestamp`) instead of written anew.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::client::{resource, Client};
use crate::meta;

/// What makes two events the same: the object's uid, the type, reason and message.
type Said = (String, String, String, String);

/// Writes events as one component (`kubelet` on a host, `default-scheduler`, a controller).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    component: &'static str,
    host: Option<String>,
    /// Events written, by (object uid, type, reason, message): their name and count.
    written: Arc<Mutex<HashMap<Said, (String, i64)>>>,
}

impl Recorder {
    pub fn new(client: Client, component: &'static str, host: Option<String>) -> Recorder {
        Recorder { client, component, host, written: Arc::default() }
    }

    /// Records an event about `object` (a Pod, a Node…, as JSON) in the background.
    pub fn event(&self, object: &Value, kind: &str, r#type: &str, reason: &str, message: String) {
        let involved = json!({
            "kind": kind,
            "namespace": meta::get(object, "namespace"),
            "name": meta::get(object, "name"),
            "uid": meta::get(object, "uid"),
            "apiVersion": object.get("apiVersion").and_then(Value::as_str).unwrap_or("v1"),
            "resourceVersion": meta::get(object, "resourceVersion"),
        });
        let me = self.clone();
        let (t, reason) = (r#type.to_string(), reason.to_string());
        tokio::spawn(async move { me.write(involved, t, reason, message).await });
    }

    async fn write(&self, involved: Value, r#type: String, reason: String, message: String) {
        let events = resource("", "v1", "events");
        let text = |f: &str| involved.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let namespace = match text("namespace") {
            ns if ns.is_empty() => "default".to_string(),
            ns => ns,
        };
        let key = (text("uid"), r#type.clone(), reason.clone(), message.clone());
        let now = meta::now();
        let repeat = self.written.lock().get(&key).cloned();
        if let Some((name, count)) = repeat {
            let patch = json!({"count": count + 1, "lastTimestamp": now});
            if self.client.merge_patch(events, Some(&namespace), &name, None, &patch).await.is_ok() {
                self.written.lock().insert(key, (name, count + 1));
                return;
            }
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("{}.{nanos:x}", text("name"));
        let mut source = json!({"component": self.component});
        if let Some(h) = &self.host {
            source["host"] = json!(h);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": r#type,
            "eventTime": null,
            "reportingComponent": self.component,
            "reportingInstance": self.host.clone().unwrap_or_default(),
        });
        match self.client.create(events, Some(&namespace), &event).await {
            Ok(_) => {
                let mut w = self.written.lock();
                // A recorder forgets old events as client-go's LRU does.
                if w.len() > 4096 {
                    w.clear();
                }
                w.insert(key, (name, 1));
            }
            Err(e) => tracing::debug!(component = self.component, error = %e, "an event was not written"),
        }
    }
}
