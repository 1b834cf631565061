//! OpenAPI v3, generated from the resource table and the types' schemas (k8s-openapi's
//! `schemars` impls, whose schema names are kube's definition names): the `/openapi/v3` index
//! and one document per group-version, as kube-openapi serves them. kubectl reads them for
//! `explain`, and to learn that the server validates fields itself (a `patch` operation with the
//! kind's `x-kubernetes-group-version-kind` and a `fieldValidation` parameter), after which
//! `kubectl create -f` and `apply -f` leave validation to the server.

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};
use sha2::Digest as _;

use crate::discovery;
use crate::proto::Node;
use crate::resources::Resource;

/// The path of a group-version's document under `/openapi/v3/`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// kube-openapi's hash of a document: upper-case hex of its SHA-512.
fn hash(doc: &[u8]) -> String {
    sha2::Sha512::digest(doc).iter().map(|b| format!("{b:02X}")).collect()
}

fn gvk(r: &Resource) -> Value {
    json!({"group": r.group, "kind": r.kind, "version": r.version})
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "description": description, "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

const DRY_RUN: &str = "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed";
const FIELD_VALIDATION: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.";

/// One operation of `r`: kube's extensions, parameters, and its body and answer schemas.
fn operation(r: &Resource, action: &str, verb: &str, schema: &Value, body: bool, list: Option<&Value>) -> Value {
    let mut params = Vec::new();
    if matches!(action, "post" | "put" | "patch" | "delete" | "deletecollection") {
        params.push(query_param("dryRun", DRY_RUN));
    }
    if matches!(action, "post" | "put" | "patch") {
        params.push(query_param("fieldValidation", FIELD_VALIDATION));
    }
    let answer = list.unwrap_or(schema);
    let mut op = json!({
        "description": format!("{verb} {}", r.kind),
        "operationId": format!("{action}{}", r.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": answer}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
    });
    if body {
        let media = if action == "patch" {
            let third = match r.custom {
                Some(_) => "application/apply-patch+yaml",
                None => "application/strategic-merge-patch+json",
            };
            ["application/json-patch+json", "application/merge-patch+json", third]
                .iter()
                .map(|m| (m.to_string(), json!({"schema": {"type": "object"}})))
                .collect::<Map<_, _>>()
        } else {
            [("application/json".to_string(), json!({"schema": schema}))].into_iter().collect()
        };
        op["requestBody"] = json!({"content": media, "required": true});
    }
    op
}

/// The document of one group-version; `None` if nothing is served there.
pub fn document(all: &[&'static Resource], group: &str, version: &str) -> Option<Value> {
    let served = discovery::of(all, group, version);
    if served.is_empty() {
        return None;
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let mut kinds = Vec::new();
    let mut custom = Map::new();
    for r in &served {
        let schema = match r.custom {
            Some(c) => {
                let name = custom_name(r, r.kind);
                custom.insert(name.clone(), custom_schema(r, c, &mut generator));
                json!({"$ref": format!("#/components/schemas/{name}")})
            }
            None => serde_json::to_value((r.schema)(&mut generator)).expect("a schema encodes"),
        };
        kinds.push((r, schema.clone()));
        let list = json!({"type": "object", "properties": {"items": {"type": "array", "items": schema}}});
        let name = path_param("name", &format!("name of the {}", r.kind));
        let ns = path_param("namespace", "object name and auth scope, such as for teams and projects");
        let (collection, object, scope) = if r.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", r.plural),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
                vec![ns],
            )
        } else {
            (format!("{base}/{}", r.plural), format!("{base}/{}/{{name}}", r.plural), vec![])
        };
        let mut c = Map::new();
        c.insert("get".into(), operation(r, "list", "list or watch objects of kind", &schema, false, Some(&list)));
        if r.serves("create") {
            c.insert("post".into(), operation(r, "post", "create a", &schema, true, None));
        }
        if r.serves("deletecollection") {
            c.insert(
                "delete".into(),
                operation(r, "deletecollection", "delete collection of", &schema, false, Some(&list)),
            );
        }
        c.insert("parameters".into(), Value::Array(scope.clone()));
        paths.insert(collection, Value::Object(c));
        let mut o = Map::new();
        o.insert("get".into(), operation(r, "get", "read the specified", &schema, false, None));
        o.insert("put".into(), operation(r, "put", "replace the specified", &schema, true, None));
        o.insert("patch".into(), operation(r, "patch", "partially update the specified", &schema, true, None));
        o.insert("delete".into(), operation(r, "delete", "delete a", &schema, false, None));
        o.insert("parameters".into(), Value::Array([vec![name], scope].concat()));
        paths.insert(object, Value::Object(o));
        if r.namespaced {
            let mut all = Map::new();
            all.insert(
                "get".into(),
                operation(r, "list", "list or watch objects of kind", &schema, false, Some(&list)),
            );
            paths.insert(format!("{base}/{}", r.plural), Value::Object(all));
        }
    }
    let mut schemas: Map<String, Value> =
        generator.take_definitions(true).into_iter().collect::<serde_json::Map<String, Value>>();
    schemas.extend(custom);
    // kube's merge markers on each field that has them (kubectl's apply reads the patch ones).
    for (name, schema) in schemas.iter_mut() {
        for (field, m) in Node::named(name).marked_fields() {
            let Some(Value::Object(p)) = schema.pointer_mut(&format!("/properties/{field}")) else { continue };
            for (key, value) in [
                ("x-kubernetes-list-type", m.list_type),
                ("x-kubernetes-map-type", m.map_type),
                ("x-kubernetes-patch-merge-key", m.merge_key),
                ("x-kubernetes-patch-strategy", m.strategy),
            ] {
                if !value.is_empty() {
                    p.insert(key.into(), value.into());
                }
            }
            if !m.map_keys.is_empty() {
                p.insert("x-kubernetes-list-map-keys".into(), json!(m.map_keys));
            }
        }
    }
    // Each kind's schema names its group, version and kind (an array, as kube writes it there).
    for (r, _) in kinds.into_iter().filter(|(r, _)| r.custom.is_none()) {
        let name = format!(
            "io.k8s.api.{}.{}.{}",
            if r.group.is_empty() { "core" } else { r.group.split('.').next().unwrap_or(r.group) },
            r.version,
            r.kind
        );
        if let Some(Value::Object(s)) = schemas.get_mut(&name) {
            s.insert("x-kubernetes-group-version-kind".into(), json!([gvk(r)]));
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// kube's name of a custom resource's schema: the group reversed, the version, the kind
/// (`com.example.stable.v1.CronTab`).
fn custom_name(r: &Resource, kind: &str) -> String {
    let group: Vec<&str> = r.group.split('.').rev().collect();
    format!("{}.{}.{kind}", group.join("."), r.version)
}

/// A custom resource version's schema as kube publishes it: the definition's, with `apiVersion`,
/// `kind` and `metadata` (ObjectMeta) described, and its group-version-kind.
fn custom_schema(r: &Resource, c: &crate::crd::Custom, generator: &mut schemars::SchemaGenerator) -> Value {
    let meta =
        serde_json::to_value(generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>())
            .expect("a schema encodes");
    let mut schema = match &c.raw {
        Value::Object(m) => Value::Object(m.clone()),
        _ => json!({"type": "object"}),
    };
    let props = schema.as_object_mut().expect("an object").entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(p) = props {
        p.insert("apiVersion".into(), json!({"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}));
        p.insert("kind".into(), json!({"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}));
        p.insert("metadata".into(), json!({"allOf": [meta], "default": {}, "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk(r)]);
    schema
}

/// `/openapi/v3`: each group-version's document and where it is, by hash.
pub fn index(all: &[&'static Resource]) -> Value {
    let mut paths = Map::new();
    for (g, v) in discovery::group_versions(all) {
        if let Some(doc) = document(all, g, v) {
            let bytes = serde_json::to_vec(&doc).expect("a document encodes");
            let path = gv_path(g, v);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(&bytes))}),
            );
        }
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl looks for: a patch with the kind and a fieldValidation parameter, and the
    /// kind's schema with its group-version-kind.
    #[test]
    fn the_core_document_tells_kubectl_what_it_needs() {
        let all: Vec<&'static Resource> = crate::resources::RESOURCES.iter().collect();
        let doc = document(&all, "", "v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "", "kind": "ConfigMap", "version": "v1"})
        );
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let cm = &doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(cm["x-kubernetes-group-version-kind"], json!([{"group": "", "kind": "ConfigMap", "version": "v1"}]));
        assert!(cm["properties"]["data"]["description"].as_str().unwrap().starts_with("Data contains"));
        let meta = &doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
        let owners = &meta["properties"]["ownerReferences"];
        assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
        assert_eq!(owners["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(owners["x-kubernetes-list-type"], "map");
        assert_eq!(owners["x-kubernetes-list-map-keys"], json!(["uid"]));
        assert_eq!(meta["properties"]["finalizers"]["x-kubernetes-list-type"], "set");
        let ports = &doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-list-map-keys"], json!(["port", "protocol"]));
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "port");
        let selector = &doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["selector"];
        assert_eq!(selector["x-kubernetes-map-type"], "atomic");
        let text = serde_json::to_string(&doc).unwrap();
        assert!(!text.contains("#/$defs") && !text.contains("#/definitions"), "refs point into components");
        let index = index(&all);
        assert!(index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/api/v1?hash="));
    }
}
