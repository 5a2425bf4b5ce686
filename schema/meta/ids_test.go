package meta_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/wahook/wahook/schema/meta"
)

func TestValidIDs(t *testing.T) {
	for _, c := range []struct {
		s           string
		id, display bool
	}{
		{"107655290331184", true, true},
		{"1", true, true},
		{"", false, false},
		{strings.Repeat("1", 32), true, false},
		{strings.Repeat("1", 33), false, false},
		{"+1 (555) 781-0001", false, true},
		{"15557810001.", false, true},
		{"1555x", false, false},
		{"wahook.events.>", false, false},
		{"+ ", false, false},
		{strings.Repeat("1", 20), true, true},
		{strings.Repeat("1", 21), true, false},
	} {
		if got := meta.ValidNumberID(c.s); got != c.id {
			t.Errorf("ValidNumberID(%q) = %v", c.s, got)
		}
		if got := meta.ValidDisplayNumber(c.s); got != c.display {
			t.Errorf("ValidDisplayNumber(%q) = %v", c.s, got)
		}
	}
}

// TestDecodeImpossibleIDs: a change whose metadata names an impossible
// number is an item error at the change, naming the key and the length,
// never the value; the other changes are decoded.
func TestDecodeImpossibleIDs(t *testing.T) {
	long := strings.Repeat("9", 5000)
	body := `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[
		{"field":"messages","value":{"metadata":{"display_phone_number":"15557810001","phone_number_id":"` + long + `"},"statuses":[{"id":"wamid.a","status":"sent","timestamp":"1","recipient_id":"1"}]}},
		{"field":"messages","value":{"metadata":{"display_phone_number":"1555.` + long + `","phone_number_id":"2"},"statuses":[{"id":"wamid.b","status":"sent","timestamp":"1","recipient_id":"1"}]}},
		{"field":"phone_number_quality_update","value":{"display_phone_number":"ab","event":"FLAGGED"}},
		{"field":"messages","value":{"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.c","status":"sent","timestamp":"1","recipient_id":"1"}]}}]}]}`
	p, err := meta.Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) != 3 {
		t.Fatalf("problems: %v", p.Problems)
	}
	for i, want := range []string{"value.metadata.phone_number_id", "value.metadata.display_phone_number", "value.display_phone_number"} {
		pr := p.Problems[i]
		if pr.Path != "entry[0].changes["+string(rune('0'+i))+"]" || !strings.Contains(pr.Error(), want) || !errors.Is(pr, meta.ErrBadItem) {
			t.Errorf("problem %d: %s", i, pr.Error())
		}
		if strings.Contains(pr.Error(), long[:100]) || len(pr.Error()) > 300 {
			t.Errorf("problem %d repeats the value: %.200s", i, pr.Error())
		}
	}
	if ids := p.PhoneNumberIDs(); len(ids) != 1 || ids[0] != "107655290331184" {
		t.Errorf("numbers decoded: %v", ids)
	}
}

// TestErrorWithoutCode: an error with no code, a null one or "" is told
// from Meta's code 0 (an auth error) by NoCode; 0 and "0" are code 0.
func TestErrorWithoutCode(t *testing.T) {
	for errJSON, noCode := range map[string]bool{
		`{"title":"x"}`: true, `{"code":null,"title":"x"}`: true, `{"code":"","title":"x"}`: true,
		`{"code":0,"title":"x"}`: false, `{"code":"0","title":"x"}`: false, `{"code":131048}`: false, `{"title":"x","code" : null }`: true,
	} {
		body := `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"15557810001","phone_number_id":"2"},` +
			`"statuses":[{"id":"wamid.a","status":"failed","timestamp":"1","recipient_id":"1","errors":[` + errJSON + `]}]}}]}]}`
		p, err := meta.Decode([]byte(body))
		if err != nil || len(p.Problems) > 0 {
			t.Fatalf("%s: %v %v", errJSON, err, p.Problems)
		}
		e := p.Entries[0].Changes[0].Messaging.Statuses[0].Errors[0]
		if e.NoCode != noCode || !noCode && e.Code != 0 && e.Code != 131048 {
			t.Errorf("%s: NoCode %v, code %d", errJSON, e.NoCode, e.Code)
		}
	}
}

// TestDecodeImpossibleWabaID: an entry's id of thousands of characters
// (a KV key of wahook_accounts too long for nats-server, which closed the
// connection that ingest shares) fails its entry, which becomes a dead
// letter with its path, and the entries beside it are decoded.
func TestDecodeImpossibleWabaID(t *testing.T) {
	long := strings.Repeat("9", 5000)
	change := `{"field":"account_update","value":{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}}`
	for _, id := range []string{`"` + long + `"`, long, `"1.2"`, `"a b"`} {
		body := `{"object":"whatsapp_business_account","entry":[{"id":` + id + `,"time":1,"changes":[` + change + `]},{"id":"104281907735512","time":1,"changes":[` + change + `]}]}`
		p, err := meta.Decode([]byte(body))
		if err != nil {
			t.Fatalf("%.20s: %v", id, err)
		}
		if len(p.Problems) != 1 || !strings.HasPrefix(p.Problems[0].Path, "entry[0]") || !strings.Contains(p.Problems[0].Error(), "WABA id") ||
			!errors.Is(p.Problems[0], meta.ErrBadItem) || strings.Contains(p.Problems[0].Error(), "99999999") {
			t.Errorf("%.20s: problems %v", id, p.Problems)
		}
		var ids []string
		for _, e := range p.Entries {
			ids = append(ids, e.ID)
		}
		if !slices.Contains(ids, "104281907735512") || slices.ContainsFunc(ids, func(s string) bool { return len(s) > meta.MaxWabaIDLen }) {
			t.Errorf("%.20s: entries decoded %q", id, ids)
		}
	}
	for _, ok := range []string{"104281907735512", "waba-1", strings.Repeat("7", meta.MaxWabaIDLen)} {
		if !meta.ValidWabaID(ok) {
			t.Errorf("%s refused", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", ">", strings.Repeat("7", meta.MaxWabaIDLen+1)} {
		if meta.ValidWabaID(bad) {
			t.Errorf("%q taken", bad)
		}
	}
}
