{{/* name is every object's name: fullnameOverride; else the release's
name when it holds "fairgate" (helm install fairgate …: Service fairgate);
else <release>-fairgate. */}}
{{- define "fairgate.name" -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "fairgate" .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-fairgate" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- define "fairgate.labels" -}}
app.kubernetes.io/name: fairgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{/* seconds parses "25s" or "1m" into whole seconds. */}}
{{- define "fairgate.seconds" -}}
{{- $s := toString . -}}
{{- if hasSuffix "ms" $s -}}0{{- else if hasSuffix "m" $s -}}{{ mul (trimSuffix "m" $s | atoi) 60 }}{{- else -}}{{ trimSuffix "s" $s | atoi }}{{- end -}}
{{- end -}}
{{- define "fairgate.config" -}}
{{- if .Values.config }}{{ .Values.config }}{{ else }}{{ .Files.Get "files/fairgate.yaml" }}{{ end -}}
{{- end -}}
{{/* maxReplicas is the most pods the chart may run: replicaCount, or an
autoscaler's maxReplicas when autoscaling.enabled is set. */}}
{{- define "fairgate.maxReplicas" -}}
{{- $max := int .Values.replicaCount -}}
{{- if dig "autoscaling" "enabled" false .Values.AsMap -}}
{{- $max = max $max (int (dig "autoscaling" "maxReplicas" 1 .Values.AsMap)) -}}
{{- end -}}
{{- $max -}}
{{- end -}}
{{/* internalOnService: in proxy mode, whether the Service carries the
internal port (asked for, or needed by the ServiceMonitor). */}}
{{- define "fairgate.internalOnService" -}}
{{- if and .Values.upstream (or .Values.internalService.enabled .Values.serviceMonitor.enabled) -}}true{{- end -}}
{{- end -}}
{{/* secretName is the Secret the tokens and the password come from: an
existingSecret's, or the chart's own. */}}
{{- define "fairgate.secretName" -}}{{ .Values.existingSecret.name | default (include "fairgate.name" .) }}{{- end -}}
{{/* adminTokenKey, internalTokenKey, storePasswordKey: the Secret's key for
each, or empty when it is not set (its feature stays off). */}}
{{- define "fairgate.adminTokenKey" -}}
{{- if .Values.existingSecret.name -}}{{ .Values.existingSecret.adminTokenKey }}{{- else if .Values.adminToken -}}admin-token{{- end -}}
{{- end -}}
{{- define "fairgate.internalTokenKey" -}}
{{- if .Values.existingSecret.name -}}{{ .Values.existingSecret.internalTokenKey }}{{- else if .Values.internalToken -}}internal-token{{- end -}}
{{- end -}}
{{- define "fairgate.storePasswordKey" -}}
{{- if .Values.existingSecret.name -}}{{ .Values.existingSecret.storePasswordKey }}{{- else if .Values.store.password -}}store-password{{- end -}}
{{- end -}}
{{/* rlsMode: fairgate in envoyproxy/ratelimit's place (rls.configMap). */}}
{{- define "fairgate.rlsMode" -}}{{- if .Values.rls.configMap -}}true{{- end -}}{{- end -}}
{{/* grpcPort: the gRPC port, 8081 in envoyproxy/ratelimit's place (as
there), else grpcPort (0: off). */}}
{{- define "fairgate.grpcPort" -}}{{- if .Values.rls.configMap -}}8081{{- else -}}{{ .Values.grpcPort | int }}{{- end -}}{{- end -}}
{{/* adminPort: 8081, or 8082 in envoyproxy/ratelimit's place (its gRPC
port is 8081). */}}
{{- define "fairgate.adminPort" -}}{{- if .Values.rls.configMap -}}8082{{- else -}}8081{{- end -}}{{- end -}}
{{/* rlsConfigDir: where the rls.configMap is mounted,
RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. */}}
{{- define "fairgate.rlsConfigDir" -}}{{ printf "%s/%s/config" (trimSuffix "/" .Values.rls.runtimeRoot) .Values.rls.runtimeSubdirectory }}{{- end -}}
{{/* validate stops the render on a combination that would run unsafely. */}}
{{- define "fairgate.validate" -}}
{{- $max := include "fairgate.maxReplicas" . | int -}}
{{- if and (hasPrefix "memory://" .Values.store.url) (gt $max 1) (not .Values.allowPerPodLimits) -}}
{{- fail (printf "store.url is memory:// with up to %d replicas: each pod would limit alone, so tenants get about %d times their limits and an API key made on one pod is unknown to the others. Set store.url to a Redis every pod shares (redis://redis:6379), or replicaCount=1, or allowPerPodLimits=true to accept per-pod limits" $max $max) -}}
{{- end -}}
{{- if and (include "fairgate.internalOnService" .) (not (include "fairgate.internalTokenKey" .)) -}}
{{- fail "the internal port (8090: decision API, /metrics) would be on the Service with no token: set internalToken, or leave internalService.enabled and serviceMonitor.enabled false" -}}
{{- end -}}
{{- with .Values.existingSecret -}}
{{- if and .name (or $.Values.adminToken $.Values.internalToken $.Values.store.password) -}}
{{- fail (printf "existingSecret.name is %s, and adminToken, internalToken or store.password is set too: put each value in that Secret and name its key (existingSecret.adminTokenKey, internalTokenKey, storePasswordKey), or drop existingSecret.name to let the chart make its own Secret" .name) -}}
{{- end -}}
{{- if and .name (not (or .adminTokenKey .internalTokenKey .storePasswordKey)) -}}
{{- fail (printf "existingSecret.name is %s but no key of it is named: set existingSecret.adminTokenKey, internalTokenKey and/or storePasswordKey to the keys it holds" .name) -}}
{{- end -}}
{{- if and (not .name) (or .adminTokenKey .internalTokenKey .storePasswordKey) -}}
{{- fail "existingSecret's keys are set without existingSecret.name: name the Secret that holds them" -}}
{{- end -}}
{{- end -}}
{{- if .Values.rls.configMap -}}
{{- if .Values.config -}}
{{- fail "rls.configMap and config are both set: in envoyproxy/ratelimit's place fairgate makes its config from that ConfigMap's domain files (RUNTIME_ROOT); drop config, or drop rls.configMap to run on fairgate.yaml" -}}
{{- end -}}
{{- if .Values.upstream -}}
{{- fail "rls.configMap and upstream are both set: envoyproxy/ratelimit's place is a rate limit service for Envoy, not a proxy; drop one" -}}
{{- end -}}
{{- if and .Values.grpcPort (ne (int .Values.grpcPort) 8081) -}}
{{- fail (printf "grpcPort is %v with rls.configMap: in envoyproxy/ratelimit's place the gRPC port is 8081, as there; leave grpcPort 0" .Values.grpcPort) -}}
{{- end -}}
{{- end -}}
{{- if .Values.networkPolicy.enabled -}}
{{- if and (include "fairgate.grpcPort" . | int) (not .Values.networkPolicy.grpcFrom) -}}
{{- fail "networkPolicy.enabled with the gRPC port on and networkPolicy.grpcFrom empty: no one could call the rate limit service; set grpcFrom to the peers that do (Envoy's pods or namespace)" -}}
{{- end -}}
{{- if and .Values.upstream .Values.serviceMonitor.enabled (not .Values.networkPolicy.internalFrom) -}}
{{- fail "networkPolicy.enabled with serviceMonitor.enabled in proxy mode and networkPolicy.internalFrom empty: Prometheus could not scrape port 8090; add its pods or namespace to internalFrom" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) -}}
{{- fail (printf "autoscaling.maxReplicas %v is below autoscaling.minReplicas %v" .Values.autoscaling.maxReplicas .Values.autoscaling.minReplicas) -}}
{{- end -}}
{{- end -}}
