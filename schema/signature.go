package schema

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// SignatureHeader is the header Meta signs each webhook POST with: "sha256="
// and the lowercase hex HMAC-SHA256 of the raw body under the app secret
// (docs/meta-webhooks.md 1.2).
const SignatureHeader = "X-Hub-Signature-256"

// SignaturePrefix starts every SignatureHeader value.
const SignaturePrefix = "sha256="

// Sign returns the SignatureHeader value of body under secret, as Meta
// computes it. The load generator and tests sign with it; ingest verifies.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return SignaturePrefix + hex.EncodeToString(m.Sum(nil))
}
