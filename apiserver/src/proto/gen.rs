//! The generator of `table.rs` (test-only; std only, so it also builds alone with `rustc`).
//!
//! Two inputs:
//! - k8s-pb 0.9.0's sources (`$CARGO_HOME/registry/src/*/k8s-pb-0.9.0/src`): every message, its
//!   fields' tags, wire types, cardinality and message types. They define the wire format, so they
//!   are the authority on what a body can hold; [`pb_messages`] reads them and the table test
//!   compares the committed table with them on every run.
//! - The Go types of `kubernetes/{api,apimachinery,apiextensions-apiserver,kube-aggregator,
//!   metrics}` at the tag matching k8s-pb's protos (v0.35.0), one directory per repository under
//!   `$KEEL_K8S_GO`: each field's JSON name (its `json:` struct tag), whether it is inlined
//!   (`json:",inline"`), and whether it is a pointer (a zero value present in protobuf is set only
//!   for pointers: Go writes every non-pointer field); each package's API group (`GroupName`);
//!   which messages are named Go slices (`type Verbs []string`, JSON arrays); each field's merge
//!   markers (`patchStrategy`/`patchMergeKey` tags, `+listType`/`+listMapKey`/`+mapType`
//!   comments).
//!
//! Fields are matched to Go by message name and tag number; the few that have no Go field (the
//! hand-written `Time`, `MicroTime`, `Quantity`) keep their proto name, which is lowerCamelCase.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The k8s-pb release the table is generated from.
pub const K8S_PB: &str = "k8s-pb-0.9.0";
/// The Go tag whose types match k8s-pb's protos (Kubernetes 1.35.0).
pub const GO_TAG: &str = "v0.35.0";
/// The Go repositories read, as directories under `$KEEL_K8S_GO`.
pub const GO_REPOS: [&str; 5] = ["api", "apimachinery", "apiextensions-apiserver", "kube-aggregator", "metrics"];

/// One `::prost::Message` of k8s-pb.
#[derive(Debug, Clone, PartialEq)]
pub struct PbMessage {
    /// The proto package, `k8s.io.api.apps.v1`.
    pub package: String,
    pub name: String,
    /// In declaration order (the proto's, which is Go's).
    pub fields: Vec<PbField>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PbField {
    /// The Rust name, without `r#`.
    pub rust: String,
    pub tag: u8,
    /// `string`, `bytes`, `int32`, `int64`, `bool`, `double`, or a message's full name.
    pub ty: String,
    pub card: PbCard,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PbCard {
    Single,
    Repeated,
    /// `map<string, ty>`.
    Map,
}

const SCALARS: [&str; 6] = ["string", "bytes", "int32", "int64", "bool", "double"];

/// k8s-pb's sources in the cargo registry.
pub fn pb_dir() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cargo"));
    let src = home.join("registry").join("src");
    let entries = std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    for e in entries.flatten() {
        let dir = e.path().join(K8S_PB).join("src");
        if dir.is_dir() {
            return dir;
        }
    }
    panic!("{K8S_PB} is not in {} (run a cargo build first)", src.display())
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).expect("a readable directory").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every message of k8s-pb, sorted by package and name.
pub fn pb_messages(src: &Path) -> Vec<PbMessage> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut out = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src").parent().expect("a parent");
        let module: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if module.is_empty() {
            continue; // lib.rs
        }
        let text = std::fs::read_to_string(&file).expect("a readable file");
        parse_pb_file(&module, &text, &file, &mut out);
    }
    out.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    out
}

fn parse_pb_file(module: &[String], text: &str, file: &Path, out: &mut Vec<PbMessage>) {
    let package = format!("k8s.io.{}", module.join("."));
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut derive_message = false;
    let mut current: Option<PbMessage> = None;
    while i < lines.len() {
        let t = lines[i].trim();
        i += 1;
        if t.starts_with("#[derive(") {
            derive_message = t.contains("::prost::Message");
            continue;
        }
        if let Some(rest) = t.strip_prefix("pub struct ") {
            assert!(derive_message, "{}: a struct that is not a message: {t}", file.display());
            derive_message = false;
            let name = rest.split([' ', '{']).next().expect("a name").to_string();
            let m = PbMessage { package: package.clone(), name, fields: Vec::new() };
            if t.ends_with("{}") {
                out.push(m);
            } else {
                current = Some(m);
            }
            continue;
        }
        if lines[i - 1] == "}" {
            if let Some(m) = current.take() {
                out.push(m);
            }
            continue;
        }
        let Some(attr) = t.strip_prefix("#[prost(").and_then(|a| a.strip_suffix(")]")) else { continue };
        let m = current.as_mut().unwrap_or_else(|| panic!("{}: a field outside a message", file.display()));
        let mut decl = String::new();
        while i < lines.len() {
            decl.push_str(lines[i].trim());
            i += 1;
            if decl.ends_with(',') && decl.matches('<').count() == decl.matches('>').count() {
                break;
            }
        }
        m.fields.push(parse_pb_field(module, attr, &decl));
    }
    assert!(current.is_none(), "{}: an unclosed message", file.display());
}

fn parse_pb_field(module: &[String], attr: &str, decl: &str) -> PbField {
    let tag = attr.split("tag = \"").nth(1).and_then(|t| t.split('"').next()).expect("a tag");
    let tag: u8 = tag.parse().expect("a small tag");
    let decl = decl.strip_prefix("pub ").expect("a pub field");
    let (rust, ty) = decl.split_once(':').expect("name: type");
    let rust = rust.trim().trim_start_matches("r#").to_string();
    let ty = ty.trim().trim_end_matches(',').replace(",>", ">");
    let (card, kind) = if let Some(map) = attr.strip_prefix("btree_map = \"").or_else(|| attr.strip_prefix("map = \""))
    {
        let kv = map.split('"').next().expect("map types");
        let (k, v) = kv.split_once(", ").expect("key, value");
        assert_eq!(k, "string", "a map keyed by {k}");
        (PbCard::Map, v.to_string())
    } else {
        let kind = attr.split([',', ' ']).next().expect("a kind").to_string();
        let card = if attr.split(", ").any(|a| a == "repeated") { PbCard::Repeated } else { PbCard::Single };
        (card, kind)
    };
    let ty = if kind == "message" {
        resolve(module, &ty)
    } else {
        assert!(SCALARS.contains(&kind.as_str()), "an unknown kind {kind}");
        kind
    };
    PbField { rust, tag, ty, card }
}

/// The full name of the message type in a k8s-pb field's Rust type, as seen from `module`.
fn resolve(module: &[String], ty: &str) -> String {
    let mut path = ty;
    if let Some(map) = path.strip_prefix("::prost::alloc::collections::BTreeMap<") {
        path = map.split_once(',').expect("key, value").1.trim();
    }
    for wrapper in ["::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"] {
        path = path.strip_prefix(wrapper).unwrap_or(path);
    }
    for wrapper in ["::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"] {
        path = path.strip_prefix(wrapper).unwrap_or(path);
    }
    let path = path.trim_end_matches('>');
    let mut base: Vec<&str> = module.iter().map(String::as_str).collect();
    let segments: Vec<&str> = path.split("::").collect();
    let mut rest = &segments[..];
    if rest.first() == Some(&"crate") {
        base.clear();
        rest = &rest[1..];
    }
    while rest.first() == Some(&"super") {
        base.pop().expect("a parent module");
        rest = &rest[1..];
    }
    base.extend(rest);
    format!("k8s.io.{}", base.join("."))
}

/// A Go struct field with a protobuf tag.
#[derive(Debug, Clone)]
struct GoField {
    json: String,
    inline: bool,
    pointer: bool,
    /// kube's merge markers: `patchStrategy`, `patchMergeKey` (struct tags), `+listType`,
    /// `+listMapKey` (each one), `+mapType` (comment markers).
    markers: GoMarkers,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct GoMarkers {
    strategy: String,
    merge_key: String,
    list_type: String,
    map_keys: Vec<String>,
    map_type: String,
}

impl GoMarkers {
    /// Reads a `// +key=value` marker line of a field's comment.
    fn comment(&mut self, line: &str) {
        let Some((key, value)) = line.trim_start_matches('/').trim().strip_prefix('+').and_then(|m| m.split_once('='))
        else {
            return;
        };
        let value = value.trim().to_string();
        match key {
            "listType" => self.list_type = value,
            "listMapKey" => self.map_keys.push(value),
            "mapType" => self.map_type = value,
            _ => {}
        }
    }
}

#[derive(Default)]
struct GoPackage {
    group: Option<String>,
    /// Struct name → protobuf tag → field.
    structs: HashMap<String, HashMap<u8, GoField>>,
    /// Named slice types (`type Verbs []string`).
    slices: BTreeSet<String>,
    /// Every type's name, by its lowercase form (k8s-pb's names are prost's UpperCamelCase:
    /// `JsonSchemaProps` for `JSONSchemaProps`).
    names: HashMap<String, String>,
    /// Types defined as another package's (`type List metav1.List`): name → (proto package, name).
    aliases: HashMap<String, (String, String)>,
}

/// The value of `key:"…"` in a Go struct tag.
fn tag_value<'a>(tags: &'a str, key: &str) -> Option<&'a str> {
    let at = tags.find(&format!("{key}:\""))?;
    tags[at + key.len() + 2..].split('"').next()
}

fn go_package(dir: &Path) -> GoPackage {
    let mut pkg = GoPackage::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "go") && !p.to_string_lossy().ends_with("_test.go"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable Go file");
        let mut current: Option<String> = None;
        let mut markers = GoMarkers::default();
        // Import name → proto package (`metav1` → `k8s.io.apimachinery.pkg.apis.meta.v1`).
        let mut imports = HashMap::new();
        for line in text.lines() {
            let t = line.trim();
            if let Some((name, path)) = t.strip_prefix("import ").unwrap_or(t).split_once("\"k8s.io/") {
                let path = path.trim_end_matches('"');
                let name = name.trim();
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                let name = if name.is_empty() { path.rsplit('/').next().unwrap_or("") } else { name };
                imports.insert(name.to_string(), format!("k8s.io.{}", path.replace('/', ".").replace('-', "_")));
            }
            if let Some(g) = line.strip_prefix("const GroupName = \"") {
                pkg.group = Some(g.trim_end_matches('"').to_string());
            }
            if let Some(rest) = line.strip_prefix("type ") {
                let mut words = rest.split_whitespace();
                let (name, kind) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                pkg.names.insert(name.to_lowercase(), name.to_string());
                if kind == "struct" && rest.ends_with('{') {
                    current = Some(name.to_string());
                } else if kind.starts_with("[]") {
                    pkg.slices.insert(name.to_string());
                } else if let Some((q, ty)) = kind.split_once('.') {
                    if let Some(p) = imports.get(q) {
                        pkg.aliases.insert(name.to_string(), (p.clone(), ty.to_string()));
                    }
                }
                continue;
            }
            if line.starts_with('}') {
                current = None;
                markers = GoMarkers::default();
                continue;
            }
            let Some(name) = &current else { continue };
            if t.starts_with("//") {
                markers.comment(t);
                continue;
            }
            let mut field_markers = std::mem::take(&mut markers);
            let Some(bt) = t.find('`') else { continue };
            let (decl, tags) = t.split_at(bt);
            let Some(proto) = tag_value(tags, "protobuf").filter(|p| *p != "-") else { continue };
            let mut parts = proto.split(',');
            let tag: u8 = parts.nth(1).and_then(|n| n.parse().ok()).expect("a protobuf tag number");
            // `EphemeralContainerCommon` is `bytes,1,req`, unnamed (and inlined).
            let proto_name = parts.find_map(|p| p.strip_prefix("name=")).unwrap_or("");
            let (json, inline) = match tag_value(tags, "json") {
                Some(j) => {
                    let mut opts = j.split(',');
                    let name = opts.next().unwrap_or("");
                    (name, opts.any(|o| o == "inline"))
                }
                None => ("", false),
            };
            let json = if json.is_empty() || json == "-" { proto_name } else { json };
            let ty = decl.split_whitespace().last().expect("a type");
            field_markers.strategy = tag_value(tags, "patchStrategy").unwrap_or("").to_string();
            field_markers.merge_key = tag_value(tags, "patchMergeKey").unwrap_or("").to_string();
            let field =
                GoField { json: json.to_string(), inline, pointer: ty.starts_with('*'), markers: field_markers };
            pkg.structs.entry(name.clone()).or_default().insert(tag, field);
        }
    }
    pkg
}

/// The Go directory of a proto package: `k8s.io.api.apps.v1` → `api/apps/v1`,
/// `k8s.io.kube_aggregator.pkg.apis.apiregistration.v1` → `kube-aggregator/pkg/apis/…`.
fn go_dir(go: &Path, package: &str) -> PathBuf {
    let mut parts = package.strip_prefix("k8s.io.").expect("a k8s.io package").split('.');
    let mut dir = go.join(parts.next().expect("a repository").replace('_', "-"));
    for p in parts {
        dir.push(p);
    }
    dir
}

/// The JSON shape of messages kube encodes other than as an object of their fields.
fn shape(full: &str, go_slices: &BTreeSet<String>, name: &str) -> &'static str {
    const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.";
    const EXT: [&str; 2] = [
        "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.",
        "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1beta1.",
    ];
    if let Some(n) = full.strip_prefix(META) {
        match n {
            "Time" => return "Time",
            "MicroTime" => return "MicroTime",
            "Duration" => return "Duration",
            "FieldsV1" => return "Json",
            _ => {}
        }
    }
    match full {
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => return "IntOrString",
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => return "Quantity",
        "k8s.io.apimachinery.pkg.api.resource.QuantityValue" => return "Quantity",
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => return "Json",
        _ => {}
    }
    for ext in EXT {
        match full.strip_prefix(ext) {
            Some("JSON") => return "Json",
            Some("JSONSchemaPropsOrArray") => return "SchemaOrArray",
            Some("JSONSchemaPropsOrBool") => return "SchemaOrBool",
            Some("JSONSchemaPropsOrStringArray") => return "SchemaOrStringArray",
            _ => {}
        }
    }
    if go_slices.contains(name) {
        return "List";
    }
    "Object"
}

fn lower_camel(rust: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in rust.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The text of `table.rs` from k8s-pb's sources and the Go types under `go`; panics on a message
/// or field it cannot place.
pub fn generate(pb: &Path, go: &Path) -> String {
    let mut messages = pb_messages(pb);
    let packages: Vec<String> =
        messages.iter().map(|m| m.package.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let go_pkgs: HashMap<&str, GoPackage> = packages.iter().map(|p| (p.as_str(), go_package(&go_dir(go, p)))).collect();
    // k8s-pb's full name → the message's own (Go's) name, then sorted by that.
    let mut own = HashMap::new();
    for m in &mut messages {
        let go = &go_pkgs[m.package.as_str()];
        let name =
            go.names.get(&m.name.to_lowercase()).unwrap_or_else(|| panic!("no Go type {}.{}", m.package, m.name));
        own.insert(format!("{}.{}", m.package, m.name), format!("{}.{name}", m.package));
        m.name = name.clone();
    }
    messages.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    let index: HashMap<String, usize> =
        messages.iter().enumerate().map(|(i, m)| (format!("{}.{}", m.package, m.name), i)).collect();
    let index = |pb_name: &str| own.get(pb_name).and_then(|n| index.get(n)).copied();

    let mut groups = BTreeMap::new();
    for (i, p) in packages.iter().enumerate() {
        if let Some(g) = &go_pkgs[p.as_str()].group {
            let version = p.rsplit('.').next().expect("a version");
            assert!(groups.insert((g.clone(), version.to_string()), i).is_none(), "two packages for {g}/{version}");
        }
    }

    let mut s = String::new();
    s.push_str(&format!(
        "// @generated by `proto::gen` from {K8S_PB} (the wire format: tags, types, cardinality) and\n\
         // the Go types of kubernetes/{{{}}}\n\
         // {GO_TAG} (JSON names, inlining, pointers, API groups, merge markers). Do not edit. To regenerate:\n\
         //   for r in {}; do mkdir -p /tmp/k8s-go/$r &&\n\
         //     git -C <clone of kubernetes/$r> archive {GO_TAG} | tar -x -C /tmp/k8s-go/$r; done\n\
         //   KEEL_K8S_GO=/tmp/k8s-go cargo test --workspace --lib proto::gen -- --ignored\n\
         // `proto::tests::table_matches_k8s_pb` checks it against k8s-pb on every run.\n\n",
        GO_REPOS.join(","),
        GO_REPOS.join(" ")
    ));
    s.push_str(
        "use super::Card::{I, K, P, R, V};\nuse super::Shape::*;\nuse super::Ty::*;\nuse super::{f, k, m, Markers, Message};\n\n",
    );
    s.push_str(
        "/// The proto packages, sorted; messages name theirs by position (read by the tests).\n\
         #[cfg_attr(not(test), allow(dead_code))]\npub(super) static PACKAGES: &[&str] = &[\n",
    );
    for (i, p) in packages.iter().enumerate() {
        let _ = writeln!(s, "    {p:?}, // {i}");
    }
    s.push_str(
        "];\n\n/// (API group, version) → package, sorted.\npub(super) static GROUPS: &[(&str, &str, u8)] = &[\n",
    );
    for ((g, v), i) in &groups {
        let _ = writeln!(s, "    ({g:?}, {v:?}, {i}),");
    }
    s.push_str("];\n\n/// Every message, sorted by package and name; message fields name their type by position.\n");
    let _ = writeln!(s, "pub(super) static MESSAGES: [Message; {}] = [", messages.len());
    let mut unmatched = Vec::new();
    let mut marked = Vec::new();
    for (n, msg) in messages.iter().enumerate() {
        let pkg = packages.iter().position(|p| *p == msg.package).expect("a package");
        let go = &go_pkgs[msg.package.as_str()];
        let go_fields = match go.aliases.get(&msg.name) {
            Some((p, n)) => go_pkgs[p.as_str()].structs.get(n),
            None => go.structs.get(&msg.name),
        };
        let full = format!("{}.{}", msg.package, msg.name);
        let shape = shape(&full, &go.slices, &msg.name);
        let _ = write!(s, "    // {n}\n    m({pkg}, {:?}, {shape}, &[", msg.name);
        let mut line = 0;
        for (k, fld) in msg.fields.iter().enumerate() {
            let go_field = go_fields.and_then(|g| g.get(&fld.tag));
            if let Some(g) = go_field.filter(|g| g.markers != GoMarkers::default()) {
                marked.push((n, fld.tag, g.markers.clone()));
            }
            if go_field.is_none() && shape == "Object" {
                unmatched.push(format!("{full}.{}", fld.rust));
            }
            let json = match go_field {
                Some(g) if !g.json.is_empty() => g.json.clone(),
                _ => lower_camel(&fld.rust), // the proto's name
            };
            let ty = match fld.ty.as_str() {
                "string" => "Str".to_string(),
                "bytes" => "Bytes".to_string(),
                "int32" => "Int32".to_string(),
                "int64" => "Int64".to_string(),
                "bool" => "Bool".to_string(),
                "double" => "Double".to_string(),
                t => format!("Msg({})", index(t).unwrap_or_else(|| panic!("{full}.{}: no message {t}", fld.rust))),
            };
            let card = match fld.card {
                PbCard::Repeated => "R",
                PbCard::Map => "K",
                PbCard::Single => match go_field {
                    Some(g) if g.inline && ty.starts_with("Msg") => "I",
                    Some(g) if !g.pointer => "V",
                    _ => "P",
                },
            };
            let item = format!("f({}, {json:?}, {ty}, {card})", fld.tag);
            if k > 0 {
                s.push(',');
                line += 1;
            }
            if line + item.len() > 100 || k == 0 {
                s.push_str("\n        ");
                line = 8;
            } else {
                s.push(' ');
                line += 1;
            }
            line += item.len();
            s.push_str(&item);
        }
        s.push_str(if msg.fields.is_empty() { "]),\n" } else { "\n    ]),\n" });
    }
    s.push_str("];\n");
    s.push_str(
        "\n/// kube's merge markers of the fields that have any, by message and field tag: patch strategy,\n\
         /// patch merge key, list type, list map keys, map type.\n\
         pub(super) static MARKERS: &[(u16, u8, Markers)] = &[\n",
    );
    marked.sort_by_key(|(n, tag, _)| (*n, *tag));
    for (n, tag, k) in marked {
        let _ = writeln!(
            s,
            "    ({n}, {tag}, k({:?}, {:?}, {:?}, &{:?}, {:?})),",
            k.strategy, k.merge_key, k.list_type, k.map_keys, k.map_type
        );
    }
    s.push_str("];\n");
    assert!(unmatched.is_empty(), "fields with no Go field: {unmatched:#?}");
    s
}

/// Where the generated table lives.
#[cfg(test)]
pub fn table_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proto/table.rs")
}

/// Rewrites `table.rs`; needs `$KEEL_K8S_GO` (see the table's header).
#[test]
#[ignore = "rewrites src/proto/table.rs from k8s-pb and $KEEL_K8S_GO"]
fn regenerate() {
    let go = std::env::var_os("KEEL_K8S_GO").expect("KEEL_K8S_GO: the Go sources, as table.rs's header says");
    std::fs::write(table_path(), generate(&pb_dir(), Path::new(&go))).expect("table.rs is writable");
}
