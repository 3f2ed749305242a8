//! Per-stage timers of a request through the module (issue #34): where the microseconds an
//! enriched request adds go, stage by stage, on Envoy's worker thread and on the in-process
//! reader's runtime alike. Off unless `FERRY_NATIVE_STAGES` names a file: then each stage's
//! count, total nanoseconds and a histogram (`BUCKETS` log-linear buckets, 4 per power of two:
//! a percentile to within 19 %) are summed in process-wide atomics, and a thread of its own
//! rewrites that file every 100 ms (`name count total_ns bucket...` per line), which a
//! benchmark reads before and after a case: means are skewed by the tails of a busy machine,
//! medians much less. Off, a stage costs one relaxed load of a flag.
//!
//! Wall-clock intervals on the monotonic clock, so a stage includes any time its thread was
//! not running (a busy machine shows up here as it does in the client's latency).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ferry_core::stage_clock::{self, bucket, BUCKETS};

/// The environment variable naming the file the totals are written to.
pub const VARIABLE: &str = "FERRY_NATIVE_STAGES";

/// How often the totals file is rewritten.
const EVERY: Duration = Duration::from_millis(100);

/// The timed stages, in the order a request meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The request-headers hook (admission: owned headers removed, route chosen).
    Headers,
    /// From the last body hook's start to the entities parsed (the body copied out included).
    Parse,
    /// Parsed → the reader call started (near cache, the reader request built).
    LookupRequest,
    /// A dispatched reader call (a callout to the reader cluster) → its answer delivered to the
    /// stream: Envoy's async client, the reader and the way back, as the worker sees them.
    Call,
    /// The in-process lookup handed to the reader's runtime → its task running there.
    HandOff,
    /// The reader decoding and checking the request into its Redis command.
    ReaderDecode,
    /// The Redis round trip, as the reader's task sees it (redis-rs's driver included).
    Redis,
    /// Redis's answer encoded as the reader's response.
    ReaderEncode,
    /// The answer left for the stream → the stream's worker running it (Envoy's scheduler).
    HandBack,
    /// The answer checked and decoded into vectors (and put into the near cache).
    Decode,
    /// Features chosen per entity under the route's policies.
    Enrich,
    /// The enriched body (or header) written into the request.
    Rewrite,
    /// Envoy's `continue_decoding` (the request sent on, as far as it runs inline).
    Resume,
}

const STAGES: usize = 13;

const NAMES: [&str; STAGES] = [
    "headers",
    "parse",
    "lookup_request",
    "call",
    "hand_off",
    "reader_decode",
    "redis",
    "reader_encode",
    "hand_back",
    "decode",
    "enrich",
    "rewrite",
    "resume",
];

static ENABLED: AtomicBool = AtomicBool::new(false);
static COUNT: [AtomicU64; STAGES] = [const { AtomicU64::new(0) }; STAGES];
static TOTAL_NS: [AtomicU64; STAGES] = [const { AtomicU64::new(0) }; STAGES];

static HISTOGRAM: [[AtomicU64; BUCKETS]; STAGES] =
    [const { [const { AtomicU64::new(0) }; BUCKETS] }; STAGES];

/// Reads `FERRY_NATIVE_STAGES` and, when set, turns the timers on and starts the thread that
/// writes the totals (once per process, at module load).
pub fn init() -> Result<(), String> {
    let Some(path) = std::env::var_os(VARIABLE) else {
        return Ok(());
    };
    if ENABLED.swap(true, Relaxed) {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("ferry-stages".into())
        .spawn(move || loop {
            std::thread::sleep(EVERY);
            write(std::path::Path::new(&path));
        })
        .map(drop)
        .map_err(|e| format!("{VARIABLE}: cannot start its writer: {e}"))
}

/// The time now when the timers are on.
#[inline]
pub fn now() -> Option<Instant> {
    ENABLED.load(Relaxed).then(Instant::now)
}

/// Adds the interval `from` → now to `stage`; returns now (for the next stage to start from).
#[inline]
pub fn since(stage: Stage, from: Option<Instant>) -> Option<Instant> {
    let from = from?;
    let now = Instant::now();
    add(stage, now.saturating_duration_since(from));
    Some(now)
}

fn add(stage: Stage, took: Duration) {
    let i = stage as usize;
    let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    COUNT[i].fetch_add(1, Relaxed);
    TOTAL_NS[i].fetch_add(ns, Relaxed);
    if let Some(b) = HISTOGRAM.get(i).and_then(|h| h.get(bucket(ns))) {
        b.fetch_add(1, Relaxed);
    }
}

/// The totals as the file holds them.
pub fn totals() -> String {
    let mut out = String::new();
    for (i, name) in NAMES.iter().enumerate() {
        let (n, ns) = (COUNT[i].load(Relaxed), TOTAL_NS[i].load(Relaxed));
        let buckets = HISTOGRAM[i].iter().map(|b| b.load(Relaxed));
        out.push_str(&stage_clock::line(name, n, ns, buckets));
        out.push('\n');
    }
    out
}

/// Written whole and renamed, so a reader never sees half a file. A failed write is retried
/// on the next tick: timers never disturb the requests.
fn write(path: &std::path::Path) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, totals()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// One stream's clock: when its last stage ended (or its current hook started).
#[derive(Default)]
pub struct Marks(Cell<Option<Instant>>);

impl Marks {
    /// A hook (or a delivery) starts: the next stage counts from now.
    pub fn start(&self) {
        self.0.set(now());
    }

    /// Restarts from `at` (an instant taken by the caller).
    pub fn start_at(&self, at: Option<Instant>) {
        self.0.set(at);
    }

    /// `stage` ended now: it is timed from the last mark, and the next starts here.
    pub fn done(&self, stage: Stage) {
        let from = self.0.get();
        self.0.set(since(stage, from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_and_names_line_up_and_off_records_nothing() {
        assert_eq!(NAMES[Stage::Resume as usize], "resume");
        assert_eq!(NAMES[Stage::HandOff as usize], "hand_off");
        let marks = Marks::default();
        marks.start();
        marks.done(Stage::Parse);
        if !ENABLED.load(Relaxed) {
            assert!(totals().lines().all(|l| l.contains(" 0 0 ")));
        }
        add(Stage::Redis, Duration::from_micros(3));
        assert!(totals().contains("redis 1 3000 "));
    }

    /// What a stage costs, on and off (run by hand: `cargo test --profile native -p
    /// ferry-native cost_of_a_stage -- --ignored --nocapture`). It turns the timers on for the
    /// rest of the process.
    #[test]
    #[ignore]
    fn cost_of_a_stage() {
        const N: u32 = 1_000_000;
        let marks = Marks::default();
        let time = |marks: &Marks| {
            let start = Instant::now();
            for _ in 0..N {
                marks.done(Stage::Rewrite);
            }
            start.elapsed() / N
        };
        marks.start();
        let off = time(&marks);
        ENABLED.store(true, Relaxed);
        marks.start();
        let on = time(&marks);
        println!("one stage: {off:?} off, {on:?} on");
    }
}
