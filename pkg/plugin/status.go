package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// The Driver's part of a claim's status.devices (pkg/plugin/claimstatus
// computes it): written after prepare, cleared after unprepare, and a
// Warning event on the pods of a share a tenant can exceed.

// writeStatus publishes the claim's device data. It is best effort: the
// containers can start without it, so a failure is logged, not returned.
func (d *Driver) writeStatus(ctx context.Context, rec prepared.Claim) {
	if d.cfg.ClaimStatus == nil {
		return
	}
	statuses, err := claimstatus.DeviceStatuses(rec, d.cfg.NodeName, d.cards, d.cfg.ShareStatus, metav1.Now())
	if err == nil {
		err = d.cfg.ClaimStatus.SetDevices(ctx, rec.Namespace, rec.Name, statuses)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing the claim's device status failed; the claim is prepared all the same")
	}
}

// warnUnenforced records a Warning event on each pod reserving the claim
// when one of its shares is not enforced hard (status.devices says the
// same), so that `kubectl describe pod` shows it. Best effort.
func (d *Driver) warnUnenforced(ctx context.Context, claim *resourceapi.ResourceClaim, rec prepared.Claim) {
	if d.cfg.Events == nil {
		return
	}
	msg := claimstatus.UnenforcedMessage(rec, d.cfg.ShareStatus, d.cfg.NodeName)
	if msg == "" {
		return
	}
	for _, ref := range claim.Status.ReservedFor {
		if ref.Resource != "pods" || ref.APIGroup != "" {
			continue
		}
		d.cfg.Events.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: claim.Namespace, Name: ref.Name, UID: ref.UID},
			corev1.EventTypeWarning, claimstatus.ReasonShareNotEnforced, msg)
	}
	klog.FromContext(ctx).V(2).Info("Share not enforced hard", "message", msg, "pods", len(claim.Status.ReservedFor))
}

// clearStatus removes our entries after unprepare, best effort: a claim
// that is gone or deallocated has none to remove.
func (d *Driver) clearStatus(ctx context.Context, rec prepared.Claim) {
	if d.cfg.ClaimStatus == nil || rec.Name == "" {
		return
	}
	if err := d.cfg.ClaimStatus.SetDevices(ctx, rec.Namespace, rec.Name, nil); err != nil {
		klog.FromContext(ctx).V(2).Info("Clearing the claim's device status failed", "err", err)
	}
}
