{{/* Names, labels and the pieces every beatflow pod shares. */}}

{{- define "beatflow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "beatflow.selectorLabels" -}}
app.kubernetes.io/name: beatflow
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

{{- define "beatflow.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "beatflow.fullname" .)) -}}
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

{{- define "beatflow.tmpVolumeMount" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "beatflow.tmpVolume" -}}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
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
{{- with .Values.connections.brokerUrl -}}
{{- $db := regexFind "/[0-9]+$" . | trimPrefix "/" | default "0" -}}
{{- if ne $db (toString $.Values.redis.databaseIndex) -}}
{{- fail (printf "redis.databaseIndex (%v) must match the database of connections.brokerUrl (%s), or KEDA counts the wrong lists" $.Values.redis.databaseIndex $db) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.autoscaling.keda.enabled (not .Values.redis.existingSecret) (not .Values.redis.address) -}}
{{- fail "redis: KEDA needs the Redis address; set redis.existingSecret or redis.address (host:port)" -}}
{{- end -}}
{{- if and .Values.flower.enabled (not .Values.flower.auth.existingSecret) (not .Values.flower.auth.password) -}}
{{- fail "flower.auth: Flower never runs without authentication; set flower.auth.existingSecret or flower.auth.password (or flower.enabled=false)" -}}
{{- end -}}
{{- if and .Values.flower.ingress.enabled (not .Values.flower.ingress.host) -}}
{{- fail "flower.ingress.host is required when flower.ingress.enabled is true" -}}
{{- end -}}
{{- end -}}
