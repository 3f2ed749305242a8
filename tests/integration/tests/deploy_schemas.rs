//! deploy/ against the real schemas, offline: every manifest, and the Helm chart's renderings,
//! through kubectl-validate (Kubernetes 1.32's built-in OpenAPI schemas, embedded in it, and
//! the CRDs of Envoy Gateway, Gateway API, Istio and cert-manager, taken from their Go modules);
//! `helm lint` on the chart; deploy/kubernetes/ferry.yaml equal to the chart's rendering; a
//! field planted in a copy is refused. The tools come from scripts/k8s-tools-build.sh (built
//! from the Go module proxy once, cached; `FERRY_K8S_TOOLS` names a directory it made).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use ferry_integration_tests::root;

/// The Kubernetes version whose built-in schemas the manifests are checked against (the newest
/// the pinned kubectl-validate embeds).
const KUBERNETES: &str = "1.32";

/// The directory of scripts/k8s-tools-build.sh: bin/helm, bin/kubectl-validate, crds/current/.
fn tools() -> &'static Path {
    static TOOLS: OnceLock<PathBuf> = OnceLock::new();
    TOOLS.get_or_init(|| {
        if let Some(dir) = std::env::var_os("FERRY_K8S_TOOLS") {
            return PathBuf::from(dir);
        }
        let out = Command::new("bash")
            .arg(root().join("scripts/k8s-tools-build.sh"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("bash");
        assert!(out.status.success(), "scripts/k8s-tools-build.sh failed");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// kubectl-validate on `files`, with every CRD directory; never a cluster (the kubeconfig is
/// an empty file, so no API server is asked).
/// kubectl-validate accepts every one of `files` (its report printed either way).
fn assert_valid(files: &[PathBuf], what: &str) {
    let out = kubectl_validate(files);
    println!("{}", text(&out));
    assert!(
        out.status.success(),
        "kubectl-validate refused {what}:\n{}",
        text(&out)
    );
}

fn kubectl_validate(files: &[PathBuf]) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    let kubeconfig = scratch.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "").unwrap();
    let mut cmd = Command::new(tools().join("bin/kubectl-validate"));
    cmd.env("KUBECONFIG", &kubeconfig)
        .env("HOME", scratch.path())
        .args(["--version", KUBERNETES]);
    let mut crds: Vec<PathBuf> = std::fs::read_dir(tools().join("crds/current"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    crds.sort();
    assert!(crds.len() >= 3, "CRD directories: {crds:?}");
    for dir in crds {
        cmd.arg("--local-crds").arg(dir);
    }
    cmd.args(files).output().unwrap()
}

/// helm, with its cache, config and data under a scratch directory.
fn helm(args: &[&str]) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    Command::new(tools().join("bin/helm"))
        .current_dir(root())
        .env("HELM_CACHE_HOME", scratch.path().join("cache"))
        .env("HELM_CONFIG_HOME", scratch.path().join("config"))
        .env("HELM_DATA_HOME", scratch.path().join("data"))
        .args(args)
        .output()
        .unwrap()
}

/// Every manifest file of deploy/ (YAML; the chart's sources are rendered, not read).
fn manifests() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["envoy-gateway", "istio", "kubernetes"] {
        for e in std::fs::read_dir(root().join("deploy").join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "yaml") {
                out.push(path);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 6, "{out:?}");
    out
}

#[test]
fn every_deploy_manifest_passes_the_real_schemas() {
    let files = manifests();
    assert_valid(&files, "a manifest");
}

/// The same file with one wrong field planted (a typo in a Deployment's spec, a field a
/// cert-manager Certificate does not have, a wrong type in an Istio resource): each refused,
/// and named.
#[test]
fn a_planted_wrong_field_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "kubernetes/ferry.yaml",
            "  replicas: 2\n  strategy:\n",
            "  replicas: 2\n  replica: 3\n  strategy:\n",
            "replica",
        ),
        (
            "kubernetes/ferry.yaml",
            "  renewBefore: 240h\n",
            "  renewBefore: 240h\n  renewAfter: 1h\n",
            "renewAfter",
        ),
        (
            "istio/wasmplugin.yaml",
            "  failStrategy: FAIL_CLOSE\n",
            "  failStrategy: FAIL_CLOSE\n  priority: high\n",
            "priority",
        ),
        (
            "envoy-gateway/extension-policy.yaml",
            "    failOpen: false\n",
            "    failOpen: false\n    failClosed: true\n",
            "failClosed",
        ),
    ];
    for (i, (file, from, to, field)) in cases.iter().enumerate() {
        let original = std::fs::read_to_string(root().join("deploy").join(file)).unwrap();
        assert!(original.contains(from), "{file} no longer holds {from:?}");
        let planted = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&planted, original.replacen(from, to, 1)).unwrap();
        let out = kubectl_validate(std::slice::from_ref(&planted));
        let log = text(&out);
        assert!(!out.status.success(), "{file} with {field} passed:\n{log}");
        assert!(
            log.contains(field),
            "{file}: the refusal does not name {field}:\n{log}"
        );
        println!("{file} with `{field}` planted: refused\n{}", log.trim());
    }
}

/// The renderings the tests check: (name, helm args after `template ferry deploy/helm/ferry`).
fn renderings() -> Vec<(&'static str, Vec<&'static str>)> {
    let attach = vec![
        "--set",
        "attach.snapshotToken=t0ken",
        "--set",
        "attach.snapshotKeys[0].id=k-1fdff1d53376",
        "--set",
        "attach.snapshotKeys[0].ed25519=+GIKu+fhF8h2hy43tWAVs2fYv84JPDfavnXwpbzTwW4=",
    ];
    let with = |extra: &[&'static str]| {
        let mut v = attach.clone();
        v.extend_from_slice(extra);
        v
    };
    vec![
        ("default", vec![]),
        ("namespace", vec!["--set", "namespace.create=true"]),
        (
            "log sink and Envoy Gateway",
            with(&[
                "--set",
                "logSink.enabled=true",
                "--set",
                "attach.envoyGateway.enabled=true",
            ]),
        ),
        ("Istio", with(&["--set", "attach.istio.enabled=true"])),
        (
            "provided secrets, no NetworkPolicies, an existing claim",
            vec![
                "--set",
                "tls.certManager.enabled=false",
                "--set",
                "networkPolicy.enabled=false",
                "--set",
                "controlPlane.repo.existingClaim=repo",
                "--set",
                "logSink.enabled=true",
            ],
        ),
        ("the apply job", vec!["--set", "apply.enabled=true"]),
    ]
}

#[test]
fn the_chart_lints_and_its_renderings_pass_the_real_schemas() {
    let out = helm(&["lint", "--strict", "deploy/helm/ferry"]);
    assert!(out.status.success(), "helm lint:\n{}", text(&out));
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, (name, args)) in renderings().into_iter().enumerate() {
        let out = template("ferry", &args);
        assert!(
            out.status.success(),
            "helm template ({name}):\n{}",
            text(&out)
        );
        let path = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path);
    }
    assert_valid(&files, "a rendering");
}

/// An attachment without the read token or the keys is refused at render time, not rendered
/// with a placeholder.
#[test]
fn an_attachment_without_token_or_keys_is_refused() {
    for what in [
        "attach.envoyGateway.enabled=true",
        "attach.istio.enabled=true",
    ] {
        let out = helm(&["template", "ferry", "deploy/helm/ferry", "--set", what]);
        assert!(!out.status.success(), "{what} rendered without a token");
        assert!(text(&out).contains("snapshotToken"), "{}", text(&out));
    }
}

/// One source of truth: the plain manifest is the chart's rendering
/// (scripts/render-manifests.sh writes it; `--check` compares).
#[test]
fn the_plain_manifest_is_the_charts_rendering() {
    let out = Command::new("bash")
        .arg(root().join("scripts/render-manifests.sh"))
        .arg("--check")
        .env("FERRY_K8S_TOOLS", tools())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// The filter's own parser on the chart's attachments: each pull config is accepted, pulls
/// over `https://` with the given key, never `insecure`; the Envoy Gateway clusters present a
/// client certificate, and Istio's DestinationRules originate mTLS with one (to the reader and
/// the control plane).
#[test]
fn the_charts_attachments_configure_the_filter_closed() {
    let (_, mut args) = renderings().remove(2);
    args.extend(["--set", "attach.istio.enabled=true"]);
    let out = template("ferry", &args);
    assert!(out.status.success(), "{}", text(&out));
    let rendered = String::from_utf8(out.stdout).unwrap();
    let mut configs = Vec::new();
    let mut mutual = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&rendered) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        match v["kind"].as_str() {
            Some("EnvoyExtensionPolicy") => configs.push(v["spec"]["wasm"][0]["config"].clone()),
            Some("WasmPlugin") => configs.push(v["spec"]["pluginConfig"].clone()),
            Some("EnvoyPatchPolicy") => {
                for patch in v["spec"]["jsonPatches"].as_array().unwrap() {
                    let tls = &patch["operation"]["value"]["transport_socket"]["typed_config"];
                    let ctx = &tls["common_tls_context"];
                    assert!(ctx["tls_certificates"][0].is_object(), "{patch}");
                    assert!(
                        ctx["validation_context"]["trusted_ca"].is_object(),
                        "{patch}"
                    );
                }
            }
            Some("DestinationRule") => {
                let tls = &v["spec"]["trafficPolicy"]["tls"];
                assert_eq!(tls["mode"], "MUTUAL", "{v}");
                assert!(tls["credentialName"].is_string(), "{v}");
                assert!(v["spec"]["workloadSelector"].is_object(), "{v}");
                mutual.push(v["spec"]["host"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    assert_eq!(configs.len(), 2, "{rendered}");
    mutual.sort();
    assert_eq!(
        mutual,
        [
            "ferry-control-plane.ferry.svc.cluster.local",
            "ferry-reader.ferry.svc.cluster.local"
        ]
    );
    for config in configs {
        match ferry_core::plugin_config::parse_plugin(config.to_string().as_bytes()) {
            Ok(ferry_core::plugin_config::Plugin::Pull(p)) => {
                assert!(p.url.starts_with("https://"), "{}", p.url);
                assert!(!p.insecure, "{p:?}");
                assert!(p.keys.is_some_and(|k| !k.ids().is_empty()));
            }
            Ok(_) => panic!("the chart's attachments pull the snapshot: {config}"),
            Err(e) => panic!("the filter refuses {config}: {e}"),
        }
    }
}

/// `helm template` of the chart with extra arguments, in the namespace `ferry`.
fn template(release: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "template",
        release,
        "deploy/helm/ferry",
        "--namespace",
        "ferry",
    ];
    all.extend_from_slice(args);
    helm(&all)
}

/// values.schema.json: a value of the wrong type, a misspelt key, a value outside its enum or
/// range, are refused by `helm template` and `helm lint` (as by `helm install`), naming the
/// key; the documented values pass.
#[test]
fn values_of_a_wrong_type_are_refused_by_the_schema() {
    let cases: [(&[&str], &str); 6] = [
        (&["--set", "reader.replicas=two"], "/reader/replicas"),
        (&["--set", "reader.replicsa=2"], "replicsa"),
        (&["--set", "logSink.enabled=yes"], "/logSink/enabled"),
        (
            &["--set", "controlPlane.grants=push"],
            "/controlPlane/grants",
        ),
        (
            &["--set", "tls.certManager.issuerRef.kind=Isuer"],
            "/tls/certManager/issuerRef/kind",
        ),
        (
            &["--set", "attach.snapshotPollMs=10"],
            "/attach/snapshotPollMs",
        ),
    ];
    for (args, key) in cases {
        let out = template("ferry", args);
        let log = text(&out);
        assert!(!out.status.success(), "{args:?} rendered:\n{log}");
        assert!(
            log.contains("schema"),
            "{args:?}: not the schema's refusal:\n{log}"
        );
        assert!(
            log.contains(key),
            "{args:?}: the refusal does not name {key}:\n{log}"
        );
        println!("{args:?} refused: {}", log.trim());
        let mut lint = vec!["lint", "--strict", "deploy/helm/ferry"];
        lint.extend_from_slice(args);
        let out = helm(&lint);
        assert!(
            !out.status.success(),
            "helm lint {args:?} passed:\n{}",
            text(&out)
        );
        assert!(text(&out).contains(key), "{}", text(&out));
    }
    let out = template(
        "ferry",
        &[
            "--set",
            "controlPlane.minAvailable=50%",
            "--set",
            "reader.replicas=3",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// Every (kind, namespace, name) of a rendering, and the values of fields that must differ
/// between releases: pod labels selected, secrets and claims named, Envoy cluster names, the
/// control plane's `--cluster-name`, Redis users.
fn objects_and_references(yaml: &str) -> (Vec<String>, Vec<String>) {
    let mut objects = Vec::new();
    let mut refs = Vec::new();
    fn walk(v: &serde_json::Value, refs: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let named = matches!(
                        k.as_str(),
                        "secretName" | "claimName" | "credentialName" | "app"
                    ) || (k == "name" && m.contains_key("key"));
                    if named {
                        refs.push(format!("{k}={}", x.as_str().unwrap_or_default()));
                    }
                    walk(x, refs);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    if x == "--cluster-name" {
                        refs.push(format!("--cluster-name={}", a[i + 1]));
                    }
                    walk(x, refs);
                }
            }
            _ => {}
        }
    }
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        objects.push(format!(
            "{}/{}/{}",
            v["kind"].as_str().unwrap(),
            v["metadata"]["namespace"].as_str().unwrap_or(""),
            v["metadata"]["name"].as_str().unwrap()
        ));
        walk(&v["spec"], &mut refs);
        if v["kind"] == "ConfigMap" {
            // The Redis ACL users: their names are the data's keys.
            for user in v["data"].as_object().unwrap().keys() {
                refs.push(format!("redis-user={user}"));
            }
        }
        if v["kind"] == "EnvoyPatchPolicy" {
            for p in v["spec"]["jsonPatches"].as_array().unwrap() {
                refs.push(format!("cluster={}", p["name"].as_str().unwrap()));
            }
        }
    }
    objects.sort();
    refs.sort();
    refs.dedup();
    (objects, refs)
}

/// Releases side by side: two releases of every option (log sink, Envoy Gateway, Istio) in one
/// namespace share no object name (here or in the attachments' namespaces), no selected pod
/// label, no secret or claim, no Envoy cluster, no Redis user and no shared-state name; both
/// pass the real schemas together. The release `ferry` keeps the names of the plain manifest;
/// a name stem too long for the Services' DNS labels is refused, naming the fix.
#[test]
fn two_releases_share_a_namespace_without_sharing_a_name() {
    let (_, mut args) = renderings().remove(2);
    args.extend(["--set", "attach.istio.enabled=true"]);
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut files = Vec::new();
    // The second release enriches another model (the attachments' targets are the user's).
    let second = [
        "--set",
        "attach.istio.selector.app=fraud-model-staging",
        "--set",
        "attach.envoyGateway.routeName=fraud-model-staging",
    ];
    for release in ["ferry", "staging"] {
        let mut args = args.clone();
        if release == "staging" {
            args.extend(second);
        }
        let out = template(release, &args);
        assert!(out.status.success(), "{release}: {}", text(&out));
        let yaml = String::from_utf8(out.stdout).unwrap();
        let path = dir.path().join(format!("{release}.yaml"));
        std::fs::write(&path, &yaml).unwrap();
        files.push(path);
        seen.push(objects_and_references(&yaml));
    }
    let (ferry, staging) = (&seen[0], &seen[1]);
    assert!(ferry
        .0
        .contains(&"Deployment/ferry/ferry-reader".to_owned()));
    assert!(staging
        .0
        .contains(&"Deployment/ferry/staging-ferry-reader".to_owned()));
    assert!(ferry.0.len() > 20, "{:?}", ferry.0);
    assert_eq!(ferry.0.len(), staging.0.len());
    let shared: Vec<_> = ferry.0.iter().filter(|o| staging.0.contains(o)).collect();
    assert!(shared.is_empty(), "objects of both releases: {shared:?}");
    for kind in [
        "app=",
        "secretName=",
        "claimName=",
        "credentialName=",
        "name=",
        "cluster=",
        "redis-user=",
        "--cluster-name=",
    ] {
        assert!(
            ferry.1.iter().any(|r| r.starts_with(kind)),
            "no {kind} found: {:?}",
            ferry.1
        );
    }
    let shared: Vec<_> = ferry.1.iter().filter(|r| staging.1.contains(r)).collect();
    assert!(shared.is_empty(), "named by both releases: {shared:?}");
    println!("ferry: {:?}\nstaging: {:?}", ferry.1, staging.1);
    assert_valid(&files, "a release's rendering");

    let out = template("a-release-name-of-thirty-five-chars", &[]);
    assert!(!out.status.success(), "a 41-character stem rendered");
    assert!(text(&out).contains("fullnameOverride"), "{}", text(&out));
    let out = template(
        "a-release-name-of-thirty-five-chars",
        &["--set", "fullnameOverride=ferry-b"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("name: ferry-b-reader\n"));
}

/// The operator job (`apply.enabled`): its pods carry the labels the control plane's
/// NetworkPolicy admits, present the operator's certificate (the secret a Certificate issues
/// with the identity the control plane grants `push`), push to the control plane's Service,
/// use only flags `ferry apply` has; and its script, run here on the first-install path (no
/// control plane answers) against a real Redis over TLS, materializes the repo and then
/// writes it onto the "volume", where the control plane's init container waits for ferry.yaml.
#[test]
fn the_apply_job_materializes_then_fills_the_repo_volume() {
    let out = template("ferry", &["--set", "apply.enabled=true"]);
    assert!(out.status.success(), "{}", text(&out));
    let rendered = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let job = find("Job", "ferry-apply");
    let pod = &job["spec"]["template"];
    let policy = find("NetworkPolicy", "ferry-control-plane");
    let admitted = policy["spec"]["ingress"][0]["from"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["podSelector"]["matchLabels"].as_object().unwrap())
        .any(|want| want.iter().all(|(k, v)| pod["metadata"]["labels"][k] == *v));
    assert!(
        admitted,
        "the job's pods are not let in: {}",
        pod["metadata"]
    );
    let tls = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tls")
        .unwrap();
    let secret = tls["secret"]["secretName"].as_str().unwrap();
    let cert = find("Certificate", secret);
    let identity = cert["spec"]["uris"][0].as_str().unwrap();
    let grants = find("Deployment", "ferry-control-plane").to_string();
    assert!(
        grants.contains(&format!("push={identity}")),
        "{identity} may not push"
    );
    let script = pod["spec"]["containers"][0]["command"][2]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        script.contains("url=https://ferry-control-plane.ferry.svc.cluster.local:8091\n"),
        "{script}"
    );
    let help = ferry_integration_tests::run(
        Command::new(ferry_integration_tests::bin("ferry")).args(["apply", "--help"]),
    );
    for flag in script
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .filter(|w| !["--max-time", "--cacert"].contains(w))
    // curl's
    {
        assert!(
            help.contains(&format!("{flag} ")),
            "ferry apply has no {flag}"
        );
    }

    // The first-install path, for real: the container's paths moved under a scratch folder.
    let dir = tempfile::tempdir().unwrap();
    let work = ferry_integration_tests::example_repo_with(dir.path(), 50);
    let volume = dir.path().join("volume");
    let script = script
        .replace("/work/repo", work.to_str().unwrap())
        .replace("/var/lib/ferry/repo", volume.join("repo").to_str().unwrap());
    let (redis, files) = ferry_integration_tests::RedisServer::start_tls();
    let url = redis.url().replace("redis://", "rediss://");
    let bin_dir = ferry_integration_tests::bin("ferry");
    let path = format!(
        "{}:{}",
        bin_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .env("PATH", path)
        .env("FERRY_REDIS", &url)
        .env("FERRY_REDIS_CA_FILE", &files.ca_cert)
        .env("FERRY_PUSH_TOKEN", "unused-on-first-install")
        .output()
        .unwrap();
    assert!(out.status.success(), "the job's script:\n{}", text(&out));
    assert!(volume.join("repo/ferry.yaml").is_file());
    assert!(volume.join("repo/data").is_dir());
    let keys = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(&files.ca_cert)
        .args(["-p", &redis.port.to_string(), "dbsize"])
        .output()
        .unwrap();
    let keys: u64 = String::from_utf8_lossy(&keys.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(keys >= 50, "{keys} keys materialized");
    println!("first install: {keys} keys materialized over TLS, then the volume written");
}

/// docs/production.md's values file (step 4) with its policy (step 7) renders, and the
/// rendering passes the real schemas: the guide's example stays installable.
#[test]
fn the_production_guides_values_render_and_pass_the_schemas() {
    let guide = std::fs::read_to_string(root().join("docs/production.md")).unwrap();
    let step = &guide[guide
        .find("**4. Chart values and install.**")
        .expect("step 4")..];
    let block = step
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("step 4's values file")
        .0;
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("my-values.yaml");
    std::fs::write(&values, block).unwrap();
    let (_, attach) = renderings().remove(2);
    let mut args = vec!["-f", values.to_str().unwrap()];
    args.extend(attach);
    let out = template("ferry", &args);
    assert!(out.status.success(), "{}", text(&out));
    let rendered = String::from_utf8(out.stdout).unwrap();
    for kind in ["Job", "EnvoyExtensionPolicy", "EnvoyPatchPolicy"] {
        assert!(rendered.contains(&format!("\nkind: {kind}\n")), "no {kind}");
    }
    let path = dir.path().join("rendered.yaml");
    std::fs::write(&path, rendered).unwrap();
    let out = kubectl_validate(&[path]);
    assert!(out.status.success(), "{}", text(&out));
}
