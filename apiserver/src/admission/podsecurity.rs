//! PodSecurity: kube's Pod Security admission, as in v1.33. A namespace's labels
//! `pod-security.kubernetes.io/<mode>` and `<mode>-version` choose, for each of three modes, a
//! level of the Pod Security Standards and the version of its checks:
//!
//! ```text
//!   mode      a violation ...                           judged on
//!   enforce   refuses the write (403)                   pods
//!   audit     is noted in the request's audit event     pods and workloads' pod templates
//!   warn      is sent back as a Warning header          pods and workloads' pod templates
//! ```
//!
//! Levels nest: privileged checks nothing, baseline stops known privilege escalations,
//! restricted adds hardening and replaces three baseline checks with stricter ones. Every check
//! is a row of [`CHECKS`] and runs in kube's order (baseline IDs byte-sorted, then restricted
//! ones), because the refusal joins the failing checks' texts in that order and clients match it.
//! The checks read the JSON of a pod or pod template; nothing is decoded into types.
//!
//! Writes of namespaces are checked too: labels kube cannot parse are refused (422), and an
//! enforce level made stricter is tried against the namespace's pods, which answers warnings only.
//! keel has no AdmissionConfiguration file, so nothing is exempt and unlabelled namespaces are
//! privileged in every mode (kube-system included).

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde_json::{json, Value};

use super::{annotate, forbidden, warn, Attributes};
use crate::rest::Api;
use crate::status::{self, go_quote, FieldError, GroupKind, Status};

/// The prefix of the namespace labels (kube's audit annotations share it).
const PREFIX: &str = "pod-security.kubernetes.io/";
/// Audit annotation: the enforce policy a pod was judged by.
const ENFORCE_POLICY: &str = "pod-security.kubernetes.io/enforce-policy";
/// Audit annotation: what the audit level found.
const AUDIT_VIOLATIONS: &str = "pod-security.kubernetes.io/audit-violations";
/// Audit annotation: why the policy could not be read as written.
const ERROR: &str = "pod-security.kubernetes.io/error";
/// The newest minor version with checks of its own; newer versions and `latest` use its checks.
const NEWEST: i64 = 32;
/// At most this many existing pods are tried against an enforce level made stricter.
const MAX_PODS: usize = 3000;
/// Pod subresources whose writes never change what the pod runs.
const IGNORED: [&str; 8] = ["exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status"];

/// What stands in for a missing part of an object.
static NULL: Value = Value::Null;

/// A Pod Security Standards level, from loosest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

/// The levels by their label values, in order.
const LEVELS: [&str; 3] = ["privileged", "baseline", "restricted"];

impl Level {
    /// The level a label names; the match is exact, as kube's.
    fn parse(s: &str) -> Option<Level> {
        [Level::Privileged, Level::Baseline, Level::Restricted].into_iter().find(|l| LEVELS[*l as usize] == s)
    }
}

impl fmt::Display for Level {
    /// The level's label value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(LEVELS[*self as usize])
    }
}

/// A version of the checks: `latest`, or `v1.<minor>` as the label wrote it (unclamped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Latest,
    V1(i64),
}

impl Version {
    /// kube's version syntax: `latest`, or `v1.` and a number without a leading zero.
    fn parse(s: &str) -> Option<Version> {
        if s == "latest" {
            return Some(Version::Latest);
        }
        let n = s.strip_prefix("v1.")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
            return None;
        }
        // A number too large for Go's int is refused there too.
        n.parse().ok().map(Version::V1)
    }

    /// The minor version whose checks apply: future versions get the newest checks.
    fn minor(self) -> i64 {
        match self {
            Version::Latest => NEWEST,
            Version::V1(n) => n.min(NEWEST),
        }
    }
}

impl fmt::Display for Version {
    /// `latest` or `v1.N`, as kube prints a version.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::V1(n) => write!(f, "v1.{n}"),
        }
    }
}

/// A level at a version, printed `restricted:latest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    /// `<level>:<version>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// A namespace's policy: one level and version per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

/// The policy of a namespace with `labels`, and the errors of the labels kube cannot parse (in
/// label order). An unparsable enforce level fails closed (restricted), unparsable audit and warn
/// levels fail open (privileged), an unparsable version is `latest`. Without a warn label, warn
/// follows a valid enforce label that is stricter.
pub fn policy(labels: Option<&Value>) -> (Policy, Vec<FieldError>) {
    let default = LevelVersion { level: Level::Privileged, version: Version::Latest };
    let mut p = Policy { enforce: default, audit: default, warn: default };
    let mut errors = Vec::new();
    let label = |key: &str| labels.and_then(|l| l.get(format!("{PREFIX}{key}"))).and_then(Value::as_str);
    let invalid = |key: &str, value: &str, why: &str| {
        FieldError::invalid(&format!("metadata.labels[{PREFIX}{key}]"), json!(value), why)
    };
    for (mode, lv) in [("enforce", &mut p.enforce), ("audit", &mut p.audit), ("warn", &mut p.warn)] {
        if let Some(s) = label(mode) {
            lv.level = Level::parse(s).unwrap_or_else(|| {
                errors.push(invalid(mode, s, "must be one of privileged, baseline, restricted"));
                if mode == "enforce" {
                    Level::Restricted
                } else {
                    Level::Privileged
                }
            });
        }
        let key = format!("{mode}-version");
        if let Some(s) = label(&key) {
            lv.version = Version::parse(s).unwrap_or_else(|| {
                errors.push(invalid(&key, s, r#"must be "latest" or "v1.x""#));
                Version::Latest
            });
        }
    }
    let enforced = label("enforce").and_then(Level::parse).is_some();
    if label("warn").is_none() && enforced && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if label("warn-version").is_none() {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errors)
}

/// The label errors as one text, as kube's error aggregate prints them: one alone, several
/// (distinct) as `[a, b]`.
fn aggregate(errors: &[FieldError]) -> String {
    let mut texts: Vec<String> = Vec::new();
    for e in errors {
        let t = e.to_string();
        if !texts.contains(&t) {
            texts.push(t);
        }
    }
    match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A field of `v` at the JSON pointer `path`; a null counts as absent, as a nil pointer.
fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    v.pointer(path).filter(|x| !x.is_null())
}

/// A string field.
fn text<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

/// A boolean field, none when unset.
fn truth(v: &Value, path: &str) -> Option<bool> {
    at(v, path).and_then(Value::as_bool)
}

/// A list field, empty when unset.
fn items<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// The strings of a list field.
fn strs<'a>(v: &'a Value, path: &str) -> impl Iterator<Item = &'a str> {
    items(v, path).iter().map(|x| x.as_str().unwrap_or(""))
}

/// The `name` of a container, volume or sysctl.
fn name(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or("")
}

/// What the checks read: the metadata and spec of a pod, or of a workload's pod template.
pub struct Pod<'a> {
    meta: &'a Value,
    spec: &'a Value,
}

impl<'a> Pod<'a> {
    /// The pod whose `metadata` and `spec` are in `object` (a Pod, or a pod template).
    pub fn of(object: &'a Value) -> Pod<'a> {
        let part = |k: &str| object.get(k).unwrap_or(&NULL);
        Pod { meta: part("metadata"), spec: part("spec") }
    }

    /// Every container in kube's visiting order: init containers, containers, ephemeral ones.
    fn containers(&self) -> impl Iterator<Item = &'a Value> {
        let spec = self.spec;
        ["/initContainers", "/containers", "/ephemeralContainers"].into_iter().flat_map(move |k| items(spec, k))
    }

    /// The names of the containers `bad` picks, in visiting order (not sorted, not distinct).
    fn names(&self, mut bad: impl FnMut(&'a Value) -> bool) -> Vec<&'a str> {
        self.containers().filter(|c| bad(c)).map(name).collect()
    }

    /// Whether the pod declares it runs on Windows (some restricted checks pass it from v1.25).
    fn windows(&self) -> bool {
        text(self.spec, "/os/name") == Some("windows")
    }
}

/// One failed check: a short reason and the detail naming what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// A failed check.
fn fail(reason: &str, detail: String) -> Violation {
    Violation { reason: reason.into(), detail }
}

/// `singular` for exactly one, else `plural` (zero is plural, as kube has it).
fn plural<'s>(singular: &'s str, plural: &'s str, n: usize) -> &'s str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// The items each in double quotes (nothing escaped), joined `, `: `"a", "b"`.
fn join_quote<I: IntoIterator<Item = S>, S: AsRef<str>>(items: I) -> String {
    items.into_iter().map(|s| format!("\"{}\"", s.as_ref())).collect::<Vec<_>>().join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers(names: &[&str]) -> String {
    format!("{} {}", plural("container", "containers", names.len()), join_quote(names))
}

/// Who set a forbidden value, joined ` and `: `pod`, then the containers, then the
/// annotation(s) when `annotations` is not 0. Empty when nobody did.
fn setters(pod: bool, names: &[&str], annotations: usize) -> String {
    let mut who = Vec::new();
    if pod {
        who.push("pod".to_string());
    }
    if !names.is_empty() {
        who.push(containers(names));
    }
    if annotations > 0 {
        who.push(plural("annotation", "annotations", annotations).to_string());
    }
    who.join(" and ")
}

/// How a pod and its containers set `securityContext.<field>.type` (AppArmor, seccomp), where
/// only RuntimeDefault and Localhost are good.
#[derive(Default)]
struct Profiles<'a> {
    /// The pod sets a bad type.
    pod_bad: bool,
    /// The pod sets a good type (its containers may then leave theirs unset).
    pod_good: bool,
    /// Containers setting a bad type.
    bad: Vec<&'a str>,
    /// Containers setting none.
    unset: Vec<&'a str>,
    /// The bad types, sorted and distinct.
    values: BTreeSet<String>,
}

/// The profiles of `field` in the pod and its containers.
fn profiles<'a>(p: &Pod<'a>, field: &str) -> Profiles<'a> {
    let path = format!("/securityContext/{field}");
    let mut out = Profiles::default();
    let bad = |profile: &Value, values: &mut BTreeSet<String>| {
        let t = text(profile, "/type").unwrap_or("");
        let good = matches!(t, "RuntimeDefault" | "Localhost");
        if !good {
            values.insert(t.to_string());
        }
        !good
    };
    if let Some(profile) = at(p.spec, &path) {
        out.pod_bad = bad(profile, &mut out.values);
        out.pod_good = !out.pod_bad;
    }
    for c in p.containers() {
        match at(c, &path) {
            None => out.unset.push(name(c)),
            Some(profile) => {
                if bad(profile, &mut out.values) {
                    out.bad.push(name(c));
                }
            }
        }
    }
    out
}

/// A check's test: the violation, if any, of a pod at a (clamped) minor version.
type Run = for<'p, 'v> fn(&'p Pod<'v>, i64) -> Option<Violation>;

/// One check of the standards: kube's ID, its level, the first minor version it exists at, the
/// baseline check it replaces at restricted, and its test.
struct Check {
    id: &'static str,
    level: Level,
    since: i64,
    replaces: Option<&'static str>,
    run: Run,
}

/// A row of [`CHECKS`].
const fn row(id: &'static str, level: Level, since: i64, replaces: Option<&'static str>, run: Run) -> Check {
    Check { id, level, since, replaces, run }
}

/// Every check, in the order kube runs them: baseline IDs byte-sorted, then restricted ones.
static CHECKS: [Check; 17] = [
    row("appArmorProfile", Level::Baseline, 0, None, app_armor),
    row("capabilities_baseline", Level::Baseline, 0, None, capabilities_baseline),
    row("hostNamespaces", Level::Baseline, 0, None, host_namespaces),
    row("hostPathVolumes", Level::Baseline, 0, None, host_path_volumes),
    row("hostPorts", Level::Baseline, 0, None, host_ports),
    row("privileged", Level::Baseline, 0, None, privileged),
    row("procMount", Level::Baseline, 0, None, proc_mount),
    row("seLinuxOptions", Level::Baseline, 0, None, se_linux),
    row("seccompProfile_baseline", Level::Baseline, 0, None, seccomp_baseline),
    row("sysctls", Level::Baseline, 0, None, sysctls),
    row("windowsHostProcess", Level::Baseline, 0, None, windows_host_process),
    row("allowPrivilegeEscalation", Level::Restricted, 8, None, privilege_escalation),
    row("capabilities_restricted", Level::Restricted, 22, Some("capabilities_baseline"), capabilities_restricted),
    row("restrictedVolumes", Level::Restricted, 0, Some("hostPathVolumes"), restricted_volumes),
    row("runAsNonRoot", Level::Restricted, 0, None, run_as_non_root),
    row("runAsUser", Level::Restricted, 23, None, run_as_user),
    row("seccompProfile_restricted", Level::Restricted, 19, Some("seccompProfile_baseline"), seccomp_restricted),
];

/// The checks `level` runs at minor version `v`, in order: a baseline check is dropped at
/// restricted only where the restricted check replacing it exists at `v`.
fn checks(level: Level, v: i64) -> Vec<&'static Check> {
    let restricted = level == Level::Restricted;
    let replaced = |id: &str| {
        restricted && CHECKS.iter().any(|c| c.level == Level::Restricted && c.since <= v && c.replaces == Some(id))
    };
    CHECKS
        .iter()
        .filter(|c| level != Level::Privileged && c.since <= v)
        .filter(|c| c.level == Level::Baseline || restricted)
        .filter(|c| !replaced(c.id))
        .collect()
}

/// The violations of a pod at `lv`, in check order (none at privileged).
pub fn evaluate(lv: LevelVersion, pod: &Pod<'_>) -> Vec<Violation> {
    let v = lv.version.minor();
    checks(lv.level, v).iter().filter_map(|c| (c.run)(pod, v)).collect()
}

/// The failing checks' reasons joined `, ` (how existing pods are grouped).
pub fn reasons(found: &[Violation]) -> String {
    found.iter().map(|f| f.reason.as_str()).collect::<Vec<_>>().join(", ")
}

/// Each failing check as `reason (detail)`, joined `, `.
pub fn detail(found: &[Violation]) -> String {
    let one = |f: &Violation| match f.detail.as_str() {
        "" => f.reason.clone(),
        d => format!("{} ({d})", f.reason),
    };
    found.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The refusal of a pod enforce finds violating.
pub fn refusal(lv: LevelVersion, found: &[Violation]) -> String {
    format!("violates PodSecurity {}: {}", go_quote(&lv.to_string()), detail(found))
}

/// The warning or audit note of a pod (or template) violating `lv`.
pub fn would_violate(lv: LevelVersion, found: &[Violation]) -> String {
    format!("would violate PodSecurity {}: {}", go_quote(&lv.to_string()), detail(found))
}

/// appArmorProfile: profiles other than RuntimeDefault and Localhost, in the security contexts
/// or the beta annotations (which may also be empty, `runtime/default` or `localhost/...`).
fn app_armor(p: &Pod<'_>, _: i64) -> Option<Violation> {
    const KEY: &str = "container.apparmor.security.beta.kubernetes.io/";
    let found = profiles(p, "appArmorProfile");
    let allowed = |v: &str| v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
    let annotations = p.meta.get("annotations").and_then(Value::as_object);
    let mut notes: Vec<String> = annotations
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or("")))
        .filter(|&(k, v)| k.starts_with(KEY) && !allowed(v))
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    notes.sort();
    let who = setters(found.pod_bad, &found.bad, notes.len());
    // The types first (sorted), then the annotations as `key="value"` (sorted).
    let values: Vec<String> = found.values.into_iter().chain(notes).collect();
    let reason = plural("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len());
    (!who.is_empty())
        .then(|| fail(reason, format!("{who} must not set AppArmor profile type to {}", join_quote(&values))))
}

/// The capabilities a baseline container may add (the container runtimes' defaults).
const DEFAULT_CAPABILITIES: &str =
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID SYS_CHROOT";

/// capabilities_baseline: only the runtime's default capabilities may be added.
fn capabilities_baseline(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let mut caps = BTreeSet::new();
    let bad = p.names(|c| {
        let default = |x: &str| DEFAULT_CAPABILITIES.split(' ').any(|d| d == x);
        let extra: Vec<&str> = strs(c, "/securityContext/capabilities/add").filter(|&x| !default(x)).collect();
        caps.extend(extra.iter().copied());
        !extra.is_empty()
    });
    let detail =
        || format!("{} must not include {} in securityContext.capabilities.add", containers(&bad), join_quote(&caps));
    (!bad.is_empty()).then(|| fail("non-default capabilities", detail()))
}

/// hostNamespaces: the host's network, PID and IPC namespaces are not shared.
fn host_namespaces(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let on: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| truth(p.spec, &format!("/{k}")) == Some(true))
        .map(|k| format!("{k}=true"))
        .collect();
    (!on.is_empty()).then(|| fail("host namespaces", on.join(", ")))
}

/// hostPathVolumes (baseline only): no hostPath volumes.
fn host_path_volumes(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let bad: Vec<&str> = items(p.spec, "/volumes").iter().filter(|v| has(v, "hostPath")).map(name).collect();
    let detail = || format!("{} {}", plural("volume", "volumes", bad.len()), join_quote(&bad));
    (!bad.is_empty()).then(|| fail("hostPath volumes", detail()))
}

/// hostPorts: no container port is bound on the host. The ports are sorted as text, unquoted;
/// `uses` agrees with the containers, `hostPorts` with the ports.
fn host_ports(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let mut ports = BTreeSet::new();
    let bad = p.names(|c| {
        let used: Vec<i64> =
            items(c, "/ports").iter().filter_map(|x| x.get("hostPort")?.as_i64()).filter(|n| *n != 0).collect();
        ports.extend(used.iter().map(i64::to_string));
        !used.is_empty()
    });
    let (uses, noun) = (plural("uses", "use", bad.len()), plural("hostPort", "hostPorts", ports.len()));
    let list = ports.iter().map(String::as_str).collect::<Vec<_>>().join(", ");
    (!bad.is_empty()).then(|| fail("hostPort", format!("{} {uses} {noun} {list}", containers(&bad))))
}

/// privileged: no privileged containers.
fn privileged(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let bad = p.names(|c| truth(c, "/securityContext/privileged") == Some(true));
    (!bad.is_empty())
        .then(|| fail("privileged", format!("{} must not set securityContext.privileged=true", containers(&bad))))
}

/// procMount: only the default /proc mask.
fn proc_mount(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let mut kinds = BTreeSet::new();
    let bad = p.names(|c| match text(c, "/securityContext/procMount") {
        Some(m) if m != "Default" => {
            kinds.insert(m);
            true
        }
        _ => false,
    });
    let detail = || format!("{} must not set securityContext.procMount to {}", containers(&bad), join_quote(&kinds));
    (!bad.is_empty()).then(|| fail("procMount", detail()))
}

/// seLinuxOptions: only container types (container_engine_t from v1.31), and no user or role.
fn se_linux(p: &Pod<'_>, v: i64) -> Option<Violation> {
    const KEY: &str = "/securityContext/seLinuxOptions";
    let allowed = |t: &str| {
        matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (v >= 31 && t == "container_engine_t")
    };
    let (mut types, mut user, mut role) = (BTreeSet::new(), false, false);
    // Whether one seLinuxOptions is bad, noting what is.
    let mut bad = |o: &Value| {
        let t = text(o, "/type").unwrap_or("");
        let set = |k: &str| text(o, k).is_some_and(|s| !s.is_empty());
        if !allowed(t) {
            types.insert(t.to_string());
        }
        user |= set("/user");
        role |= set("/role");
        !allowed(t) || set("/user") || set("/role")
    };
    let pod = at(p.spec, KEY).is_some_and(&mut bad);
    let names = p.names(|c| at(c, KEY).is_some_and(&mut bad));
    let who = setters(pod, &names, 0);
    let mut data = Vec::new();
    if !types.is_empty() {
        data.push(format!("{} {}", plural("type", "types", types.len()), join_quote(&types)));
    }
    data.extend(user.then_some("user may not be set".to_string()));
    data.extend(role.then_some("role may not be set".to_string()));
    let detail = || format!("{who} set forbidden securityContext.seLinuxOptions: {}", data.join("; "));
    (!who.is_empty()).then(|| fail("seLinuxOptions", detail()))
}

/// seccompProfile_baseline: a profile set must be RuntimeDefault or Localhost. Before v1.19 the
/// profiles were annotations, where `runtime/default`, `docker/default` and `localhost/...` pass.
fn seccomp_baseline(p: &Pod<'_>, v: i64) -> Option<Violation> {
    if v < 19 {
        return seccomp_annotations(p);
    }
    let found = profiles(p, "seccompProfile");
    let who = setters(found.pod_bad, &found.bad, 0);
    let detail = || format!("{who} must not set securityContext.seccompProfile.type to {}", join_quote(&found.values));
    (!who.is_empty()).then(|| fail("seccompProfile", detail()))
}

/// The seccomp annotations of versions before v1.19, for the pod and each container.
fn seccomp_annotations(p: &Pod<'_>) -> Option<Violation> {
    let allowed = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let notes = p.meta.get("annotations");
    let keys = std::iter::once("seccomp.security.alpha.kubernetes.io/pod".to_string())
        .chain(p.containers().map(|c| format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c))));
    let bad: BTreeSet<String> = keys
        .filter_map(|k| {
            let value = notes?.get(&k)?.as_str()?;
            (!allowed(value)).then(|| format!("{k}={}", go_quote(value)))
        })
        .collect();
    let list = bad.iter().map(String::as_str).collect::<Vec<_>>().join(", ");
    let detail = || format!("forbidden {} {list}", plural("annotation", "annotations", bad.len()));
    (!bad.is_empty()).then(|| fail("seccompProfile", detail()))
}

/// The sysctls baseline allows, by the minor version they became safe at.
const SAFE_SYSCTLS: [(i64, &str); 4] = [
    (
        0,
        "kernel.shm_rmid_forced net.ipv4.ip_local_port_range net.ipv4.tcp_syncookies net.ipv4.ping_group_range \
         net.ipv4.ip_unprivileged_port_start",
    ),
    (27, "net.ipv4.ip_local_reserved_ports"),
    (
        29,
        "net.ipv4.tcp_keepalive_time net.ipv4.tcp_fin_timeout net.ipv4.tcp_keepalive_intvl \
         net.ipv4.tcp_keepalive_probes",
    ),
    (32, "net.ipv4.tcp_rmem net.ipv4.tcp_wmem"),
];

/// sysctls: only the safe ones. Names in spec order, unquoted, repeats kept.
fn sysctls(p: &Pod<'_>, v: i64) -> Option<Violation> {
    let safe =
        |n: &str| SAFE_SYSCTLS.iter().any(|(since, names)| *since <= v && names.split_whitespace().any(|s| s == n));
    let bad: Vec<&str> = items(p.spec, "/securityContext/sysctls").iter().map(name).filter(|&n| !safe(n)).collect();
    (!bad.is_empty()).then(|| fail("forbidden sysctls", bad.join(", ")))
}

/// windowsHostProcess: no Windows host processes, for the pod or any container.
fn windows_host_process(p: &Pod<'_>, _: i64) -> Option<Violation> {
    const KEY: &str = "/securityContext/windowsOptions/hostProcess";
    let bad = p.names(|c| truth(c, KEY) == Some(true));
    let who = setters(truth(p.spec, KEY) == Some(true), &bad, 0);
    (!who.is_empty())
        .then(|| fail("hostProcess", format!("{who} must not set securityContext.windowsOptions.hostProcess=true")))
}

/// allowPrivilegeEscalation: every container sets it false (Windows pods pass from v1.25).
fn privilege_escalation(p: &Pod<'_>, v: i64) -> Option<Violation> {
    if v >= 25 && p.windows() {
        return None;
    }
    let bad = p.names(|c| truth(c, "/securityContext/allowPrivilegeEscalation") != Some(false));
    let detail = || format!("{} must set securityContext.allowPrivilegeEscalation=false", containers(&bad));
    (!bad.is_empty()).then(|| fail("allowPrivilegeEscalation != false", detail()))
}

/// capabilities_restricted: every container drops ALL and adds at most NET_BIND_SERVICE
/// (Windows pods pass from v1.25). The missing drops are named before the additions.
fn capabilities_restricted(p: &Pod<'_>, v: i64) -> Option<Violation> {
    if v >= 25 && p.windows() {
        return None;
    }
    let (mut caps, mut adding) = (BTreeSet::new(), Vec::new());
    let keeping = p.names(|c| {
        // No capabilities at all is no drop either.
        let Some(set) = at(c, "/securityContext/capabilities") else { return true };
        let extra: Vec<&str> = strs(set, "/add").filter(|x| *x != "NET_BIND_SERVICE").collect();
        if !extra.is_empty() {
            adding.push(name(c));
            caps.extend(extra);
        }
        !strs(set, "/drop").any(|d| d == "ALL")
    });
    let mut parts = Vec::new();
    if !keeping.is_empty() {
        parts.push(format!(r#"{} must set securityContext.capabilities.drop=["ALL"]"#, containers(&keeping)));
    }
    if !adding.is_empty() {
        let caps = join_quote(&caps);
        parts.push(format!("{} must not include {caps} in securityContext.capabilities.add", containers(&adding)));
    }
    (!parts.is_empty()).then(|| fail("unrestricted capabilities", parts.join("; ")))
}

/// The volume sources restricted allows.
const SAFE_VOLUMES: &str = "configMap csi downwardAPI emptyDir ephemeral image persistentVolumeClaim projected secret";

/// The other volume sources, in the order kube looks for them (the message names the first).
const VOLUME_TYPES: &str =
    "hostPath gcePersistentDisk awsElasticBlockStore gitRepo nfs iscsi glusterfs rbd flexVolume cinder cephfs \
     flocker fc azureFile vsphereVolume quobyte azureDisk photonPersistentDisk portworxVolume scaleIO storageos";

/// Whether a volume has the source `k`.
fn has(vol: &Value, k: &str) -> bool {
    vol.get(k).is_some_and(|x| !x.is_null())
}

/// restrictedVolumes: only the volume sources a pod cannot reach the host through.
fn restricted_volumes(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let (mut bad, mut kinds) = (Vec::new(), BTreeSet::new());
    for vol in items(p.spec, "/volumes") {
        if SAFE_VOLUMES.split(' ').any(|k| has(vol, k)) {
            continue;
        }
        bad.push(name(vol));
        kinds.insert(VOLUME_TYPES.split_whitespace().find(|k| has(vol, k)).unwrap_or("unknown"));
    }
    let detail = || {
        let (n, t) = (bad.len(), kinds.len());
        let (volumes, uses) = (plural("volume", "volumes", n), plural("uses", "use", n));
        let types = plural("restricted volume type", "restricted volume types", t);
        format!("{volumes} {} {uses} {types} {}", join_quote(&bad), join_quote(&kinds))
    };
    (!bad.is_empty()).then(|| fail("restricted volume types", detail()))
}

/// runAsNonRoot: set true on the pod or every container. An explicit false is named first.
fn run_as_non_root(p: &Pod<'_>, _: i64) -> Option<Violation> {
    const KEY: &str = "/securityContext/runAsNonRoot";
    let pod = truth(p.spec, KEY);
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in p.containers() {
        match truth(c, KEY) {
            Some(false) => explicit.push(name(c)),
            None if pod != Some(true) => implicit.push(name(c)),
            _ => {}
        }
    }
    let who = setters(pod == Some(false), &explicit, 0);
    if !who.is_empty() {
        return Some(fail("runAsNonRoot != true", format!("{who} must not set securityContext.runAsNonRoot=false")));
    }
    let detail = || format!("pod or {} must set securityContext.runAsNonRoot=true", containers(&implicit));
    (!implicit.is_empty()).then(|| fail("runAsNonRoot != true", detail()))
}

/// runAsUser (from v1.23): neither the pod nor a container runs as user 0.
fn run_as_user(p: &Pod<'_>, _: i64) -> Option<Violation> {
    let root = |v: &Value| at(v, "/securityContext/runAsUser").and_then(Value::as_i64) == Some(0);
    let who = setters(root(p.spec), &p.names(root), 0);
    (!who.is_empty()).then(|| fail("runAsUser=0", format!("{who} must not set runAsUser=0")))
}

/// seccompProfile_restricted (from v1.19): RuntimeDefault or Localhost on the pod or every
/// container; explicitly bad values are named first (Windows pods pass from v1.25).
fn seccomp_restricted(p: &Pod<'_>, v: i64) -> Option<Violation> {
    if v >= 25 && p.windows() {
        return None;
    }
    let found = profiles(p, "seccompProfile");
    let who = setters(found.pod_bad, &found.bad, 0);
    if !who.is_empty() {
        let values = join_quote(&found.values);
        return Some(fail(
            "seccompProfile",
            format!("{who} must not set securityContext.seccompProfile.type to {values}"),
        ));
    }
    let missing: &[&str] = if found.pod_good { &[] } else { &found.unset };
    let detail = || {
        let who = containers(missing);
        format!(r#"pod or {who} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#)
    };
    (!missing.is_empty()).then(|| fail("seccompProfile", detail()))
}

/// Whether a pod update changes what it runs (kube's isSignificantPodUpdate): the number of
/// containers or init containers, an image, or an ephemeral container added or given a new
/// image. Anything else (labels, annotations, resources, status) is let through unjudged.
pub fn significant(new: &Value, old: &Value) -> bool {
    let image = |c: &Value| text(c, "/image").unwrap_or("").to_string();
    for kind in ["/spec/containers", "/spec/initContainers"] {
        let (now, before) = (items(new, kind), items(old, kind));
        if now.len() != before.len() || now.iter().zip(before).any(|(a, b)| image(a) != image(b)) {
            return true;
        }
    }
    let before = items(old, "/spec/ephemeralContainers");
    items(new, "/spec/ephemeralContainers").iter().any(|c| match before.iter().find(|o| name(o) == name(c)) {
        None => true,
        Some(o) => image(o) != image(c),
    })
}

/// kube's warnings for making a namespace's enforce level `lv`: which of its `pods` it would
/// refuse, one line per distinct set of reasons naming the lexically first pod. One pod of each
/// controller is tried before the others (they are likely copies), and at most [`MAX_PODS`].
pub fn existing_pods(namespace: &str, lv: LevelVersion, pods: &[&Value]) -> Vec<String> {
    /// The UID of the pod's controller, if it has one.
    fn controller(pod: &Value) -> Option<&str> {
        let owners = items(pod, "/metadata/ownerReferences");
        owners.iter().find(|o| truth(o, "/controller") == Some(true)).map(|o| text(o, "/uid").unwrap_or(""))
    }
    let (mut first, mut rest, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    for &pod in pods {
        match controller(pod) {
            Some(uid) if !seen.insert(uid) => rest.push(pod),
            _ => first.push(pod),
        }
    }
    let total = first.len() + rest.len();
    // (reasons, lexically first pod, pods) in the order first met.
    let mut groups: Vec<(String, &str, usize)> = Vec::new();
    for pod in first.into_iter().chain(rest).take(MAX_PODS) {
        let found = evaluate(lv, &Pod::of(pod));
        if found.is_empty() {
            continue;
        }
        let (key, who) = (reasons(&found), text(pod, "/metadata/name").unwrap_or(""));
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => {
                g.1 = g.1.min(who);
                g.2 += 1;
            }
            None => groups.push((key, who, 1)),
        }
    }
    let mut out = Vec::new();
    let checked = total.min(MAX_PODS);
    if checked < total {
        out.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !groups.is_empty() {
        let (ns, level) = (go_quote(namespace), go_quote(&lv.to_string()));
        out.push(format!("existing pods in namespace {ns} violate the new PodSecurity enforce level {level}"));
    }
    let mut lines: Vec<String> = groups
        .into_iter()
        .map(|(key, pod, n)| match n {
            1 => format!("{pod}: {key}"),
            2 => format!("{pod} (and 1 other pod): {key}"),
            n => format!("{pod} (and {} other pods): {key}", n - 1),
        })
        .collect();
    lines.sort();
    out.extend(lines);
    out
}

/// What a namespace write (`old` for an update) means: label errors to refuse it with, or the
/// enforce level newly made stricter (to try the existing pods against), or nothing. An update
/// keeping the same invalid labels passes, so old namespaces stay writable.
pub fn namespace_change(new: &Value, old: Option<&Value>) -> Result<Option<LevelVersion>, Vec<FieldError>> {
    let (now, errors) = policy(new.pointer("/metadata/labels"));
    let Some(old) = old else {
        return if errors.is_empty() { Ok(None) } else { Err(errors) };
    };
    let (before, old_errors) = policy(old.pointer("/metadata/labels"));
    if !errors.is_empty() && (old_errors.is_empty() || errors != old_errors) {
        return Err(errors);
    }
    let (n, o) = (now.enforce, before.enforce);
    let looser = n.version == o.version && n.level <= o.level;
    if n == o || n.level == Level::Privileged || looser {
        return Ok(None);
    }
    Ok(Some(n))
}

/// Where a workload keeps its pod template (kube's pod spec extractor); none for resources
/// without one.
fn template_path(group: &str, plural: &str) -> Option<&'static str> {
    match (group, plural) {
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some("/spec/template"),
        ("", "podtemplates") => Some("/template"),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

/// PodSecurity for one write: creates and updates of pods (subresources that cannot change what
/// runs are skipped), of namespaces (label validation; warnings when enforce is made stricter),
/// and of workloads with pod templates (warned and audited, never refused). Anything else passes.
pub async fn admit(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    if a.operation != "CREATE" && a.operation != "UPDATE" {
        return Ok(());
    }
    match (a.r.group, a.r.plural) {
        ("", "namespaces") => admit_namespace(api, a),
        ("", "pods") => admit_pod(api, a).await,
        (group, plural) => match template_path(group, plural) {
            Some(path) => admit_workload(api, a, path).await,
            None => Ok(()),
        },
    }
}

/// The policy of the namespace `ns`: as the watch cache holds it, or (a namespace made a moment
/// ago) as the store does; none if it does not exist.
async fn namespace_policy(api: &Api, ns: &str) -> Option<(Policy, Vec<FieldError>)> {
    let object = super::namespace(api, ns).await?;
    Some(policy(object.pointer("/metadata/labels")))
}

/// A namespace write: refused for unparsable labels; warned about existing pods when its
/// enforce level is made stricter.
fn admit_namespace(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    let Some(object) = a.object else { return Ok(()) };
    if !a.subresource.is_empty() {
        return Ok(());
    }
    // The name is the request's; a create may carry it only in the object.
    let ns = if a.name.is_empty() { text(object, "/metadata/name").unwrap_or("") } else { a.name };
    let old = if a.operation == "UPDATE" { a.old } else { None };
    match namespace_change(object, old) {
        Err(errors) => Err(status::invalid(GroupKind { group: "", kind: "Namespace" }, ns, &errors)),
        Ok(None) => Ok(()),
        Ok(Some(lv)) => {
            let pods = crate::resources::find("", "v1", "pods").expect("pods are served");
            let held: Vec<_> = api.cached_list(pods, Some(ns)).iter().map(|o| o.json(pods)).collect();
            let refs: Vec<&Value> = held.iter().map(|v| &**v).collect();
            for w in existing_pods(ns, lv, &refs) {
                warn(w);
            }
            Ok(())
        }
    }
}

/// A pod write: enforced, audited and warned, unless nothing it runs changed.
async fn admit_pod(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    if IGNORED.contains(&a.subresource) {
        return Ok(());
    }
    let Some((policy, errors)) = namespace_policy(api, a.namespace).await else {
        let (ns, why) = (go_quote(a.namespace), format!("failed to lookup namespace {}", go_quote(a.namespace)));
        annotate(ERROR, format!("Internal error occurred: {why}: namespaces {ns} not found"));
        return Err(crate::rest::internal(why));
    };
    if errors.is_empty() && [policy.enforce, policy.audit, policy.warn].iter().all(|lv| lv.level == Level::Privileged) {
        // kube answers this before reading the pod, always naming `latest`.
        let lv = LevelVersion { level: Level::Privileged, version: Version::Latest };
        annotate(ENFORCE_POLICY, lv.to_string());
        return Ok(());
    }
    let Some(object) = a.object else { return Ok(()) };
    if a.operation == "UPDATE" && a.old.is_some_and(|old| !significant(object, old)) {
        return Ok(());
    }
    judge(a, &policy, &errors, &Pod::of(object), true)
}

/// A workload write: its pod template is audited and warned about, never refused; a failure to
/// read the policy lets it through with an audit note.
async fn admit_workload(api: &Api, a: &Attributes<'_>, path: &str) -> Result<(), Status> {
    if !a.subresource.is_empty() {
        return Ok(());
    }
    let Some((policy, errors)) = namespace_policy(api, a.namespace).await else {
        let ns = go_quote(a.namespace);
        annotate(ERROR, format!("failed to lookup namespace {ns}: namespaces {ns} not found"));
        return Ok(());
    };
    if errors.is_empty() && policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged {
        return Ok(());
    }
    let Some(object) = a.object else { return Ok(()) };
    let template = match at(object, path) {
        Some(t) => t,
        // Only a ReplicationController's template is optional; there is no pod to judge.
        None if a.r.plural == "replicationcontrollers" => return Ok(()),
        None => &NULL,
    };
    judge(a, &policy, &errors, &Pod::of(template), false)
}

/// Judges a pod by the namespace's policy: enforce (pods only) refuses, audit notes, warn warns
/// (only when the write is let through).
fn judge(
    a: &Attributes<'_>,
    policy: &Policy,
    errors: &[FieldError],
    pod: &Pod<'_>,
    enforce: bool,
) -> Result<(), Status> {
    if !errors.is_empty() {
        annotate(ERROR, format!("Failed to parse policy: {}", aggregate(errors)));
    }
    let mut refused = None;
    if enforce {
        annotate(ENFORCE_POLICY, policy.enforce.to_string());
        let found = evaluate(policy.enforce, pod);
        if !found.is_empty() {
            refused = Some(forbidden(a, &refusal(policy.enforce, &found)));
        }
    }
    let found = evaluate(policy.audit, pod);
    if !found.is_empty() {
        annotate(AUDIT_VIOLATIONS, would_violate(policy.audit, &found));
    }
    if let Some(s) = refused {
        return Err(s);
    }
    let found = evaluate(policy.warn, pod);
    if !found.is_empty() {
        warn(would_violate(policy.warn, &found));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Namespace labels from `(mode key, value)` pairs.
    fn labels(pairs: &[(&str, &str)]) -> Value {
        Value::Object(pairs.iter().map(|(k, v)| (format!("{PREFIX}{k}"), json!(v))).collect())
    }

    /// The policy of `pairs` as `enforce audit warn` texts, and the errors' text.
    fn parsed(pairs: &[(&str, &str)]) -> (String, String) {
        let (p, errors) = policy(Some(&labels(pairs)));
        (
            format!("{} {} {}", p.enforce, p.audit, p.warn),
            if errors.is_empty() { String::new() } else { aggregate(&errors) },
        )
    }

    const LATEST: LevelVersion = LevelVersion { level: Level::Restricted, version: Version::Latest };
    const BASELINE: LevelVersion = LevelVersion { level: Level::Baseline, version: Version::Latest };

    /// The detail of one check's violation of `pod` at the newest version ("" when it passes).
    fn one(run: Run, pod: Value) -> String {
        run(&Pod::of(&pod), NEWEST).map(|f| f.detail).unwrap_or_default()
    }

    #[test]
    fn labels_give_the_policy_and_warn_follows_enforce() {
        let all = |s: &str| format!("{s} {s} {s}");
        assert_eq!(parsed(&[]), (all("privileged:latest"), String::new()));
        assert_eq!(policy(None).0, policy(Some(&labels(&[]))).0);
        assert_eq!(parsed(&[("enforce", "restricted")]).0, "restricted:latest privileged:latest restricted:latest");
        let pinned = [("enforce", "baseline"), ("enforce-version", "v1.25")];
        assert_eq!(parsed(&pinned).0, "baseline:v1.25 privileged:latest baseline:v1.25");
        let own_version = [("enforce", "restricted"), ("enforce-version", "v1.25"), ("warn-version", "v1.30")];
        assert_eq!(parsed(&own_version).0, "restricted:v1.25 privileged:latest restricted:v1.30");
        let quiet = [("enforce", "restricted"), ("warn", "privileged")];
        assert_eq!(parsed(&quiet).0, "restricted:latest privileged:latest privileged:latest");
        assert_eq!(
            parsed(&[("enforce", "baseline"), ("warn", "restricted")]).0,
            "baseline:latest privileged:latest restricted:latest"
        );
        assert_eq!(
            parsed(&[("audit", "baseline"), ("audit-version", "v1.99")]).0,
            "privileged:latest baseline:v1.99 privileged:latest"
        );
    }

    #[test]
    fn invalid_labels_fail_closed_for_enforce_and_open_otherwise() {
        let (p, errors) = parsed(&[
            ("enforce", "Restricted"),
            ("enforce-version", "v1.05"),
            ("audit", "foo"),
            ("warn-version", "1.25"),
        ]);
        // An invalid enforce level does not make warn follow it.
        assert_eq!(p, "restricted:latest privileged:latest privileged:latest");
        assert_eq!(
            errors,
            "[metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"Restricted\": must be one of privileged, baseline, restricted, \
             metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: \"v1.05\": must be \"latest\" or \"v1.x\", \
             metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"foo\": must be one of privileged, baseline, restricted, \
             metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\"]"
        );
        assert_eq!(
            parsed(&[("warn", "high")]).1,
            "metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: \"high\": must be one of privileged, baseline, restricted"
        );
        for ok in ["latest", "v1.0", "v1.25", "v1.99"] {
            assert!(Version::parse(ok).is_some(), "{ok}");
        }
        for bad in ["v1.05", "1.25", "v2.0", "v1.", "v1.x", "Latest", "v1.25 ", "v1.99999999999999999999"] {
            assert!(Version::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn checks_run_in_kubes_order_per_version() {
        let ids = |level, v| checks(level, v).iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            ids(Level::Baseline, NEWEST),
            [
                "appArmorProfile",
                "capabilities_baseline",
                "hostNamespaces",
                "hostPathVolumes",
                "hostPorts",
                "privileged",
                "procMount",
                "seLinuxOptions",
                "seccompProfile_baseline",
                "sysctls",
                "windowsHostProcess"
            ]
        );
        assert_eq!(
            ids(Level::Restricted, NEWEST),
            [
                "appArmorProfile",
                "hostNamespaces",
                "hostPorts",
                "privileged",
                "procMount",
                "seLinuxOptions",
                "sysctls",
                "windowsHostProcess",
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "restrictedVolumes",
                "runAsNonRoot",
                "runAsUser",
                "seccompProfile_restricted"
            ]
        );
        assert!(ids(Level::Privileged, NEWEST).is_empty());
        let old = ids(Level::Restricted, 21);
        assert!(old.contains(&"capabilities_baseline") && !old.contains(&"capabilities_restricted"));
        assert!(!old.contains(&"runAsUser") && ids(Level::Restricted, 23).contains(&"runAsUser"));
        let older = ids(Level::Restricted, 18);
        assert!(older.contains(&"seccompProfile_baseline") && !older.contains(&"seccompProfile_restricted"));
        assert!(!ids(Level::Restricted, 7).contains(&"allowPrivilegeEscalation"));
        assert!(!ids(Level::Restricted, 0).contains(&"hostPathVolumes"));
    }

    #[test]
    fn a_bare_pod_violates_restricted_with_kubes_text() {
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(
            refusal(LATEST, &evaluate(LATEST, &Pod::of(&pod))),
            "violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert!(evaluate(BASELINE, &Pod::of(&pod)).is_empty());
        let future = LevelVersion { level: Level::Restricted, version: Version::V1(99) };
        assert_eq!(evaluate(future, &Pod::of(&pod)), evaluate(LATEST, &Pod::of(&pod)));
        assert_eq!(would_violate(future, &[]), "would violate PodSecurity \"restricted:v1.99\": ");
    }

    #[test]
    fn a_compliant_pod_passes_restricted() {
        let pod = json!({"spec": {
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "i", "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
            "volumes": [{"name": "v", "configMap": {"name": "x"}}, {"name": "t", "projected": {"sources": []}}]}});
        assert!(evaluate(LATEST, &Pod::of(&pod)).is_empty());
        assert!(evaluate(BASELINE, &Pod::of(&pod)).is_empty());
    }

    #[test]
    fn baseline_refuses_host_access_and_privilege() {
        let pod = json!({"spec": {"hostNetwork": true, "hostPID": true, "hostIPC": false,
            "containers": [{"name": "a", "securityContext": {"privileged": true}},
                           {"name": "b", "securityContext": {"privileged": true}}],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}});
        assert_eq!(
            detail(&evaluate(BASELINE, &Pod::of(&pod))),
            "host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume \"h\"), \
             privileged (containers \"a\", \"b\" must not set securityContext.privileged=true)"
        );
        let strict = detail(&evaluate(LATEST, &Pod::of(&pod)));
        assert!(strict.contains("restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")"));
        assert!(!strict.contains("hostPath volumes"));
    }

    #[test]
    fn container_checks_word_one_and_many() {
        let ports = |list: Value| json!({"spec": {"containers": list}});
        assert_eq!(
            one(host_ports, ports(json!([{"name": "b", "ports": [{"containerPort": 80, "hostPort": 20}]}]))),
            "container \"b\" uses hostPort 20"
        );
        let many = json!([{"name": "b", "ports": [{"hostPort": 9}, {"hostPort": 10}]}, {"name": "c", "ports": [{"hostPort": 9}]}]);
        assert_eq!(one(host_ports, ports(many)), "containers \"b\", \"c\" use hostPorts 10, 9");
        let caps = json!({"spec": {"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["SYS_TIME", "CHOWN", "NET_ADMIN"]}}}]}});
        assert_eq!(
            one(capabilities_baseline, caps),
            "container \"a\" must not include \"NET_ADMIN\", \"SYS_TIME\" in securityContext.capabilities.add"
        );
        let caps = json!({"spec": {"containers": [{"name": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, {"name": "y"}]}});
        assert_eq!(
            one(capabilities_restricted, caps),
            "containers \"x\", \"y\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"x\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add"
        );
        let proc =
            json!({"spec": {"ephemeralContainers": [{"name": "e", "securityContext": {"procMount": "Unmasked"}}]}});
        assert_eq!(one(proc_mount, proc), "container \"e\" must not set securityContext.procMount to \"Unmasked\"");
        let init = json!({"spec": {"containers": [{"name": "b"}], "initContainers": [{"name": "a"}]}});
        assert_eq!(
            one(privilege_escalation, init),
            "containers \"a\", \"b\" must set securityContext.allowPrivilegeEscalation=false"
        );
    }

    #[test]
    fn pod_and_container_setters_are_joined_with_and() {
        let root = json!({"spec": {"securityContext": {"runAsNonRoot": false, "runAsUser": 0},
            "containers": [{"name": "a", "securityContext": {"runAsNonRoot": false, "runAsUser": 0}},
                           {"name": "b", "securityContext": {"runAsUser": 0}}]}});
        assert_eq!(
            one(run_as_non_root, root.clone()),
            "pod and container \"a\" must not set securityContext.runAsNonRoot=false"
        );
        assert_eq!(one(run_as_user, root), "pod and containers \"a\", \"b\" must not set runAsUser=0");
        let pod_true = json!({"spec": {"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"}]}});
        assert_eq!(one(run_as_non_root, pod_true), "");
        let se = json!({"spec": {"securityContext": {"seLinuxOptions": {"type": "spc_t"}},
            "containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"user": "u", "role": "r"}}}]}});
        assert_eq!(one(se_linux, se), "pod and container \"a\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set; role may not be set");
        let engine = json!({"spec": {"containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}}]}});
        assert_eq!(one(se_linux, engine.clone()), "");
        let at30 = se_linux(&Pod::of(&engine), 30).map(|f| f.detail);
        assert_eq!(
            at30.as_deref(),
            Some("container \"a\" set forbidden securityContext.seLinuxOptions: type \"container_engine_t\"")
        );
        let host = json!({"spec": {"securityContext": {"windowsOptions": {"hostProcess": true}},
            "containers": [{"name": "a", "securityContext": {"windowsOptions": {"hostProcess": true}}},
                           {"name": "b", "securityContext": {"windowsOptions": {"hostProcess": true}}}]}});
        assert_eq!(
            one(windows_host_process, host),
            "pod and containers \"a\", \"b\" must not set securityContext.windowsOptions.hostProcess=true"
        );
    }

    #[test]
    fn profiles_name_bad_values_before_missing_ones() {
        let armor = json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/f": "localhost/x"}},
            "spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [{"name": "e"}]}});
        let found = app_armor(&Pod::of(&armor), NEWEST).unwrap();
        assert_eq!(found.reason, "forbidden AppArmor profiles");
        assert_eq!(
            found.detail,
            "pod and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/e=\"unconfined\"\""
        );
        let armor = json!({"spec": {"containers": [{"name": "a", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}});
        assert_eq!(app_armor(&Pod::of(&armor), NEWEST).unwrap().reason, "forbidden AppArmor profile");
        let seccomp = json!({"spec": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}, {"name": "b"}]}});
        assert_eq!(
            one(seccomp_restricted, seccomp.clone()),
            "container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\""
        );
        assert_eq!(
            one(seccomp_baseline, seccomp),
            "container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\""
        );
        let unset = json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "securityContext": {"seccompProfile": {"type": "Localhost"}}}, {"name": "c"}]}});
        assert_eq!(one(seccomp_restricted, unset), "pod or containers \"a\", \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"");
        let annotated = json!({"metadata": {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}, "spec": {}});
        let old = LevelVersion { level: Level::Baseline, version: Version::V1(18) };
        assert_eq!(
            detail(&evaluate(old, &Pod::of(&annotated))),
            "seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\")"
        );
        assert!(evaluate(BASELINE, &Pod::of(&annotated)).is_empty());
    }

    #[test]
    fn volumes_sysctls_and_windows_follow_their_versions() {
        let vols = json!({"spec": {"volumes": [{"name": "a", "hostPath": {"path": "/"}}, {"name": "b", "nfs": {}},
            {"name": "c", "emptyDir": {}}, {"name": "d"}]}});
        assert_eq!(
            one(restricted_volumes, vols),
            "volumes \"a\", \"b\", \"d\" use restricted volume types \"hostPath\", \"nfs\", \"unknown\""
        );
        let ctl = json!({"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax"}, {"name": "net.ipv4.tcp_rmem"}, {"name": "kernel.msgmax"}]}}});
        assert_eq!(one(sysctls, ctl.clone()), "kernel.msgmax, kernel.msgmax");
        assert_eq!(sysctls(&Pod::of(&ctl), 31).unwrap().detail, "kernel.msgmax, net.ipv4.tcp_rmem, kernel.msgmax");
        let win = json!({"spec": {"os": {"name": "windows"}, "containers": [{"name": "c"}]}});
        assert_eq!(reasons(&evaluate(LATEST, &Pod::of(&win))), "runAsNonRoot != true");
        let v24 = LevelVersion { level: Level::Restricted, version: Version::V1(24) };
        assert_eq!(
            reasons(&evaluate(v24, &Pod::of(&win))),
            "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
        );
    }

    #[test]
    fn only_what_runs_makes_an_update_significant() {
        let old = json!({"metadata": {"labels": {"a": "b"}}, "spec": {
            "containers": [{"name": "c", "image": "i"}], "ephemeralContainers": [{"name": "e", "image": "x"}]}});
        let changed = |f: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            f(&mut new);
            significant(&new, &old)
        };
        assert!(!changed(&|_: &mut Value| {}));
        assert!(!changed(&|p: &mut Value| p["metadata"]["labels"] = json!({"a": "c"})));
        assert!(!changed(&|p: &mut Value| p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}})));
        assert!(changed(&|p: &mut Value| p["spec"]["containers"][0]["image"] = json!("j")));
        assert!(changed(&|p: &mut Value| p["spec"]["containers"] =
            json!([{"name": "c", "image": "i"}, {"name": "d", "image": "i"}])));
        assert!(changed(&|p: &mut Value| p["spec"]["initContainers"] = json!([{"name": "n", "image": "i"}])));
        assert!(changed(&|p: &mut Value| p["spec"]["ephemeralContainers"][0]["image"] = json!("y")));
        assert!(changed(&|p: &mut Value| p["spec"]["ephemeralContainers"] =
            json!([{"name": "e", "image": "x"}, {"name": "f", "image": "x"}])));
    }

    #[test]
    fn existing_pods_are_grouped_by_reasons() {
        let pod = |name: &str, uid: Option<&str>, spec: Value| {
            let owners = uid.map(|u| json!([{"uid": u, "controller": true}])).unwrap_or_else(|| json!([]));
            json!({"metadata": {"name": name, "ownerReferences": owners}, "spec": spec})
        };
        let host = json!({"hostNetwork": true});
        let pods = [
            pod("web-2", Some("u1"), host.clone()),
            pod("web-1", Some("u1"), host.clone()),
            pod("solo", None, json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]})),
            pod("fine", None, json!({"containers": [{"name": "c"}]})),
        ];
        let refs: Vec<&Value> = pods.iter().collect();
        assert_eq!(
            existing_pods("ns", BASELINE, &refs),
            [
                "existing pods in namespace \"ns\" violate the new PodSecurity enforce level \"baseline:latest\"",
                "solo: privileged",
                "web-1 (and 1 other pod): host namespaces",
            ]
        );
        let many: Vec<Value> = (0..=MAX_PODS).map(|i| pod(&format!("p{i:04}"), None, host.clone())).collect();
        let refs: Vec<&Value> = many.iter().collect();
        assert_eq!(
            existing_pods("ns", BASELINE, &refs),
            [
                "new PodSecurity enforce level only checked against the first 3000 of 3001 existing pods",
                "existing pods in namespace \"ns\" violate the new PodSecurity enforce level \"baseline:latest\"",
                "p0000 (and 2999 other pods): host namespaces",
            ]
        );
        assert!(existing_pods("ns", BASELINE, &refs[..0]).is_empty());
    }

    #[test]
    fn namespace_writes_refuse_bad_labels_and_find_stricter_enforcement() {
        let ns = |pairs: &[(&str, &str)]| json!({"metadata": {"name": "x", "labels": labels(pairs)}});
        let bad = ns(&[("enforce", "foo")]);
        let errors = namespace_change(&bad, None).unwrap_err();
        let status = status::invalid(GroupKind { group: "", kind: "Namespace" }, "x", &errors);
        assert_eq!(
            status.message,
            "Namespace \"x\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"foo\": must be one of privileged, baseline, restricted"
        );
        // Keeping invalid labels unchanged passes; changing them, or breaking valid ones, does not.
        assert_eq!(namespace_change(&bad, Some(&bad)), Ok(None));
        assert!(namespace_change(&ns(&[("enforce", "bar")]), Some(&bad)).is_err());
        assert!(namespace_change(&bad, Some(&ns(&[]))).is_err());
        let (base, strict) = (ns(&[("enforce", "baseline")]), ns(&[("enforce", "restricted")]));
        assert_eq!(namespace_change(&strict, Some(&base)), Ok(Some(LATEST)));
        assert_eq!(namespace_change(&base, Some(&strict)), Ok(None));
        assert_eq!(namespace_change(&strict, Some(&strict)), Ok(None));
        assert_eq!(namespace_change(&ns(&[("enforce", "privileged")]), Some(&strict)), Ok(None));
        let pinned = ns(&[("enforce", "restricted"), ("enforce-version", "v1.25")]);
        let v25 = LevelVersion { level: Level::Restricted, version: Version::V1(25) };
        assert_eq!(namespace_change(&pinned, Some(&strict)), Ok(Some(v25)));
        assert_eq!(namespace_change(&strict, None), Ok(None));
    }
}
