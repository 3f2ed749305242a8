use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn host_port(r: &SqlRegistry) -> (String, u16) {
    let host = match &r.config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    (host, r.config.get_ports()[0])
}

#[test]
fn feasts_url_is_read_with_its_driver_credentials_and_database() {
    let r = parse(
        "postgresql+psycopg://feast:s%40cret@db.internal:6543/registry",
        no_env,
    )
    .unwrap();
    assert_eq!(host_port(&r), ("db.internal".into(), 6543));
    assert_eq!(r.config.get_user(), Some("feast"));
    assert_eq!(r.config.get_password(), Some(&b"s@cret"[..]));
    assert_eq!(r.config.get_dbname(), Some("registry"));
    // libpq's default: TLS when offered.
    assert_eq!(r.tls, Tls::Prefer);
    assert_eq!(
        r.shown,
        "postgresql+psycopg://feast:***@db.internal:6543/registry"
    );
    for scheme in ["postgresql", "postgres", "postgresql+psycopg2"] {
        let r = parse(&format!("{scheme}://u@h/d"), no_env).unwrap();
        assert_eq!(host_port(&r), ("h".into(), 5432), "{scheme}");
    }
}

#[test]
fn sslmode_comes_from_the_url_else_pgsslmode() {
    let mode = |url: &str, env: &dyn Fn(&str) -> Option<String>| parse(url, env).map(|r| r.tls);
    let url = "postgresql+psycopg://u:p@h:5432/d";
    assert_eq!(
        mode(&format!("{url}?sslmode=disable"), &no_env),
        Ok(Tls::Disable)
    );
    assert_eq!(
        mode(&format!("{url}?sslmode=require"), &no_env),
        Ok(Tls::Require)
    );
    let pg_env = |k: &str| match k {
        "PGSSLMODE" => Some("verify-full".to_owned()),
        "PGSSLROOTCERT" => Some("/etc/ca.pem".to_owned()),
        _ => None,
    };
    assert_eq!(mode(url, &pg_env), Ok(Tls::Verify("/etc/ca.pem".into())));
    // The URL wins over the environment.
    assert_eq!(
        mode(&format!("{url}?sslmode=disable"), &pg_env),
        Ok(Tls::Disable)
    );
    assert_eq!(
        mode(
            &format!("{url}?sslmode=verify-ca&sslrootcert=/ca.pem"),
            &no_env
        ),
        Ok(Tls::Verify("/ca.pem".into()))
    );
    let err = mode(&format!("{url}?sslmode=verify-full"), &no_env).unwrap_err();
    assert!(err.contains("needs a CA"), "{err}");
    assert!(
        err.contains("u:***@h"),
        "the password is never shown: {err}"
    );
    let err = mode(&format!("{url}?sslmode=sometimes"), &no_env).unwrap_err();
    assert!(err.contains("sslmode 'sometimes'"), "{err}");
    let err = mode(&format!("{url}?sslcert=/c.pem"), &no_env).unwrap_err();
    assert!(err.contains("sslcert is not supported"), "{err}");
    // Other libpq options still reach the client's parser.
    let r = parse(&format!("{url}?application_name=x&sslmode=disable"), no_env).unwrap();
    assert_eq!(r.config.get_application_name(), Some("ferry"));
}

#[test]
fn other_databases_and_broken_urls_are_refused_by_name() {
    let err = parse("mysql+pymysql://u:pw@h/d", no_env).unwrap_err();
    assert!(
        err.contains("the mysql SQL registry is not supported"),
        "{err}"
    );
    assert!(!err.contains("pw"), "{err}");
    let err = parse("sqlite:///registry.db", no_env).unwrap_err();
    assert!(err.contains("sqlite"), "{err}");
    assert!(parse("not a url", no_env)
        .unwrap_err()
        .contains("not a database URL"));
    let err = parse("postgresql://u:pw@h:notaport/d", no_env).unwrap_err();
    assert!(err.contains("u:***@h:notaport"), "{err}");
}

#[test]
fn redaction_hides_only_the_password() {
    assert_eq!(redact("postgresql://u:p@h/d"), "postgresql://u:***@h/d");
    assert_eq!(redact("postgresql://u@h/d"), "postgresql://u@h/d");
    assert_eq!(redact("postgresql://h/d?x=a@b"), "postgresql://h/d?x=a@b");
    // An '@' inside the password: the last one before the host ends the credentials.
    assert_eq!(
        redact("postgresql://u:p@q@h:1/d"),
        "postgresql://u:***@h:1/d"
    );
}
