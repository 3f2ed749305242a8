//! Who may do what on the HTTP API: two roles, each with its bearer token. The push token
//! pushes snapshots and also reads; the read token reads the snapshot (`GET /v1/snapshot`, what
//! the filter pulls) and `/status` (they hand out fingerprints). `/healthz` and `/metrics` stay
//! open (probes and scrapers hold no token; neither names a fingerprint). Also the start rules:
//! an empty token is an error, and a non-loopback address without a push token needs
//! `--insecure`. With a push token set, reads need a token too (the
//! read token, or the push token); the filter's pull sends `snapshot_token`.

use std::net::SocketAddr;
use std::path::Path;

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `GET /v1/snapshot`, `GET /status`.
    Read,
    /// `POST /v1/snapshot`.
    Push,
}

/// The API's tokens. With neither, everything is open (loopback, or `--insecure`).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    pub push: Option<String>,
    pub read: Option<String>,
}

/// Why `ferry serve` refuses to start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("{0} is set but empty: an empty token would turn authentication off; unset it, or give a token")]
    Empty(String),
    #[error("both {0} and {1} are given: choose one")]
    Both(String, String),
    #[error("reading the token file {path}: {reason}")]
    File { path: String, reason: String },
    #[error(
        "a read token without a push token would leave pushes open: give a push token \
         (--token/FERRY_PUSH_TOKEN or --push-token-file/FERRY_PUSH_TOKEN_FILE)"
    )]
    ReadWithoutPush,
    #[error(
        "the HTTP API listens on {0}, not a loopback address, without a push token: anyone who \
         reaches it could push a snapshot. Give a push token (--token/FERRY_PUSH_TOKEN or \
         --push-token-file/FERRY_PUSH_TOKEN_FILE), or pass --insecure to run open anyway"
    )]
    OpenOnNetwork(SocketAddr),
}

/// One token from its value (flag or env, named `value_name`) or its file (named `file_name`).
/// A file's trailing newline is not part of the token (`echo token > file`, Kubernetes secrets
/// written by hand).
pub fn token(
    value: Option<&str>,
    value_name: &str,
    file: Option<&Path>,
    file_name: &str,
) -> Result<Option<String>, TokenError> {
    match (value, file) {
        (Some(_), Some(_)) => Err(TokenError::Both(value_name.into(), file_name.into())),
        (Some(""), None) => Err(TokenError::Empty(value_name.into())),
        (Some(v), None) => Ok(Some(v.to_owned())),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| TokenError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            let t = text.trim_end_matches(['\n', '\r']);
            if t.is_empty() {
                return Err(TokenError::Empty(format!(
                    "the token file {}",
                    path.display()
                )));
            }
            Ok(Some(t.to_owned()))
        }
        (None, None) => Ok(None),
    }
}

impl Tokens {
    /// The start rules; Ok(true) when the API runs open on a network address (`--insecure`).
    pub fn check(&self, listen: SocketAddr, insecure: bool) -> Result<bool, TokenError> {
        if self.read.is_some() && self.push.is_none() {
            return Err(TokenError::ReadWithoutPush);
        }
        let open_on_network = self.push.is_none() && !listen.ip().is_loopback();
        if open_on_network && !insecure {
            return Err(TokenError::OpenOnNetwork(listen));
        }
        Ok(open_on_network)
    }

    /// Whether `authorization` (the header's value) allows `role`. No push token = open.
    pub fn allows(&self, role: Role, authorization: Option<&str>) -> bool {
        let Some(push) = &self.push else { return true };
        let given = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let read_ok = role == Role::Read && self.read.as_deref().is_some_and(|r| same(given, r));
        // Both compared whatever the first gives, so the time does not tell which one matched.
        let push_ok = same(given, push);
        push_ok || read_ok
    }
}

/// Equal, in time independent of where they differ.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_empty_or_doubled_token_is_refused_naming_it_and_a_file_is_read() {
        let e = token(Some(""), "FERRY_PUSH_TOKEN", None, "f").unwrap_err();
        assert!(
            e.to_string().contains("FERRY_PUSH_TOKEN is set but empty"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let e = token(Some("x"), "--token", Some(&file), "--push-token-file").unwrap_err();
        assert_eq!(
            e,
            TokenError::Both("--token".into(), "--push-token-file".into())
        );
        assert_eq!(
            token(None, "v", Some(&file), "f").unwrap().as_deref(),
            Some("s3cret")
        );
        std::fs::write(&file, "\n").unwrap();
        let e = token(None, "v", Some(&file), "f").unwrap_err().to_string();
        assert!(e.contains("empty") && e.contains("token"), "{e}");
        let e = token(None, "v", Some(&dir.path().join("nope")), "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        assert_eq!(token(None, "v", None, "f").unwrap(), None);
    }

    #[test]
    fn a_network_address_needs_a_push_token_or_insecure() {
        let none = Tokens::default();
        assert_eq!(none.check(addr("127.0.0.1:8091"), false), Ok(false));
        assert_eq!(none.check(addr("[::1]:8091"), false), Ok(false));
        let e = none.check(addr("0.0.0.0:8091"), false).unwrap_err();
        assert!(e.to_string().contains("--insecure"), "{e}");
        assert_eq!(none.check(addr("0.0.0.0:8091"), true), Ok(true));
        let push = Tokens {
            push: Some("p".into()),
            read: None,
        };
        assert_eq!(push.check(addr("0.0.0.0:8091"), false), Ok(false));
        let read_only = Tokens {
            push: None,
            read: Some("r".into()),
        };
        assert_eq!(
            read_only.check(addr("127.0.0.1:8091"), true),
            Err(TokenError::ReadWithoutPush)
        );
    }

    #[test]
    fn the_push_token_pushes_and_reads_the_read_token_only_reads() {
        let t = Tokens {
            push: Some("push-t".into()),
            read: Some("read-t".into()),
        };
        for (role, header, ok) in [
            (Role::Push, Some("Bearer push-t"), true),
            (Role::Read, Some("Bearer push-t"), true),
            (Role::Read, Some("Bearer read-t"), true),
            (Role::Push, Some("Bearer read-t"), false),
            (Role::Read, Some("Bearer nope"), false),
            (Role::Read, Some("push-t"), false),
            (Role::Read, None, false),
            (Role::Push, None, false),
        ] {
            assert_eq!(t.allows(role, header), ok, "{role:?} {header:?}");
        }
        let open = Tokens::default();
        assert!(open.allows(Role::Push, None) && open.allows(Role::Read, None));
    }
}
