package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/wahook/wahook/schema"
)

const signaturePrefix = schema.SignaturePrefix

// Verifier checks X-Hub-Signature-256 against one app's secrets. Several
// secrets are accepted so that a secret can be rotated without refusing
// deliveries signed with the old one. It is safe for concurrent use.
type Verifier struct {
	keys []*hmacPool
}

type hmacPool struct{ pool sync.Pool }

// hmacState is a pooled HMAC with room for its sum: a sum written into a
// local array would escape through the hash.Hash interface, one allocation
// per request.
type hmacState struct {
	h   hash.Hash
	sum [sha256.Size]byte
}

func newHMACPool(secret []byte) *hmacPool {
	key := append([]byte(nil), secret...)
	p := &hmacPool{}
	p.pool.New = func() any { return &hmacState{h: hmac.New(sha256.New, key)} }
	return p
}

// NewVerifier returns a Verifier accepting a signature by any of secrets.
func NewVerifier(secrets ...[]byte) *Verifier {
	v := &Verifier{}
	for _, s := range secrets {
		v.keys = append(v.keys, newHMACPool(s))
	}
	return v
}

// parseSignature reads header, "sha256=" and 64 hex digits, into sum:
// ErrSignatureMissing or ErrSignatureMalformed when it cannot be a
// signature. The endpoint reads it before the body, so that a request
// without one holds no body memory (an unsigned slow upload held its
// announced size for the read's timeout, and a few dozen of them all of
// it), and checks the body against it once the body is here (verifySum).
func parseSignature(header []byte, sum *[sha256.Size]byte) error {
	if len(header) == 0 {
		return ErrSignatureMissing
	}
	if len(header) != len(signaturePrefix)+2*sha256.Size || string(header[:len(signaturePrefix)]) != signaturePrefix {
		return ErrSignatureMalformed
	}
	if _, err := hex.Decode(sum[:], header[len(signaturePrefix):]); err != nil {
		return ErrSignatureMalformed
	}
	return nil
}

// Verify checks header, the value of X-Hub-Signature-256, against body, the
// raw bytes as received. Meta signs its own serialisation (with \uXXXX
// escapes), so the body must never be decoded or re-encoded before this
// (docs/meta-webhooks.md 1.2). The comparison is constant-time. It returns nil,
// ErrSignatureMissing, ErrSignatureMalformed or ErrBadSignature.
func (v *Verifier) Verify(header, body []byte) error {
	var want [sha256.Size]byte
	if err := parseSignature(header, &want); err != nil {
		return err
	}
	return v.verifySum(&want, body)
}

// verifySum is Verify with the signature read already: nil or
// ErrBadSignature.
func (v *Verifier) verifySum(want *[sha256.Size]byte, body []byte) error {
	ok := 0
	// Every secret is tried, so that the time taken does not tell which one
	// matched.
	for _, k := range v.keys {
		st := k.pool.Get().(*hmacState)
		st.h.Reset()
		st.h.Write(body)
		ok |= subtle.ConstantTimeCompare(st.h.Sum(st.sum[:0]), want[:])
		k.pool.Put(st)
	}
	if ok != 1 {
		return ErrBadSignature
	}
	return nil
}
