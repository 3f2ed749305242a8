//! A chapter of the book run as written: its files (a fenced block under
//! `<!-- file: PATH -->`) are written, then its `sh` blocks are run in order by bash in a fresh
//! folder laid out like a checkout (links to what `make test` built), each block bounded in time;
//! a block under `<!-- output of the command above -->` must equal, as JSON, what the block
//! before it printed. Only the ports are changed (each of the chapter's ports to a free one), and
//! blocks under `<!-- run: no ... -->` are skipped. The processes a block starts in the
//! background are killed with its process group when the run ends.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// The longest a block may run (a cold Envoy start and a debug materialize included).
const BLOCK_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug)]
enum Block {
    File {
        path: String,
        text: String,
    },
    Run {
        text: String,
        expect: Option<String>,
    },
    Skipped,
}

/// The page's blocks in order: files, commands (with the output the page shows after them).
fn blocks(page: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(m) = line
            .strip_prefix("<!-- ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            marker = Some(m.to_owned());
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            // A marker names the block right under it.
            if !line.trim().is_empty() {
                marker = None;
            }
            continue;
        };
        let mut text = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        match marker.take().as_deref() {
            Some(m) if m.starts_with("file: ") => out.push(Block::File {
                path: m["file: ".len()..].to_owned(),
                text,
            }),
            Some(m) if m.starts_with("run: no") => out.push(Block::Skipped),
            Some("output of the command above") => match out.last_mut() {
                Some(Block::Run { expect, .. }) => *expect = Some(text),
                _ => panic!("{page}: an output block follows no command block"),
            },
            _ if lang == "sh" => out.push(Block::Run { text, expect: None }),
            _ => {}
        }
    }
    out
}

/// `text` with each page port, as a whole number, replaced by its free port.
fn with_ports(text: &str, ports: &[(u16, u16)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..i]);
        let digits = rest[i..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - i);
        let number = &rest[i..i + digits];
        let before = out.chars().last();
        let swapped = ports.iter().find(|(from, _)| number == from.to_string());
        match swapped {
            Some((_, to)) if before != Some('.') => out.push_str(&to.to_string()),
            _ => out.push_str(number),
        }
        rest = &rest[i + digits..];
    }
    out.push_str(rest);
    out
}

/// Kills each block's process group (its background processes with it).
struct Groups(Vec<u32>);

impl Drop for Groups {
    fn drop(&mut self) {
        for signal in ["-TERM", "-KILL"] {
            for pgid in &self.0 {
                let _ = Command::new("kill")
                    .args([signal, "--", &format!("-{pgid}")])
                    .stderr(Stdio::null())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn wait(page: &str, child: &mut Child, what: &str, log: &Path) {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("waiting for bash") {
            Some(status) => {
                assert!(
                    status.success(),
                    "{page}: this block failed ({status}):\n{what}\noutput:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
                return;
            }
            None if start.elapsed() > BLOCK_LIMIT => panic!(
                "{page}: this block ran over {BLOCK_LIMIT:?}:\n{what}\noutput:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            ),
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Runs the chapter `page` (relative to the repository) in a temporary folder holding `links`
/// (a path in the folder, and what it points to), its `ports` each moved to a free port; checks
/// every output the page shows, and returns what each such command printed, as JSON.
pub fn run_chapter(page: &str, ports: &[u16], links: &[(&str, PathBuf)]) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(crate::root().join(page)).unwrap();
    let ports: Vec<(u16, u16)> = ports.iter().map(|&p| (p, free_port())).collect();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    for (path, target) in links {
        let link = cwd.join(path);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, link).unwrap();
    }
    let all = blocks(page, &text);
    let runs = all
        .iter()
        .filter(|b| matches!(b, Block::Run { .. }))
        .count();
    let checked = all
        .iter()
        .filter(|b| {
            matches!(
                b,
                Block::Run {
                    expect: Some(_),
                    ..
                }
            )
        })
        .count();
    assert!(
        runs >= 2 && checked >= 1,
        "{page}: {runs} command blocks, {checked} with output"
    );
    let mut printed = Vec::new();
    let mut groups = Groups(Vec::new());
    for (n, block) in all.iter().enumerate() {
        match block {
            Block::Skipped => {}
            Block::File { path, text } => {
                let path = cwd.join(path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, with_ports(text, &ports)).unwrap();
            }
            Block::Run { text, expect } => {
                let script = with_ports(text, &ports);
                let log = cwd.join(format!("block-{n}.out"));
                let out = std::fs::File::create(&log).unwrap();
                let mut cmd = Command::new("bash");
                cmd.args(["-euo", "pipefail", "-c", &script])
                    .current_dir(cwd)
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out)
                    .process_group(0);
                // The page's commands see none of the test's own settings.
                for (k, _) in std::env::vars_os() {
                    if k.to_string_lossy().starts_with("FERRY_") {
                        cmd.env_remove(k);
                    }
                }
                let mut child = cmd.spawn().expect("bash");
                groups.0.push(child.id());
                wait(page, &mut child, &script, &log);
                if let Some(expect) = expect {
                    let said = std::fs::read_to_string(&log).unwrap();
                    let said: serde_json::Value = serde_json::from_str(&said).unwrap_or_else(|e| {
                        panic!("{page}: `{script}` printed no JSON ({e}):\n{said}")
                    });
                    let pretty = serde_json::to_string_pretty(&said).unwrap();
                    let shown: serde_json::Value =
                        serde_json::from_str(expect).unwrap_or_else(|e| {
                            panic!("{page}: the output block is not JSON ({e}); printed:\n{pretty}")
                        });
                    assert_eq!(
                        said, shown,
                        "{page}: the answer to `{script}` differs from the page's:\nprinted:\n{pretty}"
                    );
                    printed.push(said);
                }
            }
        }
    }
    printed
}
