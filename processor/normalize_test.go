package processor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// The webhook test bodies (testdata/webhooks) with their
// expected facts, and the decoder's own test bodies for the shapes they do
// not cover.
const (
	normFixtures = "../testdata/webhooks"
	normTestdata = "../schema/meta/testdata"
)

var normKey = []byte("normalize-test-key")

func normSource(sec int) schema.Source {
	return schema.Source{App: "test", ReceivedAt: time.Date(2026, 3, 14, 12, 0, sec, 0, time.UTC), RawSeq: uint64(sec + 1)}
}

func normalizeBody(n *Normalizer, body []byte, src schema.Source) schema.Rows {
	var rows schema.Rows
	n.Normalize(body, src, schema.RawMsgID(body), &rows)
	return rows
}

func newTestNormalizer() (*Normalizer, *schema.Hasher) {
	h := schema.NewHasher(normKey)
	return NewNormalizer(h), h
}

func readBody(t testing.TB, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s (the test bodies are in testdata/webhooks): %v", name, err)
	}
	return b
}

// normFacts are the facts of one fixture in expected.json.
type normFacts struct {
	Entries             int                 `json:"entries"`
	WabaIDs             []string            `json:"waba_ids"`
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
	Signature           string              `json:"x_hub_signature_256"`
}

func loadFacts(t testing.TB) map[string]normFacts {
	t.Helper()
	var facts map[string]normFacts
	if err := json.Unmarshal(readBody(t, normFixtures, "expected.json"), &facts); err != nil {
		t.Fatal(err)
	}
	if len(facts) != 40 {
		t.Fatalf("expected.json has %d fixtures, want the 40 of testdata/webhooks", len(facts))
	}
	return facts
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// testdataNames lists the decoder's test bodies.
func testdataNames(t testing.TB) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(normTestdata, "*.json"))
	if err != nil || len(names) == 0 {
		t.Fatalf("decoder test bodies: %v (%d)", err, len(names))
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

// multiset counts strings.
type multiset map[string]int

func countOf[T any](rows []T, key func(*T) (string, bool)) multiset {
	c := multiset{}
	for i := range rows {
		if k, ok := key(&rows[i]); ok {
			c[k]++
		}
	}
	return c
}

func sameCount(t *testing.T, what string, got multiset, want map[string]int) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(map[string]int(got), want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func codesByOrigin(rows []schema.ErrorRow, origins ...string) multiset {
	return countOf(rows, func(e *schema.ErrorRow) (string, bool) {
		return fmt.Sprint(e.Code), slices.Contains(origins, e.Origin)
	})
}

func hasPricing(r *schema.StatusRow) bool {
	return r.PricingBillable != -1 || r.PricingModel != "" || r.PricingType != "" || r.PricingCategory != ""
}

func orNone(s string) string {
	if s == "" {
		return "None"
	}
	return s
}

// TestNormalizeFixtures checks the rows of every test body against
// every fact of expected.json that rows can show.
func TestNormalizeFixtures(t *testing.T) {
	facts := loadFacts(t)
	for _, name := range sortedNames(facts) {
		f := facts[name]
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			body := readBody(t, normFixtures, name)
			n, h := newTestNormalizer()
			rows := normalizeBody(n, body, normSource(0))
			if len(rows.DeadLetters) != 0 {
				t.Fatalf("dead letters: %+v", rows.DeadLetters)
			}

			// Statuses: count, values, pricing, groups, errors.
			if len(rows.Statuses) != f.StatusEvents {
				t.Errorf("status rows: got %d, want %d", len(rows.Statuses), f.StatusEvents)
			}
			sameCount(t, "statuses", countOf(rows.Statuses, func(r *schema.StatusRow) (string, bool) { return r.Status, true }), f.Statuses)
			sameCount(t, "pricing types", countOf(rows.Statuses, func(r *schema.StatusRow) (string, bool) {
				return orNone(r.PricingType), hasPricing(r)
			}), f.PricingTypes)
			sameCount(t, "pricing categories", countOf(rows.Statuses, func(r *schema.StatusRow) (string, bool) {
				return orNone(r.PricingCategory), hasPricing(r)
			}), f.PricingCategories)
			if got := len(countRows(rows.Statuses, hasPricing)); got != f.StatusesWithPricing {
				t.Errorf("statuses with pricing: got %d, want %d", got, f.StatusesWithPricing)
			}
			group := countRows(rows.Statuses, func(r *schema.StatusRow) bool { return r.RecipientType == meta.RecipientTypeGroup })
			if len(group) != f.GroupStatuses {
				t.Errorf("group statuses: got %d, want %d", len(group), f.GroupStatuses)
			}
			participants := map[string]bool{}
			for _, r := range group {
				if r.GroupID == "" || r.ParticipantHash == "" || r.RecipientHash != "" {
					t.Errorf("group status %s: group %q participant %q recipient %q", r.MessageID, r.GroupID, r.ParticipantHash, r.RecipientHash)
				}
				participants[r.ParticipantHash] = true
			}
			for _, r := range rows.Statuses {
				if r.RecipientType == "" && r.RecipientHash == "" {
					t.Errorf("status %s has no recipient hash", r.MessageID)
				}
			}
			sameCount(t, "status error codes", codesByOrigin(rows.Errors, originStatus), f.StatusErrorCodes)
			sameCount(t, "status rows' error codes", statusCodes(rows.Statuses), f.StatusErrorCodes)
			sameCount(t, "value error codes", codesByOrigin(rows.Errors, originValue, originHistory), f.ValueErrorCodes)
			sameCount(t, "inbound error codes", codesByOrigin(rows.Errors, originInbound), f.InboundErrorCodes)
			if c := codesByOrigin(rows.Errors, originCall); len(c) != 0 {
				t.Errorf("call errors in a fixture without any: %v", c)
			}

			// Inbound messages.
			if len(rows.Inbound) != f.InboundMessages {
				t.Errorf("inbound rows: got %d, want %d", len(rows.Inbound), f.InboundMessages)
			}
			sameCount(t, "inbound types", countOf(rows.Inbound, func(r *schema.InboundRow) (string, bool) { return r.Type, true }), f.InboundTypes)
			sameCount(t, "interactive types", countOf(rows.Inbound, func(r *schema.InboundRow) (string, bool) {
				return r.InteractiveType, r.Type == "interactive"
			}), f.InteractiveTypes)
			for _, r := range rows.Inbound {
				if r.FromHash == "" {
					t.Errorf("inbound %s has no sender hash", r.MessageID)
				}
			}

			// Quality events: kind number, display number, event, limits.
			quality := countRows(rows.Management, func(r *schema.ManagementRow) bool { return r.Field == meta.FieldPhoneNumberQualityUpdate })
			if len(quality) != len(f.QualityEvents) {
				t.Errorf("quality rows: got %d, want %d", len(quality), len(f.QualityEvents))
			} else {
				for i, q := range f.QualityEvents {
					checkQuality(t, quality[i], q)
				}
			}

			// Template, account and unknown-field events, in the README's words.
			var events []string
			for _, r := range rows.Management {
				switch r.Field {
				case meta.FieldPhoneNumberQualityUpdate, meta.FieldCalls, meta.FieldUserPreferences, FieldUnknownKeys:
					continue
				}
				events = append(events, mgmtSummary(t, r))
			}
			if !equalSorted(events, f.ManagementEvents) {
				t.Errorf("management events:\n got %q\nwant %q", events, f.ManagementEvents)
			}
			checkRawFields(t, body, rows.Management)

			// User preferences, as (user hash, value).
			var prefs [][2]string
			for _, r := range rows.Management {
				if r.Kind == schema.KindPreference {
					prefs = append(prefs, [2]string{r.SubjectID, r.Event})
				}
			}
			var wantPrefs [][2]string
			for _, p := range f.UserPreferences {
				wantPrefs = append(wantPrefs, [2]string{h.Hash(p[0]), p[1]})
			}
			if !reflect.DeepEqual(prefs, wantPrefs) {
				t.Errorf("user preferences: got %v, want %v", prefs, wantPrefs)
			}

			// Calls: rows of kind call, never status rows.
			var callStatuses, callEvents int
			for _, r := range rows.Management {
				if r.Kind != schema.KindCall {
					continue
				}
				if r.Event == "connect" || r.Event == "terminate" {
					callEvents++
				} else {
					callStatuses++
				}
			}
			if callStatuses != f.CallStatuses || callEvents != f.CallEvents {
				t.Errorf("call rows: %d statuses and %d events, want %d and %d", callStatuses, callEvents, f.CallStatuses, f.CallEvents)
			}
			if n := len(countRows(rows.Management, func(r *schema.ManagementRow) bool { return r.Field == meta.FieldSMBMessageEchoes })); n != f.Echoes {
				t.Errorf("echo rows: got %d, want %d", n, f.Echoes)
			}

			// Fields that are one event per change.
			for field, want := range f.Fields {
				switch field {
				case meta.FieldMessages, meta.FieldCalls, meta.FieldUserPreferences:
					continue
				}
				if got := len(countRows(rows.Management, func(r *schema.ManagementRow) bool { return r.Field == field })); got != want {
					t.Errorf("rows of field %s: got %d, want %d", field, got, want)
				}
			}

			// Numbers and WABAs the rows carry.
			pn, wabas := map[string]bool{}, map[string]bool{}
			forEachRow(&rows, func(number, waba string) {
				if number != "" {
					pn[number] = true
				}
				if waba != "" {
					wabas[waba] = true
				}
			})
			if !sameSet(pn, f.PhoneNumberIDs) {
				t.Errorf("phone number ids: got %v, want %v", setKeys(pn), f.PhoneNumberIDs)
			}
			if !sameSet(wabas, f.WabaIDs) {
				t.Errorf("WABA ids: got %v, want %v", setKeys(wabas), f.WabaIDs)
			}

			checkUnknownKeysKept(t, body, &rows)
			checkDistinctIDs(t, &rows)
			checkPrivacy(t, body, &rows)
		})
	}
}

func countRows[T any](rows []T, keep func(*T) bool) []*T {
	var out []*T
	for i := range rows {
		if keep(&rows[i]) {
			out = append(out, &rows[i])
		}
	}
	return out
}

func statusCodes(rows []schema.StatusRow) multiset {
	c := multiset{}
	for _, r := range rows {
		for _, code := range r.ErrorCodes {
			c[fmt.Sprint(code)]++
		}
	}
	return c
}

func equalSorted(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func sameSet(got map[string]bool, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}

func setKeys(m map[string]bool) []string { return sortedNames(m) }

// forEachRow calls f with the number and WABA of every event row.
func forEachRow(rows *schema.Rows, f func(number, waba string)) {
	for _, r := range rows.Statuses {
		f(r.PhoneNumberID, r.WabaID)
	}
	for _, r := range rows.Inbound {
		f(r.PhoneNumberID, r.WabaID)
	}
	for _, r := range rows.Errors {
		f(r.PhoneNumberID, r.WabaID)
	}
	for _, r := range rows.Management {
		f(r.PhoneNumberID, r.WabaID)
	}
}

func checkQuality(t *testing.T, r *schema.ManagementRow, q map[string]string) {
	t.Helper()
	if r.Kind != schema.KindNumber || r.DisplayPhoneNumber != q["display_phone_number"] || r.Event != q["event"] {
		t.Errorf("quality row: kind %s number %s event %s, want number %s event %s", r.Kind, r.DisplayPhoneNumber, r.Event,
			q["display_phone_number"], q["event"])
	}
	current := q["current_limit"]
	if current == "" {
		current = q["max_daily_conversations_per_business"]
	}
	if r.OldValue != q["old_limit"] || r.NewValue != current || r.SubjectName != q["max_daily_conversations_per_business"] {
		t.Errorf("quality %s limits: old %q new %q business %q, want %v", r.Event, r.OldValue, r.NewValue, r.SubjectName, q)
	}
	// The limit keys present in the kept value are exactly those expected.
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.Raw), &raw); err != nil {
		t.Fatalf("quality raw: %v", err)
	}
	for _, k := range []string{"current_limit", "old_limit", "max_daily_conversations_per_business"} {
		got, _ := raw[k].(string)
		if got != q[k] {
			t.Errorf("quality %s raw %s: got %q, want %q", r.Event, k, got, q[k])
		}
	}
}

// mgmtSummary renders a management row as the fixture README's
// "management lines" do.
func mgmtSummary(t *testing.T, r schema.ManagementRow) string {
	t.Helper()
	var raw map[string]any
	if r.Raw != "" {
		dec := json.NewDecoder(strings.NewReader(r.Raw))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			t.Errorf("%s raw: %v", r.Field, err)
		}
	}
	want := func(k schema.Kind) {
		if r.Kind != k {
			t.Errorf("%s: kind %s, want %s", r.Field, r.Kind, k)
		}
	}
	switch r.Field {
	case meta.FieldMessageTemplateStatusUpdate:
		want(schema.KindTemplate)
		return fmt.Sprintf("%s: %s template %s `%s` (%s)", r.Field, r.Event, r.SubjectID, r.SubjectName, raw["message_template_language"])
	case meta.FieldMessageTemplateQualityUpdate:
		want(schema.KindTemplate)
		return fmt.Sprintf("%s: template %s %s -> %s", r.Field, r.SubjectID, r.OldValue, r.NewValue)
	case meta.FieldTemplateCategoryUpdate:
		want(schema.KindTemplate)
		if r.Event == "CATEGORY_UPDATE_IMPENDING" {
			return fmt.Sprintf("%s: template %s impending %s -> %s at %s", r.Field, r.SubjectID, r.OldValue, r.NewValue, raw["category_update_timestamp"])
		}
		return fmt.Sprintf("%s: template %s %s -> %s", r.Field, r.SubjectID, r.OldValue, r.NewValue)
	case meta.FieldAccountUpdate:
		want(schema.KindAccount)
		return fmt.Sprintf("%s: %s", r.Field, r.Event)
	case meta.FieldBusinessCapabilityUpdate:
		want(schema.KindAccount)
		return r.Field + ": " + orderedPairs(t, r.Raw)
	}
	if r.Kind == schema.KindOther && r.Event == "RAW" {
		return r.Field + ": unknown field, kept raw"
	}
	return fmt.Sprintf("%s: unexpected row %+v", r.Field, r)
}

// orderedPairs renders a JSON object as k=v, ... in its order, values as
// JSON.
func orderedPairs(t *testing.T, raw string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s=%s", k, v))
	}
	return strings.Join(parts, ", ")
}

// changeValues returns the values of a body's changes by field, as bytes
// taken by encoding/json, not by the decoder under test.
func changeValues(t *testing.T, body []byte) map[string][]json.RawMessage {
	t.Helper()
	var env struct {
		Entry []struct {
			Changes []struct {
				Field string          `json:"field"`
				Value json.RawMessage `json:"value"`
			} `json:"changes"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	out := map[string][]json.RawMessage{}
	for _, e := range env.Entry {
		for _, c := range e.Changes {
			out[c.Field] = append(out[c.Field], c.Value)
		}
	}
	return out
}

// checkRawFields: a field kept raw is kept byte for byte.
func checkRawFields(t *testing.T, body []byte, rows []schema.ManagementRow) {
	t.Helper()
	values := changeValues(t, body)
	for _, r := range rows {
		if r.Event != "RAW" {
			continue
		}
		found := false
		for _, v := range values[r.Field] {
			found = found || string(v) == r.Raw
		}
		if !found {
			t.Errorf("field %s: raw %q is not the value as received", r.Field, r.Raw)
		}
	}
}

// checkUnknownKeysKept: every unknown key of the body is in a row: in a
// status's or inbound message's Extra, in the body's unknown-keys row, or
// inside the raw value of a management row.
func checkUnknownKeysKept(t *testing.T, body []byte, rows *schema.Rows) {
	t.Helper()
	p, err := meta.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	envelope := map[string]json.RawMessage{}
	var extras []map[string]json.RawMessage
	var withheld []map[string]json.RawMessage // inbound: content keys kept as null
	var raws []string
	for _, r := range rows.Management {
		if r.Field == FieldUnknownKeys {
			if err := json.Unmarshal([]byte(r.Raw), &envelope); err != nil {
				t.Fatalf("unknown keys row: %v", err)
			}
			continue
		}
		raws = append(raws, r.Raw)
	}
	parse := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if s != "" {
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				t.Fatalf("extra %q: %v", s, err)
			}
		}
		return m
	}
	for _, r := range rows.Statuses {
		extras = append(extras, parse(r.Extra))
	}
	for _, r := range rows.Inbound {
		extras = append(extras, parse(r.Extra))
		withheld = append(withheld, parse(r.Extra))
	}
	for _, u := range p.Unknown {
		want := keptValue(u.Path, u.Value)
		if v, ok := envelope[u.Path]; ok && bytes.Equal(v, want) {
			continue
		}
		found := false
		for _, m := range extras {
			for k, v := range m {
				if strings.HasSuffix(u.Path, "."+k) && bytes.Equal(v, want) {
					found = true
				}
			}
		}
		for _, m := range withheld {
			for k, v := range m {
				if strings.HasSuffix(u.Path, "."+k) && string(v) == "null" && strings.Contains(u.Path, ".messages[") {
					found = true
				}
			}
		}
		for _, raw := range raws {
			found = found || strings.Contains(raw, string(u.Value)) && strings.Contains(raw, `"`+lastKey(u.Path)+`"`)
		}
		if !found {
			t.Errorf("unknown key %s = %s is in no row", u.Path, u.Value)
		}
	}
}

// keptValue is the value of the unknown key at path as rows keep it: as
// received, but for end users' numbers, as keyed hashes (with the test
// normalizer's key).
func keptValue(path string, v json.RawMessage) json.RawMessage {
	n, _ := newTestNormalizer()
	obj, err := json.Marshal(map[string]json.RawMessage{lastKey(path): v})
	if err != nil {
		return v
	}
	h, changed := (&run{n: n}).scrub(string(obj))
	if !changed {
		return v
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(h), &m) != nil {
		return v
	}
	return m[lastKey(path)]
}

func lastKey(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// TestNormalizeUnknownKeys: the forward-compatibility fixture's unknown keys
// at root, entry, value, status and pricing level each land where the
// Normalizer's doc says, verbatim.
func TestNormalizeUnknownKeys(t *testing.T) {
	n, _ := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normFixtures, "unknown_field_and_extra_keys.json"), normSource(0))
	var envelope map[string]json.RawMessage
	for _, r := range rows.Management {
		if r.Field == FieldUnknownKeys {
			if err := json.Unmarshal([]byte(r.Raw), &envelope); err != nil {
				t.Fatal(err)
			}
			if r.Kind != schema.KindOther {
				t.Errorf("unknown keys row kind %s", r.Kind)
			}
		}
	}
	want := map[string]string{
		"delivery_attempt":                      `2`,
		"entry[0].region_hint":                  `"eu-west"`,
		"entry[0].changes[1].value.api_version": `"v27.0"`,
	}
	for k, v := range want {
		if string(envelope[k]) != v {
			t.Errorf("unknown keys row %s: got %s, want %s (row %v)", k, envelope[k], v, envelope)
		}
	}
	if len(envelope) != len(want) {
		t.Errorf("unknown keys row holds %v, want only the envelope's keys %v", envelope, want)
	}
	if len(rows.Statuses) != 1 {
		t.Fatalf("statuses: %d", len(rows.Statuses))
	}
	var extra map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rows.Statuses[0].Extra), &extra); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"recipient_logical_id": `"lg.771203"`, "delivery_channel": `"primary"`, "pricing.pricing_tier": `"0:250000"`,
	} {
		if string(extra[k]) != v {
			t.Errorf("status extra %s: got %s, want %s", k, extra[k], v)
		}
	}
	// The unknown field: verbatim, and its display number reaches the id
	// learned from the messages change of the same body.
	for _, r := range rows.Management {
		if r.Field == "conversation_health_update" {
			if r.DisplayPhoneNumber != "15557810001" || r.PhoneNumberID != "107655290331184" {
				t.Errorf("unknown field number: display %q id %q", r.DisplayPhoneNumber, r.PhoneNumberID)
			}
			if !strings.Contains(r.Raw, `"health_score": 0.82`) || !strings.Contains(r.Raw, `"end": 1781517600`) {
				t.Errorf("unknown field raw not verbatim: %s", r.Raw)
			}
		}
	}
}

// eventIDs returns the ids of the event rows of rows (errors apart).
func eventIDs(rows *schema.Rows) []string {
	var ids []string
	for _, r := range rows.Statuses {
		ids = append(ids, r.EventID)
	}
	for _, r := range rows.Inbound {
		ids = append(ids, r.EventID)
	}
	for _, r := range rows.Management {
		ids = append(ids, r.EventID)
	}
	return ids
}

// checkDistinctIDs: within a body every event has its own id, every error
// occurrence its own (id, index), and an error's id is its owner's: a row
// of the body, or for value-level errors an owner of their own.
func checkDistinctIDs(t testing.TB, rows *schema.Rows) {
	t.Helper()
	seen := map[string]bool{}
	for _, id := range eventIDs(rows) {
		if len(id) != 32 {
			t.Errorf("event id %q is not 16 bytes of hex", id)
		}
		if seen[id] {
			t.Errorf("event id %s twice in one body", id)
		}
		seen[id] = true
	}
	type occ struct {
		id string
		i  uint16
	}
	errs := map[occ]bool{}
	for _, e := range rows.Errors {
		k := occ{e.EventID, e.Index}
		if errs[k] {
			t.Errorf("error %s[%d] twice in one body", e.EventID, e.Index)
		}
		errs[k] = true
		if !seen[e.EventID] && e.Origin != originValue {
			t.Errorf("error %s[%d] (origin %s) has no owner row", e.EventID, e.Index, e.Origin)
		}
		if seen[e.EventID] && e.Origin == originValue {
			t.Errorf("value-level error %s shares an event's id", e.EventID)
		}
	}
}

// TestNormalizeIDsStable: ids come from what the events are. The same body
// normalized twice, received at another time by another app, gives the same
// ids; so does each event inside another POST (other bytes, other
// neighbours, another place in the body).
func TestNormalizeIDsStable(t *testing.T) {
	facts := loadFacts(t)
	names := sortedNames(facts)
	// Value-level errors received without an entry.time take the minute of
	// receipt (TestValueErrorsByMinute): they are compared only between
	// sources received within one minute; sources of app "other" leave
	// them out.
	idsOf := func(body []byte, src schema.Source) []string {
		n, _ := newTestNormalizer()
		rows := normalizeBody(n, body, src)
		ids := eventIDs(&rows)
		for _, e := range rows.Errors {
			if e.Origin == originValue && src.App == "other" {
				continue
			}
			ids = append(ids, fmt.Sprintf("%s[%d]", e.EventID, e.Index))
		}
		// The unknown-keys row is about the POST itself.
		for _, r := range rows.Management {
			if r.Field == FieldUnknownKeys {
				ids = slices.DeleteFunc(ids, func(id string) bool { return id == r.EventID })
			}
		}
		sort.Strings(ids)
		return ids
	}
	other := schema.Source{App: "other", ReceivedAt: time.Date(2026, 9, 1, 8, 30, 15, 0, time.UTC), RawSeq: 999}
	sameMinute := schema.Source{App: "again", ReceivedAt: normSource(0).ReceivedAt.Add(59 * time.Second), RawSeq: 998}
	for i, name := range names {
		body := readBody(t, normFixtures, name)
		a := idsOf(body, normSource(0))
		if len(a) == 0 {
			t.Errorf("%s: no ids", name)
			continue
		}
		if b := idsOf(body, sameMinute); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: ids differ between two runs within a minute:\n%v\n%v", name, a, b)
		}
		a = idsOf(body, schema.Source{App: "other", ReceivedAt: normSource(0).ReceivedAt}) // without the value-level errors
		if b := idsOf(body, other); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: ids differ between two runs:\n%v\n%v", name, a, b)
		}
		// Another POST: other bytes (compacted, a trailing newline).
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Fatal(err)
		}
		compact.WriteByte('\n')
		if b := idsOf(compact.Bytes(), other); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: ids differ inside a compacted POST:\n%v\n%v", name, a, b)
		}
		// Another POST that batches it after the entries of the next
		// fixture: every id of both is in it.
		next := readBody(t, normFixtures, names[(i+1)%len(names)])
		batch := batchBodies(t, next, body)
		got := idsOf(batch, other)
		for _, id := range append(a, idsOf(next, other)...) {
			if _, ok := slices.BinarySearch(got, id); !ok {
				t.Errorf("%s: id %s is not in a POST that batches it with %s", name, id, names[(i+1)%len(names)])
			}
		}
	}
}

// batchBodies returns one body holding the entries of every body, in order.
func batchBodies(t testing.TB, bodies ...[]byte) []byte {
	t.Helper()
	var entries []json.RawMessage
	for _, b := range bodies {
		var env struct {
			Entry []json.RawMessage `json:"entry"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, env.Entry...)
	}
	out, err := json.Marshal(map[string]any{"object": meta.ObjectWhatsAppBusinessAccount, "entry": entries})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNormalizeGroupStatuses: the three statuses of one group message stay
// three events; the two delivered ones share wamid and status.
func TestNormalizeGroupStatuses(t *testing.T) {
	n, h := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normFixtures, "group_message_and_statuses.json"), normSource(0))
	ids := map[string]bool{}
	byParticipant := map[string][]string{}
	for _, r := range rows.Statuses {
		ids[r.EventID] = true
		byParticipant[r.ParticipantHash] = append(byParticipant[r.ParticipantHash], r.Status)
	}
	if len(ids) != 3 {
		t.Errorf("group statuses: %d distinct ids, want 3", len(ids))
	}
	want := map[string][]string{h.Hash("16505550142"): {"delivered", "read"}, h.Hash("16505550187"): {"delivered"}}
	if !reflect.DeepEqual(byParticipant, want) {
		t.Errorf("statuses by participant: got %v, want %v", byParticipant, want)
	}
	// Statuses to participants known by BSUID only stay apart as well.
	rows = normalizeBody(n, readBody(t, normTestdata, "status_variants.json"), normSource(0))
	for _, r := range rows.Statuses {
		if r.MessageID == "wamid.S2" && (r.RecipientType != "group" || r.ParticipantHash != h.Hash("16505550142") ||
			r.RecipientUserHash != h.Hash("US.1") || r.GroupID != "Y2FwaV9ncm91cDox" || r.Status != "delivered") {
			t.Errorf("group status S2: %+v", r)
		}
	}
	// Participants known only by BSUID, same wamid, status and second, and
	// recipient_type in another case.
	body := []byte(`{"entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[
		{"id":"wamid.g","status":"delivered","timestamp":"1781514312","recipient_id":"grp","recipient_type":"group","recipient_participant_user_id":"US.111"},
		{"id":"wamid.g","status":"delivered","timestamp":"1781514312","recipient_id":"grp","recipient_type":"Group","recipient_participant_user_id":"US.222"},
		{"id":"wamid.g","status":"delivered","timestamp":"1781514312","recipient_id":"grp","recipient_type":"group","recipient_participant_parent_user_id":"US.ENT.333"}]}}]}]}`)
	rows = normalizeBody(n, body, normSource(0))
	got := map[string]string{}
	for _, r := range rows.Statuses {
		got[r.ParticipantHash] = r.EventID
		if r.GroupID != "grp" || r.RecipientType != "group" || r.RecipientHash != "" {
			t.Errorf("BSUID group status: %+v", r)
		}
	}
	wantP := []string{h.Hash("US.111"), h.Hash("US.222"), h.Hash("US.ENT.333")}
	if len(rows.Statuses) != 3 || !sameSet(boolSet(keysOf(got)), wantP) {
		t.Errorf("BSUID participants: rows %d, participants %v, want %v", len(rows.Statuses), keysOf(got), wantP)
	}
	checkDistinctIDs(t, &rows)
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func boolSet(s []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}

// TestNormalizeBSUID: users known only by their BSUID are still keyed, as
// hashes: a status to a BSUID and an inbound message from one.
func TestNormalizeBSUID(t *testing.T) {
	n, h := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normTestdata, "status_variants.json"), normSource(0))
	found := false
	for _, r := range rows.Statuses {
		if r.MessageID == "wamid.S1" {
			found = true
			if r.RecipientHash != h.Hash("US.98231074456120938811") || r.RecipientUserHash != r.RecipientHash {
				t.Errorf("BSUID status: recipient %q user %q", r.RecipientHash, r.RecipientUserHash)
			}
		}
		if r.MessageID == "wamid.S4" && r.RecipientHash != h.Hash("16505550142") {
			t.Errorf("numeric recipient id: %q", r.RecipientHash)
		}
	}
	if !found {
		t.Fatal("no row for wamid.S1")
	}
	rows = normalizeBody(n, readBody(t, normTestdata, "inbound_more_types.json"), normSource(0))
	for _, r := range rows.Inbound {
		switch r.MessageID {
		case "wamid.M1":
			if r.FromHash != h.Hash("US.13920457718820365147") || r.FromUserHash != r.FromHash {
				t.Errorf("BSUID sender: from %q user %q", r.FromHash, r.FromUserHash)
			}
		case "wamid.M7":
			// A type not known yet: recorded, its payload withheld.
			if r.Type != "poll_vote" || r.Extra != `{"poll_vote":null}` {
				t.Errorf("unknown type: type %q extra %q", r.Type, r.Extra)
			}
		}
	}
}

// TestNormalizeStatusValues: legacy statuses are kept as they came, upper
// case folded; call statuses never become status rows.
func TestNormalizeStatusValues(t *testing.T) {
	n, _ := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normFixtures, "status_legacy_deleted_warning.json"), normSource(0))
	got := countOf(rows.Statuses, func(r *schema.StatusRow) (string, bool) { return r.Status, true })
	sameCount(t, "legacy statuses", got, map[string]int{"deleted": 1, "warning": 1})

	rows = normalizeBody(n, readBody(t, normFixtures, "calls_field_statuses.json"), normSource(0))
	if len(rows.Statuses) != 0 {
		t.Errorf("calls field: %d status rows, want none", len(rows.Statuses))
	}
	calls := countOf(rows.Management, func(r *schema.ManagementRow) (string, bool) { return r.Event, r.Kind == schema.KindCall })
	sameCount(t, "call rows", calls, map[string]int{"RINGING": 1, "ACCEPTED": 1, "terminate": 1})
	for _, r := range rows.Management {
		if r.PhoneNumberID != "131870552904416" || r.SubjectID == "" {
			t.Errorf("call row: number %q subject %q", r.PhoneNumberID, r.SubjectID)
		}
	}
}

// TestNormalizeCallErrors: errors of call statuses are error rows of origin
// call owned by the call's row; value-level errors under calls are value
// errors.
func TestNormalizeCallErrors(t *testing.T) {
	n, _ := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normTestdata, "calls_connect.json"), normSource(0))
	sameCount(t, "call errors", codesByOrigin(rows.Errors, originCall), map[string]int{"138006": 1})
	sameCount(t, "value errors", codesByOrigin(rows.Errors, originValue), map[string]int{"138000": 1})
	if len(rows.Statuses) != 0 {
		t.Errorf("status rows under calls: %d", len(rows.Statuses))
	}
	checkDistinctIDs(t, &rows)
}

// TestNormalizeCoexistence: echoes and history are not inbound traffic;
// history errors are errors of origin history.
func TestNormalizeCoexistence(t *testing.T) {
	n, _ := newTestNormalizer()
	rows := normalizeBody(n, readBody(t, normTestdata, "coexistence_fields.json"), normSource(0))
	if len(rows.Inbound) != 0 || len(rows.Statuses) != 0 {
		t.Errorf("coexistence fields: %d inbound and %d status rows, want none", len(rows.Inbound), len(rows.Statuses))
	}
	sameCount(t, "history errors", codesByOrigin(rows.Errors, originHistory), map[string]int{"2593109": 1})
	echoes := countOf(rows.Management, func(r *schema.ManagementRow) (string, bool) {
		return r.SubjectID, r.Field == meta.FieldSMBMessageEchoes
	})
	sameCount(t, "echo rows", echoes, map[string]int{"wamid.ECHO1": 1, "wamid.ECHO2": 1, "wamid.ECHO3": 1})
	if len(rows.DeadLetters) != 0 {
		t.Errorf("dead letters: %+v", rows.DeadLetters)
	}
	checkDistinctIDs(t, &rows)
}

// TestNormalizePrivacyScanner: the scan of checkPrivacy knows what to look
// for, or it would pass for nothing.
func TestNormalizePrivacyScanner(t *testing.T) {
	all := map[string]bool{}
	for _, name := range sortedNames(loadFacts(t)) {
		for _, s := range endUserStrings(t, readBody(t, normFixtures, name)) {
			all[s] = true
		}
	}
	for _, name := range testdataNames(t) {
		for _, s := range endUserStrings(t, readBody(t, normTestdata, name)) {
			all[s] = true
		}
	}
	for _, s := range []string{
		"16505550142", "16505550187", "4915155500734", "US.13920457718820365147", "US.ENT.58810293746651029384",
		"Devin Castellanos", "Can we move the meetup to 7?", "marisol.o", "Corrected text", "Seu pedido saiu para entrega",
		"5511955550321", "BR.7710293384",
	} {
		if !all[s] {
			t.Errorf("the privacy scan does not look for %q", s)
		}
	}
	for _, s := range []string{"15557810001", "107655290331184", "Y2FwaV9ncm91cDoxNTU1NzgxMDAwMToxMjAzNjMxODQ5NDU2ODI1NjU"} {
		if all[s] {
			t.Errorf("the privacy scan takes business data %q for an end user's", s)
		}
	}
	if len(all) < 50 {
		t.Errorf("the privacy scan looks for only %d strings", len(all))
	}
}

// TestNormalizeDecoderBodies: the decoder's own test bodies normalize
// without dead letters, with distinct ids and without end users' numbers or
// text in any row.
func TestNormalizeDecoderBodies(t *testing.T) {
	for _, name := range testdataNames(t) {
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			body := readBody(t, normTestdata, name)
			n, _ := newTestNormalizer()
			rows := normalizeBody(n, body, normSource(0))
			if len(rows.DeadLetters) != 0 {
				t.Errorf("dead letters: %+v", rows.DeadLetters)
			}
			if rows.Len() == 0 {
				t.Error("no rows")
			}
			checkDistinctIDs(t, &rows)
			checkUnknownKeysKept(t, body, &rows)
			checkPrivacy(t, body, &rows)
		})
	}
}

// TestNormalizeResolvesDisplayNumber: a quality event names its number by
// display number only. The normalizer does no I/O: it gives the pairs a
// body's metadata shows (for stage 1 to learn, once per body) and fills in
// the id only where the same body pairs the display number with one; its
// event id is the same either way.
func TestNormalizeResolvesDisplayNumber(t *testing.T) {
	n, _ := newTestNormalizer()
	quality := readBody(t, normFixtures, "quality_throughput_upgrade.json")
	alone := normalizeBody(n, quality, normSource(0))
	if len(alone.Management) != 1 || alone.Management[0].PhoneNumberID != "" || len(alone.Numbers) != 0 {
		t.Fatalf("alone: %+v, pairs %v", alone.Management, alone.Numbers)
	}
	status := readBody(t, normFixtures, "status_sent_pmp_marketing.json")
	learned := normalizeBody(n, batchBodies(t, status, status), normSource(1))
	want := []schema.NumberPair{{Display: "15557810001", PhoneNumberID: "107655290331184"}}
	if !reflect.DeepEqual(learned.Numbers, want) {
		t.Fatalf("pairs of a body with two statuses of one number: %v, want %v", learned.Numbers, want)
	}
	// A body holding both resolves within itself.
	both := normalizeBody(n, batchBodies(t, readBody(t, normFixtures, "status_played_voice.json"), quality), normSource(3))
	found := false
	for _, r := range both.Management {
		if r.Event == "THROUGHPUT_UPGRADE" {
			found = true
			if r.PhoneNumberID != "107655290331184" {
				t.Errorf("same body: number %q", r.PhoneNumberID)
			}
			if r.EventID != alone.Management[0].EventID {
				t.Errorf("the id changed with the number: %s, then %s", alone.Management[0].EventID, r.EventID)
			}
		}
	}
	if !found {
		t.Fatal("no upgrade in the body holding both")
	}
	if len(both.Numbers) != 1 {
		t.Errorf("pairs: %v", both.Numbers)
	}
}

// TestNormalizeDeadLetters: a body that is not JSON and one that is JSON but
// no webhook are one dead letter each, with the decoder's reason and the
// body as received; a bad status among good ones costs only itself.
func TestNormalizeDeadLetters(t *testing.T) {
	n, _ := newTestNormalizer()
	for _, c := range []struct{ body, reason string }{
		{"this is not json", meta.ReasonNotJSON},
		{`{"object":"whatsapp_business_account"}`, meta.ReasonNoEntry},
		{`["entry"]`, meta.ReasonNotObject},
		{"", meta.ReasonEmptyBody},
		{`{"object":"whatsapp_business_account","entry":[]}`, ReasonNoEvents},
		{`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"}}}]}]}`, ReasonNoEvents},
	} {
		src := normSource(7)
		rows := normalizeBody(n, []byte(c.body), src)
		if len(rows.DeadLetters) != 1 || rows.Len() != 1 {
			t.Errorf("%q: %d rows, %d dead letters, want one dead letter", c.body, rows.Len(), len(rows.DeadLetters))
			continue
		}
		d := rows.DeadLetters[0]
		if d.Reason != c.reason || d.Body != c.body || d.Item != "" || d.Error == "" || d.RawMsgID != schema.RawMsgID([]byte(c.body)) || d.Source != src {
			t.Errorf("%q: dead letter %+v, want reason %s", c.body, d, c.reason)
		}
	}

	bad := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[
		{"id":"wamid.a","status":"sent","timestamp":"1781514312","recipient_id":"4915155500001"},
		{"id":"wamid.b","status":"sent","timestamp":{"bad":true},"recipient_id":"4915155500002"},
		{"id":"wamid.c","status":"delivered","timestamp":"1781514313","recipient_id":"4915155500003"}]}}]}]}`)
	rows := normalizeBody(n, bad, normSource(8))
	var msgs []string
	for _, r := range rows.Statuses {
		msgs = append(msgs, r.MessageID)
	}
	if !reflect.DeepEqual(msgs, []string{"wamid.a", "wamid.c"}) {
		t.Errorf("good statuses beside the bad one: %v", msgs)
	}
	if len(rows.DeadLetters) != 1 {
		t.Fatalf("dead letters: %+v", rows.DeadLetters)
	}
	d := rows.DeadLetters[0]
	if d.Reason != ReasonBadItem || d.Item != "entry[0].changes[0].value.statuses[1]" || !strings.Contains(d.Body, "wamid.b") ||
		!strings.Contains(d.Error, "timestamp") || d.RawMsgID != schema.RawMsgID(bad) {
		t.Errorf("bad item: %+v", d)
	}
}

// TestNormalizeRepeatedItem: a status given twice in one body is one event
// with its errors once (docs/meta-webhooks.md 11.2 rule 6).
func TestNormalizeRepeatedItem(t *testing.T) {
	st := `{"id":"wamid.r","status":"failed","timestamp":"1781514312","recipient_id":"4915155500001","errors":[{"code":131049,"title":"x"}]}`
	body := []byte(`{"entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[` +
		st + `,` + st + `]}},{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[` + st + `]}}]}]}`)
	n, _ := newTestNormalizer()
	rows := normalizeBody(n, body, normSource(0))
	if len(rows.Statuses) != 1 || len(rows.Errors) != 1 {
		t.Errorf("repeated status: %d statuses, %d errors, want 1 and 1", len(rows.Statuses), len(rows.Errors))
	}
	// Rows of earlier bodies in the same batch are left alone.
	n.Normalize(body, normSource(1), "", &rows)
	if len(rows.Statuses) != 2 || len(rows.Errors) != 2 {
		t.Errorf("second body in one batch: %d statuses, %d errors, want 2 and 2", len(rows.Statuses), len(rows.Errors))
	}
	if rows.Statuses[0].EventID != rows.Statuses[1].EventID {
		t.Error("the same status in two bodies got two ids")
	}
}

// TestNormalizeTimes: a timestamp that is no time gives the receive time as
// event time, not a year 1970 or past ClickHouse's DateTime; the id still
// comes from what was sent.
func TestNormalizeTimes(t *testing.T) {
	n, _ := newTestNormalizer()
	for _, ts := range []string{`"0"`, `"99999999999"`, `-5`} {
		body := []byte(`{"entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"statuses":[{"id":"wamid.t","status":"sent","timestamp":` + ts + `,"recipient_id":"4915155500001"}]}}]}]}`)
		a := normalizeBody(n, body, normSource(0))
		b := normalizeBody(n, body, normSource(30))
		if len(a.Statuses) != 1 || len(b.Statuses) != 1 {
			t.Fatalf("timestamp %s: rows %+v", ts, a)
		}
		if !a.Statuses[0].EventTime.Equal(normSource(0).ReceivedAt) {
			t.Errorf("timestamp %s: event time %v", ts, a.Statuses[0].EventTime)
		}
		if a.Statuses[0].EventID != b.Statuses[0].EventID {
			t.Errorf("timestamp %s: the id depends on the receive time", ts)
		}
	}
}

// checkPrivacy scans every string field of every row for the end users'
// numbers, BSUIDs, names and message text of body. Allowed: the raw value
// of a field kept raw (unknown fields: its numbers are hashed, its text is
// not) and a dead letter's body. The values of unknown keys, kept in an
// Extra, are scanned too: their numbers are hashed.
func checkPrivacy(t testing.TB, body []byte, rows *schema.Rows) {
	t.Helper()
	secrets := endUserStrings(t, body)
	check := func(table string, row any) {
		v := reflect.ValueOf(row)
		walkStrings(v, "", func(field, s string) {
			switch {
			case table == "management" && field == "Raw" && v.FieldByName("Event").String() == "RAW":
				return
			case table == "dead_letters" && field == "Body":
				return
			}
			for _, secret := range secrets {
				if strings.Contains(s, secret) {
					t.Errorf("%s.%s holds end-user data %q: %q", table, field, secret, s)
				}
			}
		})
	}
	for _, r := range rows.Statuses {
		check("statuses", r)
	}
	for _, r := range rows.Inbound {
		check("inbound", r)
	}
	for _, r := range rows.Errors {
		check("errors", r)
	}
	for _, r := range rows.Management {
		check("management", r)
	}
	for _, r := range rows.DeadLetters {
		check("dead_letters", r)
	}
}

func walkStrings(v reflect.Value, name string, f func(field, s string)) {
	switch v.Kind() {
	case reflect.String:
		f(name, v.String())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fn := v.Type().Field(i).Name
			if v.Type().Field(i).Anonymous {
				fn = name
			}
			walkStrings(v.Field(i), fn, f)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walkStrings(v.Index(i), name, f)
		}
	}
}

// Keys whose string values are end users' numbers or BSUIDs.
var userIDKeys = map[string]bool{
	"wa_id": true, "from": true, "to": true, "recipient_id": true, "recipient_participant_id": true,
	"recipient_participant_user_id": true, "recipient_participant_parent_user_id": true,
	"recipient_user_id": true, "recipient_parent_user_id": true, "parent_recipient_user_id": true,
	"user_id": true, "parent_user_id": true, "from_user_id": true, "from_parent_user_id": true,
	"to_user_id": true, "to_parent_user_id": true, "new_wa_id": true, "previous_user_id": true,
	"previous_parent_user_id": true, "phone": true, "phone_number": true,
}

// Keys inside a message's content whose values are not what the user wrote.
var notText = map[string]bool{
	"id": true, "type": true, "mime_type": true, "sha256": true, "message_id": true, "original_message_id": true,
	"voice": true, "animated": true, "catalog_id": true, "product_retailer_id": true, "currency": true,
}

// endUserStrings returns the end users' numbers, BSUIDs, names, usernames
// and message text in body: what no row may hold.
func endUserStrings(t testing.TB, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	business := map[string]bool{}
	var collectBusiness func(v any)
	collectBusiness = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && (k == "display_phone_number" || k == "phone_number_id") {
					business[s] = true
				}
				collectBusiness(c)
			}
		case []any:
			for _, c := range x {
				collectBusiness(c)
			}
		}
	}
	collectBusiness(doc)
	set := map[string]bool{}
	add := func(s string) {
		if s != "" && !business[s] {
			set[s] = true
		}
	}
	// text collects every string under a content key.
	var text func(v any, key string)
	text = func(v any, key string) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if !notText[k] {
					text(c, k)
				}
			}
		case []any:
			for _, c := range x {
				text(c, key)
			}
		case string:
			if len(x) >= 6 || userIDKeys[key] {
				add(x)
			}
		case json.Number:
			if userIDKeys[key] {
				add(x.String())
			}
		}
	}
	scalar := func(c any) {
		switch s := c.(type) {
		case string:
			add(s)
		case json.Number:
			add(s.String())
		}
	}
	// walk visits every object; inMessage is set for the items of a
	// messages or message_echoes array (inbound, echo, history).
	var walk func(v any, inMessage bool)
	walk = func(v any, inMessage bool) {
		switch x := v.(type) {
		case map[string]any:
			group := x["recipient_type"] == meta.RecipientTypeGroup
			typ, _ := x["type"].(string)
			for k, c := range x {
				_, content := contentKeys[k]
				switch {
				case userIDKeys[k] && !(k == "recipient_id" && group):
					scalar(c)
				case k == "profile" || k == "contact":
					text(c, k) // names, usernames, contact books
				case k == "threads":
					for _, th := range asList(c) {
						if m, ok := th.(map[string]any); ok {
							scalar(m["id"]) // a history thread is named by the user's number
						}
					}
				case inMessage && (content || k == typ):
					text(c, k)
				}
				walk(c, k == "messages" || k == "message_echoes")
			}
		case []any:
			for _, c := range x {
				walk(c, inMessage)
			}
		}
	}
	walk(doc, false)
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestGroupValuesHashNumbers: a group field, kept raw, names end users by
// phone number (participants added, who added them). They were stored in
// clear in management_events.raw and on EVENTS; now as keyed hashes of
// their digits, the rest of the value as sent, and the event's id is what
// it was (it is taken from the value as sent).
func TestGroupValuesHashNumbers(t *testing.T) {
	n, h := newTestNormalizer()
	value := `{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"groups":[{"timestamp":"1781515000","group_id":"Y2FwaV9ncm91cDox","type":"group_participants_add","initiated_by":"15557810001",` +
		`"added_participants":[{"wa_id":"447700900456","input":"+44 7700 900456"}],"failed_participants":[{"input":"US.13491208655302741918","errors":[{"code":131026}]}],` +
		`"subject":"Spring <sale> & more"}]}`
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781515000,"changes":[{"field":"group_participants_update","value":` + value + `}]}]}`)
	rows := normalizeBody(n, body, normSource(1))
	if len(rows.Management) != 1 {
		t.Fatalf("%d management rows, want 1", len(rows.Management))
	}
	r := rows.Management[0]
	for _, clear := range []string{"447700900456", "7700 900456", "15557810001\",\"added"} {
		if strings.Contains(r.Raw, clear) {
			t.Errorf("an end user's number in clear in the stored value: %s", r.Raw)
		}
	}
	var v struct {
		Groups []struct {
			InitiatedBy string `json:"initiated_by"`
			Added       []struct {
				WaID  string `json:"wa_id"`
				Input string `json:"input"`
			} `json:"added_participants"`
			Failed []struct {
				Input string `json:"input"`
			} `json:"failed_participants"`
			Subject string `json:"subject"`
		} `json:"groups"`
		Metadata struct {
			Display string `json:"display_phone_number"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &v); err != nil || len(v.Groups) != 1 || len(v.Groups[0].Added) != 1 || len(v.Groups[0].Failed) != 1 {
		t.Fatalf("stored value %s: %v", r.Raw, err)
	}
	g := v.Groups[0]
	if want := h.Hash("447700900456"); g.Added[0].WaID != want || g.Added[0].Input != want {
		t.Errorf("participant %+v; want both the hash of its digits, %s", g.Added[0], want)
	}
	if g.InitiatedBy != h.Hash("15557810001") {
		t.Errorf("initiated_by %q, want its hash", g.InitiatedBy)
	}
	// A participant named by BSUID is hashed as the events hash BSUIDs.
	if want := h.Hash("US.13491208655302741918"); g.Failed[0].Input != want {
		t.Errorf("failed participant's input %q, want the hash of its BSUID, %s", g.Failed[0].Input, want)
	}
	// What names no end user stays: the business's own display number
	// under metadata, the subject (with < > &, not escaped).
	if v.Metadata.Display != "15557810001" || g.Subject != "Spring <sale> & more" {
		t.Errorf("changed beyond the numbers: %s", r.Raw)
	}
	if want := schema.EventID(schema.KindOther, "group_participants_update", "104281907735512", "107655290331184", "", "RAW",
		"1781515000", "", "", rawSum([]byte(value)), ""); r.EventID != want {
		t.Errorf("id %s, want %s: the id of the value as sent", r.EventID, want)
	}
}

// TestValueErrorsByMinute: a value-level error of a messages webhook (no
// entry.time, no timestamp) comes as the same value each time a number
// hits it. Every recurrence had one id for ever, so the errors table
// counted one; now the minute of receipt is part of its id: copies within
// a minute are one error, each minute's another. An error whose change has
// an entry.time keeps that as its time, whenever it is received.
func TestValueErrorsByMinute(t *testing.T) {
	n, _ := newTestNormalizer()
	body := func(entryTime string) []byte {
		return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512"` + entryTime + `,"changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
			`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"errors":[{"code":130429,"title":"Rate limit hit","message":"Rate limit hit","error_data":{"details":"Cloud API message throughput has been reached."}}]}}]}]}`)
	}
	at := func(b []byte, when time.Time) schema.ErrorRow {
		t.Helper()
		rows := normalizeBody(n, b, schema.Source{App: "test", ReceivedAt: when, RawSeq: 1})
		if len(rows.Errors) != 1 || rows.Errors[0].Code != 130429 || rows.Errors[0].Origin != originValue {
			t.Fatalf("rows %+v; want one value-level 130429", rows.Errors)
		}
		return rows.Errors[0]
	}
	t0 := time.Date(2026, 6, 1, 9, 0, 5, 0, time.UTC)
	first, again, later := at(body(""), t0), at(body(""), t0.Add(40*time.Second)), at(body(""), t0.Add(time.Minute))
	if first.EventID != again.EventID {
		t.Errorf("two copies within a minute: ids %s and %s, want one", first.EventID, again.EventID)
	}
	if first.EventID == later.EventID {
		t.Errorf("the same error a minute later has the first one's id %s: counted once", first.EventID)
	}
	if !later.EventTime.Equal(t0.Add(time.Minute)) {
		t.Errorf("event_time %v, want the receive time", later.EventTime)
	}
	stamped := body(`,"time":1781515000`)
	if a, b := at(stamped, t0), at(stamped, t0.Add(time.Hour)); a.EventID != b.EventID || !a.EventTime.Equal(time.Unix(1781515000, 0)) {
		t.Errorf("with entry.time: ids %s and %s, time %v; want one id at entry.time", a.EventID, b.EventID, a.EventTime)
	}
}

// TestEchoAndHistoryMessageErrors: the errors of a message echo and of a
// history follow-up message are error rows (origin echo, history) owned by
// their message's row, and those of a history chunk's messages are the
// chunk's, after its own. Before, they were only codes in the row's reason:
// the errors table, the failure analytics and /api/v1/failures missed them.
func TestEchoAndHistoryMessageErrors(t *testing.T) {
	n, _ := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[` +
		`{"field":"smb_message_echoes","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"message_echoes":[{"from":"15557810001","to":"447700900456","id":"wamid.E1","timestamp":"1781515000","type":"unsupported","errors":[{"code":131051,"title":"Message type unknown","message":"Message type unknown","error_data":{"details":"Message type is currently not supported."}}]}]}},` +
		`{"field":"history","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"messages":[{"from":"447700900456","id":"wamid.H1","timestamp":"1781515001","type":"image","errors":[{"code":131052,"title":"Media download error","message":"Media download error"}]}]}},` +
		`{"field":"history","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"history":[{"metadata":{"phase":0,"chunk_order":1,"progress":10},"errors":[{"code":2593109,"title":"History sync error"}],"threads":[{"id":"447700900456","messages":[` +
		`{"from":"447700900456","id":"wamid.T1","timestamp":"1781515002","type":"text","text":{"body":"hi"}},` +
		`{"from":"447700900456","id":"wamid.T2","timestamp":"1781515003","type":"image","errors":[{"code":131053,"title":"Media upload error"}]}]}]}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	owners := map[string]schema.ManagementRow{}
	for _, r := range rows.Management {
		owners[r.EventID] = r
	}
	var got []string
	for _, e := range rows.Errors {
		o, ok := owners[e.EventID]
		if !ok {
			t.Errorf("error %d (%s) owned by %s, no row of this body", e.Code, e.Origin, e.EventID)
		}
		if e.PhoneNumberID != "107655290331184" || e.EventTime.IsZero() || (o.Event != "HISTORY_CHUNK" && e.MessageID != o.SubjectID) {
			t.Errorf("error row %+v; want the number, the message id of its owner %q and a time", e, o.SubjectID)
		}
		got = append(got, fmt.Sprintf("%s %d %s %s[%d]", e.Origin, e.Code, e.MessageID, o.Event, e.Index))
	}
	// The chunk's own error, then its messages' (after the chunk's, by index).
	want := []string{"echo 131051 wamid.E1 unsupported[0]", "history 131052 wamid.H1 image[0]",
		"history 2593109  HISTORY_CHUNK[0]", "history 131053 wamid.T2 HISTORY_CHUNK[1]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("error rows\n%q, want\n%q", got, want)
	}
}

// TestStrayLists: a list a field does not read (statuses under
// smb_message_echoes, calls under messages) was decoded and then went
// nowhere: no row, no unknown key, no dead letter. Now the change gets an
// UNEXPECTED_LISTS row naming each such list and its length, without its
// content; no fixture has one.
func TestStrayLists(t *testing.T) {
	n, _ := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[` +
		`{"field":"smb_message_echoes","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"message_echoes":[{"from":"15557810001","to":"447700900456","id":"wamid.E0","timestamp":"1781515000","type":"text","text":{"body":"hi"}}],` +
		`"statuses":[{"id":"wamid.ECHO1","status":"delivered","timestamp":"1781515000","recipient_id":"447700900456"}]}},` +
		`{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"calls":[{"id":"wacid.1","from":"447700900456","event":"connect","timestamp":"1781515001"},{"id":"wacid.2","from":"447700900456","event":"terminate","timestamp":"1781515002"}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	var got []string
	for _, r := range rows.Management {
		if r.Event == "UNEXPECTED_LISTS" {
			got = append(got, r.SubjectName+" "+r.Reason)
			// Under a field of its own: under smb_message_echoes, stage 2
			// and the throughput API counted it as an outbound message.
			if r.Raw != "" || r.PhoneNumberID != "107655290331184" || r.Field != FieldUnexpectedLists {
				t.Errorf("row %+v: want the number, its own field, and no content", r)
			}
		}
	}
	if want := []string{"smb_message_echoes statuses:1", "messages calls:2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows for lists not read: %q, want %q", got, want)
	}
	if again := normalizeBody(n, body, normSource(5)); len(again.Management) != len(rows.Management) || again.Management[len(again.Management)-1].EventID != rows.Management[len(rows.Management)-1].EventID {
		t.Errorf("ids differ between two runs")
	}

	for _, name := range sortedNames(loadFacts(t)) {
		rows := normalizeBody(n, readBody(t, normFixtures, name), normSource(0))
		for _, r := range rows.Management {
			if r.Event == "UNEXPECTED_LISTS" {
				t.Errorf("%s: %s %s", name, r.Field, r.Reason)
			}
		}
	}
}

// TestUnknownKeysPastTheLimit: past meta.MaxUnknown unknown keys a body's
// keys are counted, not kept; its unknown-keys row says how many (nothing
// said they were missing), and the status is still stored.
func TestUnknownKeysPastTheLimit(t *testing.T) {
	n, _ := newTestNormalizer()
	var b strings.Builder
	b.WriteString(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.K","status":"sent","timestamp":"1781514312","recipient_id":"15551234567"`)
	for i := 0; i < meta.MaxUnknown+500; i++ {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString(`}]}}]}]}`)
	rows := normalizeBody(n, []byte(b.String()), normSource(0))
	if len(rows.Statuses) != 1 {
		t.Fatalf("%d statuses, want 1", len(rows.Statuses))
	}
	var reason string
	for _, r := range rows.Management {
		if r.Field == FieldUnknownKeys {
			reason = r.Reason
		}
	}
	if !strings.Contains(reason, "500 more unknown keys after the first 1000") {
		t.Errorf("unknown-keys row reason %q; want the count of the keys not kept", reason)
	}
}

// TestUnknownKeysHashNumbers: numbers under unknown keys (a status's, a
// value's) were stored in clear in the status's extra and in the body's
// unknown-keys row; so were lists of numbers under a number key. They are
// keyed hashes now; a date under "from" is not taken for a number.
func TestUnknownKeysHashNumbers(t *testing.T) {
	n, h := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"new_thing":{"from":"447700900888","window":{"from":"2026-01-01","to":"2026-01-31"}},` +
		`"statuses":[{"id":"wamid.U","status":"sent","timestamp":"1781514312","recipient_id":"15551234567","forwarded_to":{"wa_id":"447700900999"},"recipient.wa_id":"447700900777","to":["447700900456","+44 7700 900457"]}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	if len(rows.Statuses) != 1 {
		t.Fatalf("%d statuses", len(rows.Statuses))
	}
	var unknown string
	for _, r := range rows.Management {
		if r.Field == FieldUnknownKeys {
			unknown = r.Raw
		}
	}
	stored := rows.Statuses[0].Extra + unknown
	for _, number := range []string{"447700900888", "447700900999", "447700900777", "447700900456", "7700 900457"} {
		if strings.Contains(stored, number) {
			t.Errorf("%s stored in clear:\n%s\n%s", number, rows.Statuses[0].Extra, unknown)
		}
	}
	for _, number := range []string{"447700900888", "447700900999", "447700900777", "447700900456", "447700900457"} {
		if !strings.Contains(stored, h.Hash(number)) {
			t.Errorf("the hash of %s is not stored in its place:\n%s\n%s", number, rows.Statuses[0].Extra, unknown)
		}
	}
	if !strings.Contains(unknown, `"from":"2026-01-01"`) || !strings.Contains(unknown, `"to":"2026-01-31"`) {
		t.Errorf("dates under from and to were changed: %s", unknown)
	}
}

// TestNumbersHashedInEveryShape: a number in a known field's value (under a
// key not known yet), as a JSON number, in nested lists, under a list key,
// or under an escaped key name was stored in clear; a Unix time, a date or
// an id longer than 15 digits under "from"/"to" was taken for a number and
// hashed. A number written with dots is one.
func TestNumbersHashedInEveryShape(t *testing.T) {
	n, h := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781515000,"changes":[` +
		`{"field":"phone_number_quality_update","value":{"display_phone_number":"15557810001","event":"FLAGGED","current_limit":"TIER_1K","reported_by":{"wa_id":"447700900451"}}},` +
		`{"field":"account_settings_update","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"phone_number_settings":{"phone_number_id":"107655290331184","blocked_by":{"wa_id":"447700900452"}}}},` +
		`{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"statuses":[{"id":"wamid.S","status":"sent","timestamp":"1781514312","recipient_id":"15551234567",` +
		`"forward":{"to":447700900453,"wa_ids":["447700900454"],"participants":[{"phone":"+44 7700 900455"}],"from":[["447700900456"]],"w\u0061_id":"447700900457"},` +
		`"window":{"from":"1781514312","to":"20260131","input":"31.01.2026","initiated_by":"1234567890123456"},"dotted":{"to":"+44.7700.900458"}}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	stored := keptJSON(&rows)
	for i := 1; i <= 8; i++ {
		number := fmt.Sprintf("44770090045%d", i)
		if strings.Contains(stored, number) || strings.Contains(stored, "7700 90045") {
			t.Errorf("%s stored in clear:\n%s", number, stored)
		}
		if !strings.Contains(stored, h.Hash(number)) {
			t.Errorf("the hash of %s is not stored in its place:\n%s", number, stored)
		}
	}
	// Dates, a Unix time, and an id longer than any phone number (15
	// digits) stay as they are.
	for _, kept := range []string{`"from":"1781514312"`, `"to":"20260131"`, `"input":"31.01.2026"`, `"initiated_by":"1234567890123456"`} {
		if !strings.Contains(stored, kept) {
			t.Errorf("%s was changed:\n%s", kept, stored)
		}
	}
}

// TestBSUIDsHashedInKeptValues: end users' BSUIDs (business-scoped user
// ids) under keys not known yet, in a status's extra, a known field's
// value and a body's unknown-keys row, were stored in clear, though the
// events keep them only as keyed hashes. They are hashed now, as the
// events hash them (the BSUID as written), under user_id and every key
// ending in it, and under the number keys (a group's input); so are
// numbers under phone_number and new_wa_id. What is not a BSUID under
// those keys (a message id, a word) stays, as do BSUIDs under keys that
// name no user.
func TestBSUIDsHashedInKeptValues(t *testing.T) {
	n, h := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","future_user_id":"GB.7Hq2Lm9","entry":[{"id":"104281907735512","time":1781515000,"changes":[` +
		`{"field":"phone_number_quality_update","value":{"display_phone_number":"15557810001","event":"FLAGGED","current_limit":"TIER_1K","reported_by":{"user_id":"US.20571938846102937745","parent_user_id":"US.ENT.58810293746651029384"}}},` +
		`{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"statuses":[{"id":"wamid.S","status":"sent","timestamp":"1781514312","recipient_id":"15551234567",` +
		`"handover":{"previous_user_id":"BR.a1B2c3D4e5","to_user_ids":["DE.99887766"],"contact":{"phone_number":"+44 7700 900461","new_wa_id":"447700900462"}},` +
		`"note":{"user_id":"wamid.HBgL","label":"US.KEPT1","to":"promo"}}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	got := keptJSON(&rows)
	for _, id := range []string{"GB.7Hq2Lm9", "US.20571938846102937745", "US.ENT.58810293746651029384", "BR.a1B2c3D4e5", "DE.99887766"} {
		if strings.Contains(got, id) {
			t.Errorf("BSUID %s stored in clear:\n%s", id, got)
		}
		if !strings.Contains(got, h.Hash(id)) {
			t.Errorf("the hash of %s is not stored in its place:\n%s", id, got)
		}
	}
	for _, number := range []string{"447700900461", "447700900462"} {
		if strings.Contains(got, number) || strings.Contains(got, "7700 900461") || !strings.Contains(got, h.Hash(number)) {
			t.Errorf("%s not replaced by its hash:\n%s", number, got)
		}
	}
	for _, kept := range []string{`"user_id":"wamid.HBgL"`, `"label":"US.KEPT1"`, `"to":"promo"`} {
		if !strings.Contains(got, kept) {
			t.Errorf("%s was changed:\n%s", kept, got)
		}
	}
}

// TestUserContentWithheldInKeptValues: what end users wrote or are called
// (a profile's name and username, text, a caption, a location) is withheld
// from the JSON kept as received, under a field not known yet, in a
// status's unknown keys and in the unknown-keys row alike: the key stays,
// its value is null. Business keys beside them are kept as sent.
func TestUserContentWithheldInKeptValues(t *testing.T) {
	n, _ := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781515000,"changes":[` +
		`{"field":"group_message_digest","value":{"display_phone_number":"15557810001","group_id":"G1",` +
		`"contacts":[{"profile":{"name":"Ana Souza","username":"@ana.s"},"wa_id":"5511988887777"}],` +
		`"messages":[{"type":"text","text":{"body":"meet me at 9"},"location":{"latitude":-23.55,"longitude":-46.63}}],` +
		`"digest":{"caption":"holiday photo","from_username":"@bruno.k","count":2}}},` +
		`{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"statuses":[{"id":"wamid.S","status":"sent","timestamp":"1781514312","recipient_id":"15551234567",` +
		`"recipient_username":"@carla.m","channel_note":"kept"}]}}]}],"future":{"profile":{"name":"Dario Neri"}}}`)
	rows := normalizeBody(n, body, normSource(0))
	got := keptJSON(&rows)
	for _, secret := range []string{"Ana Souza", "@ana.s", "meet me at 9", "-23.55", "holiday photo", "@bruno.k", "@carla.m", "Dario Neri", "5511988887777"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q stored in clear:\n%s", secret, got)
		}
	}
	for _, kept := range []string{`"group_id":"G1"`, `"count":2`, `"type":"text"`, `"channel_note":"kept"`, `"recipient_username":null`, `"from_username":null`, `"caption":null`, `"text":null`, `"contacts":null`} {
		if !strings.Contains(got, kept) {
			t.Errorf("%s not in the kept values:\n%s", kept, got)
		}
	}
}

// TestBSUID: what reads as a BSUID or a parent BSUID, and what does not.
func TestBSUID(t *testing.T) {
	for s, want := range map[string]bool{
		"US.20571938846102937745": true, "US.ENT.58810293746651029384": true, "BR.a1B2c3": true, "GB.7": true,
		"us.20571938846102937745": false, "USA.123": false, "US.": false, "US.ENT.": false, "US.ENT.12a": false,
		"US.abc-def": false, "US.abc.def": false, "wamid.HBgL": false, "U.123": false, "": false,
		"US." + strings.Repeat("a", 128): true, "US." + strings.Repeat("a", 129): false,
	} {
		if got := bsuid(s); got != want {
			t.Errorf("bsuid(%q) = %v, want %v", s, got, want)
		}
	}
}

// keptJSON is the JSON rows keep as received (management events' raw
// values, statuses' extra), a line each.
func keptJSON(rows *schema.Rows) string {
	var b strings.Builder
	for _, r := range rows.Management {
		b.WriteString(r.Raw + "\n")
	}
	for _, r := range rows.Statuses {
		b.WriteString(r.Extra + "\n")
	}
	return b.String()
}

// TestPhoneDigits: what reads as a phone number in international form, and
// what does not (dates, times, decimals, addresses, ids too long).
func TestPhoneDigits(t *testing.T) {
	for s, want := range map[string]string{
		"447700900453": "447700900453", "+44 7700 900453": "447700900453", "+44.7700.900453": "447700900453",
		"(415) 555-2671 1": "41555526711", "0044 7700 900453": "447700900453", "011 44 7700 900453": "447700900453",
		"0011 44 7700 900453": "447700900453", "+683 4002": "6834002", "+33.6.12.34.56.78": "33612345678",
		"2026-01-31": "", "20260131": "", "31.01.2026": "", "2026.01.31": "", "31-01-2026": "",
		"1781514312": "", "1781514312000": "", "1781514312.5": "", "12345.67": "", "192.168.100.200": "",
		"31.1.2026": "", "1234567890123456": "", "123456": "", "wamid.HBgL": "",
	} {
		got, ok := phoneDigits(s)
		if got != want || ok != (want != "") {
			t.Errorf("phoneDigits(%q) = %q, %v; want %q", s, got, ok, want)
		}
	}
}

// TestErrorWithoutCodeIsUnknown: a failed status whose error has no code
// (or a null one) stores code -1, class unknown, not 0, Meta's auth code,
// whose verdict would stop the number; an explicit 0 stays 0.
func TestErrorWithoutCodeIsUnknown(t *testing.T) {
	n, _ := newTestNormalizer()
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[` +
		`{"id":"wamid.A","status":"failed","timestamp":"1781514312","recipient_id":"15551234567","errors":[{"title":"no code"}]},` +
		`{"id":"wamid.B","status":"failed","timestamp":"1781514312","recipient_id":"15551234567","errors":[{"code":null,"title":"null code"}]},` +
		`{"id":"wamid.C","status":"failed","timestamp":"1781514312","recipient_id":"15551234567","errors":[{"code":0,"title":"auth"}]}]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	want := map[string]int32{"wamid.A": -1, "wamid.B": -1, "wamid.C": 0}
	if len(rows.Statuses) != 3 || len(rows.Errors) != 3 {
		t.Fatalf("%d statuses, %d errors", len(rows.Statuses), len(rows.Errors))
	}
	for _, s := range rows.Statuses {
		if len(s.ErrorCodes) != 1 || s.ErrorCodes[0] != want[s.MessageID] {
			t.Errorf("%s: codes %v, want [%d]", s.MessageID, s.ErrorCodes, want[s.MessageID])
		}
	}
	for _, e := range rows.Errors {
		if e.Code != want[e.MessageID] {
			t.Errorf("%s: error row code %d, want %d", e.MessageID, e.Code, want[e.MessageID])
		}
		if ec, _ := schema.LookupError(e.Code); e.Code == -1 && (ec.Class != schema.ClassUnknown || ec.Verdict == schema.VerdictStop) {
			t.Errorf("code -1 is %s / %s", ec.Class, ec.Verdict)
		}
	}
}

// TestKeptValueOfTooManyValues: a value kept as received that holds a
// phone number key and hundreds of thousands of values (a million empty
// objects in 4 MB took 200 MB to look for numbers in, at every delivery)
// is withheld whole, with its size; the status beside it is stored, and a
// value of a usual size is still scrubbed.
func TestKeptValueOfTooManyValues(t *testing.T) {
	n, h := newTestNormalizer()
	many := strings.Repeat("{},", 300_000)
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
		`"statuses":[{"id":"wamid.M","status":"sent","timestamp":"1781514312","recipient_id":"15551234567","swarm":[` + many + `{"wa_id":"447700900888"}],` +
		`"small":[{"wa_id":"447700900889"}]}]}}]}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rows := normalizeBody(n, body, normSource(0))
	runtime.ReadMemStats(&after)
	if len(rows.Statuses) != 1 || rows.Statuses[0].MessageID != "wamid.M" {
		t.Fatalf("statuses: %+v", rows.Statuses)
	}
	got := keptJSON(&rows)
	if strings.Contains(got, "447700900888") || strings.Contains(got, "447700900889") || !strings.Contains(got, "wahook_withheld") || !strings.Contains(got, "too many to look for") {
		t.Errorf("kept: %.400s", got)
	}
	if strings.Contains(got, "{},{}") {
		t.Errorf("the value of too many values was kept")
	}
	// The body is 0.9 MB: a tree of its values took some 45 MB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 20<<20 {
		t.Errorf("normalizing a body of %d bytes allocated %d MB", len(body), alloc>>20)
	}
	// A usual value is scrubbed as before.
	rows = normalizeBody(n, []byte(strings.Replace(string(body), many, "", 1)), normSource(0))
	if got := keptJSON(&rows); strings.Contains(got, "wahook_withheld") || !strings.Contains(got, h.Hash("447700900888")) || !strings.Contains(got, h.Hash("447700900889")) {
		t.Errorf("kept: %.400s", got)
	}
}

// TestAccountValueOfTooManyValues: an account_update withheld for its size
// (more than 100,000 values, and an escape that sends it to be read for
// numbers) lost its ban with the rest: stage 2 reads the ban from the
// value. Its event, ban and restrictions stay beside the note, capped.
func TestAccountValueOfTooManyValues(t *testing.T) {
	n, _ := newTestNormalizer()
	var rs []string
	for i := 39; i >= 0; i-- {
		rs = append(rs, fmt.Sprintf(`{"restriction_type":"RESTRICTED_OTHER_%02d","expiration":1781600000}`, i))
	}
	rs = append(rs, `{"restriction_type":"RESTRICTED_BIZ_INITIATED_MESSAGING","expiration":1781600000}`)
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","time":1781514312,"changes":[{"field":"account_update","value":` +
		`{"event":"ACCOUNT_RESTRICTION","ban_info":{"waba_ban_state":"DISABLE","waba_ban_date":"7 d\u00e9cembre 2026"},"restriction_info":[` + strings.Join(rs, ",") + `],` +
		`"new_list":[` + strings.Repeat("1,", 150_000) + `1]}}]}]}`)
	rows := normalizeBody(n, body, normSource(0))
	if len(rows.Management) != 1 {
		t.Fatalf("%d management rows", len(rows.Management))
	}
	raw := rows.Management[0].Raw
	var u meta.AccountUpdate
	if err := json.Unmarshal([]byte(raw), &u); err != nil || u.Event != "ACCOUNT_RESTRICTION" || u.BanInfo == nil || u.BanInfo.WABABanState != "DISABLE" ||
		u.BanInfo.WABABanDate != "7 décembre 2026" {
		t.Fatalf("kept: %.300s (%v)", raw, err)
	}
	if !strings.Contains(raw, "wahook_withheld") || strings.Contains(raw, "1,1,1") {
		t.Errorf("the rest of the value not withheld: %.300s", raw)
	}
	blocking := false
	for _, r := range u.RestrictionInfo {
		blocking = blocking || r.RestrictionType == schema.RestrictBusinessInitiated
	}
	if len(u.RestrictionInfo) != 16 || !blocking {
		t.Errorf("restrictions kept: %d, the business-initiated one among them %v; want 16 with it", len(u.RestrictionInfo), blocking)
	}
	// The others kept are the first by type, as stage 2 keeps them of the
	// whole value: the same state whichever way the event went.
	for _, r := range u.RestrictionInfo {
		if r.RestrictionType != schema.RestrictBusinessInitiated && r.RestrictionType > "RESTRICTED_OTHER_14" {
			t.Errorf("kept %s, not among the first 15 others by type", r.RestrictionType)
		}
	}
	// A restriction stage 2 could not read makes the value one it cannot
	// read: the note alone, not a shorter list that would lift the rest.
	bad := strings.Replace(string(body), `"restriction_type":"RESTRICTED_OTHER_07"`, `"restriction_type":7`, 1)
	rows = normalizeBody(n, []byte(bad), normSource(0))
	if len(rows.Management) != 1 {
		t.Fatalf("the value with a restriction type of 7: %d management rows, %d dead letters", len(rows.Management), len(rows.DeadLetters))
	}
	if raw := rows.Management[0].Raw; !strings.HasPrefix(raw, `{"wahook_withheld":`) || strings.Contains(raw, "restriction_info") {
		t.Errorf("a value with a restriction that cannot be read: %.300s", raw)
	}
}
