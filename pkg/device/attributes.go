package device

import resourceapi "k8s.io/api/resource/v1"

// StringAttribute is d's string attribute name, published under its bare
// name or qualified with DriverName; "" when d has none.
func StringAttribute(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	if a, ok := d.Attributes[resourceapi.QualifiedName(DriverName+"/"+name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// IntAttribute is d's int attribute name, published under its bare name
// (as this driver publishes them); -1 when d has none.
func IntAttribute(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}
