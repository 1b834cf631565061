//! Events: one object through both APIs that serve it (core/v1 and events.k8s.io/v1, converted
//! as kube converts them), expiring `--event-ttl` after its last write (written with a store
//! lease, as kube-apiserver writes them); other objects stay.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, PostParams};

mod common;

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_after_the_event_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let (running, client) = common::apiserver(dir.path(), &["--event-ttl=2s".into()]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let new_events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    let event = serde_json::from_value::<Event>(serde_json::json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "message": "started",
        "type": "Normal",
        "eventTime": "2026-12-07T04:00:00.000000Z",
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
        "action": "Starting",
    }))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();
    let cm = serde_json::from_value::<ConfigMap>(serde_json::json!({"metadata": {"name": "stays"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    // The same event through events.k8s.io/v1, where only its series may change (kube's
    // messages name the core fields): the core API sees the change, and it still expires.
    let mut seen = new_events.get("e1").await.unwrap();
    assert_eq!(seen.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("p"));
    assert_eq!((seen.note.as_deref(), seen.reporting_controller.as_deref()), (Some("started"), Some("kubelet")));
    let mut renamed = seen.clone();
    renamed.note = Some("updated".into());
    match new_events.replace("e1", &PostParams::default(), &renamed).await {
        Err(kube::Error::Api(s)) => assert_eq!(
            s.message,
            "Event.events.k8s.io \"e1\" is invalid: message: Invalid value: \"updated\": field is immutable"
        ),
        other => panic!("a note changed through events.k8s.io/v1: {other:?}"),
    }
    seen.series = Some(
        serde_json::from_value(serde_json::json!({"count": 2, "lastObservedTime": "2026-12-07T04:00:05.000000Z"}))
            .unwrap(),
    );
    new_events.replace("e1", &PostParams::default(), &seen).await.unwrap();
    assert_eq!(events.get("e1").await.unwrap().series.and_then(|s| s.count), Some(2));

    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match events.get_opt("e1").await.unwrap() {
            None => break,
            Some(_) => {
                assert!(tokio::time::Instant::now() < deadline, "the event outlived its TTL");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(cms.get_opt("stays").await.unwrap().is_some(), "a configmap expired with the events");
    running.stop().await;
}
