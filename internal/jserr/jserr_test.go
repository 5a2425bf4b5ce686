package jserr

import "testing"

// TestStoreFull: the refusals for want of room, and none of a message's own.
func TestStoreFull(t *testing.T) {
	for code, want := range map[int]bool{
		10002: true,  // resource limits exceeded for account
		10023: true,  // insufficient resources
		10028: true,  // insufficient memory resources available
		10047: true,  // insufficient storage resources available
		10054: false, // message size exceeds maximum allowed
		10071: false, // wrong last sequence
		10158: false, // duplicate message id is in process
		0:     false,
	} {
		if got := StoreFull(code); got != want {
			t.Errorf("StoreFull(%d) = %v, want %v", code, got, want)
		}
	}
}
