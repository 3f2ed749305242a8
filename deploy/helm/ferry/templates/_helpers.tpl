{{/* The stem of every object name of this release: the release's name when it contains
     the chart's (release `ferry`: ferry-reader, ferry-control-plane, ...), else
     RELEASE-ferry; `fullnameOverride` replaces it. Two releases in one namespace share no
     object, no Service and no pod label. Kept to 40 characters (refused past that, never
     cut: two long names cut alike would collide) so that STEM-control-plane-tls and the
     Services' names stay DNS labels. */}}
{{- define "ferry.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- if gt (len $full) 40 -}}
{{- fail (printf "the names' stem %q is %d characters, at most 40: set fullnameOverride (or a shorter release name)" $full (len $full)) -}}
{{- end -}}
{{- $full -}}
{{- end }}

{{/* An object's name: include "ferry.name" (list . "reader") is STEM-reader. */}}
{{- define "ferry.name" -}}
{{ include "ferry.fullname" (index . 0) }}-{{ index . 1 }}
{{- end }}

{{/* A value naming an object, or STEM-SUFFIX when it is empty:
     include "ferry.or" (list . .Values.tls.secrets.reader "reader-tls"). */}}
{{- define "ferry.or" -}}
{{- if index . 1 }}{{ index . 1 }}{{ else }}{{ include "ferry.name" (list (index . 0) (index . 2)) }}{{ end -}}
{{- end }}

{{/* An Envoy cluster name of this release (Envoy Gateway's patched clusters): STEM_SUFFIX. */}}
{{- define "ferry.cluster" -}}
{{ include "ferry.fullname" (index . 0) | replace "-" "_" }}_{{ index . 1 }}
{{- end }}

{{/* The labels of every object: which chart made it and which release it belongs to
     (`kubectl get all -l app.kubernetes.io/instance=RELEASE`). No managed-by: the plain
     manifest is this rendering, applied without Helm. */}}
{{- define "ferry.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* An object's metadata in the release's namespace: include "ferry.metadata" (list . "reader")
     names it STEM-reader; "ferry.metadataNamed" (list . NAME [NAMESPACE]) names it NAME. */}}
{{- define "ferry.metadata" -}}
{{ include "ferry.metadataNamed" (list (index . 0) (include "ferry.name" .)) }}
{{- end }}
{{- define "ferry.metadataNamed" -}}
metadata:
  name: {{ index . 1 }}
  namespace: {{ if gt (len .) 2 }}{{ index . 2 }}{{ else }}{{ (index . 0).Release.Namespace }}{{ end }}
  labels:
    {{- include "ferry.labels" (index . 0) | nindent 4 }}
{{- end }}

{{/* The image of every Ferry container. */}}
{{- define "ferry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* imagePullPolicy, only when set (else the cluster's default), on a line of its own at
     the container's indent: {{- include "ferry.pullPolicy" (list . 8) }}. Nothing when unset
     (not even a blank line). */}}
{{- define "ferry.pullPolicy" -}}
{{- with (index . 0).Values.image.pullPolicy }}{{ printf "imagePullPolicy: %s" . | nindent (index $ 1) }}{{ end -}}
{{- end }}

{{/* A Service's in-cluster DNS name: include "ferry.host" (list . "reader") is
     STEM-reader.NAMESPACE.svc.DOMAIN. */}}
{{- define "ferry.host" -}}
{{ include "ferry.name" . }}.{{ (index . 0).Release.Namespace }}.svc.{{ (index . 0).Values.clusterDomain }}
{{- end }}

{{/* resources, only when set, at the container's indent: {{- include "ferry.resources" (list RESOURCES 8) }}. */}}
{{- define "ferry.resources" -}}
{{- with index . 0 }}{{ printf "resources:\n%s" (toYaml . | indent 2) | nindent (index $ 1) }}{{ end -}}
{{- end }}

{{/* The pull config of the filter (Envoy Gateway's policy, Istio's WasmPlugin): args
     (root, snapshot cluster, reader cluster). */}}
{{- define "ferry.pullConfig" -}}
{{- $ := index . 0 -}}
{{- $token := $.Values.attach.snapshotToken -}}
{{- $secretName := include "ferry.or" (list $ $.Values.controlPlane.readTokenSecret "read-token") -}}
{{- if not $token -}}
{{- $secret := lookup "v1" "Secret" $.Release.Namespace $secretName -}}
{{- if $secret -}}
{{- $token = index $secret.data "token" | b64dec -}}
{{- end -}}
{{- end -}}
{{- if not $token -}}
{{- fail (printf "attach.snapshotToken is empty and the secret %s/%s (key token) was not found: give the read token" $.Release.Namespace $secretName) -}}
{{- end -}}
{{- if not $.Values.attach.snapshotKeys -}}
{{- fail "attach.snapshotKeys is empty: the pulled snapshots are signed (ferry keygen prints the entry)" -}}
{{- end -}}
snapshot_url: https://{{ include "ferry.host" (list $ "control-plane") }}:{{ $.Values.controlPlane.httpPort }}/v1/snapshot
snapshot_cluster: {{ index . 1 | quote }}
snapshot_poll_ms: {{ $.Values.attach.snapshotPollMs }}
snapshot_token: {{ $token | quote }}
snapshot_keys:
{{- range $.Values.attach.snapshotKeys }}
- {id: {{ .id | quote }}, ed25519: {{ .ed25519 | quote }}}
{{- end }}
reader_cluster: {{ index . 2 | quote }}
allow_on_headers_stop_iteration: false
{{- end }}

{{/* Labels as text for comments: k=v, k=v. */}}
{{- define "ferry.labelText" -}}
{{- $out := list -}}
{{- range $k, $v := . }}{{ $out = append $out (printf "%s=%s" $k $v) }}{{ end -}}
{{ join ", " $out }}
{{- end }}

{{/* With the Istio attachment, Ferry's pods run without sidecars: their servers' own mTLS is
     end to end (the DestinationRules make the model pods' sidecars originate it). */}}
{{- define "ferry.meshLabel" -}}
{{- if .Values.attach.istio.enabled }}, sidecar.istio.io/inject: "false"{{ end }}
{{- end }}
