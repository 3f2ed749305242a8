//! Who may do what on the HTTP API: three roles, granted to bearer tokens and to client
//! certificate identities (mTLS). `read` reads the snapshot (`GET /v1/snapshot`, what the filter
//! pulls) and `/status` (they hand out fingerprints); `push` pushes snapshots and also reads;
//! `write` writes features (`POST /push`, `/write-to-online-store`; #23) and nothing else. The
//! push token holds `push`, the read token `read`, the write token `write`; `--grant ROLE=IDENTITY` grants a role to the client certificates whose
//! URI or DNS SAN matches IDENTITY (`*` matching any run of characters but `/`). A request without a
//! credential is 401, one whose credential lacks the role 403. `/healthz` and `/metrics` stay
//! open (probes and scrapers hold no credential; neither names a fingerprint). Writes need a
//! write credential always, loopback included (#35: once Envoy fronts the API, loopback is
//! not local); with none configured they are 403 naming the flags. Also the start rules: an
//! empty or short token is an error, and a read credential needs a push one.

use std::path::Path;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use ferry_http_serve::exposure::Lack;
use ferry_http_serve::PeerIdentity;

use ferry_xds::identity::glob;

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `GET /v1/snapshot`, `GET /status`.
    Read,
    /// `POST /v1/snapshot` (and what `read` may).
    Push,
    /// Feature writes: `POST /push`, `POST /write-to-online-store`.
    Write,
}

impl Role {
    /// The word `--grant` uses.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Push => "push",
            Role::Write => "write",
        }
    }

    /// Whether holding `self` allows `wanted`.
    fn covers(self, wanted: Role) -> bool {
        self == wanted || (self == Role::Push && wanted == Role::Read)
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read" => Ok(Role::Read),
            "push" => Ok(Role::Push),
            "write" => Ok(Role::Write),
            _ => Err(format!("no role '{s}': read, push or write")),
        }
    }
}

/// A role granted to the client certificates whose names match a pattern (`--grant`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub role: Role,
    /// A URI or DNS SAN, `*` matching any run of characters but `/`.
    pub identity: String,
}

impl FromStr for Grant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (role, identity) = s.split_once('=').ok_or_else(|| {
            format!(
                "'{s}' is not ROLE=IDENTITY, e.g. push=spiffe://cluster.local/ns/ml/sa/ferry-ci"
            )
        })?;
        if identity.is_empty() {
            return Err(format!("'{s}' grants {role} to no identity"));
        }
        Ok(Grant {
            role: role.parse()?,
            identity: identity.to_owned(),
        })
    }
}

/// The API's bearer tokens.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    pub push: Option<String>,
    pub read: Option<String>,
    pub write: Option<String>,
}

/// Who may do what. With no push token and no grant, everything is open (loopback, or
/// `--insecure`).
#[derive(Clone, Debug, Default)]
pub struct Access {
    pub tokens: Tokens,
    pub grants: Vec<Grant>,
}

/// What a request's credentials allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No credential, or a token nobody holds: 401.
    Unauthenticated,
    /// A known credential without the role: 403.
    Forbidden,
    /// A write, and no write credential is configured at all: 403 naming the flags.
    NoWriteCredential,
}

/// The least a token must hold: 128 bits, as estimated by [`strength_bits`].
pub const MIN_TOKEN_BITS: u32 = 128;

/// How to make a token that passes, for the start error.
pub const MAKE_A_TOKEN: &str =
    "make one with `openssl rand -hex 32 > token` or `head -c 32 /dev/urandom | base64 > token`";

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
        "{name} holds at most {bits} bits ({len} characters): a token needs at least \
         {MIN_TOKEN_BITS} (32 hex or 22 base64 characters); {MAKE_A_TOKEN}"
    )]
    Weak { name: String, len: usize, bits: u32 },
    #[error(
        "a read credential without a push one would leave pushes open: give a push token \
         (--token/FERRY_PUSH_TOKEN or --push-token-file/FERRY_PUSH_TOKEN_FILE) or --grant push=IDENTITY"
    )]
    ReadWithoutPush,
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
        (Some(v), None) => strong(v, value_name).map(|()| Some(v.to_owned())),
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
            strong(t, &format!("the token file {}", path.display()))?;
            Ok(Some(t.to_owned()))
        }
        (None, None) => Ok(None),
    }
}

/// An upper bound on the bits of entropy in `token`: its length times the bits per character
/// of the smallest usual alphabet holding all its characters (decimal, hex, base64 or base64url
/// with padding, printable ASCII, any byte). An upper bound only: `aaaa...` passes a length
/// check whatever is done; what this refuses is the short token (`s3cret`, `test-token`).
pub fn strength_bits(token: &str) -> u32 {
    let all = |f: fn(u8) -> bool| token.bytes().all(f);
    // Bits per character, times 100 so that the sum stays integral.
    let per_char_centibits: u64 = if all(|b| b.is_ascii_digit()) {
        332
    } else if all(|b| b.is_ascii_hexdigit()) {
        400
    } else if all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=')) {
        600
    } else if all(|b| b.is_ascii_graphic()) {
        655
    } else {
        800
    };
    let bits = (token.len() as u64).saturating_mul(per_char_centibits) / 100;
    u32::try_from(bits).unwrap_or(u32::MAX)
}

/// `token` (named `name`) holds at least [`MIN_TOKEN_BITS`].
fn strong(token: &str, name: &str) -> Result<(), TokenError> {
    let bits = strength_bits(token);
    if bits < MIN_TOKEN_BITS {
        return Err(TokenError::Weak {
            name: name.to_owned(),
            len: token.chars().count(),
            bits,
        });
    }
    Ok(())
}

impl Access {
    /// Nobody needs a credential to read or push (writes always need one).
    pub fn open(&self) -> bool {
        self.tokens.push.is_none() && self.grants.is_empty()
    }

    /// Some credential may write: a write token or a write grant.
    pub fn writes_configured(&self) -> bool {
        self.tokens.write.is_some() || self.grants.iter().any(|g| g.role == Role::Write)
    }

    /// The start rule for credentials.
    pub fn check(&self) -> Result<(), TokenError> {
        let reads = self.tokens.read.is_some() || self.grants.iter().any(|g| g.role == Role::Read);
        let pushes = self.tokens.push.is_some() || self.grants.iter().any(|g| g.role == Role::Push);
        // A write credential alone is fine since #35: writes need one whatever else is set, so
        // it no longer marks "the API is meant to be closed" as a read credential does.
        if reads && !pushes {
            return Err(TokenError::ReadWithoutPush);
        }
        Ok(())
    }

    /// What the API on `listen` lacks to know who pushes: TLS, and a push credential. None
    /// when it lacks neither (see `ferry_http_serve::exposure`).
    pub fn lack(&self, tls: bool) -> Option<Lack> {
        let missing = match (tls, self.open()) {
            (true, false) => return None,
            (false, true) => "without TLS and without a push token",
            (false, false) => "without TLS (its tokens would travel in clear)",
            (true, true) => "without a push token",
        };
        Some(Lack {
            missing: missing.to_owned(),
            risk: "push a snapshot to every Envoy or read the fingerprints".to_owned(),
            remedy: "--tls-cert and --tls-key, and a push token (--token/FERRY_PUSH_TOKEN or \
                     --push-token-file/FERRY_PUSH_TOKEN_FILE) or --grant push=IDENTITY"
                .to_owned(),
        })
    }

    /// What `authorization` (the header's value) and the client certificate's `identity`
    /// allow for `role`.
    pub fn decide(
        &self,
        role: Role,
        authorization: Option<&str>,
        identity: Option<&PeerIdentity>,
    ) -> Decision {
        if role == Role::Write && !self.writes_configured() {
            return Decision::NoWriteCredential;
        }
        if self.open() && role != Role::Write {
            return Decision::Allowed;
        }
        let given = authorization.and_then(|v| v.strip_prefix("Bearer "));
        // All compared whatever the first gives, so the time does not tell which one matched.
        let token_role = given.map(digest).and_then(|given| {
            let push = self.tokens.push.as_deref().is_some_and(|t| same(&given, t));
            let read = self.tokens.read.as_deref().is_some_and(|t| same(&given, t));
            let write = self
                .tokens
                .write
                .as_deref()
                .is_some_and(|t| same(&given, t));
            match (push, read, write) {
                (true, _, _) => Some(Role::Push),
                (_, true, _) => Some(Role::Read),
                (_, _, true) => Some(Role::Write),
                _ => None,
            }
        });
        let granted = identity.is_some_and(|id| {
            self.grants
                .iter()
                .any(|g| g.role.covers(role) && id.names().any(|n| glob(&g.identity, n)))
        });
        if granted || token_role.is_some_and(|r| r.covers(role)) {
            Decision::Allowed
        } else if token_role.is_some() || identity.is_some() {
            Decision::Forbidden
        } else {
            Decision::Unauthenticated
        }
    }

    /// Whether the bearer `authorization` alone allows `role`.
    pub fn allows(&self, role: Role, authorization: Option<&str>) -> bool {
        self.decide(role, authorization, None) == Decision::Allowed
    }
}

/// SHA-256 of a token: what is compared, so that the comparison's time depends on neither
/// token's length nor on where they differ.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// `given` (a digest) is the digest of `token`, compared over all 32 bytes whatever differs.
fn same(given: &[u8; 32], token: &str) -> bool {
    given
        .iter()
        .zip(digest(token).iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

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
        let strong = "0123456789abcdef0123456789abcdef";
        std::fs::write(&file, format!("{strong}\n")).unwrap();
        let e = token(Some("x"), "--token", Some(&file), "--push-token-file").unwrap_err();
        assert_eq!(
            e,
            TokenError::Both("--token".into(), "--push-token-file".into())
        );
        assert_eq!(
            token(None, "v", Some(&file), "f").unwrap().as_deref(),
            Some(strong)
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
    fn a_network_address_needs_tls_and_a_push_credential_or_insecure() {
        use ferry_http_serve::exposure::check;
        let any = addr("0.0.0.0:8091");
        let none = Access::default();
        assert_eq!(
            check("the API", addr("127.0.0.1:8091"), none.lack(false), false),
            Ok(false)
        );
        assert_eq!(
            check("the API", addr("[::1]:8091"), none.lack(false), false),
            Ok(false)
        );
        let e = check("the HTTP API", any, none.lack(false), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a loopback address") && e.contains("--insecure"),
            "{e}"
        );
        assert_eq!(check("the API", any, none.lack(false), true), Ok(true));
        let push = Access {
            tokens: Tokens {
                push: Some("p".into()),
                read: None,
                write: None,
            },
            grants: vec![],
        };
        let e = check("the API", any, push.lack(false), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("without TLS"), "{e}");
        assert_eq!(push.lack(true), None);
        let granted = Access {
            grants: vec!["push=spiffe://x/ci".parse().unwrap()],
            ..Access::default()
        };
        assert_eq!(granted.lack(true), None);
        let read_only = Access {
            tokens: Tokens {
                push: None,
                read: Some("r".into()),
                write: None,
            },
            grants: vec![],
        };
        assert_eq!(read_only.check(), Err(TokenError::ReadWithoutPush));
        assert_eq!(granted.check(), Ok(()));
    }

    #[test]
    fn identities_hold_the_roles_granted_to_them_and_others_are_forbidden() {
        let access = Access {
            tokens: Tokens {
                push: Some("push-t".into()),
                read: None,
                write: None,
            },
            grants: vec![
                "push=spiffe://cluster.local/ns/ml/sa/ferry-ci"
                    .parse()
                    .unwrap(),
                "read=*.envoy.ml.svc".parse().unwrap(),
            ],
        };
        let id = |uri: &str, dns: &str| PeerIdentity::new(&[uri], &[dns]);
        let ci = id("spiffe://cluster.local/ns/ml/sa/ferry-ci", "ci.ml.svc");
        let envoy = id("spiffe://cluster.local/ns/ml/sa/envoy", "a.envoy.ml.svc");
        let stranger = id("spiffe://cluster.local/ns/ml/sa/web", "web.ml.svc");
        for (role, who, decision) in [
            (Role::Push, Some(&ci), Decision::Allowed),
            (Role::Read, Some(&ci), Decision::Allowed),
            // No write credential is configured at all: that is what the answer says.
            (Role::Write, Some(&ci), Decision::NoWriteCredential),
            (Role::Read, Some(&envoy), Decision::Allowed),
            (Role::Push, Some(&envoy), Decision::Forbidden),
            (Role::Read, Some(&stranger), Decision::Forbidden),
            (Role::Read, None, Decision::Unauthenticated),
        ] {
            assert_eq!(access.decide(role, None, who), decision, "{role:?} {who:?}");
        }
        // A token still works for a client with a certificate that has no role.
        assert_eq!(
            access.decide(Role::Push, Some("Bearer push-t"), Some(&stranger)),
            Decision::Allowed
        );
        assert!("admin=x".parse::<Grant>().is_err());
        assert!("push".parse::<Grant>().is_err());
        assert!("push=".parse::<Grant>().is_err());
    }

    #[test]
    fn the_push_token_pushes_and_reads_the_read_token_only_reads() {
        let t = Access {
            tokens: Tokens {
                push: Some("push-t".into()),
                read: Some("read-t".into()),
                write: Some("write-t".into()),
            },
            grants: vec![],
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
            (Role::Write, Some("Bearer write-t"), true),
            (Role::Write, Some("Bearer push-t"), false),
            (Role::Push, Some("Bearer write-t"), false),
            (Role::Read, Some("Bearer write-t"), false),
        ] {
            assert_eq!(t.allows(role, header), ok, "{role:?} {header:?}");
        }
        assert_eq!(
            t.decide(Role::Push, Some("Bearer read-t"), None),
            Decision::Forbidden
        );
        assert_eq!(
            t.decide(Role::Read, Some("Bearer nope"), None),
            Decision::Unauthenticated
        );
        assert_eq!(
            t.decide(Role::Write, Some("Bearer read-t"), None),
            Decision::Forbidden
        );
        let open = Access::default();
        assert!(open.allows(Role::Push, None) && open.allows(Role::Read, None));
    }

    #[test]
    fn writes_need_a_write_credential_even_when_everything_else_is_open() {
        let open = Access::default();
        for header in [None, Some("Bearer anything")] {
            assert_eq!(
                open.decide(Role::Write, header, None),
                Decision::NoWriteCredential
            );
        }
        // A write token alone: pushes and reads stay open (loopback's rule), writes need it.
        let write_only = Access {
            tokens: Tokens {
                write: Some("write-t".into()),
                ..Tokens::default()
            },
            grants: vec![],
        };
        assert_eq!(write_only.check(), Ok(()));
        assert!(write_only.allows(Role::Push, None) && write_only.allows(Role::Read, None));
        assert!(write_only.allows(Role::Write, Some("Bearer write-t")));
        assert_eq!(
            write_only.decide(Role::Write, None, None),
            Decision::Unauthenticated
        );
        assert_eq!(
            write_only.decide(Role::Write, Some("Bearer write-"), None),
            Decision::Unauthenticated
        );
        // A write grant configures writes too.
        let granted: Access = Access {
            grants: vec!["write=spiffe://x/feast".parse().unwrap()],
            ..Access::default()
        };
        assert_eq!(
            granted.decide(Role::Write, None, None),
            Decision::Unauthenticated
        );
    }

    #[test]
    fn a_token_under_128_bits_is_refused_saying_how_to_make_one() {
        for weak in [
            "s3cret",
            "test-token",
            "0123456789abcdef0123456789abcde", // 31 hex: 124 bits
            "abcdefghijklmnopqrstu",           // 21 base64: 126 bits
            "12345678901234567890123456789012345678", // 38 digits: 126 bits
        ] {
            let e = token(Some(weak), "--token/FERRY_PUSH_TOKEN", None, "f").unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, TokenError::Weak { .. }), "{weak}: {text}");
            assert!(
                text.contains("--token/FERRY_PUSH_TOKEN")
                    && text.contains("128")
                    && text.contains("openssl rand"),
                "{text}"
            );
        }
        for strong in [
            "0123456789abcdef0123456789abcdef",
            "abcdefghijklmnopqrstuv",
            "Zm9vYmFyYmF6cXV4cXV1eA==",
            "test-token-0123456789abcdef",
        ] {
            assert_eq!(
                token(Some(strong), "v", None, "f").unwrap().as_deref(),
                Some(strong)
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("short");
        std::fs::write(&file, "hunter2\n").unwrap();
        let e = token(None, "v", Some(&file), "f").unwrap_err().to_string();
        assert!(e.contains("short") && e.contains("128"), "{e}");
    }

    #[test]
    fn tokens_are_compared_as_digests_whatever_their_lengths() {
        let t = Access {
            tokens: Tokens {
                push: Some("push-token-0123456789abcdef".into()),
                ..Tokens::default()
            },
            grants: vec![],
        };
        for given in [
            "",
            "p",
            "push-token-0123456789abcde",
            "push-token-0123456789abcdef0",
        ] {
            assert_eq!(
                t.decide(Role::Push, Some(&format!("Bearer {given}")), None),
                Decision::Unauthenticated,
                "{given}"
            );
        }
        assert!(t.allows(Role::Push, Some("Bearer push-token-0123456789abcdef")));
        assert!(same(&digest("x"), "x") && !same(&digest("x"), "y"));
    }
}
