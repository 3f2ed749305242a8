//! `ferry-floor`: the floor of a lookup, measured as `ferry-bench` draws its keys. One blocking
//! connection to Redis sends `MGET` of `--batch` stored vector keys, each drawn uniformly from
//! u000001 ..= u{id_space} with ferry-bench's generator (SplitMix64, the same seed mixing), reads
//! the whole answer and times the round trip; closed loop, one request in flight. Where
//! `redis-benchmark` sends the same keys every time (hot in Redis's caches), this is what a
//! random batch costs Redis and the loopback, with nothing of Ferry's in the way (issue #34).
//!
//! `--client` chooses who sends the `MGET`, to tell Redis's own cost from the in-process
//! reader's client (issue #34's "Redis round trip" stage):
//! - `raw` (the default): a blocking socket, RESP written and read by hand; the floor.
//! - `store`: the reader's own [`ferry_reader::store::Store`] (redis-rs's multiplexed
//!   `ConnectionManager`, the reader's deadline and health bookkeeping) on a current-thread
//!   Tokio runtime driven by this thread: what the module's Redis stage runs, without Envoy.
//! - `store-thread`: the same store on a current-thread runtime on a thread of its own, each
//!   `MGET` spawned onto it and its answer sent back over a channel, as the in-process reader
//!   arranges it (`native/src/direct.rs`): adds the two thread hand-offs, without Envoy's
//!   scheduler.
//!
//! Prints one line in `redis-benchmark --csv`'s columns (test, rps, avg, min, p50, p95, p99,
//! max; latencies in ms), so `bench/miss_path.sh` reads both floors alike.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Parser, ValueEnum};
use ferry_reader::metrics::Metrics;
use ferry_reader::store::Store;
use redis::Value;

/// Who sends the `MGET` (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Client {
    Raw,
    Store,
    StoreThread,
}

#[derive(Debug, Parser)]
#[command(name = "ferry-floor", version)]
struct Args {
    /// Redis address (host:port).
    #[arg(long, default_value = "127.0.0.1:6379")]
    redis: String,
    /// The stored vectors' key prefix up to the entity key, e.g. `ferry:bench:scoring:<fp>:`.
    #[arg(long)]
    prefix: String,
    /// Keys per MGET.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Ids are drawn uniformly from u000001 ..= u{id_space}.
    #[arg(long, default_value_t = 100_000)]
    id_space: u64,
    /// Measured seconds.
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Unmeasured seconds before.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    #[arg(long, default_value_t = 20261122)]
    seed: u64,
    /// Fail unless every key is found (the keys are the ones ferry-bench asks for).
    #[arg(long)]
    require_found: bool,
    /// Who sends the `MGET`.
    #[arg(long, value_enum, default_value_t = Client::Raw)]
    client: Client,
    /// The store's deadline per call (the reader's `--redis-timeout-ms` default).
    #[arg(long, default_value_t = 50)]
    redis_timeout_ms: u64,
}

/// SplitMix64, as `bench/src/bodies.rs` (ferry-bench) draws ids.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn id(&mut self, n: u64) -> u64 {
        1 + self.next_u64() % n.max(1)
    }
}

/// The RESP encoding of `MGET` over `batch` keys drawn from `rng`, into `out`.
fn request(out: &mut Vec<u8>, args: &Args, rng: &mut Rng) {
    out.clear();
    out.extend_from_slice(format!("*{}\r\n$4\r\nMGET\r\n", args.batch + 1).as_bytes());
    for _ in 0..args.batch {
        let key = format!("{}u{:06}", args.prefix, rng.id(args.id_space));
        out.extend_from_slice(format!("${}\r\n{key}\r\n", key.len()).as_bytes());
    }
}

/// The same draw as `request`, as a redis-rs command.
fn command(args: &Args, rng: &mut Rng) -> redis::Cmd {
    let mut cmd = redis::cmd("MGET");
    for _ in 0..args.batch {
        cmd.arg(format!("{}u{:06}", args.prefix, rng.id(args.id_space)));
    }
    cmd
}

/// Keys an `MGET` answer found.
fn found(values: &[Value]) -> usize {
    values.iter().filter(|v| !matches!(v, Value::Nil)).count()
}

/// Reads one `MGET` answer (an array of bulk strings), its values skipped; the number found.
fn answer(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>, skip: &mut Vec<u8>) -> Result<usize> {
    let mut header = |r: &mut BufReader<TcpStream>, kind: u8| -> Result<i64> {
        line.clear();
        r.read_until(b'\n', line)?;
        match line.split_first() {
            Some((&k, rest)) if k == kind => Ok(std::str::from_utf8(rest)?.trim_end().parse()?),
            _ => bail!(
                "unexpected answer from Redis: {:?}",
                String::from_utf8_lossy(line)
            ),
        }
    };
    let n = header(r, b'*')?;
    let mut found = 0;
    for _ in 0..n {
        let len = header(r, b'$')?;
        if len >= 0 {
            found += 1;
            skip.resize(len as usize + 2, 0);
            r.read_exact(skip)?;
        }
    }
    Ok(found)
}

/// One round trip: sends a drawn `MGET` and returns the keys found.
enum Sender {
    Raw {
        writer: TcpStream,
        reader: BufReader<TcpStream>,
        req: Vec<u8>,
        line: Vec<u8>,
        skip: Vec<u8>,
    },
    Store {
        runtime: tokio::runtime::Runtime,
        store: Arc<Store>,
    },
    StoreThread {
        handle: tokio::runtime::Handle,
        store: Arc<Store>,
    },
}

impl Sender {
    fn new(args: &Args) -> Result<Self> {
        if args.client == Client::Raw {
            let stream = TcpStream::connect(&args.redis).with_context(|| args.redis.clone())?;
            stream.set_nodelay(true)?;
            return Ok(Sender::Raw {
                writer: stream.try_clone()?,
                reader: BufReader::with_capacity(1 << 20, stream),
                req: Vec::new(),
                line: Vec::new(),
                skip: Vec::new(),
            });
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let target = ferry_redis::RedisArgs::with_url(format!("redis://{}", args.redis))
            .target()
            .map_err(|e| anyhow!("{e}"))?;
        let store = {
            let _inside = runtime.enter();
            Store::new(
                target,
                Duration::from_millis(args.redis_timeout_ms),
                Arc::new(Metrics::default()),
            )
            .map_err(|e| anyhow!("{e}"))?
        };
        let store = Arc::new(store);
        if args.client == Client::Store {
            return Ok(Sender::Store { runtime, store });
        }
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("floor-runtime".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(Sender::StoreThread { handle, store })
    }

    /// Draws the keys (untimed), then times one round trip: (microseconds, keys found).
    fn round_trip(&mut self, args: &Args, rng: &mut Rng) -> Result<(u64, usize)> {
        match self {
            Sender::Raw {
                writer,
                reader,
                req,
                line,
                skip,
            } => {
                request(req, args, rng);
                let t0 = Instant::now();
                writer.write_all(req)?;
                let found = answer(reader, line, skip)?;
                Ok((t0.elapsed().as_micros() as u64, found))
            }
            Sender::Store { runtime, store } => {
                let cmd = command(args, rng);
                let t0 = Instant::now();
                let values = runtime
                    .block_on(store.mget(&cmd))
                    .map_err(|e| anyhow!("{e}"))?;
                Ok((t0.elapsed().as_micros() as u64, found(&values)))
            }
            Sender::StoreThread { handle, store } => {
                let cmd = command(args, rng);
                let (tx, rx) = mpsc::sync_channel(1);
                let store = store.clone();
                let t0 = Instant::now();
                handle.spawn(async move {
                    let values = store.mget(&cmd).await.map(|v| found(&v));
                    // The receiver waits for this answer; it cannot be gone.
                    let _ = tx.send(values);
                });
                let found = rx
                    .recv()
                    .context("the runtime thread dropped the answer")?
                    .map_err(|e| anyhow!("{e}"))?;
                Ok((t0.elapsed().as_micros() as u64, found))
            }
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut sender = Sender::new(&args)?;
    let mut rng = Rng(args.seed ^ 0x2545_f491_4f6c_dd1d);
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let warm_until = Instant::now() + Duration::from_secs_f64(args.warmup);
    let mut started = Instant::now();
    let mut measuring = args.warmup <= 0.0;
    let mut requests = 0u64;
    loop {
        let now = Instant::now();
        if !measuring && now >= warm_until {
            measuring = true;
            started = now;
        }
        if measuring && now.duration_since(started).as_secs_f64() >= args.duration {
            break;
        }
        let (us, found) = sender.round_trip(&args, &mut rng)?;
        if args.require_found && found != args.batch {
            bail!("{found} of {} keys found (is --prefix right?)", args.batch);
        }
        if measuring {
            hist.record(us.max(1))?;
            requests += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let test = match args.client {
        Client::Raw => "MGET_random",
        Client::Store => "MGET_random_store",
        Client::StoreThread => "MGET_random_store_thread",
    };
    println!(
        "\"{test}_{}\",\"{:.2}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\",\"{:.3}\"",
        args.batch,
        requests as f64 / secs,
        hist.mean() / 1000.0,
        hist.min() as f64 / 1000.0,
        ms(0.5),
        ms(0.95),
        ms(0.99),
        hist.max() as f64 / 1000.0,
    );
    Ok(())
}
