package meta

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fixturesDir holds the project's webhook test bodies and their facts.
const fixturesDir = "../../testdata/webhooks"

// fixtureSecret is the app secret the fixtures are signed with (fixtures
// README, testdata/webhooks/README.md, "expected.json").
const fixtureSecret = "wahook-fixture-app-secret"

// loadFixtures reads every fixture body. A missing folder fails the test: a
// silent skip would be a test that did not run (CONTRIBUTING.md, "Tests").
func loadFixtures(tb testing.TB) map[string][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(fixturesDir, "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		if filepath.Base(f) == "expected.json" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	if len(out) == 0 {
		tb.Fatalf("no fixtures in %s", fixturesDir)
	}
	return out
}

func loadFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, name))
	if err != nil {
		tb.Fatalf("read fixture: %v", err)
	}
	return b
}

// facts mirrors one object of expected.json. It is decoded with
// DisallowUnknownFields, so a fact added to expected.json fails this test
// until it is checked here.
type facts struct {
	Entries             int                 `json:"entries"`
	WABAIDs             []string            `json:"waba_ids"`
	Fields              map[string]int      `json:"fields"`
	PhoneNumberIDs      []string            `json:"phone_number_ids"`
	StatusEvents        int                 `json:"status_events"`
	Statuses            map[string]int      `json:"statuses"`
	StatusErrorCodes    map[string]int      `json:"status_error_codes"`
	StatusesWithPricing int                 `json:"statuses_with_pricing"`
	PricingTypes        map[string]int      `json:"pricing_types"`
	PricingCategories   map[string]int      `json:"pricing_categories"`
	GroupStatuses       int                 `json:"group_statuses"`
	ValueErrorCodes     map[string]int      `json:"value_error_codes"`
	InboundMessages     int                 `json:"inbound_messages"`
	InboundTypes        map[string]int      `json:"inbound_types"`
	InboundErrorCodes   map[string]int      `json:"inbound_error_codes"`
	InteractiveTypes    map[string]int      `json:"interactive_types"`
	CallStatuses        int                 `json:"call_statuses"`
	CallEvents          int                 `json:"call_events"`
	Echoes              int                 `json:"echoes"`
	HistoryMessages     int                 `json:"history_messages"`
	UserPreferences     [][2]string         `json:"user_preferences"`
	QualityEvents       []map[string]string `json:"quality_events"`
	ManagementEvents    []string            `json:"management_events"`
	XHubSignature256    string              `json:"x_hub_signature_256"`
	Bytes               int                 `json:"bytes"`
	Note                string              `json:"note"`
}

func loadExpected(t *testing.T) map[string]facts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, "expected.json"))
	if err != nil {
		t.Fatalf("read expected facts: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var exp map[string]facts
	if err := dec.Decode(&exp); err != nil {
		t.Fatalf("decode expected.json (a new fact needs a check here): %v", err)
	}
	return exp
}

// factsOf extracts from a decoded payload the facts that expected.json
// defines (testdata/webhooks/README.md, "expected.json"), using
// the package's iteration helpers.
func factsOf(t *testing.T, p *Payload) facts {
	t.Helper()
	f := facts{
		Entries:           len(p.Entries),
		Fields:            map[string]int{},
		Statuses:          map[string]int{},
		StatusErrorCodes:  map[string]int{},
		PricingTypes:      map[string]int{},
		PricingCategories: map[string]int{},
		ValueErrorCodes:   map[string]int{},
		InboundTypes:      map[string]int{},
		InboundErrorCodes: map[string]int{},
		InteractiveTypes:  map[string]int{},
		UserPreferences:   [][2]string{},
		QualityEvents:     []map[string]string{},
		ManagementEvents:  []string{},
		PhoneNumberIDs:    p.PhoneNumberIDs(),
	}
	for _, e := range p.Entries {
		f.WABAIDs = append(f.WABAIDs, e.ID)
	}
	for env := range p.Changes() {
		c := env.Change
		f.Fields[c.Field]++
		switch c.Field {
		case FieldMessages, FieldCalls, FieldUserPreferences, FieldSMBMessageEchoes, FieldHistory:
		case FieldPhoneNumberQualityUpdate:
			q := c.QualityUpdate
			ev := map[string]string{"display_phone_number": q.DisplayPhoneNumber, "event": q.Event}
			for k, v := range map[string]string{
				"current_limit": q.CurrentLimit, "old_limit": q.OldLimit,
				"max_daily_conversations_per_business": string(q.MaxDailyConversationsPerBusiness),
			} {
				if v != "" {
					ev[k] = v
				}
			}
			f.QualityEvents = append(f.QualityEvents, ev)
		default:
			f.ManagementEvents = append(f.ManagementEvents, managementLine(t, c))
		}
	}
	for r := range p.Statuses() {
		s := r.Item
		f.StatusEvents++
		f.Statuses[s.Status]++
		if s.Pricing != nil {
			f.StatusesWithPricing++
			f.PricingTypes[orNone(s.Pricing.Type)]++
			f.PricingCategories[orNone(s.Pricing.Category)]++
		}
		if s.IsGroup() {
			f.GroupStatuses++
		}
	}
	for r := range p.Errors() {
		code := strconv.FormatInt(int64(r.Item.Code), 10)
		switch {
		case r.Place == ErrorInStatus && r.Field() == FieldMessages:
			f.StatusErrorCodes[code]++
		case r.Place == ErrorInValue && r.Field() == FieldMessages, r.Place == ErrorInHistory:
			f.ValueErrorCodes[code]++
		case r.Place == ErrorInMessage && r.Field() == FieldMessages:
			f.InboundErrorCodes[code]++
		}
	}
	for r := range p.InboundMessages() {
		m := r.Item
		f.InboundMessages++
		f.InboundTypes[m.Type]++
		if m.Type == "interactive" && m.Interactive != nil {
			f.InteractiveTypes[m.Interactive.Type]++
		}
	}
	for range p.CallStatuses() {
		f.CallStatuses++
	}
	for range p.Calls() {
		f.CallEvents++
	}
	for range p.Echoes() {
		f.Echoes++
	}
	for range p.HistoryMessages() {
		f.HistoryMessages++
	}
	for r := range p.UserPreferences() {
		f.UserPreferences = append(f.UserPreferences, [2]string{r.Item.WaID, r.Item.Value})
	}
	return f
}

func orNone(s string) string {
	if s == "" {
		return "None" // expected.json's spelling of an absent key.
	}
	return s
}

// managementLine renders a management change the way expected.json does.
func managementLine(t *testing.T, c *Change) string {
	t.Helper()
	switch {
	case !c.Known():
		return c.Field + ": unknown field, kept raw"
	case c.TemplateStatus != nil:
		v := c.TemplateStatus
		return fmt.Sprintf("%s: %s template %s `%s` (%s)", c.Field, v.Event, v.TemplateID, v.Name, v.Language)
	case c.TemplateQuality != nil:
		v := c.TemplateQuality
		return fmt.Sprintf("%s: template %s %s -> %s", c.Field, v.TemplateID, v.PreviousQualityScore, v.NewQualityScore)
	case c.TemplateCategory != nil:
		v := c.TemplateCategory
		if v.Impending() {
			return fmt.Sprintf("%s: template %s impending %s -> %s at %d", c.Field, v.TemplateID, v.NewCategory, v.CorrectCategory, v.CategoryUpdateTimestamp)
		}
		return fmt.Sprintf("%s: template %s %s -> %s", c.Field, v.TemplateID, v.PreviousCategory, v.NewCategory)
	case c.AccountUpdate != nil:
		return c.Field + ": " + c.AccountUpdate.Event
	case c.CapabilityUpdate != nil:
		v := c.CapabilityUpdate
		var parts []string
		if v.MaxDailyConversationPerPhone != 0 {
			parts = append(parts, fmt.Sprintf("max_daily_conversation_per_phone=%d", v.MaxDailyConversationPerPhone))
		}
		if s := v.MaxDailyConversationsPerBusiness; s != "" {
			if n, ok := s.Int64(); ok {
				parts = append(parts, fmt.Sprintf("max_daily_conversations_per_business=%d", n))
			} else {
				parts = append(parts, fmt.Sprintf("max_daily_conversations_per_business=%q", s))
			}
		}
		if v.MaxPhoneNumbersPerBusiness != 0 {
			parts = append(parts, fmt.Sprintf("max_phone_numbers_per_business=%d", v.MaxPhoneNumbersPerBusiness))
		}
		if v.MaxPhoneNumbersPerWABA != 0 {
			parts = append(parts, fmt.Sprintf("max_phone_numbers_per_waba=%d", v.MaxPhoneNumbersPerWABA))
		}
		return c.Field + ": " + strings.Join(parts, ", ")
	}
	t.Errorf("no management line format for field %q", c.Field)
	return c.Field
}

// TestFixtures decodes every shared fixture and checks every fact of
// expected.json.
func TestFixtures(t *testing.T) {
	bodies := loadFixtures(t)
	exp := loadExpected(t)
	for _, name := range slices.Sorted(maps.Keys(exp)) {
		if _, ok := bodies[name]; !ok {
			t.Errorf("expected.json lists %s, but the file is missing", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(bodies)) {
		body := bodies[name]
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			want, ok := exp[name]
			if !ok {
				t.Fatalf("no expected facts for %s", name)
			}
			if len(body) != want.Bytes {
				t.Errorf("bytes: got %d, want %d", len(body), want.Bytes)
			}
			mac := hmac.New(sha256.New, []byte(fixtureSecret))
			mac.Write(body)
			if got := "sha256=" + hex.EncodeToString(mac.Sum(nil)); got != want.XHubSignature256 {
				t.Errorf("signature: got %s, want %s (the fixture bytes changed)", got, want.XHubSignature256)
			}
			p, err := Decode(body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(p.Problems) != 0 {
				t.Errorf("problems: got %v, want none", p.Problems)
			}
			got := factsOf(t, p)
			slices.Sort(got.PhoneNumberIDs)
			slices.Sort(want.PhoneNumberIDs)
			got.XHubSignature256, got.Bytes, got.Note = want.XHubSignature256, want.Bytes, want.Note
			normalize(&got)
			normalize(&want)
			gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
			for i := range gv.NumField() {
				name := gv.Type().Field(i).Tag.Get("json")
				if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
					t.Errorf("%s: got %v, want %v", name, g, w)
				}
			}
		})
	}
}

// normalize makes empty and nil collections compare equal.
func normalize(f *facts) {
	if len(f.PhoneNumberIDs) == 0 {
		f.PhoneNumberIDs = nil
	}
	if len(f.WABAIDs) == 0 {
		f.WABAIDs = nil
	}
}

// TestFixturesUnknownKeys checks that unknown keys at every level are kept
// verbatim, both in Payload.Unknown and on the struct they belong to, and
// that an unknown field keeps its value.
func TestFixturesUnknownKeys(t *testing.T) {
	p, err := Decode(loadFixture(t, "unknown_field_and_extra_keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"delivery_attempt":                                           `2`,
		"entry[0].region_hint":                                       `"eu-west"`,
		"entry[0].changes[1].value.api_version":                      `"v27.0"`,
		"entry[0].changes[1].value.statuses[0].recipient_logical_id": `"lg.771203"`,
		"entry[0].changes[1].value.statuses[0].delivery_channel":     `"primary"`,
		"entry[0].changes[1].value.statuses[0].pricing.pricing_tier": `"0:250000"`,
	}
	got := map[string]string{}
	for _, u := range p.Unknown {
		got[u.Path] = string(u.Value)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Unknown: got %v, want %v", got, want)
	}

	checks := []struct {
		name  string
		extra Extras
		key   string
		want  string
	}{
		{"root", p.Extra, "delivery_attempt", `2`},
		{"entry", p.Entries[0].Extra, "region_hint", `"eu-west"`},
		{"value", p.Entries[0].Changes[1].Messaging.Extra, "api_version", `"v27.0"`},
		{"status", p.Entries[0].Changes[1].Messaging.Statuses[0].Extra, "recipient_logical_id", `"lg.771203"`},
		{"status", p.Entries[0].Changes[1].Messaging.Statuses[0].Extra, "delivery_channel", `"primary"`},
		{"pricing", p.Entries[0].Changes[1].Messaging.Statuses[0].Pricing.Extra, "pricing_tier", `"0:250000"`},
	}
	for _, c := range checks {
		v, ok := c.extra.Get(c.key)
		if !ok || string(v) != c.want {
			t.Errorf("%s Extra[%s]: got %s (present %v), want %s", c.name, c.key, v, ok, c.want)
		}
	}
	ej, err := json.Marshal(p.Entries[0].Changes[1].Messaging.Statuses[0].Extra)
	if err != nil || string(ej) != `{"recipient_logical_id":"lg.771203","delivery_channel":"primary"}` {
		t.Errorf("status Extra as JSON: got %s (%v)", ej, err)
	}

	// Each item carries all unknown keys within it, as one JSON object ready
	// for an extra column.
	items := []struct {
		name    string
		unknown Extras
		want    string
	}{
		{"status", p.Entries[0].Changes[1].Messaging.Statuses[0].Unknown,
			`{"pricing.pricing_tier":"0:250000","recipient_logical_id":"lg.771203","delivery_channel":"primary"}`},
		{"change", p.Entries[0].Changes[1].Unknown,
			`{"value.statuses[0].pricing.pricing_tier":"0:250000","value.statuses[0].recipient_logical_id":"lg.771203",` +
				`"value.statuses[0].delivery_channel":"primary","value.api_version":"v27.0"}`},
		{"unknown field's change", p.Entries[0].Changes[0].Unknown, `{}`},
	}
	for _, it := range items {
		if got, err := json.Marshal(it.unknown); err != nil || string(got) != it.want {
			t.Errorf("%s Unknown: got %s (%v), want %s", it.name, got, err, it.want)
		}
	}

	c := p.Entries[0].Changes[0]
	if c.Known() || c.Field != "conversation_health_update" {
		t.Errorf("unknown field: got field %q known %v, want conversation_health_update unknown", c.Field, c.Known())
	}
	var v map[string]any
	if err := json.Unmarshal(c.Value, &v); err != nil || v["health_score"] != 0.82 {
		t.Errorf("unknown field value kept raw: got %s (%v)", c.Value, err)
	}
	if !bytes.HasPrefix(c.Value, []byte("{")) || !bytes.HasSuffix(c.Value, []byte("}")) {
		t.Errorf("unknown field value: got %q, want the object's bytes", c.Value)
	}
}

// TestFixturesVerbatim checks that every kept byte range is exactly what the
// body holds: each change's value, each item's Raw, and that the typed view
// of every fixture matches what encoding/json makes of the same bytes.
func TestFixturesVerbatim(t *testing.T) {
	for name, body := range loadFixtures(t) {
		p, err := Decode(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var generic struct {
			Entry []struct {
				Changes []struct {
					Value json.RawMessage `json:"value"`
				} `json:"changes"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(body, &generic); err != nil {
			t.Fatal(err)
		}
		for env := range p.Changes() {
			want := generic.Entry[env.EntryIndex].Changes[env.ChangeIndex].Value
			if !bytes.Equal(env.Change.Value, want) {
				t.Errorf("%s %s value: got %q, want %q", name, env.Path(), env.Change.Value, want)
			}
		}
		for r := range p.Statuses() {
			if !json.Valid(r.Item.Raw) || r.Item.Raw[0] != '{' {
				t.Errorf("%s status raw: got %q, want an object", name, r.Item.Raw)
			}
		}
		for r := range p.InboundMessages() {
			if !json.Valid(r.Item.Raw) || !bytes.Contains(r.Item.Raw, []byte(r.Item.ID)) {
				t.Errorf("%s message raw: got %q, want the message's object", name, r.Item.Raw)
			}
		}
	}
}
