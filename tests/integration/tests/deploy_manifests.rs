//! The example manifests under deploy/ (Kubernetes, Istio, Envoy Gateway), validated without a
//! cluster (none here): every document parses, has the fields its kind needs, the names it
//! refers to exist (Services, ports, clusters), the filter's own parser accepts each plugin
//! config, and the Envoy config each implies (the wasm filter with that config as a
//! StringValue, the clusters it names) passes `envoy --mode validate` with the built filter.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_core::plugin_config::{parse_plugin, Plugin, Pull};
use ferry_integration_tests::{envoy_bin, root, wasm};
use serde_json::{json, Value as Json};

/// Every document of a deploy/ file, as JSON values.
fn documents(file: &str) -> Vec<Json> {
    let path = root().join("deploy").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v: Json =
            serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
        for key in ["apiVersion", "kind"] {
            assert!(v[key].is_string(), "{file}: a document without {key}: {v}");
        }
        assert!(
            v["metadata"]["name"].is_string(),
            "{file}: no metadata.name: {v}"
        );
        docs.push(v);
    }
    assert!(!docs.is_empty(), "{file} is empty");
    docs
}

fn of_kind<'a>(docs: &'a [Json], kind: &str) -> Vec<&'a Json> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn str_at<'a>(v: &'a Json, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer}: {v}"))
}

/// The filter's parser on a manifest's plugin config (a YAML object, passed on as JSON).
fn pull_of(config: &Json) -> Pull {
    match parse_plugin(config.to_string().as_bytes()) {
        Ok(Plugin::Pull(p)) => p,
        Ok(Plugin::Snapshot(_)) => panic!("the examples pull the snapshot: {config}"),
        Err(e) => panic!("the filter refuses {config}: {e}"),
    }
}

/// `envoy --mode validate` on a bootstrap with the wasm filter configured by `config` (a JSON
/// string in a StringValue, as Istio and Envoy Gateway pass it) and `clusters`. Validate mode
/// loads the built filter and runs its `on_configure` on the config (seen here: a config the
/// filter refuses fails validation with "Unable to create Wasm plugin").
fn envoy_validate(name: &str, config: &Json, clusters: Vec<Json>) -> Result<(), String> {
    let filter = json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": "ferry", "root_id": "ferry", "failure_policy": "FAIL_CLOSED",
                "configuration": {
                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                    "value": config.to_string(),
                },
                "vm_config": {
                    "vm_id": "ferry", "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": wasm().display().to_string()}},
                },
            },
        },
    });
    let router = json!({"name": "envoy.filters.http.router", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}});
    let hcm = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "ingress",
        "http_filters": [filter, router],
        "route_config": {"virtual_hosts": [{"name": "model", "domains": ["*"],
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "model"}}]}]},
    });
    let mut clusters = clusters;
    clusters.push(dns_cluster("model", "127.0.0.1", 8080));
    let bootstrap = json!({"static_resources": {
        "listeners": [{"name": "in", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}]}],
        "clusters": clusters,
    }});
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join(format!("{name}.json"));
    std::fs::write(&path, bootstrap.to_string()).unwrap();
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(log)
    }
}

fn dns_cluster(name: &str, host: &str, port: u64) -> Json {
    json!({"name": name, "type": "STRICT_DNS", "connect_timeout": "1s", "load_assignment": {
        "cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
        {"socket_address": {"address": host, "port_value": port}}}}]}]}})
}

/// (FQDN, port) of every port of every Service in deploy/kubernetes, whose selector matches a
/// Deployment's pod labels and whose targetPort a container of it declares.
fn services() -> Vec<(String, u64)> {
    let docs = documents("kubernetes/ferry.yaml");
    let deployments = of_kind(&docs, "Deployment");
    for d in &deployments {
        assert_eq!(
            d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"],
            "{d}"
        );
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            assert!(c["image"].is_string() && c["args"].is_array(), "{c}");
        }
    }
    let mut out = Vec::new();
    for s in of_kind(&docs, "Service") {
        let pod = deployments
            .iter()
            .find(|d| d["spec"]["template"]["metadata"]["labels"] == s["spec"]["selector"])
            .unwrap_or_else(|| panic!("no Deployment for the Service {s}"));
        let container_ports: Vec<&Json> = pod["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["ports"].as_array().unwrap())
            .map(|p| &p["containerPort"])
            .collect();
        let host = format!(
            "{}.{}.svc.cluster.local",
            str_at(s, "/metadata/name"),
            str_at(s, "/metadata/namespace")
        );
        for p in s["spec"]["ports"].as_array().unwrap() {
            assert!(container_ports.contains(&&p["targetPort"]), "{s}");
            out.push((host.clone(), p["port"].as_u64().unwrap()));
        }
    }
    out
}

/// `outbound|PORT||HOST`, Istio's cluster name, back to (HOST, PORT).
fn istio_cluster(name: &str) -> (String, u64) {
    let rest = name
        .strip_prefix("outbound|")
        .unwrap_or_else(|| panic!("{name}"));
    let (port, host) = rest.split_once("||").unwrap_or_else(|| panic!("{name}"));
    (host.to_owned(), port.parse().unwrap())
}

#[test]
fn the_istio_wasmplugin_names_what_the_kubernetes_services_make() {
    let services = services();
    let docs = documents("istio/wasmplugin.yaml");
    let [plugin] = of_kind(&docs, "WasmPlugin")[..] else {
        panic!("one WasmPlugin")
    };
    assert_eq!(plugin["apiVersion"], "extensions.istio.io/v1alpha1");
    assert!(str_at(plugin, "/spec/url").starts_with("oci://"));
    assert_eq!(plugin["spec"]["type"], "HTTP");
    assert_eq!(plugin["spec"]["failStrategy"], "FAIL_CLOSE");
    let config = &plugin["spec"]["pluginConfig"];
    let pull = pull_of(config);
    assert!(!pull.overrides.headers_held);
    signed_over_tls(&pull);
    // Ferry's own mTLS, originated by the model pods' sidecars to both hosts: a client
    // certificate from a secret, the server's Service name checked.
    let rules = of_kind(&docs, "DestinationRule");
    assert_eq!(rules.len(), 2, "a DestinationRule per host");
    let rule_for = |host: &str| -> &Json {
        rules
            .iter()
            .find(|r| r["spec"]["host"] == host)
            .unwrap_or_else(|| panic!("no DestinationRule for {host}"))
    };
    for rule in &rules {
        let tls = &rule["spec"]["trafficPolicy"]["tls"];
        assert_eq!(tls["mode"], "MUTUAL", "{rule}");
        assert!(tls["credentialName"].is_string(), "{rule}");
        assert_eq!(tls["sni"], rule["spec"]["host"], "{rule}");
        assert_eq!(tls["subjectAltNames"][0], rule["spec"]["host"], "{rule}");
        // credentialName applies at sidecars only with a workloadSelector.
        assert_eq!(
            rule["spec"]["workloadSelector"]["matchLabels"],
            plugin["spec"]["selector"]["matchLabels"],
            "{rule}"
        );
    }

    // Each cluster named is one Istio makes for a Service, and the URL goes to that Service.
    let reader = istio_cluster(pull.overrides.reader_cluster.as_deref().unwrap());
    let cp = istio_cluster(&pull.cluster);
    for target in [&reader, &cp] {
        assert!(
            services.contains(target),
            "{target:?} is no Service port: {services:?}"
        );
    }
    assert_eq!(pull.authority, format!("{}:{}", cp.0, cp.1));
    assert_eq!(pull.path, "/v1/snapshot");
    rule_for(&cp.0);
    rule_for(&reader.0);

    let clusters = vec![
        dns_cluster(
            pull.overrides.reader_cluster.as_deref().unwrap(),
            &reader.0,
            reader.1,
        ),
        dns_cluster(&pull.cluster, &cp.0, cp.1),
    ];
    if let Err(log) = envoy_validate("istio", config, clusters.clone()) {
        panic!("envoy --mode validate refused the Istio config:\n{log}");
    }
    // The check bites: the same with a key the filter does not know is refused.
    let mut typo = config.clone();
    typo["snapshot_pol_ms"] = json!(5000);
    let log = envoy_validate("istio-typo", &typo, clusters).unwrap_err();
    assert!(log.contains("Unable to create Wasm plugin"), "{log}");

    // The ServiceEntry alternative: hosts and ports of its own, for a mesh-external reader.
    let entries = documents("istio/serviceentry.yaml");
    for e in of_kind(&entries, "ServiceEntry") {
        assert_eq!(e["spec"]["location"], "MESH_EXTERNAL");
        assert!(e["spec"]["hosts"][0].is_string(), "{e}");
        assert!(e["spec"]["ports"][0]["number"].is_u64(), "{e}");
    }
    assert_eq!(of_kind(&entries, "ServiceEntry").len(), 2);
}

#[test]
fn the_envoy_gateway_policy_names_the_clusters_its_patch_adds() {
    let services = services();
    let docs = documents("envoy-gateway/extension-policy.yaml");
    let [policy] = of_kind(&docs, "EnvoyExtensionPolicy")[..] else {
        panic!("one EnvoyExtensionPolicy")
    };
    assert_eq!(policy["apiVersion"], "gateway.envoyproxy.io/v1alpha1");
    assert_eq!(policy["spec"]["targetRefs"][0]["kind"], "HTTPRoute");
    let wasm_ext = &policy["spec"]["wasm"][0];
    assert_eq!(wasm_ext["code"]["type"], "Image");
    assert!(wasm_ext["code"]["image"]["url"].is_string());
    assert_eq!(wasm_ext["failOpen"], false);
    let config = &wasm_ext["config"];
    let pull = pull_of(config);
    signed_over_tls(&pull);

    let [patch] = of_kind(&docs, "EnvoyPatchPolicy")[..] else {
        panic!("one EnvoyPatchPolicy")
    };
    assert_eq!(patch["spec"]["type"], "JSONPatch");
    assert_eq!(patch["spec"]["targetRef"]["kind"], "Gateway");
    let mut clusters = Vec::new();
    for p in patch["spec"]["jsonPatches"].as_array().unwrap() {
        assert_eq!(
            p["type"],
            "type.googleapis.com/envoy.config.cluster.v3.Cluster"
        );
        assert_eq!(p["operation"]["op"], "add");
        let cluster = p["operation"]["value"].clone();
        assert_eq!(cluster["name"], p["name"]);
        let addr = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
            ["address"]["socket_address"];
        let target = (
            str_at(addr, "/address").to_owned(),
            addr["port_value"].as_u64().unwrap(),
        );
        assert!(services.contains(&target), "{target:?} is no Service port");
        clusters.push(cluster);
    }
    let names: Vec<&str> = clusters.iter().map(|c| str_at(c, "/name")).collect();
    for named in [
        pull.overrides.reader_cluster.as_deref().unwrap(),
        &pull.cluster,
    ] {
        assert!(
            names.contains(&named),
            "{named} is not among the patched clusters {names:?}"
        );
    }
    // Both clusters speak mTLS: each verifies its server's certificate for its Service name
    // and presents the Gateway's Envoy's client certificate (the reader requires one).
    for (name, host) in [
        (
            pull.cluster.as_str(),
            pull.authority.split(':').next().unwrap(),
        ),
        (
            pull.overrides.reader_cluster.as_deref().unwrap(),
            "ferry-reader.ferry.svc.cluster.local",
        ),
    ] {
        let cluster = clusters.iter().find(|c| c["name"] == name).unwrap();
        let tls = &cluster["transport_socket"]["typed_config"];
        assert!(
            str_at(tls, "/@type").ends_with("UpstreamTlsContext"),
            "{cluster}"
        );
        assert_eq!(str_at(tls, "/sni"), host);
        let ctx = &tls["common_tls_context"];
        assert!(
            ctx["tls_certificates"][0]["private_key"].is_object(),
            "{cluster}"
        );
        assert_eq!(
            ctx["validation_context"]["match_typed_subject_alt_names"][0]["matcher"]["exact"],
            host
        );
    }
    // The files the clusters name (the ferry-envoy-tls secret, mounted through the
    // EnvoyProxy) made here, so that Envoy loads them.
    let secret = tempfile::tempdir().unwrap();
    let ca = ferry_test_support::certs::Ca::new("deploy manifests");
    ca.write(&secret.path().join("ca.crt"));
    let leaf = ca.issue(
        &[],
        &["spiffe://cluster.local/ns/envoy-gateway-system/sa/envoy"],
    );
    let files = leaf.write(secret.path(), "envoy");
    std::fs::rename(&files.cert, secret.path().join("tls.crt")).unwrap();
    std::fs::rename(&files.key, secret.path().join("tls.key")).unwrap();
    let moved = serde_json::to_string(&clusters)
        .unwrap()
        .replace("/etc/ferry/tls/", &format!("{}/", secret.path().display()));
    let clusters: Vec<Json> = serde_json::from_str(&moved).unwrap();
    if let Err(log) = envoy_validate("envoy-gateway", config, clusters) {
        panic!("envoy --mode validate refused the Envoy Gateway config:\n{log}");
    }
}

/// The Envoy Gateway files name each other: the Gateway its EnvoyProxy, the HTTPRoute its
/// Gateway and Backend, both policies the HTTPRoute, the native policy a module the EnvoyProxy
/// allows, with a config the filter's parser accepts naming a patched cluster. (A real Envoy
/// Gateway reads them in gateway.rs, `make test-gateway`.)
#[test]
fn the_envoy_gateway_files_name_each_other() {
    let docs = documents("envoy-gateway/gateway.yaml");
    let [gateway] = of_kind(&docs, "Gateway")[..] else {
        panic!("one Gateway")
    };
    let [proxy] = of_kind(&docs, "EnvoyProxy")[..] else {
        panic!("one EnvoyProxy")
    };
    let [route] = of_kind(&docs, "HTTPRoute")[..] else {
        panic!("one HTTPRoute")
    };
    let [backend] = of_kind(&docs, "Backend")[..] else {
        panic!("one Backend")
    };
    let infra = &gateway["spec"]["infrastructure"]["parametersRef"];
    assert_eq!(
        (&infra["kind"], &infra["name"]),
        (&json!("EnvoyProxy"), &proxy["metadata"]["name"])
    );
    assert_eq!(
        gateway["metadata"]["namespace"],
        proxy["metadata"]["namespace"]
    );
    let parent = &route["spec"]["parentRefs"][0];
    assert_eq!(parent["name"], gateway["metadata"]["name"]);
    assert_eq!(parent["namespace"], gateway["metadata"]["namespace"]);
    let to = &route["spec"]["rules"][0]["backendRefs"][0];
    assert_eq!(
        (&to["kind"], &to["name"]),
        (&json!("Backend"), &backend["metadata"]["name"])
    );
    assert_eq!(
        route["metadata"]["namespace"],
        backend["metadata"]["namespace"]
    );
    // KServe v1's predict path is matched exactly (a PathPrefix matches whole segments only).
    let paths: Vec<&Json> = route["spec"]["rules"][0]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["path"]["value"])
        .collect();
    assert!(
        paths.contains(&&json!("/v1/models/fraud:predict")),
        "{route}"
    );

    let wasm_docs = documents("envoy-gateway/extension-policy.yaml");
    let patched: Vec<&Json> = of_kind(&wasm_docs, "EnvoyPatchPolicy")[0]["spec"]["jsonPatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    let native_docs = documents("envoy-gateway/dynamic-module-policy.yaml");
    let [native] = of_kind(&native_docs, "EnvoyExtensionPolicy")[..] else {
        panic!("one EnvoyExtensionPolicy")
    };
    for policy in [of_kind(&wasm_docs, "EnvoyExtensionPolicy")[0], native] {
        let target = &policy["spec"]["targetRefs"][0];
        assert_eq!(
            (&target["kind"], &target["name"]),
            (&json!("HTTPRoute"), &route["metadata"]["name"])
        );
        assert_eq!(
            policy["metadata"]["namespace"],
            route["metadata"]["namespace"]
        );
    }
    let module = &native["spec"]["dynamicModule"][0];
    let allowed: Vec<&Json> = proxy["spec"]["dynamicModules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"])
        .collect();
    assert!(
        allowed.contains(&&module["name"]),
        "{module} not in {allowed:?}"
    );
    // The module pulls as the Wasm filter does, through the same patched clusters.
    let native_pull = pull_of(&module["config"]);
    signed_over_tls(&native_pull);
    for named in [
        native_pull
            .overrides
            .reader_cluster
            .as_deref()
            .unwrap_or_default(),
        &native_pull.cluster,
    ] {
        assert!(patched.contains(&&json!(named)), "{named}: {patched:?}");
    }
}

/// A manifest's pull is signed and declared TLS: keys, `https://`, never `insecure`.
fn signed_over_tls(pull: &Pull) {
    assert!(pull.url.starts_with("https://"), "{}", pull.url);
    assert!(!pull.insecure, "{pull:?}");
    assert!(
        pull.keys.as_ref().is_some_and(|k| !k.ids().is_empty()),
        "{pull:?}"
    );
}

#[test]
fn every_deploy_file_is_covered_here() {
    let mut files = Vec::new();
    collect(&root().join("deploy"), &mut files);
    files.sort();
    let covered = [
        "envoy-gateway/dynamic-module-policy.yaml",
        "envoy-gateway/extension-policy.yaml",
        "envoy-gateway/gateway.yaml",
        "grafana/ferry.json",
        "istio/serviceentry.yaml",
        "istio/wasmplugin.yaml",
        "kubernetes/ferry.yaml",
    ];
    assert_eq!(files, covered, "a new manifest needs its checks here");
}

/// deploy/'s manifest files; the Helm chart's sources (deploy/helm) are templates, checked
/// through their renderings in deploy_schemas.rs (and kubernetes/ferry.yaml is the default one).
fn collect(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path == root().join("deploy/helm") {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|x| x == "yaml" || x == "json") {
            let rel = path.strip_prefix(root().join("deploy")).unwrap();
            out.push(rel.display().to_string());
        }
    }
}

/// The containers of deploy/kubernetes, by Deployment name.
/// The environment variable `name` of a container (its `value` or `valueFrom`).
fn env_of<'a>(container: &'a Json, what: &str, name: &str) -> &'a Json {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{what} has no {name}"))
}

fn containers(docs: &[Json]) -> Vec<(String, &Json)> {
    of_kind(docs, "Deployment")
        .into_iter()
        .flat_map(|d| {
            let name = str_at(d, "/metadata/name").to_owned();
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |c| (name.clone(), c))
        })
        .collect()
}

/// Ingress into the namespace is denied unless allowed; the reader is reachable from Envoys
/// only, the control plane from Envoys and operators, each on its own ports; no server binds
/// 0.0.0.0; Redis is reached over TLS with a password from a secret.
#[test]
fn network_policies_let_only_envoy_and_operators_in() {
    let docs = documents("kubernetes/ferry.yaml");
    let policies = of_kind(&docs, "NetworkPolicy");
    let deny = policies
        .iter()
        .find(|p| p["spec"]["podSelector"] == json!({}))
        .expect("a default policy over every pod");
    assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress"]));
    assert!(
        deny["spec"]["ingress"].is_null(),
        "the default allows nothing: {deny}"
    );
    let allowed = |app: &str| -> (Vec<Json>, Vec<u64>) {
        let p = policies
            .iter()
            .find(|p| p["spec"]["podSelector"]["matchLabels"]["app"] == app)
            .unwrap_or_else(|| panic!("no NetworkPolicy for {app}"));
        let rules = p["spec"]["ingress"].as_array().unwrap();
        assert_eq!(rules.len(), 1, "{p}");
        let from = rules[0]["from"].as_array().unwrap();
        let roles = from
            .iter()
            .map(|f| {
                assert_eq!(f["namespaceSelector"], json!({}), "{f}");
                f["podSelector"]["matchLabels"].clone()
            })
            .collect();
        let ports = rules[0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_u64().unwrap())
            .collect();
        (roles, ports)
    };
    let role = |r: &str| json!({"ferry.dev/role": r});
    assert_eq!(allowed("ferry-reader"), (vec![role("envoy")], vec![8090]));
    assert_eq!(
        allowed("ferry-control-plane"),
        (vec![role("envoy"), role("operator")], vec![8091, 18000])
    );
    for (deployment, c) in containers(&docs) {
        let text = c.to_string();
        assert!(!text.contains("0.0.0.0"), "{deployment} binds 0.0.0.0: {c}");
    }
    let reader = containers(&docs)
        .into_iter()
        .find(|(d, _)| d == "ferry-reader")
        .unwrap()
        .1;
    let env = |name: &str| env_of(reader, "reader", name);
    assert!(env("FERRY_REDIS")["value"]
        .as_str()
        .unwrap()
        .starts_with("rediss://"));
    assert!(env("FERRY_REDIS_PASSWORD")["valueFrom"]["secretKeyRef"].is_object());
    assert!(env("FERRY_REDIS_CA_FILE")["value"].is_string());
}

/// The control plane runs as replicas sharing their state through Redis (`--shared-state`,
/// reached as the reader reaches it: TLS, a password from a secret, a mounted CA), with no
/// state directory, the repo volume mounted read-only by all of them from a claim they can all
/// mount, updates one replica at a time, and a PodDisruptionBudget keeping one up.
#[test]
fn the_control_plane_runs_as_replicas_sharing_state_with_a_disruption_budget() {
    let docs = documents("kubernetes/ferry.yaml");
    let deployment = of_kind(&docs, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "ferry-control-plane")
        .unwrap();
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2);
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    let (_, c) = containers(&docs)
        .into_iter()
        .find(|(d, _)| d == "ferry-control-plane")
        .unwrap();
    let args = c["args"].to_string();
    assert!(args.contains("\"--shared-state\""), "{args}");
    // Ready only once it serves a snapshot: a replica started while Redis is away serves none.
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{c}");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{c}");
    assert!(!args.contains("--state-dir"), "{args}");
    assert!(flag(c, "--cluster-name").is_some_and(|n| !n.is_empty()));
    let env = |name: &str| env_of(c, "the control plane", name);
    assert!(env("FERRY_REDIS")["value"]
        .as_str()
        .unwrap()
        .starts_with("rediss://"));
    assert!(env("FERRY_REDIS_PASSWORD")["valueFrom"]["secretKeyRef"].is_object());
    let ca = env("FERRY_REDIS_CA_FILE")["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| ca.starts_with(&format!("{}/", str_at(m, "/mountPath")))),
        "{ca} is on no mounted volume"
    );
    let repo = mounts.iter().find(|m| m["name"] == "repo").unwrap();
    assert_eq!(repo["readOnly"], true, "{repo}");
    let claims = of_kind(&docs, "PersistentVolumeClaim");
    assert!(
        claims
            .iter()
            .all(|p| p["spec"]["accessModes"] == json!(["ReadWriteMany"])),
        "every replica mounts the repo"
    );
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let budget = of_kind(&docs, "PodDisruptionBudget")
        .into_iter()
        .find(|p| p["spec"]["selector"]["matchLabels"] == *labels)
        .expect("a PodDisruptionBudget over the control plane's pods");
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert_eq!(str_at(budget, "/metadata/namespace"), "ferry");
}

/// A server's flag value in a container's args (`--flag VALUE`).
fn flag<'a>(c: &'a Json, name: &str) -> Option<&'a str> {
    let args = c["args"].as_array()?;
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1)?.as_str()
}

/// Every server runs with TLS: `--tls-cert`, `--tls-key` and `--client-ca` name files of a
/// volume mounted from a secret (issued by a cert-manager Certificate of the manifest), no
/// `--insecure`; `ferry serve` signs its snapshots with a key from a mounted secret, grants
/// roles to certificate identities and maps Envoy identities to node ids.
#[test]
fn every_server_serves_tls_from_mounted_secrets() {
    let docs = documents("kubernetes/ferry.yaml");
    let certificates: Vec<&str> = of_kind(&docs, "Certificate")
        .iter()
        .map(|c| str_at(c, "/spec/secretName"))
        .collect();
    let deployments = of_kind(&docs, "Deployment");
    for (deployment, c) in containers(&docs) {
        let pod = &deployments
            .iter()
            .find(|d| d["metadata"]["name"] == deployment.as_str())
            .unwrap()["spec"]["template"]["spec"];
        let text = c["args"].to_string();
        assert!(!text.contains("--insecure"), "{deployment}: {text}");
        // The secret a file path comes from: the mount holding it, its volume's secret.
        let secret_of = |path: &str| -> String {
            let mount = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| path.starts_with(&format!("{}/", str_at(m, "/mountPath"))))
                .unwrap_or_else(|| panic!("{deployment}: {path} is on no mounted volume"));
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap();
            str_at(volume, "/secret/secretName").to_owned()
        };
        let mut secrets = Vec::new();
        for name in ["--tls-cert", "--tls-key", "--client-ca"] {
            let path = flag(c, name).unwrap_or_else(|| panic!("{deployment} has no {name}"));
            secrets.push(secret_of(path));
        }
        secrets.dedup();
        assert_eq!(
            secrets.len(),
            1,
            "{deployment}: one secret for its TLS: {secrets:?}"
        );
        assert!(
            certificates.contains(&secrets[0].as_str()),
            "{deployment}: {} is issued by no Certificate ({certificates:?})",
            secrets[0]
        );
        if deployment == "ferry-control-plane" {
            assert_eq!(
                secret_of(flag(c, "--signing-key").unwrap()),
                "ferry-signing-key"
            );
            assert!(flag(c, "--grant").is_some_and(|g| g.starts_with("push=spiffe://")));
            assert!(flag(c, "--node-identity").is_some_and(|g| g.contains("=envoy-")));
        }
    }
    // Envoy's and the operator's client certificates are issued too (URI SANs).
    for name in ["ferry-envoy-tls", "ferry-operator-tls"] {
        assert!(certificates.contains(&name), "{certificates:?}");
    }
}

/// Every metric the Grafana dashboard queries exists: the filter's from ferry-core's metric
/// table, the reader's and `ferry serve`'s as registered in their sources (a histogram's
/// `_bucket`/`_sum`/`_count`, a counter's `_total` and a `_seconds` unit are the exporters').
#[test]
fn grafana_dashboard_queries_only_metrics_that_exist() {
    use ferry_core::metrics::{views, ALL};
    let text = std::fs::read_to_string(root().join("deploy/grafana/ferry.json")).unwrap();
    let dashboard: Json = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            queries.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            queries.push(v["query"].as_str().unwrap().to_owned());
        }
    }
    let mut sources = String::new();
    for dir in ["reader/src", "control-plane/src"] {
        read_rs(&root().join(dir), &mut sources);
    }
    let known = |name: &str| {
        ALL.iter().any(|(_, _, n)| *n == name)
            || [views::VALUES_NAME, views::AGE_NAME].contains(&name)
            || sources.contains(&format!("\"{name}\""))
    };
    let mut names = 0;
    for q in &queries {
        for word in q.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.starts_with("ferry_") {
                continue;
            }
            names += 1;
            let base = ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(word);
            let exists = known(base) || base.strip_suffix("_seconds").is_some_and(known);
            assert!(
                exists,
                "the dashboard queries {word}, which no exporter defines: {q}"
            );
        }
    }
    assert!(names >= 20, "{names} metric names in the dashboard");
    assert!(text.contains("ferry_view_age_seconds_bucket") && text.contains("ferry_view_values"));
}

fn read_rs(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            read_rs(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}
