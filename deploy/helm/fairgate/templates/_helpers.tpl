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
