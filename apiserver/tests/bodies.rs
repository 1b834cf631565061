//! Request bodies in each media type kube decodes (JSON, YAML, protobuf), and kube's 415 for
//! any other, on writes and on DELETE's options; a refused body changes nothing. Answers in
//! protobuf to the clients that ask for it.

mod common;

/// Sends `body` as `content_type`; the answer's status code and body.
async fn send(client: &kube::Client, method: &str, uri: &str, content_type: &str, body: &str) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("Content-Type", content_type)
        .body(body.as_bytes().to_vec())
        .unwrap();
    match client.request_text(req).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("{method} {uri}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_each_media_type_kube_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let (running, client) = common::apiserver(dir.path(), &[]).await;
    let cms = "/api/v1/namespaces/default/configmaps";

    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  answer: \"42\"\n";
    let (code, text) = send(&client, "POST", cms, "application/yaml", yaml).await;
    assert_eq!(code, 200, "{text}");
    let created: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(created["data"]["answer"], "42");

    let unknown = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf";
    let other = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"as-text"}}"#;
    assert_eq!(send(&client, "POST", cms, "text/plain", other).await, (415, unknown.to_string()));
    // Strict decoding names duplicate keys as it names unknown ones, in the order they come.
    let twice = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"twice","name":"twice"},"data":{"a":"1"},"dta":{}}"#;
    assert_eq!(
        send(&client, "POST", &format!("{cms}?fieldValidation=Strict"), "application/json", twice).await,
        (400, r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.name", unknown field "dta""#.to_string())
    );
    let (code, _) = send(&client, "POST", cms, "application/yaml", "metadata: [unclosed").await;
    assert_eq!(code, 400);
    let one = format!("{cms}/from-yaml");
    assert_eq!(
        send(&client, "DELETE", &one, "text/plain", r#"{"gracePeriodSeconds":0}"#).await,
        (415, unknown.to_string())
    );
    // Nothing refused was written or deleted.
    let req = http::Request::get(cms).body(Vec::new()).unwrap();
    let list: serde_json::Value = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert!(names.contains(&"from-yaml") && !names.contains(&"as-text") && !names.contains(&"twice"), "{names:?}");
    // DELETE's options may be YAML too.
    let (code, text) = send(&client, "DELETE", &one, "application/yaml", "gracePeriodSeconds: 0\n").await;
    assert_eq!(code, 200, "{text}");
    running.stop().await;
}

/// GET `uri` asking for kube's protobuf first, as client-go's components ask: the answer's
/// content type and body.
async fn get_protobuf(client: &kube::Client, uri: &str) -> (String, Vec<u8>) {
    let req = http::Request::get(uri)
        .header("Accept", "application/vnd.kubernetes.protobuf, */*")
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    (ct, resp.into_body().collect_bytes().await.unwrap().to_vec())
}

/// The message inside kube's envelope, and the type the envelope names.
fn unwrap(body: &[u8]) -> (String, String, Vec<u8>) {
    use prost::Message as _;
    let u = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(body.strip_prefix(b"k8s\0").expect("the magic"))
        .expect("an envelope");
    let tm = u.type_meta.unwrap_or_default();
    (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default(), u.raw.unwrap_or_default())
}

/// Answers in kube's protobuf to a client that asks for it: an object, a list, a watch's
/// length-framed WatchEvents and an error's Status, each read with k8s-pb's types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_in_protobuf_to_clients_that_ask() {
    use k8s_pb::api::core::v1 as core;
    use prost::Message as _;
    let dir = tempfile::tempdir().unwrap();
    let (running, client) = common::apiserver(dir.path(), &[]).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pb"},"data":{"k":"v"}}"#;
    assert_eq!(send(&client, "POST", cms, "application/json", cm).await.0, 200);

    let (ct, body) = get_protobuf(&client, &format!("{cms}/pb")).await;
    assert_eq!(ct, "application/vnd.kubernetes.protobuf");
    let (api_version, kind, raw) = unwrap(&body);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    let got = core::ConfigMap::decode(raw.as_slice()).unwrap();
    assert_eq!(got.data["k"], "v");
    let rv = got.metadata.unwrap().resource_version.unwrap();

    let (_, body) = get_protobuf(&client, cms).await;
    let (_, kind, raw) = unwrap(&body);
    assert_eq!(kind, "ConfigMapList");
    let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
    assert!(list.items.iter().any(|i| i.metadata.as_ref().unwrap().name.as_deref() == Some("pb")));

    // A watch from 0 sends what is there, then ends at its timeout.
    let (ct, body) = get_protobuf(&client, &format!("{cms}?watch=true&resourceVersion=0&timeoutSeconds=1")).await;
    assert_eq!(ct, "application/vnd.kubernetes.protobuf;stream=watch");
    let mut rest = body.as_slice();
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let n = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let (api_version, kind, raw) = unwrap(&rest[4..4 + n]);
        assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "WatchEvent"));
        let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(raw.as_slice()).unwrap();
        let (_, kind, raw) = unwrap(&event.object.unwrap().raw.unwrap());
        assert_eq!(kind, "ConfigMap");
        let object = core::ConfigMap::decode(raw.as_slice()).unwrap().metadata.unwrap();
        seen.push((event.r#type.unwrap(), object.name.unwrap(), object.resource_version.unwrap()));
        rest = &rest[4 + n..];
    }
    assert!(seen.contains(&("ADDED".to_string(), "pb".to_string(), rv)), "{seen:?}");

    // Errors too are in protobuf: a Status.
    let req = http::Request::get(format!("{cms}/missing"))
        .header("Accept", "application/vnd.kubernetes.protobuf, */*")
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf");
    let (_, kind, raw) = unwrap(&resp.into_body().collect_bytes().await.unwrap());
    assert_eq!(kind, "Status");
    let s = k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(raw.as_slice()).unwrap();
    assert_eq!((s.reason.as_deref(), s.code), (Some("NotFound"), Some(404)));
    assert_eq!(s.message.as_deref(), Some("configmaps \"missing\" not found"));
    running.stop().await;
}
