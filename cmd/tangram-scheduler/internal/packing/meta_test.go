package packing

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func metaObject(name string) v1.ObjectMeta {
	return v1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}
}

func clusterObject(name string) v1.ObjectMeta {
	return v1.ObjectMeta{Name: name, UID: types.UID(name)}
}
