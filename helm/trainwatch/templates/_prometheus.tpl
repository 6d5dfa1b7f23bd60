{{/*
Prometheus sharded by trial (prometheus.shards > 1, standalone mode): the shards' components,
and the relabelling that keeps one shard's share. A trial's ranks must be evaluated together
(stragglers, scaling efficiency), so the share is a hash of experiment/trial, never of the
target's address: the Pushgateway is one target holding every trial.
*/}}

{{- /* "true" when the chart runs more than one Prometheus. */}}
{{- define "trainwatch.prometheus.sharded" -}}
{{- if gt (int .Values.prometheus.shards) 1 }}true{{ end }}
{{- end }}

{{- /* The components of the evaluating Prometheus servers, as a JSON list: ["prometheus"] with
one server (today's names), else ["prometheus-shard-0", ...]. */}}
{{- define "trainwatch.prometheus.shardComponents" -}}
{{- $shards := int .Values.prometheus.shards }}
{{- if le $shards 1 }}
{{- toJson (list "prometheus") }}
{{- else }}
{{- $names := list }}
{{- range $i := until $shards }}
{{- $names = append $names (printf "prometheus-shard-%d" $i) }}
{{- end }}
{{- toJson $names }}
{{- end }}
{{- end }}

{{- /* "true" when the chart deploys the central Prometheus that the shards remote_write to. */}}
{{- define "trainwatch.prometheus.central" -}}
{{- if and (include "trainwatch.prometheus.sharded" .) (not .Values.prometheus.sharding.remoteWriteUrl) }}true{{ end }}
{{- end }}

{{- /* Where the shards remote_write: the user's receiver, else the chart's central one. */}}
{{- define "trainwatch.prometheus.remoteWriteUrl" -}}
{{- if .Values.prometheus.sharding.remoteWriteUrl }}
{{- .Values.prometheus.sharding.remoteWriteUrl }}
{{- else }}
{{- printf "http://%s.%s.svc.%s:%v/api/v1/write" (include "trainwatch.componentName" (list . "prometheus")) .Release.Namespace .Values.clusterDomain .Values.prometheus.port }}
{{- end }}
{{- end }}

{{- /* The series the shards send to the global view (a regex on __name__): every recording rule
(level:metric:operations, the only names with a colon), ALERTS, and the trials' and nodes'
identity series the Fleet dashboard and `trainwatch trials` join on (one per rank, GPU or node);
then prometheus.sharding.remoteWriteKeep. tests/test_helm_sharding.py checks that it covers
every record of prometheus/rules. */}}
{{- define "trainwatch.prometheus.remoteWriteKeep" -}}
{{- $names := list "[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+" "ALERTS" "push_time_seconds" "trainwatch_trial_info" "trainwatch_trial_gpu_info" "trainwatch_trial_exit" "trainwatch_host_info" "trainwatch_gpu_info" }}
{{- with .Values.prometheus.sharding.remoteWriteKeep }}
{{- $names = append $names . }}
{{- end }}
{{- join "|" $names }}
{{- end }}

{{/*
Keep one shard's share: hashmod of the source labels into __tmp_trainwatch_shard, keep the
shard's number, drop the helper label. Call with (dict "sources" (list ...) "shards" N
"shard" I). The same hash over the same label values puts a pushed trial (its exported
experiment/trial) and a pulled one (its pod's trainwatch.io/experiment and /trial annotations)
on the same shard.
*/}}
{{- define "trainwatch.prometheus.keepShard" -}}
- source_labels: {{ toJson .sources }}
  modulus: {{ .shards }}
  target_label: __tmp_trainwatch_shard
  action: hashmod
- source_labels: [__tmp_trainwatch_shard]
  regex: "{{ .shard }}"
  action: keep
- regex: __tmp_trainwatch_shard
  action: labeldrop
{{- end }}

{{- /* The central Prometheus's prometheus.yml (prometheus-central.yaml). */}}
{{- define "trainwatch.prometheus.centralConfig" -}}
{{- $pr := .Values.prometheus -}}
# The global view of {{ $pr.shards }} shards (prometheus-shard-0..{{ sub (int $pr.shards) 1 }}): they write here
# (--web.enable-remote-write-receiver); nothing is evaluated here.
global:
  scrape_interval: {{ $pr.scrapeInterval }}
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["localhost:{{ $pr.port }}"]
{{- end }}

{{/*
kube-prometheus-stack mode with kubePrometheusStack.shards > 1: what the monitors add so that
the Prometheus Operator's sharding splits trials, not target addresses. The operator hashes
`__tmp_hash` (from `__address__` unless a relabeling set it) modulo spec.shards and keeps
$(SHARD), scrapes a target with a non-empty `__tmp_disable_sharding` on every shard, and
expands $(SHARD) throughout the generated config (its config reloader's env substitution).
Call with (dict "ctx" $ "what" "pushgateway"|"exporter"|"trials").
*/}}
{{- define "trainwatch.kps.sharding" -}}
{{- $kps := .ctx.Values.kubePrometheusStack }}
{{- $shards := int $kps.shards }}
{{- $extra := .extra | default dict }}
{{- if gt $shards 1 }}
{{- if eq .what "trials" }}
# The operator hashes the pod's trial: its trainwatch.io/experiment and trainwatch.io/trial
# annotations (as a pushed trial's labels are hashed), else its controller (the Job,
# PyTorchJob... that runs every rank of it).
- sourceLabels: [__meta_kubernetes_namespace, __meta_kubernetes_pod_controller_kind, __meta_kubernetes_pod_controller_name]
  targetLabel: __tmp_hash
- sourceLabels: [__meta_kubernetes_pod_annotation_trainwatch_io_experiment, __meta_kubernetes_pod_annotation_trainwatch_io_trial]
  regex: "(.+;.+)"
  targetLabel: __tmp_hash
{{- else }}
{{- $everyShard := or (eq .what "pushgateway") (eq $kps.shardExporters "all") }}
{{- if or $everyShard $extra.relabelings }}
relabelings:
  {{- if $everyShard }}
  # Scraped by every shard: {{ if eq .what "pushgateway" }}one target holds every trial{{ else }}a trial's GPUs and nodes join to it on its shard{{ end }}.
  - targetLabel: __tmp_disable_sharding
    replacement: "true"
  {{- end }}
  {{- with $extra.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- if or (eq .what "pushgateway") $extra.metricRelabelings }}
metricRelabelings:
  {{- if eq .what "pushgateway" }}
  # This shard's trials: $(SHARD) is the operator's, substituted in the whole config.
  - sourceLabels: [experiment, trial]
    modulus: {{ $shards }}
    targetLabel: __tmp_trainwatch_shard
    action: hashmod
  - sourceLabels: [__tmp_trainwatch_shard]
    regex: $(SHARD)
    action: keep
  - regex: __tmp_trainwatch_shard
    action: labeldrop
  {{- end }}
  {{- with $extra.metricRelabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
