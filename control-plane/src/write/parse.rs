//! The write path's parse thread: one dedicated thread, at a lower CPU priority than the rest
//! of `ferry serve` (nice + [`NICE`]), that parses and checks write bodies one at a time. On a
//! machine the readers and Envoy share, a write flood's parsing then takes only the CPU they
//! leave idle; the answers of status, metrics and xDS, on the async runtime, are not slowed
//! either. A thread of its own because Linux's nice value is per thread and cannot be lowered
//! back without privilege: a niced thread of the blocking pool would carry it to other work.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

/// How much nicer than the process the parse thread runs (the nice value is capped at 19).
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// The parse thread's queue; the thread ends when the `Parser` is dropped.
pub struct Parser {
    jobs: Option<mpsc::Sender<Job>>,
}

impl Parser {
    /// Starts the thread (or, if no thread can be started, runs jobs on the blocking pool).
    pub fn start() -> Parser {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("ferry-write-parse".into())
            .spawn(move || {
                if let Err(e) = lower_priority() {
                    tracing::warn!(error = %e, "the write parse thread keeps the process's CPU priority");
                }
                while let Ok(job) = rx.recv() {
                    // A panicking job drops its answer: its caller sees an internal error.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                }
            });
        match started {
            Ok(_) => Parser { jobs: Some(tx) },
            Err(e) => {
                tracing::warn!(error = %e, "no write parse thread: parsing on the blocking pool");
                Parser { jobs: None }
            }
        }
    }

    /// Runs `f` on the parse thread, after the jobs before it; `None` if it panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let Some(jobs) = &self.jobs else {
            return tokio::task::spawn_blocking(f).await.ok();
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        jobs.send(job).ok()?;
        rx.await.ok()
    }
}

/// The calling thread's nice value raised by [`NICE`] (Linux: `setpriority(PRIO_PROCESS, 0)`
/// changes the calling thread only).
fn lower_priority() -> std::io::Result<()> {
    let now = rustix::process::getpriority_process(None)?;
    rustix::process::setpriority_process(None, (now + NICE).min(19))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_in_order_on_a_nicer_thread_and_a_panic_is_an_answer() {
        let process = rustix::process::getpriority_process(None).unwrap();
        let p = Parser::start();
        let (nice, name) = p
            .run(|| {
                (
                    rustix::process::getpriority_process(None).unwrap(),
                    std::thread::current().name().map(str::to_owned),
                )
            })
            .await
            .unwrap();
        assert_eq!(nice, (process + NICE).min(19));
        assert_eq!(name.as_deref(), Some("ferry-write-parse"));
        // This thread (and so the process's other threads) kept its priority.
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), process);
        assert_eq!(p.run(|| -> u8 { panic!("a bad job") }).await, None);
        assert_eq!(
            p.run(|| 7).await,
            Some(7),
            "the thread outlives a panicking job"
        );
    }
}
