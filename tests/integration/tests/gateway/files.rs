//! The project's deploy/envoy-gateway files as the test applies them: each change is an exact
//! text replacement that must match once, so a file that drifts from what the test knows fails
//! here instead of being silently tested in another shape. What changes: the model's port, the
//! image's registry, the module's path and the folder of Envoy's client certificate and CA
//! (a mounted secret in a cluster), the read token and signing key (secrets a user writes
//! too), and the EnvoyProxy's provider (a host process of Envoy 1.40.0 in place of a
//! Kubernetes Deployment with that secret mounted). Names, namespaces, clusters, policies: as shipped.

use ferry_integration_tests::root;

pub fn read(name: &str) -> String {
    let path = root().join("deploy/envoy-gateway").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with `from` replaced by `to`; `from` must occur exactly once.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    replace_n(text, from, to, 1)
}

/// `text` with each of the `n` occurrences of `from` replaced by `to`.
pub fn replace_n(text: &str, from: &str, to: &str, n: usize) -> String {
    let found = text.matches(from).count();
    assert_eq!(
        found, n,
        "{from:?} occurs {found} times, not {n}, in:\n{text}"
    );
    text.replace(from, to)
}

/// What standalone mode needs besides the project's files: the GatewayClass Envoy Gateway's
/// own install makes (`eg`, which the Gateway names), and a patch of Envoy Gateway's own
/// `wasm_cluster` (its Envoy's mTLS link to its Wasm cache), which v1.9.1 cannot make work in
/// host mode by itself: it names the CA by its path in a Kubernetes pod (`/certs/ca.crt`; Envoy
/// refuses the cluster, "Invalid path", and with it the whole cluster update), and the client
/// certificate it hands Envoy over SDS comes from a CA generated in memory at its start, which
/// its Wasm cache (verifying against the CA `certgen --local` wrote) refuses ("certificate
/// signed by unknown authority"). The patch points both at `certgen --local`'s files in
/// `certs` (its `envoy/` directory).
pub fn standalone(certs: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: eg
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyPatchPolicy
metadata:
  name: standalone-wasm-cluster
  namespace: envoy-gateway-system
spec:
  targetRef:
    group: gateway.networking.k8s.io
    kind: Gateway
    name: eg
  type: JSONPatch
  jsonPatches:
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: wasm_cluster
    operation:
      op: replace
      path: /transport_socket/typed_config/common_tls_context/validation_context/trusted_ca/filename
      value: {certs}/ca.crt
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: wasm_cluster
    operation:
      op: remove
      path: /transport_socket/typed_config/common_tls_context/tls_certificate_sds_secret_configs
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: wasm_cluster
    operation:
      op: add
      path: /transport_socket/typed_config/common_tls_context/tls_certificates
      value:
      - certificate_chain: {{filename: {certs}/tls.crt}}
        private_key: {{filename: {certs}/tls.key}}
"
    )
}

/// gateway.yaml: the model on `model_port`, Envoy a host process, the module at `module`.
pub fn gateway(model_port: u16, module: &str, envoy_version: &str) -> String {
    let text = read("gateway.yaml");
    let text = replace_once(
        &text,
        "      hostname: fraud-predictor.models.svc.cluster.local\n      port: 80\n",
        &format!(
            "      hostname: fraud-predictor.models.svc.cluster.local\n      port: {model_port}\n"
        ),
    );
    let text = replace_once(
        &text,
        "  provider:
    type: Kubernetes
    kubernetes:
      envoyDeployment:
        # Envoy's client certificate for the reader and the control plane (mTLS; the clusters
        # of extension-policy.yaml name these files): a Certificate of Ferry's CA issued in
        # this namespace into the secret ferry-envoy-tls (deploy/kubernetes/ferry.yaml's
        # ferry-envoy-tls, issued here).
        pod:
          volumes:
          - name: ferry-tls
            secret: {secretName: ferry-envoy-tls}
        container:
          # The module is built for Envoy 1.40's dynamic-module ABI (it loads in 1.40 and 1.41).
          image: docker.io/envoyproxy/envoy:distroless-v1.40.0
          volumeMounts:
          - {name: ferry-tls, mountPath: /etc/ferry/tls, readOnly: true}
",
        &format!("  provider:\n    type: Host\n    host:\n      envoyVersion: {envoy_version}\n"),
    );
    let text = replace_once(
        &text,
        "path: /usr/lib/ferry/libferry_native.so",
        &format!("path: {module}"),
    );
    text
}

/// What extension-policy.yaml's secrets and addresses become in the test.
pub struct Wasm<'a> {
    /// `host:port/repo:tag` on the test's registry.
    pub image: &'a str,
    pub read_token: &'a str,
    /// The `snapshot_keys` entry `ferry keygen` printed, as a YAML flow map.
    pub key: &'a str,
    /// The folder holding what the ferry-envoy-tls secret holds in a cluster: Envoy's client
    /// certificate (tls.crt, tls.key) and the CA of the reader's and ferry serve's (ca.crt).
    pub tls_dir: &'a str,
}

/// extension-policy.yaml's documents: (the Wasm EnvoyExtensionPolicy, the EnvoyPatchPolicy).
pub fn extension_policy(w: &Wasm) -> (String, String) {
    let text = read("extension-policy.yaml");
    let text = replace_once(
        &text,
        "url: registry.example.com/ferry/ferry-filter:0.1.0",
        &format!("url: {}", w.image),
    );
    let text = replace_once(
        &text,
        "snapshot_token: REPLACE-WITH-THE-READ-TOKEN",
        &format!("snapshot_token: {}", w.read_token),
    );
    let text = replace_once(
        &text,
        "- {id: k-1fdff1d53376, ed25519: +GIKu+fhF8h2hy43tWAVs2fYv84JPDfavnXwpbzTwW4=}",
        &format!("- {}", w.key),
    );
    // Three files for each of the two clusters.
    let text = replace_n(&text, "/etc/ferry/tls/", &format!("{}/", w.tls_dir), 6);
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let [wasm, patch] = docs[..] else {
        panic!("extension-policy.yaml: two documents, {} found", docs.len())
    };
    assert!(wasm.contains("kind: EnvoyExtensionPolicy"), "{wasm}");
    assert!(patch.contains("kind: EnvoyPatchPolicy"), "{patch}");
    (format!("{wasm}\n"), patch.to_owned())
}

/// dynamic-module-policy.yaml with the test's read token and key (the secrets a user writes).
pub fn dynamic_module_policy(w: &Wasm) -> String {
    let text = read("dynamic-module-policy.yaml");
    let text = replace_once(
        &text,
        "snapshot_token: REPLACE-WITH-THE-READ-TOKEN",
        &format!("snapshot_token: {}", w.read_token),
    );
    replace_once(
        &text,
        "- {id: k-1fdff1d53376, ed25519: +GIKu+fhF8h2hy43tWAVs2fYv84JPDfavnXwpbzTwW4=}",
        &format!("- {}", w.key),
    )
}
