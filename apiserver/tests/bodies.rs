//! Request bodies in each media type kube decodes (JSON, YAML, protobuf), and kube's 415 for
//! any other, on writes and on DELETE's options; a refused body changes nothing.

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
