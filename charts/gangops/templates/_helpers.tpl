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

{{/*
Values that render but could not run as asked: each refused with what to change.
*/}}
{{- define "gangops.refuseUnworkable" -}}
{{- $c := .Values.controller -}}
{{- if and (gt (int $c.replicas) 1) (not $c.leaderElect) -}}
{{- fail (printf "controller.replicas is %d with controller.leaderElect false: every replica would schedule and write at once. Set controller.leaderElect: true, or controller.replicas: 1." (int $c.replicas)) -}}
{{- end -}}
{{- $l := $c.lease -}}
{{- if not (and (lt (float64 $l.retryPeriodSeconds) (float64 $l.renewDeadlineSeconds)) (le (float64 $l.renewDeadlineSeconds) (subf (float64 $l.durationSeconds) 1.0))) -}}
{{- fail (printf "controller.lease: retryPeriodSeconds (%v) < renewDeadlineSeconds (%v) <= durationSeconds (%v) - 1 must hold (the gap, up to 30 s, is each Lease request's timeout; gangops run refuses anything else at start)." $l.retryPeriodSeconds $l.renewDeadlineSeconds $l.durationSeconds) -}}
{{- end -}}
{{- if and (not $c.webhook.enabled) (or $c.alertmanager.token $c.alertmanager.existingSecret) -}}
{{- fail "controller.alertmanager is set but controller.webhook.enabled is false: the Alertmanager receiver is served on the webhook address. Enable the webhook, or remove the alertmanager token." -}}
{{- end -}}
{{- if and $c.webhook.enabled (eq (int $c.webhook.port) (int $c.metricsPort)) -}}
{{- fail (printf "controller.webhook.port and controller.metricsPort are both %d: give them different ports." (int $c.metricsPort)) -}}
{{- end -}}
{{- $pdb := $c.podDisruptionBudget -}}
{{- if and $pdb.enabled (gt (int $c.replicas) 1) (ge (int $pdb.minAvailable) (int $c.replicas)) -}}
{{- fail (printf "controller.podDisruptionBudget.minAvailable (%d) is not below controller.replicas (%d): no controller pod could ever be evicted, and kubectl drain would never finish on its nodes." (int $pdb.minAvailable) (int $c.replicas)) -}}
{{- end -}}
{{- end -}}

{{/*
CEL: the field at path (a list: "status" "capacity") is the same in object and
oldObject, present in both or absent from both (each level checked with has()).
*/}}
{{- define "gangops.celUnchanged" -}}
{{- $new := list -}}{{- $old := list -}}{{- $n := "object" -}}{{- $o := "oldObject" -}}
{{- range . -}}
{{- $n = printf "%s.%s" $n . -}}{{- $o = printf "%s.%s" $o . -}}
{{- $new = append $new (printf "has(%s)" $n) -}}{{- $old = append $old (printf "has(%s)" $o) -}}
{{- end -}}
{{- $hasNew := join " && " $new -}}{{- $hasOld := join " && " $old -}}
(({{ $hasNew }}) == ({{ $hasOld }}) && (!({{ $hasNew }}) || {{ $n }} == {{ $o }}))
{{- end -}}
