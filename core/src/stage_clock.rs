//! What both builds' per-stage timers share (issue #34): the log-linear histogram a stage's
//! durations are counted in, and the text line a stage's totals are written as, so that
//! `bench/miss_path_report.py` reads the native module's file and the Wasm filter's log alike.
//! Where the time comes from and where the totals go is each build's own (`native/src/stages.rs`,
//! `filter/src/stages.rs`).

/// Buckets per stage: bucket `i` < 4 holds `i` ns; above, `i = 4 * (b - 1) + s` holds values
/// whose top bit is `b` and next two bits are `s` (so up to 2^41 ns, ~37 min; the last bucket
/// takes anything longer). A percentile read as its bucket's lower edge is within 19 %.
pub const BUCKETS: usize = 160;

/// The bucket of a duration in nanoseconds.
pub fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let top = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (top - 2)) & 3) as usize;
    (4 * (top - 1) + sub).min(BUCKETS - 1)
}

/// One stage's totals as a line: `name count total_ns bucket...` (every bucket, in order).
pub fn line(name: &str, count: u64, total_ns: u64, buckets: impl Iterator<Item = u64>) -> String {
    let mut out = format!("{name} {count} {total_ns}");
    for b in buckets {
        out.push(' ');
        out.push_str(&b.to_string());
    }
    out
}

/// Stages' totals kept by one thread (the Wasm filter's VM: one per Envoy worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Totals {
    count: Vec<u64>,
    total_ns: Vec<u64>,
    histogram: Vec<[u64; BUCKETS]>,
}

impl Totals {
    /// Empty totals of `stages` stages.
    pub fn new(stages: usize) -> Self {
        Self {
            count: vec![0; stages],
            total_ns: vec![0; stages],
            histogram: vec![[0; BUCKETS]; stages],
        }
    }

    /// Counts `ns` for stage `stage` (a stage out of range is ignored).
    pub fn add(&mut self, stage: usize, ns: u64) {
        let (Some(n), Some(total), Some(h)) = (
            self.count.get_mut(stage),
            self.total_ns.get_mut(stage),
            self.histogram.get_mut(stage),
        ) else {
            return;
        };
        *n += 1;
        *total = total.saturating_add(ns);
        if let Some(b) = h.get_mut(bucket(ns)) {
            *b += 1;
        }
    }

    /// Intervals counted over all stages.
    pub fn intervals(&self) -> u64 {
        self.count.iter().sum()
    }

    /// Each stage's `line`, named by `names` in stage order.
    pub fn lines<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = String> + 'a {
        names.iter().enumerate().map(|(i, name)| {
            let buckets = self.histogram.get(i).map_or(&[][..], |h| &h[..]);
            line(
                name,
                self.count.get(i).copied().unwrap_or(0),
                self.total_ns.get(i).copied().unwrap_or(0),
                buckets.iter().copied(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_linear() {
        assert_eq!(
            (bucket(0), bucket(3), bucket(4), bucket(5), bucket(7)),
            (0, 3, 4, 5, 7)
        );
        assert_eq!(
            (bucket(8), bucket(10), bucket(12), bucket(15)),
            (8, 9, 10, 11)
        );
        // 3000 = 0b1011_1011_1000: top bit 11, next two bits 01.
        assert_eq!(bucket(3000), 4 * 10 + 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn totals_count_each_stage_into_its_bucket() {
        let mut t = Totals::new(2);
        t.add(1, 3000);
        t.add(1, 5);
        t.add(7, 1); // no such stage
        assert_eq!(t.intervals(), 2);
        let lines: Vec<String> = t.lines(&["a", "b"]).collect();
        assert!(lines[0].starts_with("a 0 0 0 0"), "{}", lines[0]);
        let b: Vec<u64> = lines[1]
            .split(' ')
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!((b[0], b[1]), (2, 3005));
        assert_eq!((b[2 + 5], b[2 + 41]), (1, 1));
        assert_eq!(b.len(), 2 + BUCKETS);
    }

    #[test]
    fn a_line_holds_every_bucket() {
        assert_eq!(
            line("parse", 2, 900, [0, 1, 1].into_iter()),
            "parse 2 900 0 1 1"
        );
    }
}
