//! The in-process reader's settings: the value of `FERRY_NATIVE_READER`, the reader's own flags
//! (`--redis URL ...`), split as a POSIX shell splits words so that a value may hold spaces,
//! then parsed by the reader's `clap` definition. No error repeats a value: any of them may be a
//! password.
//!
//! Splitting: blanks separate words; `'...'` keeps everything literally; `"..."` keeps
//! everything but `\"` and `\\`; outside quotes a `\` keeps the next character; a word that
//! starts with `#` starts a comment, as in a shell. So
//! `FERRY_NATIVE_READER="--redis redis://r:6379 --redis-password 'a b'"` sets the password
//! `a b`.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use ferry_reader::Config;

/// The variable that turns the in-process reader on; its value is the reader's flags.
pub const VARIABLE: &str = "FERRY_NATIVE_READER";

const QUOTING: &str = "split like shell words: quote a value with spaces, e.g. \
                       --redis-password 'two words'";

/// The reader's configuration from the variable's value.
pub fn parse(flags: &str) -> Result<Config, String> {
    let words = split(flags)?;
    let args = std::iter::once("ferry-native".to_owned()).chain(words);
    Config::try_parse_from(args).map_err(|e| describe(&e))
}

/// Splits `flags` into words (see the module's comment), with `shlex`: the splitting of the
/// `cc` build tool, already in the build.
fn split(flags: &str) -> Result<Vec<String>, String> {
    shlex::split(flags).ok_or_else(|| {
        format!(
            "{VARIABLE}: a quote is not closed, or a backslash ends it (its value is {QUOTING})"
        )
    })
}

/// What clap found wrong, naming the flag but never a value (clap's own message quotes them).
fn describe(e: &clap::Error) -> String {
    let flag = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.as_str()),
        _ => None,
    };
    let what = match e.kind() {
        ErrorKind::UnknownArgument => match flag {
            // Any other word may be part of a value that lost its quotes (`-x`, `--a=b` too).
            Some(f) if is_flag_name(f) => format!("unknown flag {f}"),
            _ => "a word that is no flag and follows no flag (not shown: it may be a secret)"
                .to_owned(),
        },
        // `-hunter2`, a value that lost its quotes, reads as `-h`.
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        | ErrorKind::DisplayVersion => {
            "a word read as -h/--help or -V/--version (not shown: it may be part of a value)"
                .to_owned()
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            format!("invalid value for {}", flag.unwrap_or("a flag"))
        }
        ErrorKind::NoEquals => {
            format!("{} needs a value", flag.unwrap_or("a flag"))
        }
        kind => {
            let name = kind
                .as_str()
                .map_or_else(|| format!("{kind:?}"), str::to_owned);
            match flag {
                Some(f) => format!("{name} ({f})"),
                None => name,
            }
        }
    };
    format!("{VARIABLE}: {what}; its value is the reader's flags, {QUOTING}")
}

/// `--name`: lower-case letters, digits and dashes, as every reader flag is spelt.
fn is_flag_name(word: &str) -> bool {
    word.strip_prefix("--").is_some_and(|name| {
        name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell() {
        let w = |s: &str| split(s).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(w("  --a  b\t--c "), ["--a", "b", "--c"]);
        assert_eq!(
            w("--p 'a b' --q \"c \\\" d\""),
            ["--p", "a b", "--q", "c \" d"]
        );
        assert_eq!(w(r"--p a\ b"), ["--p", "a b"]);
        assert_eq!(w("--p ''"), ["--p", ""]);
        assert_eq!(w(r#"--p x'y z'"w""#), ["--p", "xy zw"]);
        assert!(w("").is_empty());
    }

    #[test]
    fn a_password_with_a_space_is_one_value() {
        let c = parse("--redis redis://127.0.0.1:1/0 --redis-password 'pass word' --threads 2")
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.redis.password.as_deref(), Some("pass word"));
        assert_eq!(c.redis.url, "redis://127.0.0.1:1/0");
        assert_eq!(c.threads, 2);
    }

    #[test]
    fn errors_never_repeat_a_value() {
        for (flags, names, secret) in [
            // The password lost its quotes: its second word is a stray argument.
            ("--redis-password hunter2 xyzzy", "no flag", "xyzzy"),
            (
                "--redis-password 'hunter2",
                "quote is not closed",
                "hunter2",
            ),
            (
                "--threads hunter2",
                "invalid value for --threads",
                "hunter2",
            ),
            ("--bogus hunter2", "unknown flag --bogus", "hunter2"),
            (
                "--redis-password a -hunter2",
                "read as -h/--help",
                "hunter2",
            ),
            (
                "--redis-password a --x=hunter2",
                "unknown flag --x",
                "hunter2",
            ),
        ] {
            let e = parse(flags).err().unwrap_or_default();
            assert!(e.contains(names), "{flags}: {e}");
            assert!(
                e.starts_with(VARIABLE) && e.contains("quote a value"),
                "{e}"
            );
            assert!(!e.contains(secret), "{flags}: {e}");
        }
    }
}
