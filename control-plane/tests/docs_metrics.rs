//! docs/metrics.md against the metrics the code exposes: the filter's table
//! (`ferry_core::metrics`), and the families of the reader's, the control plane's and the log
//! sink's `/metrics` as their registries encode them. A metric missing from the page, or a
//! `ferry_*` name on the page that nothing exposes, fails.

use std::collections::BTreeSet;

use ferry::serve::metrics::{metrics_text, Gauges, Metrics, SnapshotLabels};

/// The families of an OpenMetrics text: `# TYPE name kind` → `name` (a counter as its samples
/// are named, `name_total`).
fn families(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut it = l.split_whitespace();
            let (name, kind) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            }
        })
        .collect()
}

/// Every metric name the code exposes.
fn exposed() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ferry_core::metrics::ALL
        .iter()
        .map(|(_, _, n)| (*n).to_owned())
        .collect();
    names.insert(ferry_core::metrics::views::VALUES_NAME.to_owned());
    names.insert(ferry_core::metrics::views::AGE_NAME.to_owned());
    names.extend(families(
        &ferry_reader::metrics::Metrics::default().render(true),
    ));
    let gauges = Gauges {
        connected_streams: 0,
        streams_acked_current: 0,
        snapshot: Some(SnapshotLabels {
            version: "v".into(),
            project: "p".into(),
            source: "repo",
        }),
        shared: Some((true, true)),
    };
    // A labelled family is encoded once it has a series: give the lazily made ones one.
    let cp = Metrics::default();
    cp.xds.refused("streams");
    cp.shared_refused("signature");
    names.extend(families(&metrics_text(&cp, gauges)));
    names.extend(families(
        &ferry_log_sink::metrics::SinkMetrics::new().text(),
    ));
    names
}

/// The page's `ferry_*` names. `a_{b,c}_d` is written out as `a_b_d`, `a_c_d`; `a{label}` is
/// `a`; a name ending in `_` (`ferry_derived_*`) is a family of names, not one.
fn on_the_page() -> BTreeSet<String> {
    let page = include_str!("../../docs/metrics.md").as_bytes();
    let word = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = page[i..].windows(6).position(|w| w == b"ferry_") {
        let start = i + at;
        i = start + 6;
        if start > 0 && (word(page[start - 1]) || page[start - 1] == b'.') {
            continue;
        }
        while i < page.len() && word(page[i]) {
            i += 1;
        }
        let head = String::from_utf8_lossy(&page[start..i]).into_owned();
        let mut names = vec![head.clone()];
        if page.get(i) == Some(&b'{') {
            let close = i + page[i..].iter().position(|&c| c == b'}').unwrap_or(0);
            let mut end = close + 1;
            while end < page.len() && word(page[end]) {
                end += 1;
            }
            if end > close + 1 {
                let alts = String::from_utf8_lossy(&page[i + 1..close]).into_owned();
                let tail = String::from_utf8_lossy(&page[close + 1..end]).into_owned();
                names = alts
                    .split(',')
                    .map(|a| format!("{head}{a}{tail}"))
                    .collect();
                i = end;
            }
        }
        out.extend(names.into_iter().filter(|n| !n.ends_with('_')));
    }
    out
}

#[test]
fn the_metrics_page_names_every_metric_the_code_exposes() {
    let code = exposed();
    assert!(code.len() > 50, "too few metrics found: {code:?}");
    let page = on_the_page();
    // A histogram's or a counter's samples as the page may write them.
    let base = |n: &str| -> String {
        for suffix in ["_bucket", "_count", "_sum"] {
            if let Some(b) = n.strip_suffix(suffix) {
                return b.to_owned();
            }
        }
        n.to_owned()
    };
    let missing: Vec<&String> = code.iter().filter(|n| !page.contains(*n)).collect();
    let unknown: Vec<&String> = page
        .iter()
        .filter(|n| {
            !code.contains(*n) && !code.contains(&base(n)) && !code.contains(&format!("{n}_total"))
        })
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/metrics.md differs from the metrics the code exposes:\n\
         exposed, not on the page: {missing:?}\n\
         on the page, exposed by nothing: {unknown:?}"
    );
}
