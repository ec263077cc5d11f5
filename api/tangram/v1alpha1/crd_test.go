package v1alpha1

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const crdPath = "../../../deployments/helm/tangram/crds/tangram.dev_gpugangs.yaml"

// TestCRDMatchesTypes catches a CRD manifest that was not regenerated after
// the Go types changed (make verify-generated-api compares byte for byte with
// controller-gen; this test needs no extra tool): every JSON field of the
// types is in the schema and the schema has no field the types lack.
func TestCRDMatchesTypes(t *testing.T) {
	raw, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string
			Names    struct{ Kind, Plural string }
			Scope    string
			Versions []struct {
				Name         string
				Served       bool
				Storage      bool
				Subresources map[string]any
				Schema       struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatalf("parsing %s: %v", crdPath, err)
	}
	if crd.Spec.Group != GroupName || crd.Spec.Names.Kind != Kind || crd.Spec.Names.Plural != Resource || crd.Spec.Scope != "Namespaced" {
		t.Errorf("CRD names %+v in group %s, scope %s", crd.Spec.Names, crd.Spec.Group, crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version || !crd.Spec.Versions[0].Storage {
		t.Fatalf("CRD versions %+v", crd.Spec.Versions)
	}
	v := crd.Spec.Versions[0]
	if _, ok := v.Subresources["status"]; !ok {
		t.Error("the CRD lacks the status subresource the controller writes")
	}
	var problems []string
	compare(reflect.TypeOf(GpuGang{}), v.Schema.OpenAPIV3Schema, "", &problems)
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// opaque types are described by their own schema (quantity, metadata,
// conditions), not by their Go fields.
var opaque = map[reflect.Type]bool{
	reflect.TypeOf(resource.Quantity{}):     true,
	reflect.TypeOf(metav1.ObjectMeta{}):     true,
	reflect.TypeOf(metav1.Condition{}):      true,
	reflect.TypeOf(metav1.Time{}):           true,
	reflect.TypeOf(metav1.TypeMeta{}):       true,
	reflect.TypeOf(metav1.ListMeta{}):       true,
	reflect.TypeOf(metav1.OwnerReference{}): true,
}

func compare(typ reflect.Type, schema map[string]any, path string, problems *[]string) {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		if typ.Kind() == reflect.Slice {
			items, _ := schema["items"].(map[string]any)
			schema = items
		}
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || opaque[typ] || schema == nil {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			if f.Anonymous && !opaque[f.Type] {
				compare(f.Type, schema, path, problems)
			}
			if f.Anonymous && f.Type == reflect.TypeOf(metav1.TypeMeta{}) {
				seen["apiVersion"], seen["kind"] = true, true
			}
			continue
		}
		seen[name] = true
		sub, ok := props[name].(map[string]any)
		if !ok {
			*problems = append(*problems, "field "+path+name+" is not in the CRD schema: run make generate-api")
			continue
		}
		compare(f.Type, sub, path+name+".", problems)
	}
	for name := range props {
		if !seen[name] {
			*problems = append(*problems, "the CRD schema has "+path+name+", which the Go types lack: run make generate-api")
		}
	}
}
