//! The two builds never disagree (issue #32). Every input of the `config_space` fuzz target
//! (fuzz/src/config_space: a snapshot `ferry apply` accepts, one or two requests against it,
//! the reader's answers) goes to the Wasm filter (the built `.wasm` on this crate's host) and
//! to the native module (its `Stream`, what its hooks call, over `ferry-native`'s in-memory
//! Envoy), driven alike by the target's schedule (`config_space::schedule`). What each did must
//! be the same: the local reply (status, headers, body, as Envoy sends it), or what went
//! upstream (headers, body, trailers), the reader call (cluster, headers, body, timeout), each
//! hook's verdict, the response headers, the served-feature record and the counters. The Wasm
//! build runs in 32 bits and the native one in 64: client-declared sizes near 2^32 (the
//! target's hostile tensor shapes and lengths) are where they would part.
//!
//! Inputs: a seeded stream (`config_space::stream`) and every committed input of the target
//! (fuzz/corpus, fuzz/kept and fuzz/regressions `config_space/`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod case;
mod native;
mod seen;
mod wasm;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Mutex;

use case::Agreed;

/// Inputs of the seeded stream.
const STREAM_CASES: usize = 5000;

/// The native module's near cache is one store per process: its cases run one at a time.
static NATIVE: Mutex<()> = Mutex::new(());

/// Runs every input; fails with the first few divergences, each with its case in words.
fn all_agree(inputs: impl IntoIterator<Item = (String, Vec<u8>)>) {
    let _one = NATIVE.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cases, mut refused, mut skipped, mut ends) = (0, 0, 0, [0; 3]);
    let mut failures = Vec::new();
    for (name, data) in inputs {
        cases += 1;
        match catch_unwind(AssertUnwindSafe(|| case::run(&data))) {
            Ok(Ok(Agreed::Requests(tally))) => {
                for (end, n) in ends.iter_mut().zip(tally) {
                    *end += n;
                }
            }
            Ok(Ok(Agreed::Refused)) => refused += 1,
            Ok(Ok(Agreed::Skipped)) => skipped += 1,
            Ok(Err(diff)) => failures.push(format!(
                "{name} ({data:?}) differs:\n{diff}\ncase: {}",
                ferry_fuzz::config_space::describe(&data)
            )),
            Err(_) => failures.push(format!("{name} ({data:?}) panicked (above)")),
        }
    }
    let [replied, forwarded, held] = ends;
    eprintln!(
        "{cases} cases ({refused} snapshots refused by both, {skipped} skipped): requests done \
         alike: {replied} answered locally, {forwarded} forwarded, {held} held for the reader"
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n\n{}",
        failures.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}

#[test]
fn seeded_inputs_agree() {
    let inputs = ferry_fuzz::config_space::stream(0xd1ff, STREAM_CASES);
    all_agree(inputs.enumerate().map(|(i, d)| (format!("stream #{i}"), d)));
}

#[test]
fn committed_inputs_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut inputs = Vec::new();
    for dir in ["corpus", "kept", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join("config_space")) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            inputs.push((name, std::fs::read(&path).unwrap()));
        }
    }
    inputs.sort();
    assert!(inputs.len() > 70, "the committed config_space inputs");
    all_agree(inputs);
}
