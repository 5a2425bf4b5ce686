package schema_test

import (
	"strings"
	"testing"

	"github.com/wahook/wahook/schema"
)

// Documents that were taken and should not be: trailing bytes, a negative
// code, a phone number id that is no id (300 hostile ids of 64 characters
// each made 300k numbers in stage 2).
func TestParseSendResultsRefuses(t *testing.T) {
	const good = `{"results":[{"phone_number_id":"106540352242922","status":"failed","error_code":130429,"timestamp":1773500000}]}`
	if _, bad, err := schema.ParseSendResults([]byte(good + "\n")); err != nil || len(bad) > 0 {
		t.Fatalf("good document: %v %v", err, bad)
	}
	for name, c := range map[string]struct{ body, path string }{
		"trailing garbage": {good + `{"x":1}`, "body"},
		"trailing text":    {good + " trailing", "body"},
		"negative code":    {strings.Replace(good, "130429", "-1", 1), "results[0].error_code"},
		"letters in id":    {strings.Replace(good, "106540352242922", "abc-"+strings.Repeat("x", 40), 1), "results[0].phone_number_id"},
		"id too long":      {strings.Replace(good, "106540352242922", strings.Repeat("1", 33), 1), "results[0].phone_number_id"},
		"dots in id":       {strings.Replace(good, "106540352242922", "1.2", 1), "results[0].phone_number_id"},
	} {
		_, bad, err := schema.ParseSendResults([]byte(c.body))
		var got string
		switch {
		case err != nil:
			got = err.(*schema.SendResultError).Path
		case len(bad) > 0:
			got = bad[0].Path
		}
		if got != c.path {
			t.Errorf("%s: refused at %q, want %q (err %v, bad %v)", name, got, c.path, err, bad)
		}
	}
}
