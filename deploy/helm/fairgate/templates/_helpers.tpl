{{- define "fairgate.name" -}}{{ .Release.Name }}-fairgate{{- end -}}
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
{{/* validate stops the render on a combination that would run unsafely. */}}
{{- define "fairgate.validate" -}}
{{- $max := include "fairgate.maxReplicas" . | int -}}
{{- if and (hasPrefix "memory://" .Values.store.url) (gt $max 1) (not .Values.allowPerPodLimits) -}}
{{- fail (printf "store.url is memory:// with up to %d replicas: each pod would limit alone, so tenants get about %d times their limits and an API key made on one pod is unknown to the others. Set store.url to a Redis every pod shares (redis://redis:6379), or replicaCount=1, or allowPerPodLimits=true to accept per-pod limits" $max $max) -}}
{{- end -}}
{{- if and (include "fairgate.internalOnService" .) (not .Values.internalToken) -}}
{{- fail "the internal port (8090: decision API, /metrics) would be on the Service with no token: set internalToken, or leave internalService.enabled and serviceMonitor.enabled false" -}}
{{- end -}}
{{- end -}}
