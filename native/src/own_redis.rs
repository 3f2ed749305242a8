//! The in-process reader's own Redis connection (issue #34): for one Redis reached in plain TCP,
//! Envoy's worker thread writes a lookup's `MGET` on a socket of the module's own, and one
//! thread of the module reads the answers off it, in order, and hands each to its stream
//! through Envoy's scheduler. What this removes from a lookup is the hand-off to the reader's
//! runtime (waking its thread to send the command through redis-rs's driver task), measured
//! at a quarter of what the in-process path added at batch 1 (`bench/README.md`).
//!
//! Only the happy path runs here; everything else keeps the reader's behaviour by being handed
//! to the runtime path (`Direct::run`), which answers with the reader's own errors:
//! - Redis behind TLS, a Cluster, a Unix socket or RESP3, and Feast-layout lookups (pipelines):
//!   never sent here;
//! - while the connection is down or being made, or with `--max-concurrency` lookups already
//!   waiting on it: the lookup takes the runtime path;
//! - an error reply (`-NOAUTH`, `-LOADING`, ...) or a connection lost with lookups in flight:
//!   those lookups are sent again through the runtime path within what is left of their time
//!   (a read is safe to repeat), and the connection is made again.
//!
//! Deadlines: a lookup not answered within the reader's `--redis-timeout-ms` is answered with
//! the reader's `redis_timeout` error (or, if the call's own timeout is shorter, a 504 without
//! a body, as on the runtime path); its late answer is read and dropped. A connection that
//! answers nothing for as long as the store's silence limit while lookups wait is closed and
//! made again. A write never waits for long on Envoy's worker: the socket's send timeout is
//! `WRITE_TIMEOUT`, and a write that cannot finish closes the connection (the lookup takes the
//! runtime path).

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferry_reader::batch::Batch;
use ferry_reader::{Reader, ReaderError};
use redis::{ConnectionInfo, ProtocolVersion, Value};

use crate::direct::Direct;
use crate::slot::{CallResponse, Slot};
use crate::stages::{self, Stage};

/// How long a write on Envoy's worker may wait for room in the socket's send buffer. Loopback
/// and LAN writes of a command never wait while Redis reads its socket; a Redis that stopped
/// reading gets its connection closed instead of holding the worker.
const WRITE_TIMEOUT: Duration = Duration::from_millis(2);
/// The connection's name in Redis's `CLIENT LIST`.
pub const CLIENT_NAME: &str = "ferry-native-reader";
/// How often waiting lookups are checked against their deadlines.
const WATCH_EVERY: Duration = Duration::from_millis(5);
/// Between two attempts to connect.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Where Redis is and how to log in, taken from the reader's target.
#[derive(Clone)]
pub struct Node {
    host: String,
    port: u16,
    db: i64,
    username: Option<String>,
    password: Option<String>,
}

impl Node {
    /// The node, if the reader's Redis can be reached this way (see the module's comment).
    pub fn of(info: &ConnectionInfo) -> Option<Self> {
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        Some(Self {
            host: host.clone(),
            port: *port,
            db: settings.db(),
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
        })
    }
}

/// A lookup written on the connection and waiting for its answer.
struct Waiting {
    slot: Slot,
    token: u32,
    batch: Batch,
    /// The request body, kept to send it again through the runtime path.
    body: Vec<u8>,
    /// When its command was written.
    sent: Instant,
    /// The same, for the stage timers (`None` when they are off).
    mark: Option<Instant>,
    /// When it is answered for its time (see `Deadline`).
    deadline: Instant,
    /// How: the reader's timeout error, or an empty 504 when the call's timeout came first.
    late: Late,
    /// The call's own time, for the runtime path if it must go there.
    timeout: Duration,
    /// Already answered for its time: its answer is read and dropped.
    answered: bool,
}

#[derive(Clone, Copy)]
enum Late {
    RedisTimeout,
    CallTimeout,
}

/// The connection as the worker threads see it.
struct Link {
    /// The writing half; `None` while there is no connection.
    stream: Option<TcpStream>,
    /// In the order their commands were written, which is the order of Redis's answers.
    waiting: VecDeque<Waiting>,
    /// A reusable buffer for the encoded command.
    packed: Vec<u8>,
}

pub struct OwnRedis {
    node: Node,
    link: Mutex<Link>,
    /// `--max-concurrency`: lookups waiting on the connection at most.
    max_waiting: usize,
    /// `--redis-timeout-ms`.
    redis_timeout: Duration,
    /// A connection that answers nothing this long while lookups wait is made again.
    silence_limit: Duration,
}

/// Why a lookup was not sent here: it takes the runtime path with its body.
pub struct NotSent(pub Vec<u8>);

impl OwnRedis {
    pub fn new(node: Node, max_waiting: u32, redis_timeout: Duration) -> Self {
        Self {
            node,
            link: Mutex::new(Link {
                stream: None,
                waiting: VecDeque::new(),
                packed: Vec::new(),
            }),
            max_waiting: usize::try_from(max_waiting).unwrap_or(usize::MAX).max(1),
            redis_timeout,
            silence_limit: redis_timeout.max(Duration::from_secs(1)),
        }
    }

    /// Starts the threads that make the connection, read its answers and watch the deadlines.
    pub fn start(&'static self, direct: &'static Direct) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("ferry-redis".into())
            .spawn(move || self.read_forever(direct))?;
        std::thread::Builder::new()
            .name("ferry-redis-watch".into())
            .spawn(move || self.watch_forever())?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        match self.link.lock() {
            Ok(link) => link,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// On Envoy's worker: decodes the lookup and writes its command, or gives the body back
    /// for the runtime path. A request the reader refuses is answered here with its error.
    pub fn submit(
        &self,
        reader: &Reader,
        slot: &Slot,
        token: u32,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), NotSent> {
        let started = stages::now();
        let batch = match reader.prepare(&body[..]) {
            Ok(batch) => batch,
            Err(e) => {
                slot.answer(token, error(&e));
                return Ok(());
            }
        };
        let Some(command) = batch.command() else {
            if batch.pipeline().is_some() {
                return Err(NotSent(body));
            }
            // No key at all: nothing to ask Redis.
            slot.answer(token, answered(reader.answer(&batch, Vec::new())));
            return Ok(());
        };
        let mut link = self.lock();
        if link.waiting.len() >= self.max_waiting {
            return Err(NotSent(body));
        }
        let Link { stream, packed, .. } = &mut *link;
        let Some(socket) = stream.as_mut() else {
            return Err(NotSent(body));
        };
        packed.clear();
        command.write_packed_command(packed);
        if socket.write_all(packed).is_err() {
            // Part of a command may be on the wire: the connection cannot be used again.
            close(stream);
            return Err(NotSent(body));
        }
        stages::since(Stage::ReaderDecode, started);
        let sent = Instant::now();
        let (deadline, late) = if timeout < self.redis_timeout {
            (sent + timeout, Late::CallTimeout)
        } else {
            (sent + self.redis_timeout, Late::RedisTimeout)
        };
        link.waiting.push_back(Waiting {
            slot: slot.clone(),
            token,
            batch,
            body,
            sent,
            mark: stages::now(),
            deadline,
            late,
            timeout,
            answered: false,
        });
        Ok(())
    }

    /// The reading thread: connects, reads answers until the connection fails, sends what was
    /// waiting through the runtime path, and connects again.
    fn read_forever(&'static self, direct: &'static Direct) {
        let mut retry = RETRY_FIRST;
        loop {
            let reading = match self.connect() {
                Ok(reading) => reading,
                Err(_) => {
                    // Lookups take the runtime path meanwhile, which reports Redis's state.
                    std::thread::sleep(retry);
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            retry = RETRY_FIRST;
            self.read_answers(direct, reading);
            let orphans: Vec<Waiting> = {
                let mut link = self.lock();
                close(&mut link.stream);
                link.waiting.drain(..).collect()
            };
            for w in orphans.into_iter().filter(|w| !w.answered) {
                let left = w.timeout.saturating_sub(w.sent.elapsed());
                direct.run(&w.slot, w.token, w.body, left);
            }
            std::thread::sleep(RETRY_FIRST);
        }
    }

    /// A new connection, logged in, its writing half in place for the workers.
    fn connect(&self) -> std::io::Result<BufReader<TcpStream>> {
        let node = &self.node;
        let connect_timeout = self.silence_limit;
        let mut last = std::io::Error::other("no address");
        for addr in (node.host.as_str(), node.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, connect_timeout) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    stream.set_read_timeout(Some(connect_timeout))?;
                    let mut reading = BufReader::new(stream.try_clone()?);
                    let mut writing = stream;
                    self.log_in(&mut writing, &mut reading)?;
                    reading.get_ref().set_read_timeout(None)?;
                    writing.set_write_timeout(Some(WRITE_TIMEOUT))?;
                    self.lock().stream = Some(writing);
                    return Ok(reading);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `AUTH` and `SELECT` as the URL and flags ask, each answered before any lookup is sent.
    fn log_in(
        &self,
        writing: &mut TcpStream,
        reading: &mut BufReader<TcpStream>,
    ) -> std::io::Result<()> {
        let node = &self.node;
        let mut commands = Vec::new();
        if let Some(password) = &node.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &node.username {
                auth.arg(user);
            }
            commands.push(auth.arg(password).clone());
        }
        if node.db != 0 {
            commands.push(redis::cmd("SELECT").arg(node.db).clone());
        }
        let mut parser = redis::Parser::new();
        for command in commands {
            writing.write_all(&command.get_packed_command())?;
            match parser.parse_value(&mut *reading) {
                Ok(Value::Okay) => {}
                Ok(Value::SimpleString(s)) if s == "OK" => {}
                // Not shown: an AUTH answer is about a secret.
                _ => return Err(std::io::Error::other("redis refused the login")),
            }
        }
        // A name in `CLIENT LIST` for operators; an ACL user without `@connection` may refuse
        // it, which costs nothing but the name.
        let name = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(CLIENT_NAME)
            .get_packed_command();
        writing.write_all(&name)?;
        parser
            .parse_value(&mut *reading)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(())
    }

    /// Reads answers in order until the connection fails or says something out of order.
    fn read_answers(&self, direct: &'static Direct, mut reading: BufReader<TcpStream>) {
        let mut parser = redis::Parser::new();
        while let Ok(value) = parser.parse_value(&mut reading) {
            let Some(w) = self.lock().waiting.pop_front() else {
                return; // an answer nobody asked for: the stream is out of step
            };
            if w.answered {
                continue;
            }
            stages::since(Stage::Redis, w.mark);
            match value {
                Value::Array(values) => {
                    let encoded = stages::now();
                    let response = answered(direct.reader().answer(&w.batch, values));
                    stages::since(Stage::ReaderEncode, encoded);
                    w.slot.answer(w.token, response);
                }
                // An error reply: the runtime path answers it with the reader's own error.
                _ => {
                    let left = w.timeout.saturating_sub(w.sent.elapsed());
                    direct.run(&w.slot, w.token, w.body, left);
                }
            }
        }
    }

    /// The watching thread: answers lookups past their deadline, and closes a connection that
    /// has answered nothing for the silence limit (the reading thread then makes a new one).
    fn watch_forever(&self) {
        loop {
            std::thread::sleep(WATCH_EVERY);
            let now = Instant::now();
            let mut late = Vec::new();
            {
                let mut link = self.lock();
                for w in link.waiting.iter_mut().filter(|w| !w.answered) {
                    if w.deadline <= now {
                        w.answered = true;
                        late.push((w.slot.clone(), w.token, w.late));
                    }
                }
                let silent = link
                    .waiting
                    .front()
                    .is_some_and(|w| now.duration_since(w.sent) >= self.silence_limit);
                if silent {
                    close(&mut link.stream);
                }
            }
            for (slot, token, how) in late {
                let response = match how {
                    Late::RedisTimeout => error(&ReaderError::RedisTimeout(
                        u64::try_from(self.redis_timeout.as_millis()).unwrap_or(u64::MAX),
                    )),
                    Late::CallTimeout => CallResponse {
                        status: Some(504),
                        body: Vec::new(),
                    },
                };
                slot.answer(token, response);
            }
        }
    }
}

/// Shuts the connection both ways (the reading thread's read returns) and forgets it.
fn close(stream: &mut Option<TcpStream>) {
    if let Some(s) = stream.take() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

fn answered(result: Result<bytes::Bytes, ReaderError>) -> CallResponse {
    match result {
        Ok(vectors) => CallResponse {
            status: Some(200),
            body: vectors.to_vec(),
        },
        Err(e) => error(&e),
    }
}

/// The reader's own JSON error, as the runtime path answers it.
pub fn error(e: &ReaderError) -> CallResponse {
    CallResponse {
        status: Some(e.status().as_u16()),
        body: e.body().to_string().into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direct::{start_leaked, Direct};
    use ferry_protos::v1::{Lookup, VectorRequest, VectorResponse};
    use ferry_test_support::redis::RedisServer;
    use prost::Message;

    const FP: u64 = 0x0123_4567_89ab_cdef;

    fn key(user: &str) -> String {
        ferry_protos::redis_key("p", "s", FP, user)
    }

    fn body(users: &[&str]) -> Vec<u8> {
        VectorRequest {
            project: "p".into(),
            lookups: vec![Lookup {
                service: "s".into(),
                fingerprint: FP,
                entity_keys: users.iter().map(|u| u.to_string()).collect(),
                feast: None,
            }],
        }
        .encode_to_vec()
    }

    fn redis(url: &str, args: &[&str]) -> Value {
        let client = redis::Client::open(url).expect("url");
        let mut conn = client.get_connection().expect("connect");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn).expect("command")
    }

    /// Waits until the own connection is up (lookups take it from then on).
    fn connected(direct: &Direct) {
        let own = direct.own().expect("an own connection");
        let deadline = Instant::now() + Duration::from_secs(10);
        while own.lock().stream.is_none() {
            assert!(Instant::now() < deadline, "never connected");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts a lookup one way or the other and waits for its answer.
    fn ask(direct: &'static Direct, own: bool, users: &[&str]) -> CallResponse {
        static TOKEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let token = TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = Slot::default();
        let timeout = Duration::from_secs(5);
        if own {
            direct.submit(&slot, token, body(users), timeout);
        } else {
            direct.run(&slot, token, body(users), timeout);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(answer) = slot.take(token) {
                return answer;
            }
            assert!(Instant::now() < deadline, "no answer");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn vectors(answer: &CallResponse) -> Vec<Vec<u8>> {
        assert_eq!(
            answer.status,
            Some(200),
            "{:?}",
            String::from_utf8_lossy(&answer.body)
        );
        let response = VectorResponse::decode(&answer.body[..]).expect("a VectorResponse");
        response
            .results
            .into_iter()
            .flat_map(|r| r.vectors)
            .collect()
    }

    /// The last command of the client named `CLIENT_NAME`, if it is connected.
    fn own_client_last_command(url: &str) -> Option<String> {
        let client = redis::Client::open(url).expect("url");
        let mut conn = client.get_connection().expect("connect");
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut conn)
            .expect("list");
        last_command(&list)
    }

    fn last_command(list: &str) -> Option<String> {
        let line = list
            .lines()
            .find(|l| l.contains(&format!(" name={CLIENT_NAME} ")))?;
        let cmd = line.split(' ').find_map(|f| f.strip_prefix("cmd="))?;
        Some(cmd.to_owned())
    }

    #[test]
    fn answers_equal_the_runtime_paths_and_come_over_the_own_connection() {
        let server = RedisServer::start();
        let url = server.url();
        redis(&url, &["SET", &key("u1"), "one"]);
        redis(&url, &["SET", &key("u3"), "three"]);
        let direct = start_leaked(&format!("--redis {url}"));
        connected(direct);
        let users = ["u1", "u2", "u3"];
        let own = ask(direct, true, &users);
        assert_eq!(own_client_last_command(&url).as_deref(), Some("mget"));
        let runtime = ask(direct, false, &users);
        assert_eq!(own, runtime);
        assert_eq!(vectors(&own), [b"one".to_vec(), vec![], b"three".to_vec()]);
        // Refused by the reader's own rules before anything is sent, with its error.
        let refused = ask(direct, true, &["bad key\n"]);
        assert_eq!(refused.status, Some(400), "{refused:?}");
        assert_eq!(refused, ask(direct, false, &["bad key\n"]));
    }

    #[test]
    fn an_acl_user_logs_in_and_a_selected_database_is_read() {
        let server = RedisServer::start_with_password("admin-pass");
        let admin = format!("redis://:admin-pass@127.0.0.1:{}/3", server.port);
        redis(&admin, &["SET", &key("u1"), "in db 3"]);
        let url = format!("redis://ferry:ferry-pass@127.0.0.1:{}/3", server.port);
        let direct = start_leaked(&format!("--redis {url}"));
        connected(direct);
        assert_eq!(vectors(&ask(direct, true, &["u1"])), [b"in db 3".to_vec()]);
        assert_eq!(own_client_last_command(&admin).as_deref(), Some("mget"));
    }

    #[test]
    fn redis_away_is_answered_by_the_runtime_path_and_the_connection_comes_back() {
        let mut server = RedisServer::start();
        let url = server.url();
        let direct = start_leaked(&format!("--redis {url} --redis-timeout-ms 300"));
        connected(direct);
        server.stop();
        let down = ask(direct, true, &["u1"]);
        assert_eq!(down.status, Some(503), "{down:?}");
        assert!(
            String::from_utf8_lossy(&down.body).contains("redis_unavailable"),
            "the reader's own error: {down:?}"
        );
        server.restart();
        redis(&url, &["SET", &key("u1"), "back"]);
        connected(direct);
        assert_eq!(vectors(&ask(direct, true, &["u1"])), [b"back".to_vec()]);
        assert_eq!(own_client_last_command(&url).as_deref(), Some("mget"));
    }

    #[test]
    fn a_stalled_redis_is_answered_at_the_deadline_and_its_late_answer_dropped() {
        let server = RedisServer::start_args(&["--enable-debug-command", "yes"]);
        let url = server.url();
        redis(&url, &["SET", &key("u1"), "one"]);
        redis(&url, &["SET", &key("u2"), "two"]);
        let direct = start_leaked(&format!("--redis {url} --redis-timeout-ms 200"));
        connected(direct);
        let sleeper = {
            let url = url.clone();
            std::thread::spawn(move || redis(&url, &["DEBUG", "SLEEP", "0.8"]))
        };
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let late = ask(direct, true, &["u1"]);
        assert_eq!(late.status, Some(504), "{late:?}");
        assert!(
            String::from_utf8_lossy(&late.body).contains("redis_timeout"),
            "the reader's own error: {late:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "answered at its deadline"
        );
        sleeper.join().expect("DEBUG SLEEP");
        // The late answer to u1 is read and dropped: u2's answer is u2's.
        assert_eq!(vectors(&ask(direct, true, &["u2"])), [b"two".to_vec()]);
    }

    #[test]
    fn an_error_reply_is_answered_by_the_runtime_path() {
        // MGET renamed away: Redis answers it with an error, on either path.
        let server = RedisServer::start_args(&["--rename-command", "MGET", "\"\""]);
        let url = server.url();
        let direct = start_leaked(&format!("--redis {url}"));
        connected(direct);
        let own = ask(direct, true, &["u1"]);
        assert_eq!(own.status, Some(503), "{own:?}");
        assert_eq!(own, ask(direct, false, &["u1"]));
    }
}
