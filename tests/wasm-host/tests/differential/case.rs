//! One `config_space` input through both builds: the same snapshot configured in each, each
//! request the input makes driven through both in lockstep by the target's own schedule (the
//! reader's answer computed once, from the call the Wasm build made), then compared.

use ferry_fuzz::config_space::{self, schedule, Drawn};
use ferry_fuzz::NOW_US;
use prost::Message;

use super::native::{Native, NativeStream};
use super::seen::differences;
use super::wasm::{Wasm, WasmStream};

/// What a case came to when both builds agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreed {
    /// Both refused the drawn snapshot (as `draw` did).
    Refused,
    /// It reaches a known open bug (`config_space::known_open`): not run.
    Skipped,
    /// Requests done alike: (answered locally, forwarded, neither: held for the reader).
    Requests([usize; 3]),
}

/// The two builds on one request. A build that answered locally is given nothing more, as
/// Envoy gives it nothing more; the other goes on alone.
struct Pair<'a> {
    wasm: WasmStream<'a>,
    native: NativeStream<'a>,
}

impl schedule::Stream for Pair<'_> {
    fn headers(&mut self, end_of_stream: bool) {
        self.wasm.headers(end_of_stream);
        self.native.headers(end_of_stream);
    }

    fn data(&mut self, chunk: &[u8], end_of_stream: bool) {
        if !self.wasm.answered() {
            self.wasm.data(chunk, end_of_stream);
        }
        if !self.native.answered() {
            self.native.data(chunk, end_of_stream);
        }
    }

    fn trailers(&mut self) {
        if !self.wasm.answered() {
            self.wasm.trailers();
        }
        if !self.native.answered() {
            self.native.trailers();
        }
    }

    fn answered(&self) -> bool {
        self.wasm.answered() && self.native.answered()
    }

    fn call_out(&self) -> Option<Vec<u8>> {
        self.wasm.call_out().or_else(|| self.native.call_out())
    }

    fn deliver(&mut self, answer: Option<(Option<u16>, Vec<u8>)>) {
        if self.wasm.call_out().is_some() {
            self.wasm.deliver(answer.clone());
        }
        if self.native.call_out().is_some() {
            self.native.deliver(answer);
        }
    }

    fn forwarded(&self) -> bool {
        self.wasm.forwarded() || self.native.forwarded()
    }

    fn response_headers(&mut self) {
        if self.wasm.forwarded() {
            self.wasm.response_headers();
        }
        if self.native.forwarded() {
            self.native.response_headers();
        }
    }
}

/// Runs `data` through both builds; `Err` says where they differ.
pub fn run(data: &[u8]) -> Result<Agreed, String> {
    let snapshot = config_space::drawn_snapshot(data).encode_to_vec();
    let wasm = Wasm::configured(&snapshot, NOW_US);
    let native = Native::configured(&snapshot, NOW_US);
    let drawn = config_space::draw(data);
    let (wasm, native, drawn) = match (wasm, native, drawn) {
        (Some(w), Some(n), Ok(d)) => (w, n, d),
        (None, None, Err(_)) => return Ok(Agreed::Refused),
        (w, n, d) => {
            let (w, n, d) = (w.is_some(), n.is_some(), d.err());
            return Err(format!(
                "the snapshot: wasm accepted {w}, native accepted {n}, the core's check {d:?}"
            ));
        }
    };
    if config_space::known_open(&drawn).is_some() {
        return Ok(Agreed::Skipped);
    }
    requests(drawn, &wasm, &native)
}

fn requests(drawn: Drawn<'_>, wasm: &Wasm, native: &Native) -> Result<Agreed, String> {
    let mut found = Vec::new();
    let mut n = 0;
    let mut tally = [0; 3];
    config_space::requests(drawn, |config, mut req, plan, pick| {
        n += 1;
        // Envoy's connection manager gives every request an `x-request-id` before any filter
        // runs (the generator, written for the core alone, sends none): the served-feature log
        // picks requests by it, so without one no record would ever be compared.
        if !req.headers.iter().any(|(name, _)| name == "x-request-id") {
            let id = format!("{:08x}-d1ff-4000-8000-{n:012}", req.body.len());
            req.headers.push(("x-request-id".into(), id));
        }
        let mut pair = Pair {
            wasm: wasm.stream(&req, &plan, &config.reader_cluster),
            native: native.stream(&req, &plan),
        };
        schedule::drive(&mut pair, &req, &plan, config, pick);
        let (w, nat) = (pair.wasm.seen(), pair.native.seen());
        let end = usize::from(w.reply.is_none()) + usize::from(w.reply.is_none() && w.paused);
        tally[end] += 1;
        for d in differences(&w, &nat) {
            found.push(format!("request {n}: {d}"));
        }
    });
    if found.is_empty() {
        Ok(Agreed::Requests(tally))
    } else {
        Err(found.join("\n"))
    }
}
