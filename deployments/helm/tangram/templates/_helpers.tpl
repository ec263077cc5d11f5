{{/* The DRA driver name; also the name of the whole-card DeviceClass. */}}
{{- define "tangram.driverName" -}}gpu.tangram.dev{{- end -}}

{{- define "tangram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every namespaced and cluster-scoped object this release owns. */}}
{{- define "tangram.fullname" -}}
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

{{- define "tangram.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tangram.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: pass (dict "root" $ "component" "kubelet-plugin"). */}}
{{- define "tangram.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tangram.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image of one component: pass (dict "root" $ "image" .Values.kubeletPlugin.image). */}}
{{- define "tangram.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{- define "tangram.kubeletPlugin.fullname" -}}
{{- printf "%s-kubelet-plugin" (include "tangram.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tangram.controller.fullname" -}}
{{- printf "%s-controller" (include "tangram.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The kubelet's per-driver plugin directory: socket and plugin-private files. */}}
{{- define "tangram.kubeletPluginDir" -}}
{{- printf "%s/plugins/%s" (.Values.kubeletPlugin.hostPaths.kubeletRoot | trimSuffix "/") (include "tangram.driverName" .) -}}
{{- end -}}

{{- define "tangram.kubeletRegistrarDir" -}}
{{- printf "%s/plugins_registry" (.Values.kubeletPlugin.hostPaths.kubeletRoot | trimSuffix "/") -}}
{{- end -}}

{{- define "tangram.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "tangram.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Whether the kubelet plugin runs the MPS daemon as a pod of its own. */}}
{{- define "tangram.mpsDaemonPod" -}}
{{- if and .Values.sharing.enabled (eq .Values.kubeletPlugin.mps.daemon "pod") }}true{{ end -}}
{{- end -}}

{{/*
The namespace of the MPS daemon pods: one of their own, so that the kubelet
plugin, which must create them, has no rights where the controller, the
scheduler and the webhook key live.
*/}}
{{- define "tangram.mpsNamespace" -}}
{{- default (printf "%s-mps" .Release.Namespace) .Values.kubeletPlugin.mps.namespace.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Refuses values that would hand the plugin's pod rights more than the
daemon pod (kubeletPlugin.mps.daemon=pod). The plugin may create pods in the
MPS namespace, and only the daemon-pod ValidatingAdmissionPolicy narrows that
to its own node's daemon pod: without it, root on one GPU node could start a
privileged pod on any node, a control-plane node included. kube-* namespaces
hold the cluster's own components and are commonly exempt from admission
checks (the plugin refuses them at start-up too: --mps-daemon-namespace).
*/}}
{{- define "tangram.validateMPSDaemonPod" -}}
{{- $ns := include "tangram.mpsNamespace" . }}
{{- if not .Values.admissionPolicy.enabled }}
{{- fail "admissionPolicy.enabled=false with kubeletPlugin.mps.daemon=pod: the plugin may create pods in the MPS namespace, and only the daemon-pod admission policy limits that to its own node's MPS daemon pod (without it, root on one GPU node can start a privileged pod on any node). Keep admissionPolicy.enabled=true, or set kubeletPlugin.mps.daemon=process" }}
{{- end }}
{{- if eq $ns .Release.Namespace }}
{{- fail "kubeletPlugin.mps.namespace.name must not be the release namespace: the MPS daemon pods need a namespace of their own, so that the plugin's pod rights cannot reach the controller, the scheduler or the webhook key" }}
{{- end }}
{{- if hasPrefix "kube-" $ns }}
{{- fail (printf "kubeletPlugin.mps.namespace.name=%s: the MPS daemon pods may not live in a kube-* namespace, which holds the cluster's own components (often exempt from admission policies) and would come within reach of the plugin's pod rights; name a namespace of their own (with a release in kube-system, the default <release namespace>-mps is kube-system-mps: set kubeletPlugin.mps.namespace.name)" $ns) }}
{{- end }}
{{- end -}}

{{/* The username of the kubelet plugin's service account, as admission sees it. */}}
{{- define "tangram.kubeletPlugin.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "tangram.kubeletPlugin.fullname" .) -}}
{{- end -}}

{{/* Whether cert-manager issues the webhook's certificate. */}}
{{- define "tangram.webhookCertManager" -}}
{{- if and .Values.controller.webhook.enabled .Values.controller.webhook.certManager.enabled }}true{{ end -}}
{{- end -}}

{{/*
The device classes whose claims only locked-down pods may use (non-root, no
privilege escalation, no added capabilities, not privileged), as a comma
list: admissionPolicy.sharedGPURunAsNonRoot.deviceClasses (by default the
strict hard-shared-gpu.tangram.dev), plus shared-gpu.tangram.dev when
sharing.requireHardEnforcement makes the default class strict too. Empty when
admissionPolicy.sharedGPURunAsNonRoot.enabled is false. Read by the
admission policies and by the kubelet plugin (--nonroot-device-classes).
*/}}
{{- define "tangram.nonRootDeviceClasses" -}}
{{- $cfg := .Values.admissionPolicy.sharedGPURunAsNonRoot }}
{{- if $cfg.enabled }}
{{- $classes := $cfg.deviceClasses }}
{{- if .Values.sharing.requireHardEnforcement }}
{{- $classes = append $classes "shared-gpu.tangram.dev" }}
{{- end }}
{{- $classes | uniq | join "," }}
{{- end }}
{{- end -}}
