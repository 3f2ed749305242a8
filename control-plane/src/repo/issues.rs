//! The problems found in a repo, collected with their paths so that every one is reported at
//! once; and the checks every part of the repo shares (names, duplicates).

use std::collections::HashMap;

use ferry_protos::is_valid_name;

use super::Issue;

const NAME_RULE: &str = "use 1-128 of A-Z a-z 0-9 _ -, not starting with '-'";

#[derive(Default)]
pub(super) struct Issues(Vec<Issue>);

impl Issues {
    /// Every problem found, if any.
    pub(super) fn finish(self) -> Result<(), Vec<Issue>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }

    pub(super) fn add(&mut self, path: &str, reason: impl Into<String>) {
        self.0.push(Issue {
            path: path.to_owned(),
            reason: reason.into(),
        });
    }

    pub(super) fn name(&mut self, path: &str, what: &str, name: &str) {
        if !is_valid_name(name) {
            self.add(path, format!("invalid {what} '{name}' ({NAME_RULE})"));
        }
    }
}

/// First index of each name; later duplicates are reported.
pub(super) fn first_seen<'a>(
    issues: &mut Issues,
    seen: &mut HashMap<&'a str, usize>,
    name: &'a str,
    index: usize,
    path: &str,
    what: &str,
    list: &str,
) {
    if let Some(first) = seen.get(name) {
        issues.add(
            path,
            format!("duplicate {what} '{name}' (first at {list}[{first}])"),
        );
    } else {
        seen.insert(name, index);
    }
}
