{{/* Names, labels and the pieces every beatflow pod shares. */}}

{{- define "beatflow.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "beatflow.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "beatflow.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "beatflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "beatflow.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "beatflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "beatflow.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "beatflow.labels" -}}
{{ include "beatflow.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: beatflow
{{- end -}}

{{- define "beatflow.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end -}}

{{- define "beatflow.queueNames" -}}
{{- $names := list -}}
{{- range .Values.queues -}}{{- $names = append $names .name -}}{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* A queue name as the identifier KEDA's formula language accepts. */}}
{{- define "beatflow.ident" -}}
{{- regexReplaceAll "[^A-Za-z0-9]" . "_" -}}
{{- end -}}

{{- define "beatflow.connectionsSecret" -}}
{{- .Values.connections.existingSecret | default (printf "%s-env" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{/* The broker the queues live in, from the broker URL: "rabbitmq" for amqp://, amqps://,
pyamqp:// (or rabbitmq.enabled when the URL sits in connections.existingSecret), else "redis". */}}
{{- define "beatflow.broker" -}}
{{- if or .Values.rabbitmq.enabled (regexMatch "^(amqp|amqps|pyamqp)://" .Values.connections.brokerUrl) -}}
rabbitmq
{{- else -}}
redis
{{- end -}}
{{- end -}}

{{- define "beatflow.rabbitmqSecret" -}}
{{- .Values.rabbitmq.existingSecret | default (printf "%s-rabbitmq" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{- define "beatflow.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{- define "beatflow.webSecret" -}}
{{- .Values.web.auth.existingSecret | default (printf "%s-web" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{/* The Secret the migration hook reads: hooks run before the release's own objects exist, so
when the chart makes the connections Secret the hook gets a copy of its own, deleted once the
hook succeeds (the release's Secret is an ordinary object: `helm uninstall` removes it). */}}
{{- define "beatflow.migrateSecret" -}}
{{- .Values.connections.existingSecret | default (printf "%s-migrate-env" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{/* The connection URLs the chart stores, with the TLS options of .Values.tls added. */}}
{{- define "beatflow.brokerUrl" -}}
{{- $url := .Values.connections.brokerUrl -}}
{{- if and .Values.tls.redis.enabled (not (contains "ssl_cert_reqs=" $url)) -}}
{{- $q := list (printf "ssl_cert_reqs=%s" .Values.tls.redis.certReqs) -}}
{{- if .Values.tls.redis.caSecret -}}
{{- $q = append $q (printf "ssl_ca_certs=/etc/beatflow/tls/redis/%s" .Values.tls.redis.caKey) -}}
{{- end -}}
{{- $url = printf "%s%s%s" $url (ternary "&" "?" (contains "?" $url)) (join "&" $q) -}}
{{- end -}}
{{- $url -}}
{{- end -}}

{{- define "beatflow.databaseUrl" -}}
{{- $url := .Values.connections.databaseUrl -}}
{{- $q := list -}}
{{- if and .Values.tls.postgres.sslmode (not (contains "sslmode=" $url)) -}}
{{- $q = append $q (printf "sslmode=%s" .Values.tls.postgres.sslmode) -}}
{{- end -}}
{{- if and .Values.tls.postgres.rootCertSecret (not (contains "sslrootcert=" $url)) -}}
{{- $q = append $q (printf "sslrootcert=/etc/beatflow/tls/postgres/%s" .Values.tls.postgres.rootCertKey) -}}
{{- end -}}
{{- if $q -}}
{{- $url = printf "%s%s%s" $url (ternary "&" "?" (contains "?" $url)) (join "&" $q) -}}
{{- end -}}
{{- $url -}}
{{- end -}}

{{/* Ports the UIs may reach Redis on: the configured list plus the port of the broker URL or
KEDA's Redis address when the chart knows them. */}}
{{- define "beatflow.redisPorts" -}}
{{- $ports := list -}}
{{- range .Values.networkPolicy.redisPorts -}}{{- $ports = append $ports (int .) -}}{{- end -}}
{{- if eq (include "beatflow.broker" .) "rabbitmq" -}}
{{- range .Values.networkPolicy.rabbitmqPorts -}}{{- $ports = append $ports (int .) -}}{{- end -}}
{{- end -}}
{{- range (list (regexReplaceAll "^[a-z+]+://([^@/]*@)?" .Values.connections.brokerUrl "") (regexReplaceAll "^[a-z+-]+://([^@/]*@)?" .Values.connections.redisUrl "") .Values.redis.address) -}}
{{- $hostport := regexFind "^[^/:?]+:[0-9]+" . -}}
{{- if $hostport -}}{{- $ports = append $ports (int (regexReplaceAll "^.*:" $hostport "")) -}}{{- end -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{- define "beatflow.postgresPorts" -}}
{{- $ports := list -}}
{{- range .Values.networkPolicy.postgresPorts -}}{{- $ports = append $ports (int .) -}}{{- end -}}
{{- $hostport := regexFind "^[^/:?]+:[0-9]+" (regexReplaceAll "^[a-z+]+://([^@/]*@)?" .Values.connections.databaseUrl "") -}}
{{- if $hostport -}}{{- $ports = append $ports (int (regexReplaceAll "^.*:" $hostport "")) -}}{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{- define "beatflow.flowerSecret" -}}
{{- .Values.flower.auth.existingSecret | default (printf "%s-flower" (include "beatflow.fullname" .)) -}}
{{- end -}}

{{- define "beatflow.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "beatflow.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Pod spec lines shared by every beatflow pod. */}}
{{- define "beatflow.podCommon" -}}
serviceAccountName: {{ include "beatflow.serviceAccountName" . }}
{{ include "beatflow.podBase" . }}
{{- end -}}

{{/* podCommon without the ServiceAccount: for the pre-install migration hook, which runs before
a ServiceAccount the chart creates exists (it uses the namespace's default SA on install). */}}
{{- define "beatflow.podBase" -}}
automountServiceAccountToken: false
securityContext:
  {{- include "beatflow.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "beatflow.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "beatflow.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ include "beatflow.fullname" . }}-config
  - secretRef:
      name: {{ include "beatflow.connectionsSecret" . }}
{{- end -}}

{{/* Volume mounts of a beatflow container: /tmp (the root is read-only), the TLS CAs, the
git-synced dags (dags=true) and extraVolumeMounts. Call with (dict "root" $ "dags" bool). */}}
{{- define "beatflow.volumeMounts" -}}
{{- $v := .root.Values -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if $v.tls.redis.caSecret }}
  - name: redis-tls
    mountPath: /etc/beatflow/tls/redis
    readOnly: true
  {{- end }}
  {{- if $v.tls.postgres.rootCertSecret }}
  - name: postgres-tls
    mountPath: /etc/beatflow/tls/postgres
    readOnly: true
  {{- end }}
  {{- if and .dags $v.dagsGitSync.enabled }}
  - name: dags
    mountPath: /git
    readOnly: true
  {{- end }}
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "beatflow.volumes" -}}
{{- $v := .root.Values -}}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- with $v.tls.redis.caSecret }}
  - name: redis-tls
    secret:
      secretName: {{ . }}
  {{- end }}
  {{- with $v.tls.postgres.rootCertSecret }}
  - name: postgres-tls
    secret:
      secretName: {{ . }}
  {{- end }}
  {{- if and .dags $v.dagsGitSync.enabled }}
  - name: dags
    emptyDir:
      sizeLimit: 256Mi
  {{- end }}
  {{- with $v.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "beatflow.tmpVolumeMount" -}}
{{ include "beatflow.volumeMounts" (dict "root" . "dags" false) }}
{{- end -}}

{{- define "beatflow.tmpVolume" -}}
{{ include "beatflow.volumes" (dict "root" . "dags" false) }}
{{- end -}}

{{/* git-sync as an init container: one clone of dagsGitSync.ref before the pod's processes
start (they import the dags folder once). Emits list items for initContainers. */}}
{{- define "beatflow.gitSyncInit" -}}
{{- $g := .Values.dagsGitSync -}}
{{- if $g.enabled }}
- name: git-sync
  image: {{ $g.image }}
  imagePullPolicy: IfNotPresent
  env:
    - name: GITSYNC_REPO
      value: {{ $g.repo | quote }}
    - name: GITSYNC_REF
      value: {{ $g.ref | quote }}
    - name: GITSYNC_ROOT
      value: /git
    - name: GITSYNC_LINK
      value: current
    - name: GITSYNC_ONE_TIME
      value: "true"
    - name: GITSYNC_DEPTH
      value: "1"
    - name: HOME
      value: /tmp
  {{- with $g.existingSecret }}
  envFrom:
    - secretRef:
        name: {{ . }}
  {{- end }}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  securityContext:
    {{- include "beatflow.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: dags
      mountPath: /git
    - name: tmp
      mountPath: /tmp
{{- end }}
{{- end -}}

{{/* Sidecars (extraContainers) as list items for a pod's containers. */}}
{{- define "beatflow.extraContainers" -}}
{{- with .Values.extraContainers }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* affinity (the beat's anti-affinity kept) and topology spread constraints for one
component's pods. Call with (dict "root" $ "component" "worker"). */}}
{{- define "beatflow.scheduling" -}}
{{- $root := .root -}}
{{- $sel := include "beatflow.selectorLabels" . | fromYaml -}}
{{- $aff := deepCopy ($root.Values.affinity | default dict) -}}
{{- if eq .component "beat" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $sel) -}}
{{- if eq $root.Values.beat.antiAffinity "hard" -}}
{{- $_ := set $aff "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $aff "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- with $aff }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{- toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" $sel))) | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Cross-field checks that a JSON schema cannot express; each names the value to fix. */}}
{{- define "beatflow.validate" -}}
{{- $names := list -}}
{{- range .Values.queues -}}
{{- if has .name $names -}}
{{- fail (printf "queues: the queue name %q appears twice; each queue gets one worker Deployment" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- if ge (int .softTimeLimit) (int .timeLimit) -}}
{{- fail (printf "queues[%s]: softTimeLimit (%v) must be below timeLimit (%v)" .name .softTimeLimit .timeLimit) -}}
{{- end -}}
{{- if le (int $.Values.config.visibilityTimeout) (int .timeLimit) -}}
{{- fail (printf "config.visibilityTimeout (%v) must exceed queues[%s].timeLimit (%v), or Redis redelivers tasks that are still running" $.Values.config.visibilityTimeout .name .timeLimit) -}}
{{- end -}}
{{- if gt (int .minReplicas) (int .maxReplicas) -}}
{{- fail (printf "queues[%s]: minReplicas (%v) must not exceed maxReplicas (%v)" .name .minReplicas .maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.connections.existingSecret) (not (and .Values.connections.brokerUrl .Values.connections.databaseUrl)) -}}
{{- fail "connections: set existingSecret, or both brokerUrl and databaseUrl" -}}
{{- end -}}
{{- $rabbitmq := eq (include "beatflow.broker" .) "rabbitmq" -}}
{{- if and $rabbitmq (not .Values.connections.existingSecret) (not .Values.connections.redisUrl) -}}
{{- fail "connections.redisUrl is required when connections.brokerUrl is RabbitMQ: beatflow keeps the beat's lock, schedules and results in Redis" -}}
{{- end -}}
{{- if and $rabbitmq .Values.autoscaling.keda.enabled (not .Values.rabbitmq.existingSecret) (not .Values.rabbitmq.host) (not .Values.connections.brokerUrl) -}}
{{- fail "rabbitmq: KEDA needs the AMQP URL; set rabbitmq.existingSecret, rabbitmq.host or connections.brokerUrl" -}}
{{- end -}}
{{- with (ternary "" .Values.connections.brokerUrl $rabbitmq) -}}
{{- $db := regexFind "/[0-9]+$" . | trimPrefix "/" | default "0" -}}
{{- if ne $db (toString $.Values.redis.databaseIndex) -}}
{{- fail (printf "redis.databaseIndex (%v) must match the database of connections.brokerUrl (%s), or KEDA counts the wrong lists" $.Values.redis.databaseIndex $db) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.autoscaling.keda.enabled (not $rabbitmq) (not .Values.redis.existingSecret) (not .Values.redis.address) -}}
{{- fail "redis: KEDA needs the Redis address; set redis.existingSecret or redis.address (host:port)" -}}
{{- end -}}
{{- if and .Values.flower.enabled (not .Values.flower.auth.existingSecret) (not .Values.flower.auth.password) -}}
{{- fail "flower.auth: Flower never runs without authentication; set flower.auth.existingSecret or flower.auth.password (or flower.enabled=false)" -}}
{{- end -}}
{{- if and .Values.web.enabled (not .Values.web.auth.existingSecret) (not (and .Values.web.auth.password .Values.web.auth.secretKey)) -}}
{{- fail "web.auth: beatflow web never runs without a login; set web.auth.existingSecret, or web.auth.password and web.auth.secretKey (or web.enabled=false)" -}}
{{- end -}}
{{- if and .Values.web.ingress.enabled (not .Values.web.ingress.host) -}}
{{- fail "web.ingress.host is required when web.ingress.enabled is true" -}}
{{- end -}}
{{- if and .Values.tls.redis.enabled .Values.connections.brokerUrl (not (hasPrefix "rediss://" .Values.connections.brokerUrl)) (not (hasPrefix "sentinel" .Values.connections.brokerUrl)) -}}
{{- fail "tls.redis.enabled: connections.brokerUrl must be a rediss:// URL (TLS), e.g. rediss://:password@host:6380/0" -}}
{{- end -}}
{{- if and .Values.dagsGitSync.enabled (not .Values.dagsGitSync.repo) -}}
{{- fail "dagsGitSync.repo is required when dagsGitSync.enabled is true" -}}
{{- end -}}
{{- if and .Values.flower.ingress.enabled (not .Values.flower.ingress.host) -}}
{{- fail "flower.ingress.host is required when flower.ingress.enabled is true" -}}
{{- end -}}
{{- end -}}
