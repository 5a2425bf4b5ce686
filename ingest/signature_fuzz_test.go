package ingest_test

import (
	"testing"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
)

// FuzzVerify: Verify never panics, and accepts exactly the signatures that
// one of the app's secrets produces.
func FuzzVerify(f *testing.F) {
	secrets := [][]byte{[]byte("first-secret"), []byte("second-secret")}
	v := ingest.NewVerifier(secrets...)
	f.Add([]byte(schema.Sign(secrets[0], []byte(`{"a":1}`))), []byte(`{"a":1}`))
	f.Add([]byte(schema.Sign(secrets[1], []byte(`{"emoji":"\ud83d\ude00"}`))), []byte(`{"emoji":"\ud83d\ude00"}`))
	f.Add([]byte("sha256="), []byte{})
	f.Add([]byte("sha1=abc"), []byte("x"))
	f.Fuzz(func(t *testing.T, header, body []byte) {
		err := v.Verify(header, body)
		valid := string(header) == schema.Sign(secrets[0], body) || string(header) == schema.Sign(secrets[1], body)
		if (err == nil) != valid {
			t.Fatalf("Verify(%q) = %v, but the header is a valid signature: %v", header, err, valid)
		}
	})
}
