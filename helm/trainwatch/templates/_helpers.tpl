{{/*
Chart name, cut to 63 characters (the limit of a DNS label and of a label value).
*/}}
{{- define "trainwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release-chart unless the release name already contains the chart name, cut to 63.
*/}}
{{- define "trainwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of one component's resources, "<fullname>-<component>", within 63 characters: where it
would not fit, the fullname is cut, never the component, so the components of a release with a
long name keep apart (prometheus, prometheus-shard-12, grafana...). Call with (list $ "exporter").
*/}}
{{- define "trainwatch.componentName" -}}
{{- $component := index . 1 }}
{{- $full := include "trainwatch.fullname" (index . 0) }}
{{- printf "%s-%s" ($full | trunc (int (sub 62 (len $component))) | trimSuffix "-") $component }}
{{- end }}

{{- define "trainwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every resource. Call with (dict "ctx" $ "component" "exporter").
*/}}
{{- define "trainwatch.labels" -}}
helm.sh/chart: {{ include "trainwatch.chart" .ctx }}
{{ include "trainwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: trainwatch
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels: immutable on a Deployment/DaemonSet, so only name, instance and component.
*/}}
{{- define "trainwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainwatch.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The scrape job names. The rules select job="trainwatch-exporter" (prometheus/thresholds.yaml
`selectors`); the Pushgateway job only needs honor_labels so pushed job labels survive.
*/}}
{{- define "trainwatch.exporterJob" -}}trainwatch-exporter{{- end }}
{{- define "trainwatch.pushgatewayJob" -}}pushgateway{{- end }}
{{- /* Pull-mode trials: the job the rules' trial selector names (pushed series carry it). */}}
{{- define "trainwatch.trialJob" -}}trainwatch_trial{{- end }}
{{- define "trainwatch.trialNamespaces" -}}
{{- toJson (default (list .Release.Namespace) .Values.trialPull.namespaces) }}
{{- end }}

{{/*
Service label that a ServiceMonitor's jobLabel reads the job name from.
*/}}
{{- define "trainwatch.jobLabelKey" -}}trainwatch.io/job{{- end }}

{{- define "trainwatch.standalone" -}}
{{- if eq .Values.mode "standalone" }}true{{ end }}
{{- end }}

{{- define "trainwatch.kubePrometheusStack" -}}
{{- if eq .Values.mode "kube-prometheus-stack" }}true{{ end }}
{{- end }}

{{- define "trainwatch.exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create }}
{{- default (include "trainwatch.componentName" (list . "exporter")) .Values.exporter.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.exporter.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference; call with (dict "image" .Values.x.image "ctx" $). An empty tag is the
chart's appVersion.
*/}}
{{- define "trainwatch.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{/*
ConfigMap key of a Grafana provisioning file: files/grafana/provisioning/datasources/x.yaml ->
datasources_x.yaml.
*/}}
{{- define "trainwatch.grafana.provisioningKey" -}}
{{- trimPrefix "files/grafana/provisioning/" . | replace "/" "_" }}
{{- end }}

{{- /* A rule file of the chart, its runbook links pointed at .Values.runbookUrl when set.
Call with (list $ $path). */}}
{{- define "trainwatch.ruleFile" -}}
{{- $ctx := index . 0 }}{{- $text := $ctx.Files.Get (index . 1) }}
{{- if $ctx.Values.runbookUrl }}
{{- regexReplaceAll "(runbook_url: )[^#\n]+#" $text (printf "${1}%s#" $ctx.Values.runbookUrl) }}
{{- else }}
{{- $text }}
{{- end }}
{{- end }}
