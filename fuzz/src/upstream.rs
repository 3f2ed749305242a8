//! Envoy's side of a request stream, shared by the targets that drive `HttpFilter` on
//! `FakeHost` (`bypass`, `config_space`): what went upstream, and what Envoy does after each
//! stream callback.

use ferry_core::host::testing::FakeHost;
use ferry_core::request::Action;

/// What went upstream, as Envoy would have sent it: the request headers as they were when the
/// stream first continued, and every body byte released since.
#[derive(Default)]
pub struct Upstream {
    pub released: bool,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What Envoy does after a stream callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A local reply was sent: nothing more is called on the request side.
    AnsweredLocally,
    /// The stream went on (headers, if not yet, and the buffered body released).
    Released,
    /// The callback returned Pause.
    Paused,
}

impl Upstream {
    /// Envoy sends the headers (if not yet) and the buffered body on.
    pub fn release(&mut self, host: &FakeHost) {
        if !self.released {
            self.released = true;
            self.headers = host.headers.borrow().clone();
        }
        let buffered = std::mem::take(&mut *host.body.borrow_mut());
        self.body.extend(buffered);
    }

    /// After the stream callback `what` returned `action`: a local reply must come with Pause
    /// and before anything went upstream; Continue releases the stream.
    pub fn after_callback(&mut self, host: &FakeHost, what: &str, action: Action) -> Next {
        if host.sent.borrow().is_some() {
            assert!(
                action == Action::Pause,
                "{what} sent a local reply and returned Continue"
            );
            assert!(
                !self.released,
                "{what} sent a local reply after the request went upstream"
            );
            return Next::AnsweredLocally;
        }
        match action {
            Action::Continue => {
                self.release(host);
                Next::Released
            }
            Action::Pause => Next::Paused,
        }
    }

    /// After the filter handled the reader's answer on a stream that was `paused`: it
    /// answered (never also resumed, and only before anything went upstream), resumed (only a
    /// paused stream: released), or neither (`None`).
    pub fn after_call(&mut self, host: &FakeHost, paused: bool) -> Option<Next> {
        let resumed = std::mem::take(&mut *host.resumed.borrow_mut());
        if host.sent.borrow().is_some() {
            assert!(!resumed, "the request was answered and resumed");
            assert!(
                !self.released,
                "a local reply after the request went upstream"
            );
            return Some(Next::AnsweredLocally);
        }
        if !resumed {
            return None;
        }
        assert!(paused, "resumed a stream that was not paused");
        self.release(host);
        Some(Next::Released)
    }
}
