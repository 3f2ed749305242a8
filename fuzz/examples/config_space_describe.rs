//! Prints what `config_space` inputs draw: `cargo run --example config_space_describe FILE...`.
fn main() {
    for path in std::env::args().skip(1) {
        let data = std::fs::read(&path).unwrap_or_default();
        println!("{path}: {}", ferry_fuzz::config_space::describe(&data));
    }
}
