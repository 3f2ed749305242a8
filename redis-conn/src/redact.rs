//! Redis URLs may carry a password (`redis://user:secret@host`); whatever is logged or put in an
//! error goes through [`redact`] first.

/// The URL with the password of its user-info replaced by `***` (the user name is kept: it helps
/// an operator and is no secret). Several comma-separated URLs are redacted one by one.
pub fn redact(urls: &str) -> String {
    urls.split(',')
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_one(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        // Not a URL; it could still be `user:secret@host`, so only what follows an '@' is shown.
        return match url.rfind('@') {
            Some(at) => format!("***@{}", &url[at + 1..]),
            None => url.to_owned(),
        };
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let user_info = &authority[..at];
    let user = match user_info.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        // `redis://secret@host` is read by redis-rs as a password-less user name; shown hidden too,
        // since people write passwords there by mistake.
        None if user_info.is_empty() => String::new(),
        None => "***".to_owned(),
    };
    format!(
        "{}{user}@{}",
        &url[..rest_start],
        &url[rest_start + at + 1..]
    )
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_survive() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
            ("rediss://ferry:s3cret@h:1", "rediss://ferry:***@h:1"),
            ("redis://s3cret@h", "redis://***@h"),
            (
                "redis://u:p@a:1,redis://u:p@b:2",
                "redis://u:***@a:1,redis://u:***@b:2",
            ),
            ("redis://u:p%40ss@h/?x=1", "redis://u:***@h/?x=1"),
            ("u:s3cret@h:1", "***@h:1"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown);
            assert!(!redact(url).contains("s3cret"));
        }
    }
}
