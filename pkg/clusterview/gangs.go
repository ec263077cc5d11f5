package clusterview

import (
	"sort"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

// GangView is one GpuGang as its controller reports it.
type GangView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is Pending, Scheduled, Running or Failed ("" before the
	// controller has seen it).
	Phase string `json:"phase"`
	// Members is how many member pods the gang wants; Placed and Running
	// how many are bound to a node and running.
	Members int32 `json:"members"`
	Placed  int32 `json:"placed"`
	Running int32 `json:"running"`
	// Nodes are the nodes members are bound to, sorted.
	Nodes []string `json:"nodes"`
	// Diagnosis is the controller's plain-words reason while pending.
	Diagnosis string `json:"diagnosis"`
}

// gangViews summarises the snapshot's GpuGangs and maps each member claim
// ("namespace/name") to its gang.
func gangViews(gangs []*tangramv1alpha1.GpuGang, node string) ([]GangView, map[string]string) {
	views := []GangView{}
	claimGang := map[string]string{}
	for _, g := range gangs {
		v := GangView{
			Namespace: g.Namespace, Name: g.Name,
			Phase:   string(g.Status.Phase),
			Members: g.Spec.Members.Count, Placed: g.Status.Placed, Running: g.Status.Running,
			Nodes:     []string{},
			Diagnosis: g.Status.Diagnosis,
		}
		seen := map[string]bool{}
		for _, m := range g.Status.Members {
			if m.Claim != "" {
				claimGang[g.Namespace+"/"+m.Claim] = g.Namespace + "/" + g.Name
			}
			if m.Node != "" && !seen[m.Node] {
				seen[m.Node] = true
				v.Nodes = append(v.Nodes, m.Node)
			}
		}
		sort.Strings(v.Nodes)
		if node != "" && !seen[node] {
			continue
		}
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool {
		if views[i].Namespace != views[j].Namespace {
			return views[i].Namespace < views[j].Namespace
		}
		return views[i].Name < views[j].Name
	})
	return views, claimGang
}
