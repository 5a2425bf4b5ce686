package meta

import (
	"bytes"
	"encoding/json"
)

// RawField is one key of an object that the decoder does not know, with its
// value verbatim (docs/meta-webhooks.md 11.2 rule 1: keep everything).
type RawField struct {
	Key   string
	Value json.RawMessage
}

// Extras holds the unknown keys of one object, in the order they appeared.
type Extras []RawField

// Get returns the value of the unknown key k.
func (x Extras) Get(k string) (json.RawMessage, bool) {
	for i := len(x) - 1; i >= 0; i-- { // The last one wins, as in encoding/json.
		if x[i].Key == k {
			return x[i].Value, true
		}
	}
	return nil, false
}

// MarshalJSON renders the unknown keys as one JSON object, values verbatim,
// so that they can be stored in a single column. No keys render as {}.
func (x Extras) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range x {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.Value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnknownKey is one unknown key anywhere in a body, with its path (such as
// "entry[0].changes[1].value.statuses[0].pricing.pricing_tier") and its value
// verbatim.
type UnknownKey struct {
	Path  string
	Value json.RawMessage
}
