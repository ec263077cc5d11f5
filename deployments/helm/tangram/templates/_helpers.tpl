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

{{/*
Refuses admissionPolicy.enabled=false unless it is said out loud. Some
protections live only in the admission policies, with no check on the
nodes in their place: the kubelet plugin's writes held to its own node's
ResourceSlices, the claim-request rules (the whole-card class gives no
shares, memory 0 only with adminAccess and adminAccess only with memory 0),
GPUs only through claims, and the controller's Secret and caBundle limits.
(Non-root on strict shares and a claim's sharing backend are checked again
by the plugin at prepare.) Rendering without them needs
admissionPolicy.acknowledgeUnprotected=true. The controller's self-managed
webhook certificate is refused even then: its update on the
ValidatingWebhookConfiguration (and create on Secrets) is held to the
caBundle (and its certificate Secret) by policies alone, and without them it
could rewrite the webhook's rules, service or failure policy, so no
rendering keeps that right with the policies off; cert-manager injects the
caBundle and the controller then has no such right. The MPS daemon-pod case
(kubeletPlugin.mps.daemon=pod) is refused by tangram.validateMPSDaemonPod
with its own reason, whatever this says.
*/}}
{{- define "tangram.validateAdmissionPolicyOff" -}}
{{- if and (not .Values.admissionPolicy.enabled) (not (include "tangram.mpsDaemonPod" .)) }}
{{- if and .Values.controller.enabled .Values.controller.webhook.enabled (not .Values.controller.webhook.certManager.enabled) }}
{{- fail "admissionPolicy.enabled=false with the controller's self-managed webhook certificate (controller.webhook.enabled=true, controller.webhook.certManager.enabled=false): only the admission policies hold the controller's update on its ValidatingWebhookConfiguration to the caBundle (and its Secret create to the certificate Secret); without them it could rewrite the webhook's rules, service or failure policy and intercept or block writes cluster-wide. Keep admissionPolicy.enabled=true, or set controller.webhook.certManager.enabled=true (cert-manager injects the caBundle and the controller gets no write on webhook configurations or Secrets), or controller.webhook.enabled=false" }}
{{- end }}
{{- if not .Values.admissionPolicy.acknowledgeUnprotected }}
{{- fail "admissionPolicy.enabled=false drops protections that exist only at admission, with no node-side check in their place: the kubelet plugin's writes held to its own node's ResourceSlices and driver; the claim-request rules (a capacity request on the whole-card class gpu.tangram.dev would get a share past the shared classes' selectors, memory 0 only with adminAccess, adminAccess only with memory 0); GPUs only through claims (admissionPolicy.gpuOnlyThroughClaims: NVIDIA_VISIBLE_DEVICES, device-list mounts, CDI annotations, /dev hostPaths). Non-root on strict shares and a claim's sharing backend are still checked by the plugin at prepare. Keep admissionPolicy.enabled=true, or set admissionPolicy.acknowledgeUnprotected=true to install without them" }}
{{- end }}
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

{{/*
"true" when the kubelet plugin evicts pods for their GPU use
(kubeletPlugin.usage: overShare or unaccounted evict), else "".
*/}}
{{- define "tangram.usageEvicts" -}}
{{- with .Values.kubeletPlugin.usage -}}
{{- if and .enabled (or (eq .overShare "evict") (eq .unaccounted "evict")) }}true{{ end -}}
{{- end -}}
{{- end }}
