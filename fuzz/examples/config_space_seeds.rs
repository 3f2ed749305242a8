//! Writes the seeds of `config_space` (one input per case, `config_space::seeds`) to
//! fuzz/corpus/config_space/, replacing what is there: `cargo run --example config_space_seeds`.
fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/config_space");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the corpus folder");
    let cases = ferry_fuzz::config_space::seeds::cases();
    let found = ferry_fuzz::config_space::seeds::find(400_000);
    for (name, data) in &found {
        std::fs::write(dir.join(name), data).expect("write a seed");
    }
    let missing: Vec<&String> = cases
        .iter()
        .filter(|c| !found.iter().any(|(n, _)| n == *c))
        .collect();
    println!(
        "{} seeds written; no input found for: {missing:?}",
        found.len()
    );
}
