{{/*
The app.kubernetes.io/name label: always the chart's name, which the monitors make the `job`
label that the alert rules and dashboards select (job="sockwatch").
*/}}
{{- define "sockwatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Every object's name: fullnameOverride, else the release name when it contains the chart's
name (nameOverride, when set), else "<release>-<name>".
*/}}
{{- define "sockwatch.fullname" -}}
{{- $name := .Values.nameOverride | default .Chart.Name }}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The pods' ServiceAccount: serviceAccount.name, else the objects' name when the chart creates
it, else "default".
*/}}
{{- define "sockwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "sockwatch.fullname" .) }}
{{- else }}
{{- .Values.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/*
"true" when the cluster serves the Prometheus Operator's API (monitoring.coreos.com/v1): the
ServiceMonitor, PodMonitor and PrometheusRule are rendered only then, or `helm install` would
fail on a kind the cluster does not know. `helm template`: --api-versions monitoring.coreos.com/v1.
*/}}
{{- define "sockwatch.operatorAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/*
The PrometheusRule's spec.groups: files/alert-groups.yaml without its leading comment (a file,
not a template: the annotations' templates are Prometheus's), less the disabled alerts, with
ruleLabels beside each severity and runbook links under runbookBaseURL. Edited as text, so
the file's comments stay in the rendering.
*/}}
{{- define "sockwatch.alertGroups" -}}
{{- $r := .Values.metrics.prometheusRule }}
{{- $text := regexReplaceAll "\\A(#.*\\n)+" (.Files.Get "files/alert-groups.yaml") "" | trimSuffix "\n" }}
{{- $separator := "\n    - alert: " }}
{{- $chunks := splitList $separator $text }}
{{- $kept := list (first $chunks) }}
{{- range rest $chunks }}
{{- if not (has (regexFind "^[A-Za-z]+" .) $r.disabledAlerts) }}
{{- $kept = append $kept . }}
{{- end }}
{{- end }}
{{- if eq (len $kept) 1 }}
{{- fail "metrics.prometheusRule.disabledAlerts names every alert: set metrics.prometheusRule.enabled=false instead." }}
{{- end }}
{{- $text = join $separator $kept }}
{{- $labels := "" }}
{{- range $k, $v := $r.ruleLabels }}
{{- $labels = printf "%s\n        %s: %s" $labels $k (toJson $v) }}
{{- end }}
{{- $text = regexReplaceAll "(\n        severity: [a-z]+)" $text (printf "${1}%s" (replace "$" "$$" $labels)) }}
{{- with $r.runbookBaseURL }}
{{- $text = regexReplaceAll "(\n +runbook_url: )docs/" $text (printf "${1}%s/" (trimSuffix "/" . | replace "$" "$$")) }}
{{- end }}
{{- $text }}
{{- end }}

{{- define "sockwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
What selects the agent's pods: the DaemonSet's selector, the Service's and the monitors'.
*/}}
{{- define "sockwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sockwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/*
The labels of every object.
*/}}
{{- define "sockwatch.labels" -}}
{{ include "sockwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "sockwatch.chart" . }}
{{- end }}

{{- define "sockwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
`--listen`: every interface of the pod (or of the node, with hostNetwork).
*/}}
{{- define "sockwatch.listen" -}}
{{- printf "0.0.0.0:%d" (.Values.metrics.port | int) }}
{{- end }}

{{/*
Indents every non-empty line of .text by .spaces (nindent would leave trailing blanks on the
empty ones).
*/}}
{{- define "sockwatch.nindent" -}}
{{- regexReplaceAll "(?m)^[ ]+$" (nindent .spaces .text) "" }}
{{- end }}

{{/*
sockwatch.toml, the ConfigMap's one key (without its final newline). Strings are written as
JSON strings, which TOML reads the same.
*/}}
{{- define "sockwatch.config" -}}
{{- $c := .Values.config -}}
# How often the reconciliation sweep (sock_diag, /proc fds, mountinfo) runs; it repairs
# the state after lost events. "0s" disables it (the start-up scan always runs).
scan_interval = {{ $c.scanInterval | toJson }}
# How often the ring buffer is drained when the kernel has not woken the agent.
drain_interval = {{ $c.drainInterval | toJson }}
# A live socket's file removed by a process outside its owner set is a takeover (no alert)
# when that process, its cgroup or its pod binds the path again this soon (a rollout);
# otherwise a foreign unlink, reported this late. "0s": every one at once, no takeovers.
takeover_window = {{ $c.takeoverWindow | toJson }}
# Lines written to the events output (stdout, the pod's log): "verdicts" (verdicts and the
# agent's notices: hooks missing, records lost, scans failing), or "all" (a line per kernel
# event as well: thousands a second on a busy node).
events_filter = {{ $c.eventsFilter | toJson }}
# Live sockets the kernel's table holds: past it new binds are counted as map_full and left
# to the sweeps.
live_capacity = {{ $c.liveCapacity | int }}
# true: /api (the node's pids, paths and pods) answers every client; false: loopback clients
# only, others get 403. /metrics and the health routes answer everyone either way.
api_remote = {{ $c.apiRemote }}
# true: exit 2 when any hook gets no probe tier, instead of running without it.
require_all_hooks = {{ $c.requireAllHooks }}
# Guard mode (docs/guard.md; LSM tier only): "off", "stale_owner" (the kernel refuses, with
# EPERM, a stale owner's removal of a live listener's file: the Multus incident) or "foreign"
# (it refuses every removal by a process outside the owner set but the allow-lists). Here:
# sockets outside every watch (every socket, without watches), and each watch that sets no
# guard of its own. Without BPF LSM the guard is unavailable and the agent only observes.
{{- $g := include "sockwatch.guard" . | fromJson }}
guard = {{ $g.policy | toJson }}
# foreign only: removals by these commands (comm), and by processes in these cgroup v2
# directories (relative to /sys/fs/cgroup), pass.
guard_allow_comms = {{ $g.allowComms | toJson }}
guard_allow_cgroups = {{ $g.allowCgroups | toJson }}
# "enforce": refuse; "audit": let every removal through, and report (unlink_would_deny) and
# count (sockwatch_guard_kernel_decisions_total{decision="would_deny"}) what would be refused.
guard_mode = {{ $g.mode | toJson }}

# Each watch is a directory (sockets in it and up to 8 levels below) whose name becomes the
# `watch` label of the metrics. Without any watch, every path socket on the node is watched
# and labelled watch="none". Paths are host paths: the DaemonSet mounts the host's /run at
# /run and /var/lib/kubelet/device-plugins at the same path; directories elsewhere need a
# mount of their own. A watched directory that does not exist yet is waited for
# (sockwatch_watch_directory_missing is 1 meanwhile).
{{- range .Values.watches }}

[[watches]]
{{- with .name }}
name = {{ toJson . }}
{{- end }}
path = {{ toJson .path }}
{{- if hasKey . "guard" }}
guard = {{ toJson .guard }}
{{- end }}
{{- if hasKey . "guardAllowComms" }}
guard_allow_comms = {{ toJson .guardAllowComms }}
{{- end }}
{{- if hasKey . "guardAllowCgroups" }}
guard_allow_cgroups = {{ toJson .guardAllowCgroups }}
{{- end }}
{{- else }}
#
# [[watches]]
# name = "multus"
# path = "/run/multus"
# guard = "stale_owner"           # this watch's guard; default: the one above
#
# [[watches]]
# name = "device-plugins"
# path = "/var/lib/kubelet/device-plugins"
{{- end }}
{{- end }}

{{/*
The host directories the container mounts at their own paths, where watches may be.
*/}}
{{- define "sockwatch.watchableMounts" -}}
{{- $paths := list "/run" "/var/lib/kubelet/device-plugins" }}
{{- range .Values.extraVolumeMounts }}
{{- $paths = append $paths .mountPath }}
{{- end }}
{{- toJson $paths }}
{{- end }}

{{/*
The top-level guard values with their defaults filled in, as JSON: a release upgraded with
--reuse-values from a chart without them has none.
*/}}
{{- define "sockwatch.guard" -}}
{{- $g := .Values.guard | default dict }}
{{- toJson (dict "policy" ($g.policy | default "off") "mode" ($g.mode | default "enforce") "allowComms" ($g.allowComms | default list) "allowCgroups" ($g.allowCgroups | default list)) }}
{{- end }}

{{/*
"true" when a guard policy other than "off" is set, at the top level or on a watch.
*/}}
{{- define "sockwatch.guarded" -}}
{{- $on := ne (include "sockwatch.guard" . | fromJson).policy "off" }}
{{- range .Values.watches }}
{{- if and (hasKey . "guard") (ne .guard "off") }}
{{- $on = true }}
{{- end }}
{{- end }}
{{- if $on }}true{{ end }}
{{- end }}

{{/*
"true" when a guard allow-list names cgroups: the pod then mounts the node's cgroup2
hierarchy, which the agent resolves them in.
*/}}
{{- define "sockwatch.guardCgroups" -}}
{{- $any := gt (len (include "sockwatch.guard" . | fromJson).allowCgroups) 0 }}
{{- range .Values.watches }}
{{- if gt (len (.guardAllowCgroups | default list)) 0 }}
{{- $any = true }}
{{- end }}
{{- end }}
{{- if $any }}true{{ end }}
{{- end }}

{{/*
What values.schema.json cannot say; `fail` stops `helm install` and `helm template` with the
reason.
*/}}
{{- define "sockwatch.validate" -}}
{{- $m := .Values.metrics }}
{{- if $m.prometheusRule.enabled }}
{{- /* Refuses a rule with every alert disabled even where the API is missing. */}}
{{- $_ := include "sockwatch.alertGroups" . }}
{{- end }}
{{- if and $m.serviceMonitor.enabled $m.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled are both true: every agent would be scraped twice (its series duplicated, every alert doubled). Enable one of them." }}
{{- end }}
{{- if and $m.serviceMonitor.enabled (not $m.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes the agents through the headless Service. Use metrics.podMonitor to scrape the pods without one." }}
{{- end }}
{{- $np := .Values.networkPolicy }}
{{- if and $np.enabled .Values.hostNetwork }}
{{- fail "networkPolicy.enabled with hostNetwork: a pod in the node's network is subject to no NetworkPolicy. Restrict the port with the node's firewall, or set hostNetwork false." }}
{{- end }}
{{- if and $np.enabled (not $np.metricsFromNamespaces) }}
{{- fail "networkPolicy.enabled with no networkPolicy.metricsFromNamespaces: nothing could scrape the agents. Name the namespace of Prometheus (e.g. [monitoring])." }}
{{- end }}
{{- $own := dict "--config" "the chart's ConfigMap" "--listen" "metrics.port" "--probe-mode" "config.probeMode" }}
{{- range $i, $a := .Values.extraArgs }}
{{- $flag := regexReplaceAll "=.*" $a "" }}
{{- if hasKey $own $flag }}
{{- fail (printf "extraArgs[%d]: %s is the chart's (%s); sockwatch run refuses it twice" $i $flag (get $own $flag)) }}
{{- end }}
{{- end }}
{{- $exact := list "auto" "precise" "lsm" }}
{{- if and (include "sockwatch.guarded" .) (not (has .Values.config.probeMode $exact)) }}
{{- fail (printf "a guard policy is set, but config.probeMode %s attaches no LSM program: the guard would be unavailable on every node. Use probeMode auto, precise or lsm, or leave the guard \"off\"." .Values.config.probeMode) }}
{{- end }}
{{- $comms := dict "guard.allowComms" (include "sockwatch.guard" . | fromJson).allowComms }}
{{- range $i, $w := .Values.watches }}
{{- $_ := set $comms (printf "watches[%d].guardAllowComms" $i) ($w.guardAllowComms | default list) }}
{{- end }}
{{- range $at, $list := $comms }}
{{- range $i, $c := $list }}
{{- if gt (len $c) 15 }}
{{- fail (printf "%s[%d]: %q is %d bytes: the kernel keeps 15 bytes of a command name (comm), and the agent refuses a longer one" $at $i $c (len $c)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $names := dict }}
{{- $paths := dict }}
{{- $mounts := include "sockwatch.watchableMounts" . | fromJsonArray }}
{{- range $i, $w := .Values.watches }}
{{- $name := $w.name | default (base $w.path) }}
{{- if hasKey $names $name }}
{{- fail (printf "watches[%d]: the name %q is already the name of watches[%d] (each name is a `watch` label value)" $i $name (get $names $name)) }}
{{- end }}
{{- $_ := set $names $name $i }}
{{- $path := $w.path | trimSuffix "/" }}
{{- if hasKey $paths $path }}
{{- fail (printf "watches[%d]: %s is already watched by watches[%d]" $i $w.path (get $paths $path)) }}
{{- end }}
{{- $_ := set $paths $path $i }}
{{- $mounted := false }}
{{- range $mounts }}
{{- $mp := . | trimSuffix "/" }}
{{- if or (eq $path $mp) (hasPrefix (printf "%s/" $mp) $path) }}
{{- $mounted = true }}
{{- end }}
{{- end }}
{{- if not $mounted }}
{{- fail (printf "watches[%d]: %s is outside every mount of the container (%s): the agent would never see it. Mount its host directory at the same path with extraVolumes and extraVolumeMounts." $i $w.path (join ", " $mounts)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The container's securityContext of securityProfile.
*/}}
{{- define "sockwatch.containerSecurityContext" -}}
runAsUser: 0
runAsGroup: 0
{{- if eq .Values.securityProfile "privileged" }}
# securityProfile=privileged: every capability and every host device, no seccomp
# filter. The fallback where the capability set is not enough.
privileged: true
allowPrivilegeEscalation: true
readOnlyRootFilesystem: true
seccompProfile:
  type: Unconfined
{{- else }}
privileged: false
# Kubernetes refuses `false` together with SYS_ADMIN.
allowPrivilegeEscalation: true
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
  add: ["BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"]
# The runtime's default profile allows bpf(), perf_event_open(), mount() and
# setns() to a holder of these capabilities; use securityProfile=privileged on a
# runtime whose profile predates CAP_BPF and refuses bpf() with EPERM.
seccompProfile:
  type: RuntimeDefault
{{- end }}
# Kubernetes 1.30+; older clusters: the annotation
# container.apparmor.security.beta.kubernetes.io/sockwatch: unconfined
appArmorProfile:
  type: Unconfined
{{- end }}
