{{- define "creditflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "creditflow.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "creditflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "creditflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "creditflow.selector" -}}
app.kubernetes.io/name: {{ include "creditflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "creditflow.scorerName" -}}
{{- printf "%s-scorer" (include "creditflow.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "creditflow.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else -}}
{{- printf "%s-secrets" (include "creditflow.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "creditflow.hasSecrets" -}}
{{- if or .Values.secrets.create .Values.secrets.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The scorer endpoints the processor calls. */}}
{{- define "creditflow.scorerEndpoints" -}}
{{- if .Values.processor.scorers -}}
{{- .Values.processor.scorers -}}
{{- else if .Values.scorer.enabled -}}
{{- $scheme := ternary "https" "http" (ne .Values.scorer.tls.existingSecret "") -}}
{{- $name := include "creditflow.scorerName" . -}}
{{- $port := int .Values.scorer.port -}}
{{- if eq .Values.scorer.workload "StatefulSet" -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.scorer.replicas) -}}
{{- $eps = append $eps (printf "%s://%s-%d.%s-headless.%s.svc:%d" $scheme $name $i $name $.Release.Namespace $port) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- printf "%s://%s.%s.svc:%d" $scheme $name .Release.Namespace $port -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "creditflow.image" -}}
{{- printf "%s:%s" .repository (default .default .tag) -}}
{{- end -}}
