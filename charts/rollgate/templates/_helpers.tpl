{{/*
Names and labels shared by every template, and the checks of values that would render
an install that cannot work.
*/}}

{{/* The prefix of every object's name: the release name unless overridden. */}}
{{- define "rollgate.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "rollgate.controllerName" -}}{{ include "rollgate.fullname" . }}-controller{{- end -}}
{{- define "rollgate.agentName" -}}{{ include "rollgate.fullname" . }}-agent{{- end -}}

{{/* Labels on every object; app.kubernetes.io/instance finds them all by release. */}}
{{- define "rollgate.labels" -}}
app.kubernetes.io/part-of: rollgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of a component ("rollgate-controller" or "rollgate-agent"). */}}
{{- define "rollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "rollgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Fails the render on values that would install a controller that cannot run. */}}
{{- define "rollgate.validate" -}}
{{- $c := .Values.controller -}}
{{- if and (gt (int $c.replicas) 1) (not $c.leaderElection.enabled) -}}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled: two replicas without a leader would both delete pods" -}}
{{- end -}}
{{- if and .Values.cloud.region (not .Values.cloud.vpcId) -}}
{{- fail "cloud.vpcId is required with cloud.region: CLB backends are the ENIs holding the pod IPs in the cluster's VPC (vpc-..., in the ACK console under the cluster's Basic Information)" -}}
{{- end -}}
{{- $source := .Values.cloud.credentials.source -}}
{{- if not (has $source (list "none" "secret" "rrsa")) -}}
{{- fail (printf "cloud.credentials.source must be none, secret or rrsa, not %q" $source) -}}
{{- end -}}
{{- if and (eq $source "secret") (not .Values.cloud.credentials.secret.name) -}}
{{- fail "cloud.credentials.source secret needs cloud.credentials.secret.name" -}}
{{- end -}}
{{- if and (eq $source "rrsa") (not (and .Values.cloud.credentials.rrsa.roleArn .Values.cloud.credentials.rrsa.oidcProviderArn)) -}}
{{- fail "cloud.credentials.source rrsa needs cloud.credentials.rrsa.roleArn and cloud.credentials.rrsa.oidcProviderArn" -}}
{{- end -}}
{{- end -}}

{{/*
The `rules` of the object of kind KIND (ClusterRole, Role) in the controller's RBAC of
deploy/ (files/controller-rbac.yaml, a link to deploy/controller/rbac.yaml), so the
chart's rules cannot drift from the install tests run with. Usage:
include "rollgate.deployRules" (list . "ClusterRole")
*/}}
{{- define "rollgate.deployRules" -}}
{{- $root := index . 0 -}}
{{- $kind := index . 1 -}}
{{- $found := list -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" ($root.Files.Get "files/controller-rbac.yaml") -1 -}}
{{- $object := fromYaml $doc -}}
{{- if eq (toString $object.kind) $kind -}}
{{- $found = append $found $object.rules -}}
{{- end -}}
{{- end -}}
{{- if ne (len $found) 1 -}}
{{- fail (printf "files/controller-rbac.yaml (deploy/controller/rbac.yaml) must hold one %s, holds %d" $kind (len $found)) -}}
{{- end -}}
{{- toYaml (first $found) -}}
{{- end -}}
