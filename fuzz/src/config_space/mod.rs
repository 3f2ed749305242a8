//! The `config_space` target (issue #32): the configuration is part of the input. Each input
//! draws a registry snapshot of the kind `ferry apply` writes (`snapshot`: keyed and keyless
//! services, composite keys, on-demand views over request fields and stored features, routes
//! in every format with several services, every policy, near cache, logging), a request against
//! it (`request`) and the reader's answers (`reader`), drives the whole request state machine
//! (`HttpFilter` over the in-memory `FakeHost`) as Envoy drives it, and judges the result
//! (`check`): a local 4xx/5xx with Ferry's JSON error (a gRPC status on gRPC, Feast's answer on
//! `feast_rest`), or a forward in which no Ferry-owned name holds a value the client sent.
//!
//! A drawn snapshot the filter's validation refuses is skipped (the generator writes valid ones
//! by construction; `tests::most_drawn_snapshots_are_accepted` keeps it so).

pub mod check;
pub mod pick;
pub mod reader;
pub mod request;
mod run;
pub mod schedule;
pub mod seeds;
pub mod snapshot;

use std::collections::HashMap;
use std::rc::Rc;

use ferry_core::config::Config;

use pick::Pick;
use reader::Plan;
use request::Request;
use run::one_request;
pub use run::Outcome;

/// One input decoded: the configuration, the request, the reader's plan, and the rest of the
/// input (the reader's per-key choices and when it answers).
pub struct Drawn<'a> {
    pub config: Rc<Config>,
    pub req: Request,
    pub plan: Plan,
    pick: Pick<'a>,
}

/// The snapshot `draw` makes of an input (its first choices), for a host that is configured
/// with the snapshot's bytes rather than a `Config`.
pub fn drawn_snapshot(data: &[u8]) -> ferry_protos::v1::Snapshot {
    snapshot::snapshot(&mut Pick::new(data))
}

/// Decodes an input; `Err` is the filter's refusal of the drawn snapshot.
pub fn draw(data: &[u8]) -> Result<Drawn<'_>, String> {
    let mut pick = Pick::new(data);
    let snap = snapshot::snapshot(&mut pick);
    let config = Rc::new(Config::from_snapshot(snap).map_err(|e| e.to_string())?);
    let req = request::request(&mut pick, &config);
    let plan = reader::plan(&mut pick);
    Ok(Drawn {
        config,
        req,
        plan,
        pick,
    })
}

/// What an input draws, in words (without running it).
pub fn describe(data: &[u8]) -> String {
    match draw(data) {
        Ok(d) => check::describe(&d.config, &d.req, &d.plan),
        Err(why) => format!("refused: {why}"),
    }
}

/// Runs one input; a panic names the broken property.
pub fn run(data: &[u8]) {
    play(data);
}

/// Runs one input unless it reaches a known open bug (`known_open`): the stable replay's entry.
pub fn replay(data: &[u8]) {
    match draw(data) {
        Ok(d) if known_open(&d).is_some() => {}
        Ok(d) => {
            play_drawn(d);
        }
        Err(_) => {}
    }
}

/// Inputs of a fixed pseudo-random stream (`seed` picks it), 32 to 368 bytes: the stable,
/// bounded pass over the target (CI's, and the checks of the checks).
pub fn stream(seed: u64, count: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut state = seed | 1;
    (0..count).map(move |k| {
        (0..32 + (k % 8) * 48)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    })
}

/// Runs one input and says what happened.
pub fn play(data: &[u8]) -> Outcome {
    match draw(data) {
        Ok(d) if known_open(&d).is_some_and(|(key, _)| skipped(key)) => Outcome::Skipped,
        Ok(d) => play_drawn(d),
        Err(why) => Outcome::Refused(why),
    }
}

/// Whether inputs reaching the known open bug `key` are skipped: `FERRY_FUZZ_SKIP_KNOWN`
/// lists keys (comma-separated, or `all`), so that a campaign can look past a crash it keeps
/// finding while its fix is under way. Unset by default: a plain run and the replay find them.
fn skipped(key: &str) -> bool {
    static SKIP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let list = SKIP.get_or_init(|| std::env::var("FERRY_FUZZ_SKIP_KNOWN").unwrap_or_default());
    list.split(',').any(|k| k == key || k == "all")
}

/// The known open bug an input reaches, if any: (key, what). Their inputs are in
/// `found/config_space/`; an entry goes once its bug is fixed and its inputs move to
/// `regressions/config_space/`.
pub fn known_open(_d: &Drawn<'_>) -> Option<(&'static str, &'static str)> {
    // None open. Fixed: `keyless_first` (a keyless main service with a keyed extra one on
    // KServe v2 JSON or gRPC: an index out of bounds in `kserve_v2::tensor_keys`) and `31`
    // (a keyless route's tensor shape allocating what it claimed); their inputs are in
    // `regressions/config_space/`.
    None
}

pub fn play_drawn(d: Drawn<'_>) -> Outcome {
    let mut shared = HashMap::new();
    let mut first = None;
    requests(d, |config, req, plan, pick| {
        let run = one_request(config, req, plan, pick, std::mem::take(&mut shared));
        shared = run.host().shared.borrow().clone();
        first.get_or_insert(run.outcome());
    });
    first.unwrap_or(Outcome::Held)
}

/// The requests an input makes, each through `one` (the configuration, the request, its
/// reader plan, the rest of the input): the first, and sometimes a second through the same
/// shared data (another stream of the same worker), so that what the first left in the near
/// cache is read back (ids repeat often). The second never reaches a known open bug: the first
/// request is where those are found (and skipped).
pub fn requests(d: Drawn<'_>, mut one: impl FnMut(&Rc<Config>, Request, Plan, &mut Pick<'_>)) {
    let Drawn {
        config,
        req,
        plan,
        mut pick,
    } = d;
    let again = req.clone();
    one(&config, req, plan, &mut pick);
    if !pick.one_in(2) {
        return;
    }
    // The same request again (its keys are in the cache if the first stored them), or another.
    let req = if pick.one_in(2) {
        request::request(&mut pick, &config)
    } else {
        again
    };
    let plan = reader::plan(&mut pick);
    let second = Drawn {
        config: config.clone(),
        req,
        plan,
        pick,
    };
    if known_open(&second).is_none() {
        let Drawn {
            req,
            plan,
            mut pick,
            ..
        } = second;
        one(&config, req, plan, &mut pick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each committed seed is still the case its file is named after.
    #[test]
    fn committed_seeds_are_their_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/config_space");
        let mut wrong = Vec::new();
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            n += 1;
            if !seeds::case_holds(&name, &std::fs::read(&path).unwrap()) {
                wrong.push(name);
            }
        }
        assert_eq!(n, seeds::cases().len(), "a seed per case");
        assert!(
            wrong.is_empty(),
            "seeds that are not their case any more: {wrong:?}"
        );
    }

    /// Each input in found/config_space/ still reaches a known open bug (when one is fixed, its
    /// entry in `known_open` goes and its inputs move to regressions/config_space/).
    #[test]
    fn found_inputs_reach_their_known_bug() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("found/config_space");
        // None is open: git keeps no empty folder.
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let d = draw(&data).unwrap();
            let (key, _) = known_open(&d).unwrap_or_else(|| panic!("{}", path.display()));
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let want = if name.starts_with("issue31") {
                "31"
            } else {
                "keyless_first"
            };
            assert_eq!(key, want, "{name}");
        }
    }

    /// Inputs of a fixed pseudo-random stream: most must draw an accepted snapshot, or the
    /// target would spend its time on refusals.
    #[test]
    fn most_drawn_snapshots_are_accepted() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut refused: Vec<(String, String)> = Vec::new();
        let total = 2000;
        for _ in 0..total {
            let data: Vec<u8> = (0..256)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let snap = snapshot::snapshot(&mut Pick::new(&data));
            if let Err(why) = Config::from_snapshot(snap) {
                let why = why.to_string();
                // One example per kind of refusal (route and service names vary).
                let kind: String = why.chars().filter(|c| !c.is_ascii_digit()).collect();
                if !refused.iter().any(|(k, _)| *k == kind) {
                    refused.push((kind, why));
                } else {
                    refused.push((kind, String::new()));
                }
            }
        }
        assert!(
            refused.len() * 10 < total,
            "{} of {total} refused, e.g. {:?}",
            refused.len(),
            refused
                .iter()
                .filter(|(_, w)| !w.is_empty())
                .map(|(_, w)| w)
                .collect::<Vec<_>>()
        );
    }
}
