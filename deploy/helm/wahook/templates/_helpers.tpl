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

{{/* The pod affinity of a component (dict "root" . "component" "ingest"
"affinity" .Values.ingest.affinity): the value when set, which replaces the
default whole; else a preferred anti-affinity against the component's own
pods on kubernetes.io/hostname. The scheduler then puts the replicas on
different nodes where it can, so that one node's loss does not take every
ingest replica, or the whole stage 2 group, down; preferred, not required,
so that a one-node cluster (or more replicas than nodes) still schedules. */}}
{{- define "wahook.affinity" -}}
{{- if .affinity -}}
{{ toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "wahook.selector" (dict "root" .root "component" .component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* The image of a component (dict "root" . "tag" .Values.X.imageTag):
its own tag when set, for upgrades in order, else image.tag. */}}
{{- define "wahook.image" -}}
{{ .root.Values.image.repository }}:{{ .tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{- define "wahook.secretName" -}}
{{- if .Values.existingSecret -}}{{ .Values.existingSecret }}{{- else -}}{{ include "wahook.fullname" . }}{{- end -}}
{{- end -}}

{{- /* wahook.ms is a duration of the plain forms 500ms, 5s or 2m in
milliseconds, and -1 for any other form (1m30s): not compared. */ -}}
{{- define "wahook.ms" -}}
{{- $d := toString . -}}
{{- if regexMatch `^[0-9]+ms$` $d -}}{{ trimSuffix "ms" $d | atoi }}
{{- else if regexMatch `^[0-9]+s$` $d -}}{{ mul (trimSuffix "s" $d | atoi) 1000 }}
{{- else if regexMatch `^[0-9]+m$` $d -}}{{ mul (trimSuffix "m" $d | atoi) 60000 }}
{{- else -}}-1{{- end -}}
{{- end -}}

{{- define "wahook.checkValues" -}}
{{- if and (gt (int .Values.process.replicas) 1) (lt (int .Values.process.stage2Partitions) 1) -}}
{{- fail "process.stage2Partitions must be at least 1 with more than one process replica" -}}
{{- end -}}
{{- /* Every process replica is a stage 2 member, and a member needs a
partition of its own: more would make every process pod exit. */ -}}
{{- if and (gt (int .Values.process.replicas) 1) (gt (int .Values.process.replicas) (int .Values.process.stage2Partitions)) -}}
{{- fail (printf "process.replicas (%d) is more than process.stage2Partitions (%d): each process replica is a stage 2 member and needs a partition of its own, and wahook refuses more members than partitions" (int .Values.process.replicas) (int .Values.process.stage2Partitions)) -}}
{{- end -}}
{{- $ack := include "wahook.ms" .Values.ingest.ackTimeout | atoi -}}
{{- $window := include "wahook.ms" .Values.ingest.rawDuplicateWindow | atoi -}}
{{- if and (ge $ack 0) (ge $window 0) (gt $ack $window) -}}
{{- fail (printf "ingest.ackTimeout (%s) is longer than ingest.rawDuplicateWindow (%s), and ingest refuses to start so: raise ingest.rawDuplicateWindow to at least the ack timeout" .Values.ingest.ackTimeout .Values.ingest.rawDuplicateWindow) -}}
{{- end -}}
{{- /* clickhouse.dsnFromSecret reads the key clickhouse-dsn of the Secret:
the chart's own writes it only from secrets.clickhouseDSN, and pods naming a
missing key never start (CreateContainerConfigError). */ -}}
{{- if and .Values.clickhouse.dsnFromSecret (not .Values.existingSecret) (not .Values.secrets.clickhouseDSN) -}}
{{- fail "clickhouse.dsnFromSecret is true, but secrets.clickhouseDSN is empty and no existingSecret is set: the chart's Secret would have no clickhouse-dsn key for the pods to read. Set secrets.clickhouseDSN (the DSN with its password), or existingSecret to a Secret of your own with the key clickhouse-dsn, or clickhouse.dsnFromSecret=false to use clickhouse.dsn" -}}
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
