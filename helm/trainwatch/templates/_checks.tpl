{{/*
Checks the values schema cannot make, as it compares no two values: a container's request
above its limit (Kubernetes refuses the pod) and a ServiceMonitor's scrapeTimeout above its
interval (Prometheus refuses the scrape config). Each fails the render with one line naming
the value keys. The floors (limits, gc's ages) are in values.schema.json.
*/}}

{{/* A Kubernetes quantity (64Mi, 250m, 0.5, 1e3 is not one) as a float, or "" if unreadable. */}}
{{- define "trainwatch.quantity" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- float64 . -}}
{{- else -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $text -}}
{{- $units := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $unit := trimPrefix $number $text -}}
{{- if and $number (hasKey $units $unit) -}}
{{- mulf (float64 $number) (get $units $unit) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Prometheus duration (1m30s) in seconds, or "" if it is none. */}}
{{- define "trainwatch.seconds" -}}
{{- $units := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "w" 604800.0 "y" 31536000.0 -}}
{{- $parts := regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" (toString .) -1 -}}
{{- if and $parts (eq (join "" $parts) (toString .)) -}}
{{- $total := 0.0 -}}
{{- range $parts -}}
{{- $number := regexFind "^[0-9]+" . -}}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{- define "trainwatch.checks" -}}
{{- range $component := list "exporter" "pushgateway" "prometheus" "alertmanager" "grafana" "gc" -}}
{{- $resources := (index $.Values $component).resources | default dict -}}
{{- range $kind := list "memory" "cpu" -}}
{{- $request := index ($resources.requests | default dict) $kind -}}
{{- $limit := index ($resources.limits | default dict) $kind -}}
{{- if and $request $limit -}}
{{- $r := include "trainwatch.quantity" $request -}}
{{- $l := include "trainwatch.quantity" $limit -}}
{{- if and $r $l (gt (float64 $r) (float64 $l)) -}}
{{- fail (printf "%s.resources.requests.%s (%v) is above %s.resources.limits.%s (%v): Kubernetes refuses a request above its limit" $component $kind $request $component $kind $limit) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $sm := .Values.kubePrometheusStack.serviceMonitor -}}
{{- if and $sm.interval $sm.scrapeTimeout -}}
{{- $interval := include "trainwatch.seconds" $sm.interval -}}
{{- $timeout := include "trainwatch.seconds" $sm.scrapeTimeout -}}
{{- if and $interval $timeout (gt (float64 $timeout) (float64 $interval)) -}}
{{- fail (printf "kubePrometheusStack.serviceMonitor.scrapeTimeout (%s) is above kubePrometheusStack.serviceMonitor.interval (%s): Prometheus refuses a scrape timeout longer than its interval" $sm.scrapeTimeout $sm.interval) -}}
{{- end -}}
{{- end -}}
{{- end -}}
