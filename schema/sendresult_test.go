package schema_test

import (
	"strings"
	"testing"

	"github.com/wahook/wahook/schema"
)

// A campaign (biz_opaque_callback_data) is up to Meta's 512 characters, of
// any width: one of 512 two-byte characters was refused as over 512 bytes,
// while the query API filters by campaigns up to 2,048 bytes.
func TestSendResultCampaignCharacters(t *testing.T) {
	doc := `{"results":[{"phone_number_id":"106540352242922","status":"accepted","message_id":"wamid.c512","campaign":"` + strings.Repeat("é", 512) + `","timestamp":1773500000}]}`
	got, bad, err := schema.ParseSendResults([]byte(doc))
	if err != nil || len(bad) > 0 || len(got.Results) != 1 || got.Results[0].Campaign != strings.Repeat("é", 512) {
		t.Fatalf("a campaign of 512 characters (1,024 bytes): %v %v", err, bad)
	}
}

// Documents that were taken and should not be: trailing bytes, a negative
// code, a phone number id that is no id (300 hostile ids of 64 characters
// each made 300k numbers in stage 2).
func TestParseSendResultsRefuses(t *testing.T) {
	const good = `{"results":[{"phone_number_id":"106540352242922","status":"failed","error_code":130429,"timestamp":1773500000}]}`
	if _, bad, err := schema.ParseSendResults([]byte(good + "\n")); err != nil || len(bad) > 0 {
		t.Fatalf("good document: %v %v", err, bad)
	}
	for name, c := range map[string]struct{ body, path string }{
		"trailing garbage":           {good + `{"x":1}`, "body"},
		"trailing text":              {good + " trailing", "body"},
		"negative code":              {strings.Replace(good, "130429", "-1", 1), "results[0].error_code"},
		"letters in id":              {strings.Replace(good, "106540352242922", "abc-"+strings.Repeat("x", 40), 1), "results[0].phone_number_id"},
		"id too long":                {strings.Replace(good, "106540352242922", strings.Repeat("1", 33), 1), "results[0].phone_number_id"},
		"dots in id":                 {strings.Replace(good, "106540352242922", "1.2", 1), "results[0].phone_number_id"},
		"campaign of 513 characters": {strings.Replace(good, `"timestamp"`, `"campaign":"`+strings.Repeat("é", 513)+`","timestamp"`, 1), "results[0]"},
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
