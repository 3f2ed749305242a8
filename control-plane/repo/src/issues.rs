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

/// The names of one list of the repo seen so far, each at its first index; a later duplicate
/// is reported.
pub(super) struct Seen<'a> {
    /// Name → index of its first definition.
    pub(super) first: HashMap<&'a str, usize>,
    /// What the name names, and the list it is in, for the message.
    what: &'static str,
    list: &'static str,
}

impl<'a> Seen<'a> {
    pub(super) fn new(what: &'static str, list: &'static str) -> Self {
        Seen {
            first: HashMap::new(),
            what,
            list,
        }
    }

    /// Records `name` at `index`, or reports it at `path` as a duplicate of its first.
    pub(super) fn add(&mut self, issues: &mut Issues, name: &'a str, index: usize, path: &str) {
        if let Some(first) = self.first.get(name) {
            let (what, list) = (self.what, self.list);
            issues.add(
                path,
                format!("duplicate {what} '{name}' (first at {list}[{first}])"),
            );
        } else {
            self.first.insert(name, index);
        }
    }
}
