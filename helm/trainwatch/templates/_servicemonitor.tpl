{{/*
A ServiceMonitor for one component's Service. Call with (dict "ctx" $ "component" NAME
"port" PORT_NAME "honorLabels" BOOL "extra" ENDPOINT_FIELDS). The job label comes from the
Service's trainwatch.io/job label (jobLabel), so it reads the same as in standalone mode.
*/}}
{{- define "trainwatch.serviceMonitor" -}}
{{- $ctx := .ctx }}
{{- $sm := $ctx.Values.kubePrometheusStack.serviceMonitor }}
{{- $labels := dict "ctx" $ctx "component" .component }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "trainwatch.componentName" (list $ctx .component) }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "trainwatch.labels" $labels | nindent 4 }}
    {{- toYaml $ctx.Values.kubePrometheusStack.selectorLabels | nindent 4 }}
spec:
  jobLabel: {{ include "trainwatch.jobLabelKey" $ctx }}
  selector:
    matchLabels:
      {{- include "trainwatch.selectorLabels" $labels | nindent 6 }}
  namespaceSelector:
    matchNames:
      - {{ $ctx.Release.Namespace }}
  endpoints:
    - port: {{ .port }}
      path: /metrics
      {{- with $sm.interval }}
      interval: {{ . }}
      {{- end }}
      {{- with $sm.scrapeTimeout }}
      scrapeTimeout: {{ . }}
      {{- end }}
      honorLabels: {{ .honorLabels }}
      {{- $sharded := gt (int $ctx.Values.kubePrometheusStack.shards) 1 }}
      {{- with (ternary (omit .extra "relabelings" "metricRelabelings") .extra $sharded) }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- if $sharded }}
      {{- include "trainwatch.kps.sharding" (dict "ctx" $ctx "what" .component "extra" .extra) | trim | nindent 6 }}
      {{- end }}
{{- end }}
