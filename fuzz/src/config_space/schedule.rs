//! Envoy's order of events on one request stream of a `config_space` input: the request
//! headers, its data frames, its trailers, the reader's answer at a drawn point once its call is
//! out (or at the end), then the model's response headers. One schedule for every build it
//! drives: the core over `FakeHost` (`run`) and, in tests/wasm-host's differential test, the
//! `.wasm` and the native module side by side.

use ferry_core::config::Config;

use super::pick::Pick;
use super::reader::{self, Plan};
use super::request::Request;

/// A request stream as Envoy sees it; the schedule says what happens next.
pub trait Stream {
    /// The request headers (`end_of_stream`: no body and no trailers follow).
    fn headers(&mut self, end_of_stream: bool);
    /// One data frame.
    fn data(&mut self, chunk: &[u8], end_of_stream: bool);
    fn trailers(&mut self);
    /// Answered locally: Envoy delivers nothing more of the request.
    fn answered(&self) -> bool;
    /// The body of the reader call that is out and not answered yet.
    fn call_out(&self) -> Option<Vec<u8>>;
    /// The reader's answer to that call (`reader::answer`; `None`: none will come).
    fn deliver(&mut self, answer: Option<(Option<u16>, Vec<u8>)>);
    /// The request went upstream (and was not answered): the model answers.
    fn forwarded(&self) -> bool;
    /// The model's response headers.
    fn response_headers(&mut self);
}

/// Drives `s` through `req`, the reader answering as `plan` says; the drawn choices (when the
/// reader answers, what its vectors hold) come from `p`.
pub fn drive(s: &mut impl Stream, req: &Request, plan: &Plan, config: &Config, p: &mut Pick<'_>) {
    let frames = req.chunks.len();
    let trailers = !req.trailers.is_empty();
    let answer_after = p.below(frames + 2);
    s.headers(frames == 0 && !trailers);
    for (i, chunk) in req.chunks.iter().enumerate() {
        if s.answered() {
            return;
        }
        if answer_after == i {
            answer(s, plan, config, p);
            if s.answered() {
                return;
            }
        }
        s.data(chunk, i + 1 == frames && !trailers);
    }
    if trailers && !s.answered() {
        s.trailers();
    }
    if !s.answered() {
        answer(s, plan, config, p);
    }
    if s.forwarded() && !s.answered() {
        s.response_headers();
    }
}

fn answer(s: &mut impl Stream, plan: &Plan, config: &Config, p: &mut Pick<'_>) {
    if let Some(asked) = s.call_out() {
        let answer = reader::answer(plan, p, config, &asked);
        s.deliver(answer);
    }
}
