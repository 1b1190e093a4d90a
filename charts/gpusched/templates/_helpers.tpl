{{/* The release's full name: the release name, with the chart name added when it does not contain it. At most 63 characters. */}}
{{- define "gpusched.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpusched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "gpusched.selectorLabels" . }}
{{- end -}}

{{/* Labels that select the scheduler's pods. */}}
{{- define "gpusched.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpusched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpusched.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpusched.leaseName" -}}
{{- default .Values.schedulerName .Values.leaderElection.resourceName -}}
{{- end -}}

{{- define "gpusched.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The node agent's objects' name. */}}
{{- define "gpusched.agentName" -}}
{{- printf "%s-agent" (include "gpusched.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on the agent's objects. */}}
{{- define "gpusched.agentLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "gpusched.agentSelectorLabels" . }}
{{- end -}}

{{/* Labels that select the agent's pods. */}}
{{- define "gpusched.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-agent" .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpusched.agentServiceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "gpusched.agentName" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpusched.agentImage" -}}
{{- printf "%s:%s" .Values.agent.image.repository (default .Chart.AppVersion .Values.agent.image.tag) -}}
{{- end -}}

{{/* The user the agent's requests come from: its ServiceAccount. */}}
{{- define "gpusched.agentUser" -}}
{{- default (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpusched.agentServiceAccountName" .)) .Values.admissionPolicy.agentUser -}}
{{- end -}}
