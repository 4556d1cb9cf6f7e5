{{/*
Expand the name of the chart.
*/}}
{{- define "kdelay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name (truncated to 63 characters, the DNS label limit).
If the release name contains the chart name it is used as the full name.
*/}}
{{- define "kdelay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespace of the release's objects: namespaceOverride, else the release namespace.
*/}}
{{- define "kdelay.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
Chart name and version as used by the chart label.
*/}}
{{- define "kdelay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "kdelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kdelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "kdelay.labels" -}}
helm.sh/chart: {{ include "kdelay.chart" . }}
{{ include "kdelay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "kdelay.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kdelay
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the helm test pod: the common labels without app.kubernetes.io/name,
so that no Service, PodDisruptionBudget or anti-affinity takes it for a kdelay pod.
*/}}
{{- define "kdelay.testLabels" -}}
helm.sh/chart: {{ include "kdelay.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kdelay
app.kubernetes.io/component: test
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Name of the ServiceAccount.
*/}}
{{- define "kdelay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kdelay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image tag and reference.
*/}}
{{- define "kdelay.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kdelay.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
Name of the Secret holding the SASL password, and its key.
*/}}
{{- define "kdelay.saslSecretName" -}}
{{- if .Values.kafka.sasl.existingSecret }}
{{- .Values.kafka.sasl.existingSecret }}
{{- else }}
{{- printf "%s-sasl" (include "kdelay.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "kdelay.saslSecretKey" -}}
{{- if .Values.kafka.sasl.existingSecret }}
{{- .Values.kafka.sasl.existingSecretPasswordKey | default "password" }}
{{- else -}}
password
{{- end }}
{{- end }}

{{/*
True when the chart itself creates the SASL Secret.
*/}}
{{- define "kdelay.createSaslSecret" -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.existingSecret) }}true{{ end }}
{{- end }}

{{/*
Name of the Secret copy the topic hook Job reads: the chart's own Secret does not
exist yet while pre-install hooks run, so the Job gets a hook-managed copy.
*/}}
{{- define "kdelay.topicJobSaslSecretName" -}}
{{- if .Values.kafka.sasl.existingSecret }}
{{- .Values.kafka.sasl.existingSecret }}
{{- else }}
{{- printf "%s-topic-create-sasl" (include "kdelay.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
KDELAY_* environment shared by the StatefulSet and the topic Job.
*/}}
{{- define "kdelay.env" -}}
- name: KDELAY_BROKERS
  value: {{ join "," .Values.kafka.brokers | quote }}
- name: KDELAY_CLIENT_ID
  value: {{ .Values.config.clientId | quote }}
- name: KDELAY_TOPIC
  value: {{ .Values.kafka.topic | quote }}
- name: KDELAY_GROUP
  value: {{ .Values.kafka.group | quote }}
{{- with .Values.kafka.dlqTopic }}
- name: KDELAY_DLQ_TOPIC
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kafka.cancelTopic }}
- name: KDELAY_CANCEL_TOPIC
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kafka.cancelledTopic }}
- name: KDELAY_CANCELLED_TOPIC
  value: {{ . | quote }}
{{- end }}
- name: KDELAY_LEVELS
  value: {{ .Values.config.levels | quote }}
- name: KDELAY_PARTITIONS_PER_LEVEL
  value: {{ .Values.config.partitionsPerLevel | toString | quote }}
{{- with .Values.config.targetAllow }}
- name: KDELAY_TARGET_ALLOW
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.config.targetDeny }}
- name: KDELAY_TARGET_DENY
  value: {{ join "," . | quote }}
{{- end }}
- name: KDELAY_MAX_DELAY
  value: {{ .Values.config.maxDelay | quote }}
- name: KDELAY_DATA_DIR
  value: /data
- name: KDELAY_HTTP_ADDR
  value: {{ printf ":%v" .Values.containerPort | quote }}
- name: KDELAY_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: KDELAY_LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
- name: KDELAY_SHUTDOWN_TIMEOUT
  value: {{ printf "%ds" (int .Values.config.shutdownTimeoutSeconds) | quote }}
{{- with .Values.config.wheelHorizon }}
- name: KDELAY_WHEEL_HORIZON
  value: {{ . | quote }}
{{- end }}
- name: KDELAY_WHEEL_SYNC
  value: {{ .Values.config.wheelSync | quote }}
- name: KDELAY_DELIVERY
  value: {{ .Values.config.delivery | quote }}
- name: KDELAY_FETCH_MAX_WAIT
  value: {{ .Values.config.fetchMaxWait | quote }}
- name: KDELAY_SESSION_TIMEOUT
  value: {{ .Values.config.sessionTimeout | quote }}
- name: KDELAY_TARGET_MISSING_TIMEOUT
  value: {{ .Values.config.targetMissingTimeout | quote }}
- name: KDELAY_MISSING_TOPIC_GRACE
  value: {{ .Values.config.missingTopicGrace | quote }}
- name: KDELAY_RETRY_TIMEOUT
  value: {{ .Values.config.retryTimeout | quote }}
- name: KDELAY_STALL_TIMEOUT
  value: {{ .Values.config.stallTimeout | quote }}
- name: KDELAY_ALLOW_LEVEL_CHANGE
  value: {{ .Values.config.allowLevelChange | quote }}
- name: KDELAY_CANCEL_MARGIN
  value: {{ .Values.config.cancelMargin | quote }}
{{- if .Values.kafka.sasl.enabled }}
- name: KDELAY_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: KDELAY_SASL_USERNAME
  value: {{ .Values.kafka.sasl.username | quote }}
- name: KDELAY_SASL_PASSWORD_FILE
  value: /etc/kdelay/sasl/password
{{- if eq .Values.kafka.sasl.mechanism "OAUTHBEARER" }}
- name: KDELAY_SASL_OAUTH_TOKEN_URL
  value: {{ .Values.kafka.sasl.oauth.tokenURL | quote }}
{{- with .Values.kafka.sasl.oauth.scope }}
- name: KDELAY_SASL_OAUTH_SCOPE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kafka.sasl.oauth.extensions }}
- name: KDELAY_SASL_OAUTH_EXTENSIONS
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.kafka.tls.enabled }}
- name: KDELAY_TLS_ENABLED
  value: "true"
{{- with .Values.kafka.tls.existingSecret }}
{{- with $.Values.kafka.tls.caKey }}
- name: KDELAY_TLS_CA_FILE
  value: {{ printf "/etc/kdelay/tls/%s" . | quote }}
{{- end }}
{{- with $.Values.kafka.tls.certKey }}
- name: KDELAY_TLS_CERT_FILE
  value: {{ printf "/etc/kdelay/tls/%s" . | quote }}
{{- end }}
{{- with $.Values.kafka.tls.keyKey }}
- name: KDELAY_TLS_KEY_FILE
  value: {{ printf "/etc/kdelay/tls/%s" . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Volume mounts for the Kafka credentials (SASL password file, TLS files).
*/}}
{{- define "kdelay.credentialMounts" -}}
{{- if .Values.kafka.sasl.enabled }}
- name: sasl
  mountPath: /etc/kdelay/sasl
  readOnly: true
{{- end }}
{{- if and .Values.kafka.tls.enabled .Values.kafka.tls.existingSecret }}
- name: tls
  mountPath: /etc/kdelay/tls
  readOnly: true
{{- end }}
{{- end }}

{{/*
Volumes for the Kafka credentials. Argument: dict "ctx" $ "saslSecret" <secret name>.
*/}}
{{- define "kdelay.credentialVolumes" -}}
{{- $ctx := .ctx }}
{{- if $ctx.Values.kafka.sasl.enabled }}
- name: sasl
  secret:
    secretName: {{ .saslSecret }}
    defaultMode: 0444
    items:
      - key: {{ include "kdelay.saslSecretKey" $ctx }}
        path: password
{{- end }}
{{- if and $ctx.Values.kafka.tls.enabled $ctx.Values.kafka.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ $ctx.Values.kafka.tls.existingSecret }}
    defaultMode: 0444
{{- end }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the shutdown bound plus headroom.
*/}}
{{- define "kdelay.terminationGracePeriodSeconds" -}}
{{- add (int .Values.config.shutdownTimeoutSeconds) (int .Values.terminationGracePeriodExtraSeconds) }}
{{- end }}

{{/*
GOMEMLIMIT in bytes: goMemLimitRatio of resources.limits.memory (a Kubernetes
quantity: plain bytes or a K, M, G, T, Ki, Mi, Gi, Ti suffix). Empty when
there is no memory limit or the ratio is 0.
*/}}
{{- define "kdelay.goMemLimit" -}}
{{- $limit := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $limit = toString . }}{{ end }}{{ end }}{{ end }}
{{- if and $limit (gt (float64 .Values.goMemLimitRatio) 0.0) }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $limit }}
{{- $unit := trimPrefix $num $limit }}
{{- $mult := dict "" 1 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- if or (not $num) (not (hasKey $mult $unit)) }}
{{- fail (printf "resources.limits.memory %q: cannot derive GOMEMLIMIT from it; use a K/M/G/T or Ki/Mi/Gi/Ti suffix, or set goMemLimitRatio: 0" $limit) }}
{{- end }}
{{- mulf $num (get $mult $unit) .Values.goMemLimitRatio | floor | int64 }}
{{- end }}
{{- end }}

{{/*
Selector labels of the console: a name of its own, so that nothing that
selects the relays selects it.
*/}}
{{- define "kdelay.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kdelay.name" . }}-console
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the console's objects.
*/}}
{{- define "kdelay.consoleLabels" -}}
helm.sh/chart: {{ include "kdelay.chart" . }}
{{ include "kdelay.consoleSelectorLabels" . }}
app.kubernetes.io/version: {{ include "kdelay.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kdelay
app.kubernetes.io/component: console
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
