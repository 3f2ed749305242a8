//! Push sources checked: valid unique names, each listing at least one known stored view, once.
//! A view with no source (one read from a Feast registry) cannot be written by Ferry yet.

use std::collections::HashSet;

use super::issues::{Issues, Seen};
use super::raw::RawRepo;
use super::views::Views;
use super::PushSource;

pub(super) fn push_sources(
    raw: &RawRepo,
    views: &Views<'_>,
    issues: &mut Issues,
) -> Vec<PushSource> {
    let mut seen = Seen::new("push source name", "push_sources");
    let mut out = Vec::with_capacity(raw.push_sources.len());
    for (i, p) in raw.push_sources.iter().enumerate() {
        let path = format!("push_sources[{i}] '{}'", p.name);
        issues.name(&path, "name", &p.name);
        seen.add(issues, &p.name, i, &path);
        if p.views.is_empty() {
            issues.add(&path, "lists no view (views: [VIEW, ...])");
        }
        let mut listed = HashSet::new();
        let mut resolved = Vec::with_capacity(p.views.len());
        for name in &p.views {
            if !listed.insert(name.as_str()) {
                issues.add(&path, format!("lists the view '{name}' twice"));
                continue;
            }
            match views.seen.first.get(name.as_str()) {
                None => issues.add(&path, format!("unknown feature view '{name}'")),
                Some(&v) if views.list[v].source.is_none() => issues.add(
                    &path,
                    format!(
                        "the view '{name}' comes from a Feast registry: Ferry does not write \
                         Feast-backed views yet"
                    ),
                ),
                Some(&v) => resolved.push(v),
            }
        }
        out.push(PushSource {
            name: p.name.clone(),
            views: resolved,
        });
    }
    out
}
