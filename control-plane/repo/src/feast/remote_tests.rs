use super::*;

fn yaml(text: &str) -> Yaml {
    serde_norway::from_str(text).unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn a_remote_registry_is_host_port_with_tls_as_feast_reads_it() {
    let dir = Path::new("/repo");
    let r = parse(
        &yaml("registry_type: remote\npath: localhost:6570"),
        None,
        dir,
        &no_env,
    )
    .unwrap();
    assert_eq!((r.addr.as_str(), r.ca.as_ref()), ("localhost:6570", None));
    assert_eq!(r.shown(), "grpc://localhost:6570");
    let tls = yaml("registry_type: remote\npath: reg.svc:443\ncert: ca.pem\nis_tls: true");
    let r = parse(&tls, None, dir, &no_env).unwrap();
    assert_eq!(r.ca, Some(PathBuf::from("/repo/ca.pem")));
    assert_eq!(r.authority, "reg.svc");
    // is_tls without cert: the CA bundle from the environment, as Feast's client.
    let env = |k: &str| (k == "REQUESTS_CA_BUNDLE").then(|| "/etc/bundle.pem".to_owned());
    let r = parse(&yaml("path: '[::1]:6570'\nis_tls: true"), None, dir, &env).unwrap();
    assert_eq!(
        (r.ca, r.authority.as_str()),
        (Some("/etc/bundle.pem".into()), "::1")
    );
    let err = parse(&yaml("path: x:1\nis_tls: true"), None, dir, &no_env).unwrap_err();
    assert!(err.contains("SSL_CERT_FILE"), "{err}");
    for bad in [
        "path: localhost",
        "path: ':6570'",
        "path: h:99999",
        "is_tls: false",
    ] {
        assert!(parse(&yaml(bad), None, dir, &no_env).is_err(), "{bad}");
    }
    let mtls = yaml("path: h:1\ncert: c\nclient_cert: a\nclient_key: b");
    assert!(parse(&mtls, None, dir, &no_env)
        .unwrap_err()
        .contains("mTLS"));
}

#[test]
fn the_bearer_token_comes_from_where_feasts_client_takes_it() {
    let none = |_: &str| None;
    let token =
        |auth: &str, env: &dyn Fn(&str) -> Option<String>| bearer(Some(&yaml(auth)), env, &none);
    assert_eq!(bearer(None, &no_env, &none), Ok(None));
    assert_eq!(token("type: no_auth", &no_env), Ok(None));
    assert_eq!(
        token("type: oidc\ntoken: abc", &no_env),
        Ok(Some("abc".into()))
    );
    let env = |k: &str| match k {
        "MY_TOKEN" => Some("mine".to_owned()),
        "FEAST_OIDC_TOKEN" => Some("feast".to_owned()),
        "LOCAL_K8S_TOKEN" => Some("k8s".to_owned()),
        _ => None,
    };
    assert_eq!(
        token("type: oidc\ntoken_env_var: MY_TOKEN", &env),
        Ok(Some("mine".into()))
    );
    assert_eq!(token("type: oidc", &env), Ok(Some("feast".into())));
    assert_eq!(token("type: kubernetes", &env), Ok(Some("k8s".into())));
    let err = token("type: oidc\ntoken_env_var: UNSET", &env).unwrap_err();
    assert!(err.contains("UNSET"), "{err}");
    let err = token("type: oidc\nclient_secret: s\nclient_id: c", &env).unwrap_err();
    assert!(err.contains("client_secret"), "{err}");
    assert!(token("type: oidc", &no_env)
        .unwrap_err()
        .contains("needs a token"));
    // In a pod: the mounted service account token.
    let sa = |p: &str| (p == SA_TOKEN).then(|| "sa-token\n".to_owned());
    let k8s = bearer(Some(&yaml("type: kubernetes")), &env, &sa);
    assert_eq!(k8s, Ok(Some("sa-token".into())));
    assert!(token("type: ldap", &env).unwrap_err().contains("'ldap'"));
}

#[test]
fn grpc_frames_and_messages_round_trip() {
    let framed = frame(b"abc");
    assert_eq!(&framed[..], b"\0\0\0\0\x03abc");
    assert_eq!(unframe(framed).unwrap(), Bytes::from_static(b"abc"));
    assert!(unframe(Bytes::from_static(b"\0\0\0\0\x09abc")).is_err());
    assert!(unframe(Bytes::from_static(b"\x01\0\0\0\x03abc")).is_err());
    assert!(unframe(Bytes::new()).is_err());
    assert_eq!(percent_decode("no%20such%3A project"), "no such: project");
    assert_eq!(percent_decode("100%"), "100%");
}
