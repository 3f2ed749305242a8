//! Push sources checked: valid unique names, each listing at least one known stored view, once.
//! A Feast-backed repo declares none in `ferry.yaml`: its push sources are the Feast registry's
//! `PushSource`s ([`crate::feast`]).

use std::collections::HashSet;

use super::ferry_yaml::RawRepo;
use super::issues::{Issues, Seen};
use super::views::Views;
use super::PushSource;

pub(super) fn push_sources(
    raw: &RawRepo,
    views: &Views<'_>,
    issues: &mut Issues,
) -> Vec<PushSource> {
    if raw.feast.is_some() && !raw.push_sources.is_empty() {
        issues.add(
            "push_sources",
            "a Feast-backed repo takes its push sources from the Feast registry (PushSource); \
             remove push_sources from ferry.yaml",
        );
        return Vec::new();
    }
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

#[cfg(test)]
mod tests {
    use crate::test_support::{issues, load_repo, ORDER_FILES, ORDER_YAML};

    fn refusals(push_sources: &str) -> Vec<String> {
        let yaml = format!("{ORDER_YAML}push_sources:\n{push_sources}");
        let (_dir, reg) = load_repo(&yaml, &ORDER_FILES);
        issues(reg)
    }

    fn has(found: &[String], path: &str, reason: &str) {
        assert!(
            found.iter().any(|i| i.contains(path) && i.contains(reason)),
            "no issue at {path} saying {reason:?} in {found:#?}"
        );
    }

    #[test]
    fn a_good_push_source_loads() {
        let yaml = format!("{ORDER_YAML}push_sources:\n  - {{name: both, views: [zeta, alpha]}}\n");
        let (_dir, reg) = load_repo(&yaml, &ORDER_FILES);
        let reg = reg.unwrap();
        assert_eq!(reg.push_sources.len(), 1);
        assert_eq!(reg.push_sources[0].views.len(), 2);
    }

    #[test]
    fn every_refusal_is_reported_with_its_push_source() {
        let found = refusals(
            "  - {name: empty, views: []}\n  - {name: twice, views: [alpha, alpha]}\n  \
             - {name: ghost, views: [nowhere]}\n  - {name: 'bad name', views: [alpha]}\n  \
             - {name: dup, views: [alpha]}\n  - {name: dup, views: [zeta]}\n",
        );
        has(&found, "push_sources[0] 'empty'", "lists no view");
        has(
            &found,
            "push_sources[1] 'twice'",
            "lists the view 'alpha' twice",
        );
        has(
            &found,
            "push_sources[2] 'ghost'",
            "unknown feature view 'nowhere'",
        );
        has(&found, "push_sources[3] 'bad name'", "name");
        has(&found, "push_sources[5] 'dup'", "dup");
        assert_eq!(found.len(), 5, "{found:#?}");
    }
}
