//! Runs `config_space` (the replay entry: known open bugs skipped) over COUNT inputs of the
//! pseudo-random stream SEED and tallies the outcomes; stops at the first broken property:
//! `cargo run --release --example config_space_sweep COUNT [SEED]`.
use ferry_fuzz::config_space::{draw, known_open, play_drawn, stream, Outcome};

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let (mut refused, mut known, mut replied, mut forwarded, mut held) = (0, 0, 0, 0, 0);
    let started = std::time::Instant::now();
    for data in stream(seed, count) {
        let d = match draw(&data) {
            Ok(d) => d,
            Err(_) => {
                refused += 1;
                continue;
            }
        };
        if known_open(&d).is_some() {
            known += 1;
            continue;
        }
        match play_drawn(d) {
            Outcome::Replied(..) => replied += 1,
            Outcome::Forwarded => forwarded += 1,
            Outcome::Held => held += 1,
            _ => {}
        }
    }
    println!(
        "{count} inputs in {:.1} s: {forwarded} forwarded, {replied} answered locally, {held} held, \
         {refused} snapshots refused, {known} reaching a known open bug (skipped)",
        started.elapsed().as_secs_f64()
    );
}
