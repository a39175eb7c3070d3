{{/* Names and labels shared by every template. */}}

{{- define "gangops.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's prefix for namespaced and cluster-wide names: the release name,
with "-gangops" added unless it already says gangops. */}}
{{- define "gangops.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gangops.labels" -}}
app.kubernetes.io/name: {{ include "gangops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gangops
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "controller"). */}}
{{- define "gangops.selector" -}}
app.kubernetes.io/name: {{ include "gangops.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gangops.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gangops.controllerServiceAccount" -}}
{{- printf "%s-controller" (include "gangops.fullname" .) -}}
{{- end -}}

{{- define "gangops.agentServiceAccount" -}}
{{- printf "%s-agent" (include "gangops.fullname" .) -}}
{{- end -}}

{{/* Seconds from a duration written as 10s, 1m or 1.5 (seconds). */}}
{{- define "gangops.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "ms" $d -}}{{- divf (trimSuffix "ms" $d | float64) 1000 -}}
{{- else if hasSuffix "s" $d -}}{{- trimSuffix "s" $d | float64 -}}
{{- else if hasSuffix "m" $d -}}{{- mulf (trimSuffix "m" $d | float64) 60 -}}
{{- else -}}{{- $d | float64 -}}
{{- end -}}
{{- end -}}

{{/*
The seed's values-prod.yaml keys that are not chart settings: each is refused with
where the setting lives instead (the schema lets them through so this message, not a
generic one, is what the user reads).
*/}}
{{- define "gangops.refuseMisplaced" -}}
{{- $s := .Values.scheduler -}}
{{- if hasKey $s "backoffLimit" -}}
{{- fail "scheduler.backoffLimit is not a chart setting: gang restarts are policy, set in the policy repository as ClusterPolicy spec.gang.backoffLimit (default 3), or per job as TrainingJob spec.backoffLimit. Remove it from your values." -}}
{{- end -}}
{{- if hasKey $s.gangScheduling "timeout" -}}
{{- fail "scheduler.gangScheduling.timeout is not a chart setting: it is policy, set in the policy repository as ClusterPolicy spec.gang.timeoutSeconds (an integer, default 300). Remove it from your values." -}}
{{- end -}}
{{- if hasKey .Values.monitoring.gpuMetrics "exporters" -}}
{{- fail "monitoring.gpuMetrics.exporters is not a chart setting: the chart's GPU metrics come from the node agent (agent.enabled), which reads NVML itself and exports dcgm-exporter's metric names; nvidia-smi is not used. A dcgm-exporter you run yourself is scraped by its own ServiceMonitor, and the chart's recording rules read its series too. Remove it from your values." -}}
{{- end -}}
{{- if .Values.resourceQuota -}}
{{- fail "resourceQuota is not a chart setting: quotas are per project, in the policy repository (Project spec.quota.max and spec.quota.guaranteed: gpu, cpu, memory), compiled by the controller into each project namespace's ResourceQuota. Remove resourceQuota from your values." -}}
{{- end -}}
{{- end -}}
