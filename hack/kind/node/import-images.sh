#!/bin/sh
# Runs after containerd starts in Tangram's offline kind node (a drop-in of
# containerd.service): imports the image archives baked into /kind/images,
# once, so the kubelet and kubeadm find every control-plane image without a
# registry. Pinned images are never garbage-collected by the kubelet.
set -eu
marker=/var/lib/tangram-images-imported
[ -f "$marker" ] && exit 0
for archive in /kind/images/*.tar; do
	[ -f "$archive" ] || continue
	ctr -n k8s.io images import --local "$archive"
done
ctr -n k8s.io images ls -q | while read -r ref; do
	ctr -n k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
done
touch "$marker"
