package resourceslices

import (
	"slices"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// nvlinkDomains returns the nvlinkDomain value of every card, by index.
//
// A domain is a connected component of the NVLink graph: cards that reach
// each other, directly or through other cards, share it, so a claim with
// matchAttribute on nvlinkDomain gets cards that can talk over NVLink.
// Cards in the same fabric clique belong together even when NVML reported
// no local link between them. A component whose cards carry a fabric clique
// ID takes that ID (stable across nodes of a multi-node NVLink system);
// otherwise the value is "<node>-nvl<smallest index>", unique per node. A
// card without NVLink is a domain of its own.
//
// gpus must be sorted by index with unique indexes.
func nvlinkDomains(logger klog.Logger, nodeName string, gpus []gpu.GPU) map[int]string {
	position := make(map[int]int, len(gpus))
	for i, g := range gpus {
		position[g.Index] = i
	}
	parent := make([]int, len(gpus))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		// The smaller position becomes the root so the root is the
		// component's smallest index.
		if ra < rb {
			parent[rb] = ra
		} else if rb < ra {
			parent[ra] = rb
		}
	}

	firstInClique := make(map[string]int)
	for i, g := range gpus {
		for _, peer := range g.NVLinkPeers {
			j, ok := position[peer]
			if !ok {
				// A link to a card that is not listed (it failed or is
				// hidden) connects nothing we publish.
				logger.V(4).Info("NVLink peer is not among the listed GPUs; ignored for the NVLink domain", "gpu", g.Index, "peer", peer)
				continue
			}
			union(i, j)
		}
		if g.FabricCliqueID != "" {
			if j, ok := firstInClique[g.FabricCliqueID]; ok {
				union(i, j)
			} else {
				firstInClique[g.FabricCliqueID] = i
			}
		}
	}

	cliques := make(map[int][]string)
	for i, g := range gpus {
		if g.FabricCliqueID != "" {
			root := find(i)
			if !slices.Contains(cliques[root], g.FabricCliqueID) {
				cliques[root] = append(cliques[root], g.FabricCliqueID)
			}
		}
	}

	domains := make(map[int]string, len(gpus))
	for i, g := range gpus {
		root := find(i)
		ids := cliques[root]
		var domain string
		switch len(ids) {
		case 0:
			domain = nodeName + "-nvl" + strconv.Itoa(gpus[root].Index)
		case 1:
			domain = ids[0]
		default:
			// NVLink joins cards of different cliques: not expected on real
			// systems. Pick one deterministically so the cards still share
			// a domain.
			slices.Sort(ids)
			domain = ids[0]
			if root == i {
				logger.Info("NVLink-connected GPUs report different fabric cliques; using the first", "gpu", g.Index, "cliques", ids, "nvlinkDomain", domain)
			}
		}
		domains[g.Index] = boundedValue(domain)
	}
	return domains
}
