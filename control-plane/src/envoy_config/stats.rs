//! The bootstrap's `stats_config`: Envoy's tag rules that turn the filter's per (service,
//! view) metric names (`ferry_core::metrics::views`) into Prometheus labels, and the age
//! histogram's buckets. `/stats/prometheus` then reads
//! `ferry_view_values{service="S",view="V",status="stale"}` and
//! `ferry_view_age_seconds_bucket{service="S",view="V",le="3600"}` (the native build's names
//! carry Envoy's `envoy_dynamicmodulescustom_` prefix, as its other metrics).

use ferry_core::metrics::views::{AGE_BUCKETS_S, AGE_NAME, VALUES_NAME};

/// The `stats_config` block (top level of the bootstrap).
pub fn render() -> String {
    // `wasmcustom.` or `dynamicmodulescustom.`, then the name; each rule's first group is
    // cut from the name and its second is the label value.
    let any = r"^\w+\.ferry_view_\w+";
    let seg = r"[\w-]+";
    let rules = [
        ("service", format!(r"{any}(\.service\.({seg}))")),
        ("view", format!(r"{any}\.service\.{seg}(\.view\.({seg}))")),
        (
            "status",
            format!(r"^\w+\.{VALUES_NAME}\.service\.{seg}\.view\.{seg}(\.status\.({seg}))$"),
        ),
    ];
    let mut out = String::from("stats_config:\n  stats_tags:\n");
    for (tag, regex) in rules {
        out.push_str(&format!("  - tag_name: {tag}\n    regex: '{regex}'\n"));
    }
    let buckets: Vec<String> = AGE_BUCKETS_S.iter().map(u64::to_string).collect();
    out.push_str(&format!(
        "  histogram_bucket_settings:\n  - match: {{contains: \"{AGE_NAME}\"}}\n    \
         buckets: [{}]\n",
        buckets.join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_rule_and_the_buckets_are_rendered() {
        let y = super::render();
        for tag in ["service", "view", "status"] {
            assert!(y.contains(&format!("tag_name: {tag}")), "{y}");
        }
        assert!(y.contains("buckets: [1, 5, 15, 60,"), "{y}");
        assert!(y.ends_with("604800]\n"), "{y}");
    }
}
