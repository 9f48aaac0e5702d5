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

{{- define "creditflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "creditflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
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

{{/* Whether the scorers require bearer tokens; refuses auth without a secret. */}}
{{- define "creditflow.scorerAuth" -}}
{{- if .Values.scorer.auth.enabled -}}
{{- if not (include "creditflow.hasSecrets" .) -}}
{{- fail "scorer.auth.enabled needs the tokens' Secret: set secrets.create or secrets.existingSecret (or scorer.auth.enabled=false for a trusted test cluster)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The headless Service of the scorers. */}}
{{- define "creditflow.scorerHeadless" -}}
{{- printf "%s-headless" (include "creditflow.scorerName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The scorer endpoints the processor calls. */}}
{{- define "creditflow.scorerEndpoints" -}}
{{- if .Values.processor.scorers -}}
{{- .Values.processor.scorers -}}
{{- else if .Values.scorer.enabled -}}
{{- $scheme := ternary "https" "http" (ne .Values.scorer.tls.existingSecret "") -}}
{{- $port := int .Values.scorer.port -}}
{{- if eq .Values.scorer.discovery "dns" -}}
{{- printf "dns+%s://%s.%s.svc:%d" $scheme (include "creditflow.scorerHeadless" .) .Release.Namespace $port -}}
{{- else -}}
{{- printf "%s://%s.%s.svc:%d" $scheme (include "creditflow.scorerName" .) .Release.Namespace $port -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* An image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "creditflow.image" -}}
{{- if .digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .digest) -}}
{{- fail (printf "image digest %q: expected sha256: and 64 hex digits" .digest) -}}
{{- end -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (default .default .tag) -}}
{{- end -}}
{{- end -}}

{{- define "creditflow.processorImage" -}}
{{- include "creditflow.image" (dict "repository" .Values.image.repository "tag" .Values.image.tag "digest" .Values.image.digest "default" .Chart.AppVersion) -}}
{{- end -}}

{{/* Topic names: processor.config's topic-* settings or the defaults of docs/kafka.md. */}}
{{- define "creditflow.topics" -}}
{{- $c := .Values.processor.config -}}
{{- $t := dict
  "trajectories" (default "creditflow.trajectories" (index $c "topic-trajectories"))
  "scored" (default "creditflow.scored" (index $c "topic-scored"))
  "samples" (default "creditflow.samples" (index $c "topic-samples"))
  "samplesStale" (default "creditflow.samples.stale" (index $c "topic-samples-stale"))
  "deadLetters" (default "creditflow.dead-letters" (index $c "topic-dead-letters"))
  "state" (default "creditflow.advantage-state" (index $c "topic-state"))
  "policy" (default "creditflow.policy" (index $c "topic-policy")) -}}
{{- toJson $t -}}
{{- end -}}

{{/*
Kafka credentials of one workload (dict "root" $ "who" <stage name or "monitor">), as JSON:
sasl mechanism/user/secret/key, client certificate secret and keys, CA secret and key. With
strimzi.users.enabled each workload uses its own KafkaUser <fullname>-<who>.
*/}}
{{- define "creditflow.kafkaCreds" -}}
{{- $root := .root -}}
{{- $k := $root.Values.kafka -}}
{{- $c := dict "mech" "" "user" "" "pwSecret" "" "pwKey" "" "certSecret" "" "certKey" "" "keyKey" "" "caSecret" "" "caKey" "" -}}
{{- $u := $root.Values.strimzi.users -}}
{{- if and $root.Values.strimzi.enabled $u.enabled -}}
{{- $name := printf "%s-%s" (include "creditflow.fullname" $root) .who | trunc 63 | trimSuffix "-" -}}
{{- if eq $u.authentication "tls" -}}
{{- if not $k.tls.enabled -}}
{{- fail "strimzi.users.authentication=tls needs kafka.tls.enabled (the client certificate is presented over TLS)" -}}
{{- end -}}
{{- $_ := set $c "certSecret" $name -}}
{{- $_ := set $c "certKey" "user.crt" -}}
{{- $_ := set $c "keyKey" "user.key" -}}
{{- else if eq $u.authentication "scram-sha-512" -}}
{{- $_ := set $c "mech" "SCRAM-SHA-512" -}}
{{- $_ := set $c "user" $name -}}
{{- $_ := set $c "pwSecret" $name -}}
{{- $_ := set $c "pwKey" "password" -}}
{{- else -}}
{{- fail (printf "strimzi.users.authentication must be tls or scram-sha-512, got %q" $u.authentication) -}}
{{- end -}}
{{- else -}}
{{- if $k.sasl.mechanism -}}
{{- if not (has $k.sasl.mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) -}}
{{- fail (printf "kafka.sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q" $k.sasl.mechanism) -}}
{{- end -}}
{{- if not $k.sasl.user -}}
{{- fail "kafka.sasl.mechanism is set but kafka.sasl.user is empty" -}}
{{- end -}}
{{- $_ := set $c "mech" $k.sasl.mechanism -}}
{{- $_ := set $c "user" $k.sasl.user -}}
{{- if $k.sasl.passwordSecret.name -}}
{{- $_ := set $c "pwSecret" $k.sasl.passwordSecret.name -}}
{{- $_ := set $c "pwKey" (default "password" $k.sasl.passwordSecret.key) -}}
{{- else if or $root.Values.secrets.existingSecret (and $root.Values.secrets.create $root.Values.secrets.saslPassword) -}}
{{- $_ := set $c "pwSecret" (include "creditflow.secretName" $root) -}}
{{- $_ := set $c "pwKey" "sasl-password" -}}
{{- else -}}
{{- fail "kafka.sasl.mechanism is set but no password is configured: set kafka.sasl.passwordSecret.name (e.g. a Strimzi KafkaUser secret, key password), secrets.existingSecret (key sasl-password), or secrets.create with secrets.saslPassword" -}}
{{- end -}}
{{- end -}}
{{- if $k.tls.clientSecret.name -}}
{{- if not $k.tls.enabled -}}
{{- fail "kafka.tls.clientSecret is set but kafka.tls.enabled is false" -}}
{{- end -}}
{{- $_ := set $c "certSecret" $k.tls.clientSecret.name -}}
{{- $_ := set $c "certKey" (default "user.crt" $k.tls.clientSecret.certKey) -}}
{{- $_ := set $c "keyKey" (default "user.key" $k.tls.clientSecret.keyKey) -}}
{{- end -}}
{{- end -}}
{{- if $k.tls.enabled -}}
{{- $ca := $k.tls.caSecret.name -}}
{{- if and (not $ca) $root.Values.strimzi.enabled -}}
{{- $ca = printf "%s-cluster-ca-cert" $root.Values.strimzi.cluster -}}
{{- end -}}
{{- if not $ca -}}
{{- fail "kafka.tls.enabled needs kafka.tls.caSecret.name (the Secret with the brokers' CA, e.g. Strimzi's <cluster>-cluster-ca-cert)" -}}
{{- end -}}
{{- $_ := set $c "caSecret" $ca -}}
{{- $_ := set $c "caKey" (default "ca.crt" $k.tls.caSecret.key) -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/* Kafka security flags for creds (the JSON of creditflow.kafkaCreds), one "- arg" line each. */}}
{{- define "creditflow.kafkaArgs" -}}
{{- if .mech }}
- --sasl-mechanism={{ .mech }}
- --sasl-user={{ .user }}
- --sasl-password-file=/etc/creditflow/kafka-sasl/password
{{- end }}
{{- if .caSecret }}
- --kafka-tls-ca=/etc/creditflow/kafka-ca/ca.crt
{{- end }}
{{- if .certSecret }}
- --kafka-tls-cert=/etc/creditflow/kafka-client/tls.crt
- --kafka-tls-key=/etc/creditflow/kafka-client/tls.key
{{- end }}
{{- end -}}

{{- define "creditflow.kafkaMounts" -}}
{{- if .mech }}
- {name: kafka-sasl, mountPath: /etc/creditflow/kafka-sasl, readOnly: true}
{{- end }}
{{- if .caSecret }}
- {name: kafka-ca, mountPath: /etc/creditflow/kafka-ca, readOnly: true}
{{- end }}
{{- if .certSecret }}
- {name: kafka-client, mountPath: /etc/creditflow/kafka-client, readOnly: true}
{{- end }}
{{- end -}}

{{/* Secret volumes for creds; keys are mapped to fixed file names (no subPath: rotated secrets update in place). */}}
{{- define "creditflow.kafkaVolumes" -}}
{{- $c := .creds -}}
{{- if $c.mech }}
- name: kafka-sasl
  secret:
    secretName: {{ $c.pwSecret }}
    defaultMode: {{ .mode }}
    items: [{key: {{ $c.pwKey }}, path: password}]
{{- end }}
{{- if $c.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ $c.caSecret }}
    defaultMode: {{ .mode }}
    items: [{key: {{ $c.caKey }}, path: ca.crt}]
{{- end }}
{{- if $c.certSecret }}
- name: kafka-client
  secret:
    secretName: {{ $c.certSecret }}
    defaultMode: {{ .mode }}
    items: [{key: {{ $c.certKey }}, path: tls.crt}, {key: {{ $c.keyKey }}, path: tls.key}]
{{- end }}
{{- end -}}

{{/* Default spreading of a workload's pods (dict "root" $ "labels" <selector labels dict> "tsc" <values list>). */}}
{{- define "creditflow.spread" -}}
{{- if .tsc }}
topologySpreadConstraints: {{ toYaml .tsc | nindent 2 }}
{{- else }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {{ toYaml .labels | nindent 8 }}
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {{ toYaml .labels | nindent 8 }}
{{- end }}
{{- end -}}

{{- define "creditflow.antiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {{ toYaml .labels | nindent 12 }}
{{- end -}}

{{/* Pod-level settings shared by every pod: service account, security context. */}}
{{- define "creditflow.podCommon" -}}
serviceAccountName: {{ include "creditflow.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext: {{ toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The processor's consumer groups and the topic each reads, as a JSON list of [group, topic]
pairs (no duplicates): per stage, its group (processor.config.group, or the stage's own
config.group) with ".score" on the trajectories topic unless it is an advantage stage, and
".advantage" on the scored topic unless it is a score stage, as `creditflow run` derives
them from --group. With the processor disabled, the one process of processor.config.
*/}}
{{- define "creditflow.stageGroups" -}}
{{- $t := include "creditflow.topics" . | fromJson -}}
{{- $stages := list (dict "stage" "both") -}}
{{- if .Values.processor.enabled }}{{ $stages = .Values.processor.stages }}{{ end -}}
{{- $pairs := list -}}
{{- range $st := $stages -}}
{{- $c := mergeOverwrite (deepCopy $.Values.processor.config) (default dict $st.config) -}}
{{- $group := default "creditflow" (index $c "group") -}}
{{- if ne $st.stage "advantage" }}{{ $pairs = append $pairs (list (printf "%s.score" $group) $t.trajectories) }}{{ end -}}
{{- if ne $st.stage "score" }}{{ $pairs = append $pairs (list (printf "%s.advantage" $group) $t.scored) }}{{ end -}}
{{- end -}}
{{- toJson (uniq $pairs) -}}
{{- end -}}
