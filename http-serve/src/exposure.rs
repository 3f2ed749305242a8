//! The one rule for every listener (the reader, `ferry serve`'s HTTP API and xDS): plaintext,
//! or anything short of what the server needs to know its clients, only on a loopback address,
//! unless the operator says `--insecure`, which the server then logs loudly.

use std::net::SocketAddr;

/// A listener on a network address without what it needs, and no `--insecure`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{what} listens on {addr}, not a loopback address, {missing}: anyone who reaches it could \
     {risk}. Give {remedy}, or pass --insecure to run it anyway"
)]
pub struct Exposed {
    pub what: String,
    pub addr: SocketAddr,
    pub missing: String,
    pub risk: String,
    pub remedy: String,
}

/// What a listener lacks on a network address: (what is missing, what a client could then do,
/// the flags that fix it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lack {
    pub missing: String,
    pub risk: String,
    pub remedy: String,
}

/// Whether `what` may listen on `addr` lacking `lack` (None: it lacks nothing). Ok(true) when
/// it runs on a network address lacking something because of `--insecure` (say so loudly).
pub fn check(
    what: &str,
    addr: SocketAddr,
    lack: Option<Lack>,
    insecure: bool,
) -> Result<bool, Box<Exposed>> {
    let Some(lack) = lack else { return Ok(false) };
    if addr.ip().is_loopback() {
        return Ok(false);
    }
    if insecure {
        return Ok(true);
    }
    Err(Box::new(Exposed {
        what: what.to_owned(),
        addr,
        missing: lack.missing,
        risk: lack.risk,
        remedy: lack.remedy,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_insecure_may_lack_anything() {
        let lack = || {
            Some(Lack {
                missing: "without TLS".into(),
                risk: "read features".into(),
                remedy: "--tls-cert".into(),
            })
        };
        let local: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let v6: SocketAddr = "[::1]:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        assert_eq!(check("r", local, lack(), false), Ok(false));
        assert_eq!(check("r", v6, lack(), false), Ok(false));
        assert_eq!(check("r", any, None, false), Ok(false));
        assert_eq!(check("r", any, lack(), true), Ok(true));
        let e = check("the reader", any, lack(), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the reader listens on 0.0.0.0:1, not a loopback address, without TLS")
                && e.contains("--tls-cert")
                && e.contains("--insecure"),
            "{e}"
        );
    }
}
