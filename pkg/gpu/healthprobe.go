package gpu

import "context"

// HealthRegistration is what registering one card for the health
// monitor's events gave.
type HealthRegistration struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// Wanted, Supported and Registered name event types: those the
	// monitor wants, those the card supports, those registered.
	Wanted     []string `json:"wanted"`
	Supported  []string `json:"supported"`
	Registered []string `json:"registered"`
	// Error says why the card is not watched, "" when it is.
	Error string `json:"error,omitempty"`
}

// HealthProber is implemented by Sources whose health watch registers for
// events: ProbeHealth does the registration WatchHealth does, reports it
// card by card, and releases it without waiting for events. It is how
// gpu-check shows that the monitor would hear a card's XIDs.
type HealthProber interface {
	ProbeHealth(ctx context.Context) ([]HealthRegistration, error)
}
