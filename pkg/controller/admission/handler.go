package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/klog/v2"
)

// maxBody bounds what the webhook reads; the API server's own limit on
// object size is 3 MiB, and a review carries the object twice on update.
const maxBody = 8 << 20

// Handler serves AdmissionReview v1 requests on POST.
type Handler struct{}

// ServeHTTP answers one review. Malformed requests get HTTP 400; decisions
// always go in the review's response.
func (Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		http.Error(w, "use POST with an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the request body: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, fmt.Sprintf("request body larger than %d bytes", maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		http.Error(w, fmt.Sprintf("decoding the AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(w, "the AdmissionReview has no request", http.StatusBadRequest)
		return
	}
	resp := Review(review.Request)
	if !resp.Allowed {
		logger.V(2).Info("Refused object with an invalid GpuConfig", "resource", review.Request.Resource.Resource,
			"namespace", review.Request.Namespace, "name", review.Request.Name, "reason", resp.Result.Message)
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		logger.Error(err, "Writing the admission response")
	}
}
