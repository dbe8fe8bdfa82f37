{{/* Names, labels and shared pod settings of the deskpool chart. */}}

{{- define "deskpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "deskpool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "deskpool.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "deskpool.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "deskpool.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "deskpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deskpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "deskpool.labels" -}}
helm.sh/chart: {{ include "deskpool.chart" . }}
{{ include "deskpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: deskpool
{{- end -}}

{{/* Labels of one component: call with (dict "root" $ "component" "api"). */}}
{{- define "deskpool.componentLabels" -}}
{{ include "deskpool.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "deskpool.componentSelector" -}}
{{ include "deskpool.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "deskpool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "deskpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "deskpool.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "deskpool.secretName" -}}
{{- default (printf "%s-secrets" (include "deskpool.fullname" .)) .Values.existingSecret -}}
{{- end -}}

{{- define "deskpool.kvstoreAddress" -}}
{{- if .Values.bundled.redis.enabled -}}
{{- printf "%s-redis:6379" (include "deskpool.fullname" .) -}}
{{- else -}}
{{- required "kvstore.address is required when bundled.redis.enabled is false" .Values.kvstore.address -}}
{{- end -}}
{{- end -}}

{{- define "deskpool.desktopdAddress" -}}
{{- if .Values.desktopd.enabled -}}
{{- printf "%s-desktopd:%d" (include "deskpool.fullname" .) (int .Values.desktopd.port) -}}
{{- else -}}
{{- required "desktopd.externalAddress is required when desktopd.enabled is false" .Values.desktopd.externalAddress -}}
{{- end -}}
{{- end -}}

{{/* The environment every deskpool container gets: the ConfigMap and the Secret. */}}
{{- define "deskpool.envFrom" -}}
- configMapRef:
    name: {{ include "deskpool.fullname" . }}-config
- secretRef:
    name: {{ include "deskpool.secretName" . }}
{{- end -}}

{{- define "deskpool.podSecurity" -}}
serviceAccountName: {{ include "deskpool.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
