// Package admission is the validating webhook that keeps GpuConfigs the
// kubelet plugin would reject out of the cluster: ResourceClaims,
// ResourceClaimTemplates and DeviceClasses whose gpu.tangram.dev opaque
// config does not decode or validate are refused at create/update time,
// with the message the plugin would give at prepare time (both call
// pkg/config.Resolve), prefixed with the field path of the bad entry.
// A claim's or template's config may not name a sharing backend
// (config.ValidateTenantConfig): that is the admin's, per node and class.
package admission

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tangram-gpu/tangram/pkg/config"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Resources the webhook checks (resource.k8s.io/v1; the webhook
// configuration uses matchPolicy Equivalent, so other versions arrive
// converted to v1).
var (
	claims    = metav1.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "resourceclaims"}
	templates = metav1.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "resourceclaimtemplates"}
	classes   = metav1.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "deviceclasses"}
)

// Review decides one admission request. It never fails open by itself: an
// object it cannot read is refused with the reason.
func Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	var errs field.ErrorList
	var err error
	switch req.Resource {
	case claims:
		errs, err = reviewClaim(req.Object.Raw)
	case templates:
		errs, err = reviewTemplate(req.Object.Raw)
	case classes:
		errs, err = reviewClass(req.Object.Raw)
	default:
		// Not ours to judge; the webhook configuration should not send it.
		return resp
	}
	switch {
	case err != nil:
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
			Reason: metav1.StatusReasonBadRequest, Message: err.Error()}
	case len(errs) > 0:
		resp.Allowed = false
		resp.Result = invalidStatus(req, errs)
	}
	return resp
}

func invalidStatus(req *admissionv1.AdmissionRequest, errs field.ErrorList) *metav1.Status {
	msgs := make([]string, len(errs))
	causes := make([]metav1.StatusCause, len(errs))
	for i, e := range errs {
		msgs[i] = e.Field + ": " + e.Detail
		causes[i] = metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: e.Field, Message: e.Detail}
	}
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: strings.Join(msgs, "; "),
		Details: &metav1.StatusDetails{Name: req.Name, Group: req.Resource.Group, Kind: req.Kind.Kind, Causes: causes},
	}
}

func reviewClaim(raw []byte) (field.ErrorList, error) {
	var claim resourceapi.ResourceClaim
	if err := json.Unmarshal(raw, &claim); err != nil {
		return nil, fmt.Errorf("decoding the ResourceClaim: %w", err)
	}
	return checkClaimSpec(&claim, field.NewPath("spec")), nil
}

func reviewTemplate(raw []byte) (field.ErrorList, error) {
	var tmpl resourceapi.ResourceClaimTemplate
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return nil, fmt.Errorf("decoding the ResourceClaimTemplate: %w", err)
	}
	claim := &resourceapi.ResourceClaim{Spec: tmpl.Spec.Spec}
	return checkClaimSpec(claim, field.NewPath("spec", "spec")), nil
}

func reviewClass(raw []byte) (field.ErrorList, error) {
	var class resourceapi.DeviceClass
	if err := json.Unmarshal(raw, &class); err != nil {
		return nil, fmt.Errorf("decoding the DeviceClass: %w", err)
	}
	var errs field.ErrorList
	path := field.NewPath("spec", "config")
	for i, c := range class.Spec.Config {
		errs = append(errs, checkEntry(resourceapi.DeviceAllocationConfiguration{
			Source:              resourceapi.AllocationConfigSourceClass,
			DeviceConfiguration: c.DeviceConfiguration,
		}, nil, path.Index(i))...)
	}
	return errs, nil
}

func checkClaimSpec(claim *resourceapi.ResourceClaim, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	requests := config.RequestNames(claim)
	path := spec.Child("devices", "config")
	for i, c := range claim.Spec.Devices.Config {
		entryErrs := checkEntry(resourceapi.DeviceAllocationConfiguration{
			Source:              resourceapi.AllocationConfigSourceClaim,
			Requests:            c.Requests,
			DeviceConfiguration: c.DeviceConfiguration,
		}, requests, path.Index(i))
		if len(entryErrs) == 0 {
			// A valid config may still set what only the admin may.
			entryErrs = config.ValidateTenantConfig(c.Opaque, path.Index(i))
		}
		errs = append(errs, entryErrs...)
	}
	return errs
}

// checkEntry resolves one config entry on its own, exactly as the plugin
// resolves the allocation's configs, so the message is the plugin's.
func checkEntry(entry resourceapi.DeviceAllocationConfiguration, requests []string, path *field.Path) field.ErrorList {
	if entry.Opaque == nil || entry.Opaque.Driver != device.DriverName {
		return nil
	}
	if _, err := config.Resolve([]resourceapi.DeviceAllocationConfiguration{entry}, requests); err != nil {
		return field.ErrorList{field.Invalid(path.Child("opaque", "parameters"), "", err.Error())}
	}
	return nil
}
