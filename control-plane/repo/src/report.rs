//! The registry as `ferry apply` prints it: each service with its fingerprint, keys and views,
//! each route with its match, services, format and policies.

use std::fmt::Write as _;

use ferry_protos::policy::PolicyWords as _;

use super::scalars::format_ttl;
use super::Registry;

/// One line per service, view and route, each ending with a newline.
pub fn report(reg: &Registry, snapshot_version: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "project {}  snapshot {}",
        reg.project, snapshot_version
    );
    for s in &reg.services {
        let keys: Vec<String> = s
            .keys
            .iter()
            .map(|k| format!("{} ({})", k.join_key, k.key_type.as_str()))
            .collect();
        let total: usize = s.views.iter().map(|v| v.features.len()).sum();
        let _ = writeln!(
            out,
            "feature service {}  fingerprint {}  keys: {}  {} features",
            s.name,
            ferry_protos::fingerprint_hex(s.fingerprint),
            keys.join(", "),
            total
        );
        for sv in &s.views {
            let v = &reg.views[sv.view];
            let _ = writeln!(
                out,
                "  view {:<24} ttl {:<6} {} feature(s)",
                v.name,
                format_ttl(v.ttl_seconds),
                sv.features.len()
            );
        }
        for d in &s.derived {
            let v = &reg.on_demand_views[d.view];
            let _ = writeln!(
                out,
                "  on-demand view {:<15} {} feature(s)  derived version {}",
                v.name,
                d.features.len(),
                s.derived_version
            );
        }
    }
    for r in &reg.routes {
        let m = r.matcher.to_string();
        let _ = writeln!(
            out,
            "route {}  {}  -> {}  format {}  entity [{}]  names {}  missing {}  stale {}  reader error {}  max body {} B, {} entities, timeout {} ms",
            r.name,
            m,
            std::iter::once(r.service)
                .chain(r.extra_services.iter().map(|e| e.service))
                .map(|s| reg.services[s].name.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
            r.format.word(),
            r.entity_fields.join(", "),
            r.feature_names.as_str_name().to_ascii_lowercase(),
            r.on_missing_entity.word(),
            r.on_stale.word(),
            r.on_reader_error.word(),
            r.max_body_bytes,
            r.max_entities,
            r.reader_timeout_ms
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    #[test]
    fn routes_show_their_policies_in_the_words_of_the_repo() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let text = report(&reg.unwrap(), "v1");
        assert!(text.starts_with("project "), "{text}");
        assert!(text.ends_with('\n'), "{text}");
        assert!(
            text.contains("  names short  missing null  stale reject  reader error forward  "),
            "{text}"
        );
    }
}
