//! The process limits `ferry serve` (and `ferry log-sink`) need: one file descriptor per HTTP
//! connection and per gRPC connection, so caps of thousands need more than the usual soft
//! limit of 1,024 open files.

/// Descriptors beside the connections: the listeners, the state directory, logs, Redis.
const SPARE_FILES: u64 = 64;

/// Raises the soft limit of open files to the hard limit when `max_connections` (HTTP
/// connections and xDS streams, plus the spare) does not fit under it; warns when even the hard limit is too low (raise it with
/// `ulimit -Hn`, or the container runtime's `nofile`).
pub fn raise_open_files(max_connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let want = max_connections as u64 + SPARE_FILES;
    let mut limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= want {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    limit.current = Some(hard.min(want.max(soft)));
    let raised = limit.current;
    if let Err(e) = setrlimit(Resource::Nofile, limit) {
        tracing::warn!(error = %e, soft, want, "could not raise the open-file limit");
        return;
    }
    if raised.is_some_and(|r| r < want) {
        tracing::warn!(
            limit = ?raised,
            want,
            "the open-file limit is below what the connection caps (--max-http-connections, \
             --max-streams, --max-connections) need; raise the hard limit (ulimit -Hn, or the \
             container's nofile)"
        );
    }
}
