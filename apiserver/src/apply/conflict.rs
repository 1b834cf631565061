//! Apply conflicts and kube's 409 for them, worded as
//! `k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go` words them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::fieldpath::{Path, Set};
use crate::status::{self, Cause, Details, Status};

/// A field the applier would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owner's manager identifier (see [`super::managed::identifier`]).
    pub manager: String,
    pub path: Path,
}

/// The conflicts of one apply, by owner (in identifier order), each owner's fields in set
/// order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// One conflict per member of each owner's set.
    pub fn from_sets<'s>(sets: impl IntoIterator<Item = (&'s str, &'s Set)>) -> Self {
        let mut out = Vec::new();
        for (manager, set) in sets {
            out.extend(set.paths().into_iter().map(|path| Conflict { manager: manager.to_string(), path }));
        }
        Conflicts(out)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The conflicting fields, whoever owns them.
    pub fn to_set(&self) -> Set {
        let mut set = Set::new();
        for c in &self.0 {
            set.insert(&c.path.0);
        }
        set
    }

    /// The conflicts whose field is not in `allowed`.
    pub fn without(&self, allowed: &Set) -> Conflicts {
        Conflicts(self.0.iter().filter(|c| !allowed.has(&c.path.0)).cloned().collect())
    }

    /// kube's message (`getConflictMessage`): one conflict on one line; several grouped by
    /// owner, owners sorted by identifier, one `- <path>` line each.
    pub fn message(&self) -> String {
        if let [one] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                print_manager(&one.manager),
                one.path
            );
        }
        let mut by_manager: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
        for c in &self.0 {
            by_manager.entry(c.manager.as_str()).or_default().push(&c.path);
        }
        let mut lines = Vec::new();
        for (manager, paths) in by_manager {
            lines.push(format!("conflicts with {}:", print_manager(manager)));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {} conflicts: {}", self.0.len(), lines.join("\n"))
    }

    /// kube's causes (`NewConflictError`): one per conflict, reason `FieldManagerConflict`.
    pub fn causes(&self) -> Vec<Cause> {
        self.0
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {}", print_manager(&c.manager)),
                field: c.path.to_string(),
            })
            .collect()
    }

    /// kube's 409 (`errors.NewApplyConflict`): reason `Conflict`, details holding only the
    /// causes.
    pub fn status(&self) -> Status {
        let details = Details { causes: self.causes(), ..Default::default() };
        Status::failure(409, "Conflict", self.message(), Some(details))
    }
}

/// A manager as conflict messages name it (`printManager`): `"m"`, then
/// ` with subresource "s"` if any, then ` using <apiVersion>` for an updater.
pub fn print_manager(identifier: &str) -> String {
    let Ok(Value::Object(entry)) = serde_json::from_str::<Value>(identifier) else {
        return status::go_quote(identifier);
    };
    let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or("");
    let mut out = status::go_quote(text("manager"));
    if !text("subresource").is_empty() {
        out.push_str(&format!(" with subresource {}", status::go_quote(text("subresource"))));
    }
    if text("operation") == "Update" {
        out.push_str(&format!(" using {}", text("apiVersion")));
        if !text("time").is_empty() {
            out.push_str(&format!(" at {}", text("time")));
        }
    }
    out
}
