{{- define "wahook.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "wahook.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "wahook.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image of a component (dict "root" . "tag" .Values.X.imageTag):
its own tag when set, for upgrades in order, else image.tag. */}}
{{- define "wahook.image" -}}
{{ .root.Values.image.repository }}:{{ .tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{- define "wahook.secretName" -}}
{{- if .Values.existingSecret -}}{{ .Values.existingSecret }}{{- else -}}{{ include "wahook.fullname" . }}{{- end -}}
{{- end -}}

{{- define "wahook.checkValues" -}}
{{- if and (gt (int .Values.process.replicas) 1) (lt (int .Values.process.stage2Partitions) 1) -}}
{{- fail "process.stage2Partitions must be at least 1 with more than one process replica" -}}
{{- end -}}
{{- /* The secrets.* defaults are public placeholders: refuse to render
with one left (the whole value, an element of a comma-separated list, or
the secret of NAME=SECRET), unless existingSecret names the Secret to use. */ -}}
{{- if not .Values.existingSecret -}}
{{- range $key := list "appSecret" "verifyToken" "apiToken" "phoneHashKey" "clickhouseDSN" -}}
{{- if regexMatch `(^|[,=])\s*CHANGE-ME` (toString (index $.Values.secrets $key)) -}}
{{- fail (printf "secrets.%s is still a CHANGE-ME placeholder, public in the chart: set secrets.%s (in a values file kept out of the repository, or --set), or set existingSecret to a Secret of your own" $key $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Environment shared by every wahook container: NATS and logging. */}}
{{- define "wahook.env.nats" -}}
- name: WAHOOK_NATS_URL
  value: {{ .Values.nats.url | quote }}
{{- if .Values.nats.credsSecret }}
- name: WAHOOK_NATS_CREDS
  value: /etc/wahook/nats/nats.creds
{{- end }}
- name: WAHOOK_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{- define "wahook.env.clickhouse" -}}
{{- if or .Values.clickhouse.dsnFromSecret .Values.secrets.clickhouseDSN -}}
- name: WAHOOK_CLICKHOUSE_DSN
  valueFrom:
    secretKeyRef: {name: {{ include "wahook.secretName" . }}, key: clickhouse-dsn}
{{- else -}}
- name: WAHOOK_CLICKHOUSE_DSN
  value: {{ .Values.clickhouse.dsn | quote }}
{{- end }}
{{- end -}}

{{/* The ClickHouse cluster the schema is created on (migrate and process
only: --clickhouse-cluster is theirs). */}}
{{- define "wahook.env.clickhouseCluster" -}}
{{- if .Values.clickhouse.cluster -}}
- name: WAHOOK_CLICKHOUSE_CLUSTER
  value: {{ .Values.clickhouse.cluster | quote }}
{{- end -}}
{{- end -}}

{{- define "wahook.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef: {name: {{ include "wahook.secretName" .root }}, key: {{ .key }}}
{{- end -}}

{{- define "wahook.natsVolumeMount" -}}
{{- if .Values.nats.credsSecret -}}
- name: nats-creds
  mountPath: /etc/wahook/nats
  readOnly: true
{{- end }}
{{- end -}}

{{- define "wahook.natsVolume" -}}
{{- if .Values.nats.credsSecret -}}
- name: nats-creds
  secret:
    secretName: {{ .Values.nats.credsSecret }}
{{- end }}
{{- end -}}

{{- define "wahook.stage2Members" -}}
{{- $full := include "wahook.fullname" . -}}
{{- $names := list -}}
{{- range $i := until (int .Values.process.replicas) -}}
{{- $names = append $names (printf "%s-process-%d" $full $i) -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}
