// Allocation counts mean nothing under the race detector, which makes
// sync.Pool drop items at random: scripts/test.sh runs these without it.

//go:build !race

package ingest_test

import (
	"testing"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
)

// TestVerifyDoesNotAllocate: the signature check runs on every request, and
// its pooled HMACs keep their sums, so a verdict, right or wrong, costs no
// allocation.
func TestVerifyDoesNotAllocate(t *testing.T) {
	v := ingest.NewVerifier([]byte("old-secret"), []byte("new-secret"))
	body := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	right := []byte(schema.Sign([]byte("new-secret"), body))
	wrong := []byte(schema.Sign([]byte("guess"), body))
	for _, tt := range []struct {
		name string
		sig  []byte
		want error
	}{{"right", right, nil}, {"wrong", wrong, ingest.ErrBadSignature}} {
		if err := v.Verify(tt.sig, body); err != tt.want {
			t.Fatalf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
		if n := testing.AllocsPerRun(200, func() { _ = v.Verify(tt.sig, body) }); n != 0 {
			t.Errorf("%s: %.1f allocations per Verify, want 0", tt.name, n)
		}
	}
}
