package podsecurity

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The container half of the rule. The prepare-time check (Check) runs once
// per claim, with the pods that reserve it then; the kubelet never prepares
// a prepared claim again, so a pod that joins later (a PodGroup member
// bound after the first member's prepare, a pod sharing the claim) would
// run unchecked. The CDI spec of a strict share therefore names the class
// in the hook every container of the claim runs before its process starts
// (tangram-cdi-hook --non-root-class), and the hook checks the container's
// own OCI runtime config (<bundle>/config.json), as the container runtime
// wrote it from the pod's security context:
//   - process.user.uid is not 0 (runAsNonRoot with a non-root user: the
//     kubelet refuses runAsNonRoot with a root image user, so a uid of 0
//     here is a pod without it);
//   - process.noNewPrivileges is true (allowPrivilegeEscalation: false;
//     Kubernetes refuses that together with privileged or an added
//     CAP_SYS_ADMIN, so such containers fail here too).
//
// Other added capabilities are only seen at admission and at prepare: a
// runtime's default capability set is its own, so the runtime config
// cannot tell an added one from a default.

// Annotations the container runtimes put in a container's runtime config,
// which name its pod and container in the hook's message.
var (
	podNamespaceAnnotations  = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
	podNameAnnotations       = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	containerNameAnnotations = []string{"io.kubernetes.cri.container-name", "io.kubernetes.container.name"}
)

// ContainerRefusedError is a container refused by the create hook because
// it is not locked down on a share of a strict class.
type ContainerRefusedError struct {
	// Container names the container: `pod ns/name container "c"` from
	// the runtime's annotations, else `container <id>`.
	Container string
	// Claim is the claim, "namespace/name", and Class its strict class.
	Claim, Class string
	// Problems says what is wrong, one item each.
	Problems []string
}

func (e *ContainerRefusedError) Error() string {
	return fmt.Sprintf("%s %s on a share of class %s (claim %s), whose isolation relies on its MPS clients being unprivileged: "+
		"set securityContext.runAsNonRoot: true with a non-zero runAsUser (or an image whose USER is not root) and "+
		"allowPrivilegeEscalation: false on the container or the pod, and recreate the pod",
		e.Container, strings.Join(e.Problems, " and "), e.Class, e.Claim)
}

// CheckContainer decides whether the container whose OCI runtime config is
// config (config.json) may run on a share of class of claim
// ("namespace/name"); id is the container's ID, for the message when the
// runtime names no pod. Pure. It fails closed: a config that cannot be
// decoded or has no process refuses the container.
func CheckContainer(config []byte, id, claim, class string) error {
	var spec specs.Spec
	if err := json.Unmarshal(config, &spec); err != nil {
		return fmt.Errorf("container %s: reading its OCI runtime config to check that it runs as non-root on a share of class %s (claim %s): %w; refusing it",
			id, class, claim, err)
	}
	name := containerName(spec.Annotations, id)
	if spec.Process == nil {
		return fmt.Errorf("%s: its OCI runtime config has no process, so its user cannot be checked on a share of class %s (claim %s); refusing it",
			name, class, claim)
	}
	var problems []string
	if spec.Process.User.UID == 0 {
		problems = append(problems, "would run as uid 0 (root)")
	}
	if !spec.Process.NoNewPrivileges {
		problems = append(problems, "may gain privileges (noNewPrivileges is not set: allowPrivilegeEscalation is not false)")
	}
	if len(problems) == 0 {
		return nil
	}
	return &ContainerRefusedError{Container: name, Claim: claim, Class: class, Problems: problems}
}

// CheckBundle is CheckContainer on the runtime config of the container
// whose OCI bundle is bundle (the OCI state's bundle, as the hook gets it on
// stdin). A config it cannot read refuses the container.
func CheckBundle(bundle, id, claim, class string) error {
	if bundle == "" {
		return fmt.Errorf("container %s: the OCI state on stdin names no bundle, so its user cannot be checked on a share of class %s (claim %s); refusing it",
			id, class, claim)
	}
	file := filepath.Join(bundle, "config.json")
	config, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("container %s: reading its OCI runtime config %s to check that it runs as non-root on a share of class %s (claim %s): %w; refusing it",
			id, file, class, claim, err)
	}
	return CheckContainer(config, id, claim, class)
}

func containerName(annotations map[string]string, id string) string {
	first := func(keys []string) string {
		for _, k := range keys {
			if v := annotations[k]; v != "" {
				return v
			}
		}
		return ""
	}
	ns, pod, c := first(podNamespaceAnnotations), first(podNameAnnotations), first(containerNameAnnotations)
	if pod == "" || c == "" {
		return "container " + id
	}
	return fmt.Sprintf("pod %s/%s container %q", ns, pod, c)
}
