{{/* The image of every Ferry container. */}}
{{- define "ferry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* imagePullPolicy, only when set (else the cluster's default). */}}
{{- define "ferry.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* A Service's in-cluster DNS name: include "ferry.host" (list . "ferry-reader"). */}}
{{- define "ferry.host" -}}
{{ index . 1 }}.{{ (index . 0).Release.Namespace }}.svc.{{ (index . 0).Values.clusterDomain }}
{{- end }}

{{/* resources, only when set. */}}
{{- define "ferry.resources" -}}
{{- with . }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pull config of the filter (Envoy Gateway's policy, Istio's WasmPlugin): args
     (root, snapshot cluster, reader cluster). */}}
{{- define "ferry.pullConfig" -}}
{{- $ := index . 0 -}}
{{- $token := $.Values.attach.snapshotToken -}}
{{- if not $token -}}
{{- $secret := lookup "v1" "Secret" $.Release.Namespace $.Values.controlPlane.readTokenSecret -}}
{{- if $secret -}}
{{- $token = index $secret.data "token" | b64dec -}}
{{- end -}}
{{- end -}}
{{- if not $token -}}
{{- fail (printf "attach.snapshotToken is empty and the secret %s/%s (key token) was not found: give the read token" $.Release.Namespace $.Values.controlPlane.readTokenSecret) -}}
{{- end -}}
{{- if not $.Values.attach.snapshotKeys -}}
{{- fail "attach.snapshotKeys is empty: the pulled snapshots are signed (ferry keygen prints the entry)" -}}
{{- end -}}
snapshot_url: https://{{ include "ferry.host" (list $ "ferry-control-plane") }}:{{ $.Values.controlPlane.httpPort }}/v1/snapshot
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
