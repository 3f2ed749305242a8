//! The book's generated blocks: a reference table made from the code's own definitions (clap's
//! commands, the error table, the config model) sits in a chapter between two markers, and a
//! test keeps it equal to what the code makes now. `FERRY_WRITE_DOCS=1` rewrites the block
//! instead of failing, which is how a change to a flag or a key updates its page.

use std::path::{Path, PathBuf};

/// The repository's root (this crate is `tests/support`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn begin(name: &str) -> String {
    format!("<!-- generated: {name} (a test keeps this block equal to the code; FERRY_WRITE_DOCS=1 rewrites it) -->\n")
}

const END: &str = "<!-- end generated -->";

/// Fails, naming the chapter and the block and showing the block the code makes, unless the
/// chapter `doc` (relative to the repository) holds `body` between the markers of `name`.
pub fn check_block(doc: &str, name: &str, body: &str) {
    let path = repo_root().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let start = begin(name);
    let expected = format!("{start}{body}{END}");
    let Some(at) = text.find(&start) else {
        panic!("{doc} has no generated block '{name}'; add the markers or run with FERRY_WRITE_DOCS=1 after adding:\n{start}{END}");
    };
    let Some(len) = text[at..].find(END) else {
        panic!("{doc}: the generated block '{name}' has no end marker {END}");
    };
    let found = &text[at..at + len + END.len()];
    if found == expected {
        return;
    }
    if std::env::var_os("FERRY_WRITE_DOCS").is_some() {
        let new = format!("{}{expected}{}", &text[..at], &text[at + len + END.len()..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    let diff: Vec<String> = diff_lines(found, &expected);
    panic!(
        "{doc}: the block '{name}' differs from the code (FERRY_WRITE_DOCS=1 rewrites it):\n{}",
        diff.join("\n")
    );
}

/// The lines only one side has, `-` the chapter's, `+` the code's.
fn diff_lines(found: &str, expected: &str) -> Vec<String> {
    let f: Vec<&str> = found.lines().collect();
    let e: Vec<&str> = expected.lines().collect();
    let mut out: Vec<String> = f
        .iter()
        .filter(|l| !e.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        e.iter()
            .filter(|l| !f.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

/// A Markdown table cell: one line, `|` escaped.
pub fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// Every argument of `cmd` as clap defines it: name and value, default, environment variable,
/// its help (the first paragraph of its doc comment). Hidden arguments are left out.
pub fn cli_table(cmd: &clap::Command) -> String {
    let mut out = String::from("| argument | default | environment | what |\n|---|---|---|---|\n");
    for a in cmd.get_arguments() {
        if a.is_hide_set() {
            continue;
        }
        let value = a
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
        let takes = a.get_action().takes_values();
        let mut name = if a.is_positional() {
            value.clone()
        } else {
            let long = a.get_long().map(|l| format!("--{l}")).unwrap_or_default();
            let short = a.get_short().map(|s| format!("-{s}, ")).unwrap_or_default();
            if takes {
                format!("{short}{long} {value}")
            } else {
                format!("{short}{long}")
            }
        };
        if matches!(a.get_action(), clap::ArgAction::Append) {
            name.push_str(" ...");
        }
        let default = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        let default = if a.is_required_set() {
            "required".to_owned()
        } else if default.is_empty() {
            String::new()
        } else if !takes {
            // A switch's default (`false`) says nothing.
            String::new()
        } else {
            format!("`{}`", cell(&default))
        };
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let help = a
            .get_help()
            .map(|h| cell(&h.to_string()))
            .unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {default} | {env} | {help} |\n",
            cell(&name)
        ));
    }
    out
}

/// `cmd` and each of its subcommands, named as typed (`ferry serve`).
fn walk(name: &str, cmd: &clap::Command) -> Vec<(String, clap::Command)> {
    let mut out = vec![(name.to_owned(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        out.extend(walk(&format!("{name} {}", sub.get_name()), sub));
    }
    out
}

/// The ports `cmd` listens on or connects to by default: each argument whose default is a
/// socket address or whose flag names a port.
pub fn ports_table(name: &str, cmd: &clap::Command) -> String {
    let mut out = String::from("| command | flag | default |\n|---|---|---|\n");
    for (command, c) in walk(name, cmd) {
        for a in c.get_arguments() {
            let Some(default) = a.get_default_values().first() else {
                continue;
            };
            let default = default.to_string_lossy();
            let long = a.get_long().unwrap_or_default();
            let is_port = long.ends_with("port")
                || default.parse::<std::net::SocketAddr>().is_ok()
                || default.starts_with("redis://");
            if is_port && !a.is_hide_set() {
                out.push_str(&format!("| `{command}` | `--{long}` | `{default}` |\n"));
            }
        }
    }
    out
}

/// Every environment variable `cmd` reads through clap, with the flag it stands for.
pub fn env_table(name: &str, cmd: &clap::Command) -> String {
    let mut out = String::from("| variable | command | flag |\n|---|---|---|\n");
    for (command, c) in walk(name, cmd) {
        for a in c.get_arguments() {
            if let (Some(env), Some(long)) = (a.get_env(), a.get_long()) {
                out.push_str(&format!(
                    "| `{}` | `{command}` | `--{long}` |\n",
                    env.to_string_lossy()
                ));
            }
        }
    }
    out
}

/// The literal defaults the prose of `doc`'s section `## `title`` states for `cmd`'s flags,
/// `[--flag VALUE]` in a synopsis or `` `--flag` (default VALUE `` in a sentence, each compared
/// with clap's: returns one line per difference. A metavariable (`[--flag N]`, all capitals)
/// states no default; a value that starts with a digit or is a URL is a stated default (write
/// a metavariable for an example). Generated blocks are not prose and are skipped.
pub fn prose_defaults(doc: &str, title: &str, cmd: &clap::Command) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
    let heading = format!("## `{title}`\n");
    let Some(start) = text.find(&heading) else {
        return vec![format!("{doc}: no section {heading}")];
    };
    let body = &text[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let prose = body.split("<!-- generated:").next().unwrap_or_default();
    let prose = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut stated = Vec::new();
    for (i, _) in prose.match_indices("[--") {
        let rest = &prose[i + 3..];
        let end = rest.find([']', '[']).unwrap_or(rest.len());
        if let Some((flag, value)) = rest[..end].split_once(' ') {
            stated.push((flag.to_owned(), value.trim().to_owned()));
        }
    }
    for (i, _) in prose.match_indices("` (default ") {
        let Some(open) = prose[..i].rfind("`--") else {
            continue;
        };
        let flag = &prose[open + 3..i];
        let rest = &prose[i + "` (default ".len()..];
        let value: String = rest
            .chars()
            .take_while(|c| !matches!(c, ')' | ';' | ' ' | ':'))
            .collect();
        if !flag.contains(' ') {
            stated.push((flag.to_owned(), value));
        }
    }
    let mut out = Vec::new();
    for (flag, value) in stated {
        let is_literal = value.starts_with(|c: char| c.is_ascii_digit()) || value.contains("://");
        if !is_literal {
            continue;
        }
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(&flag)) else {
            out.push(format!(
                "{doc} `{title}`: `--{flag}` is not a flag of the command"
            ));
            continue;
        };
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let value = value.replace(',', "");
        if default.first() != Some(&value) {
            out.push(format!(
                "{doc} `{title}`: the prose says `--{flag}` defaults to {value}, clap says {default:?}"
            ));
        }
    }
    out
}

/// The defaults the other chapters state for a flag, `` `--flag` (default N `` (a number, with
/// `,` separators and an optional KiB/MiB/GiB), each compared with the defaults of every
/// command in `cmds` that has the flag: a value none of them has is one line of the answer.
/// (A flag two commands share is only checked against both.) README.md and docs/*.md but
/// cli.md, whose prose [`prose_defaults`] checks section by section.
pub fn chapter_defaults(cmds: &[clap::Command]) -> Vec<String> {
    let mut defaults: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for cmd in cmds {
        for (_, c) in walk("", cmd) {
            for a in c.get_arguments() {
                if let (Some(long), Some(d)) = (a.get_long(), a.get_default_values().first()) {
                    let entry = defaults.entry(long.to_owned()).or_default();
                    entry.push(d.to_string_lossy().into_owned());
                }
            }
        }
    }
    let mut files = vec![repo_root().join("README.md")];
    let mut book: Vec<_> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("cli.md"))
        .collect();
    book.sort();
    files.extend(book);
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let prose = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (i, _) in prose.match_indices("` (default ") {
            let Some(open) = prose[..i].rfind("`--") else {
                continue;
            };
            let flag = &prose[open + 3..i];
            let rest = &prose[i + "` (default ".len()..];
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .collect::<String>()
                .replace(',', "");
            let Ok(mut value) = number.parse::<u64>() else {
                continue;
            };
            let unit = rest[rest
                .find(|c: char| !(c.is_ascii_digit() || c == ','))
                .unwrap_or(0)..]
                .trim_start();
            for (suffix, factor) in [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)] {
                if unit.starts_with(suffix) {
                    value *= factor;
                }
            }
            let Some(known) = defaults.get(flag) else {
                continue;
            };
            if !known.contains(&value.to_string()) {
                let name = file.file_name().unwrap_or_default().to_string_lossy();
                out.push(format!(
                    "{name}: `--{flag}` (default {number}...): the commands' defaults are {known:?}"
                ));
            }
        }
    }
    out
}
