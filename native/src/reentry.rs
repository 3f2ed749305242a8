//! Where a stream stands with respect to Envoy's hooks, owned in one place. Envoy may deliver a
//! reader answer inside the call that sent it, i.e. inside a hook, and continuing a stream from
//! inside its own filter callback is not allowed: a resume asked for while a hook runs is kept
//! and becomes the hook's return value (Continue) instead.

use std::cell::Cell;

/// The hook running on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Request or response headers, or trailers.
    Headers,
    /// The request body: the newest chunk is not in the buffered body yet.
    RequestBody,
}

/// A resume the core asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    Request,
    Response,
}

#[derive(Default)]
pub struct Reentry {
    hook: Cell<Option<Hook>>,
    request_resumed: Cell<bool>,
    response_resumed: Cell<bool>,
}

impl Reentry {
    pub fn enter(&self, hook: Hook) {
        self.hook.set(Some(hook));
    }

    /// Ends the hook; true if a resume was asked for meanwhile (the hook then continues).
    pub fn leave(&self) -> bool {
        self.hook.set(None);
        let request = self.request_resumed.replace(false);
        let response = self.response_resumed.replace(false);
        request || response
    }

    pub fn in_body_hook(&self) -> bool {
        self.hook.get() == Some(Hook::RequestBody)
    }

    /// Keeps `resume` for the running hook's return value: true if a hook runs (the caller
    /// must not call Envoy), false outside hooks (the caller resumes the stream itself).
    pub fn defer(&self, resume: Resume) -> bool {
        if self.hook.get().is_none() {
            return false;
        }
        match resume {
            Resume::Request => self.request_resumed.set(true),
            Resume::Response => self.response_resumed.set(true),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_inside_a_hook_is_its_return_value_once() {
        let r = Reentry::default();
        assert!(!r.defer(Resume::Request), "outside hooks: resume now");
        r.enter(Hook::Headers);
        assert!(!r.in_body_hook());
        assert!(r.defer(Resume::Response));
        assert!(r.leave(), "resumed meanwhile");
        r.enter(Hook::RequestBody);
        assert!(r.in_body_hook());
        assert!(!r.leave(), "the earlier resume was used up");
        assert!(!r.in_body_hook());
    }
}
