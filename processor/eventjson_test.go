package processor

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
)

// marshalEventStd is the encoding that appendStatusEvent and the others
// replace, and the reference they are held to.
func marshalEventStd(k schema.Kind, row any) ([]byte, error) {
	return json.Marshal(Event{Kind: k, V: 1, Row: row})
}

// checkEventJSON asserts that every event of rows encodes to the bytes
// encoding/json makes of it, and so to the same values.
func checkEventJSON(t testing.TB, rows *schema.Rows) {
	t.Helper()
	check := func(what string, got []byte, gotErr error, k schema.Kind, row any) {
		t.Helper()
		want, wantErr := marshalEventStd(k, row)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%s: error %v, encoding/json %v", what, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: got\n%s\nencoding/json\n%s", what, got, want)
		}
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", what, err, got)
		}
		_ = json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: decodes to other values", what)
		}
	}
	var buf []byte
	for i := range rows.Statuses {
		r := &rows.Statuses[i]
		b, err := appendStatusEvent(buf[:0], r)
		check("status "+r.EventID, b, err, schema.KindStatus, r)
		buf = b
	}
	for i := range rows.Inbound {
		r := &rows.Inbound[i]
		b, err := appendInboundEvent(buf[:0], r)
		check("inbound "+r.EventID, b, err, schema.KindInbound, r)
		buf = b
	}
	for i := range rows.Management {
		r := &rows.Management[i]
		b, err := appendManagementEvent(buf[:0], r)
		check("management "+r.EventID, b, err, r.Kind, r)
		buf = b
	}
}

// eventJSONBodies are the fixtures and the decoder's test bodies.
func eventJSONBodies(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, dir := range []string{normFixtures, normTestdata} {
		names, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if filepath.Base(name) == "expected.json" {
				continue
			}
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = b
		}
	}
	if len(out) < 40 {
		t.Fatalf("found %d bodies, want the 40 test bodies and more", len(out))
	}
	return out
}

// nastyStrings need every kind of escape encoding/json makes.
var nastyStrings = []string{
	"plain", `"quoted" \back\slash/`, "<b>Tom & Jerry</b>", "\x00\x01\b\f\n\r\t\x1f\x7f",
	"line\u2028para\u2029end", "bad \xff\xfe utf-8 \xe2\x82", "é ü 😀 漢字", "\u00a0\ufeff",
}

// fillAll sets every field of the struct v points to: strings from
// nastyStrings, numbers to their extremes, times in a zone with
// nanoseconds.
func fillAll(v reflect.Value, n *int) {
	zone := time.FixedZone("x", -(3*3600 + 30*60))
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		*n++
		switch f.Kind() {
		case reflect.String:
			f.SetString(nastyStrings[*n%len(nastyStrings)])
		case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
			f.SetInt(-1 << (f.Type().Bits() - 1))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
			f.SetUint(math.MaxUint64 >> (64 - f.Type().Bits()))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]int32{math.MinInt32, 0, 7, math.MaxInt32}))
		case reflect.Struct:
			if f.Type() == reflect.TypeOf(time.Time{}) {
				f.Set(reflect.ValueOf(time.Date(2026, 6, 15, 9, 5, 12, 123456789+*n, zone)))
				continue
			}
			fillAll(f, n)
		default:
			panic("fillAll: field " + v.Type().Field(i).Name + " of kind " + f.Kind().String())
		}
	}
}

// TestEventJSONMatchesEncodingJSON: the hand-written event JSON is the
// bytes of encoding/json for every row of every fixture (content storage
// on and off), for rows with every field set to values that need escapes,
// for empty rows, and for a time encoding/json refuses.
func TestEventJSONMatchesEncodingJSON(t *testing.T) {
	h := schema.NewHasher(normKey)
	var events int
	for name, body := range eventJSONBodies(t) {
		for _, opts := range [][]NormalizerOption{nil, {WithContent(true)}} {
			rows := normalizeBody(NewNormalizer(h, opts...), body, normSource(3))
			events += len(rows.Statuses) + len(rows.Inbound) + len(rows.Management)
			t.Run(filepath.Base(name), func(t *testing.T) { checkEventJSON(t, &rows) })
		}
	}
	if events < 100 {
		t.Errorf("only %d events checked", events)
	}

	var full schema.Rows
	for i := 0; i < len(nastyStrings); i++ {
		n := i
		var s schema.StatusRow
		var in schema.InboundRow
		var m schema.ManagementRow
		fillAll(reflect.ValueOf(&s).Elem(), &n)
		fillAll(reflect.ValueOf(&in).Elem(), &n)
		fillAll(reflect.ValueOf(&m).Elem(), &n)
		full.Statuses = append(full.Statuses, s)
		full.Inbound = append(full.Inbound, in)
		full.Management = append(full.Management, m)
	}
	full.Statuses = append(full.Statuses, schema.StatusRow{}, schema.StatusRow{PricingBillable: -1, ErrorCodes: []int32{}})
	full.Inbound = append(full.Inbound, schema.InboundRow{})
	full.Management = append(full.Management, schema.ManagementRow{})
	checkEventJSON(t, &full)

	late := schema.StatusRow{EventTime: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := appendStatusEvent(nil, &late); err == nil {
		t.Error("a time past year 9999 encoded; encoding/json refuses it")
	}
	checkEventJSON(t, &schema.Rows{Statuses: []schema.StatusRow{late}})
}

// FuzzEventJSON: rows with arbitrary strings, numbers and times encode
// as encoding/json encodes them.
func FuzzEventJSON(f *testing.F) {
	for _, s := range nastyStrings {
		f.Add(s, int64(-1), int64(1781514312), int64(0), true)
	}
	f.Add("", int64(0), int64(0), int64(0), false)
	f.Add("\xed\xa0\x80 surrogate", int64(math.MaxInt64), int64(-62135596800), int64(999999999), false)
	f.Fuzz(func(t *testing.T, s string, n, sec, nsec int64, flag bool) {
		at := time.Unix(sec, nsec).In(time.FixedZone("", int(n%(18*3600))))
		src := schema.Source{App: s, ReceivedAt: at, RawSeq: uint64(n)}
		codes := []int32{int32(n), int32(n >> 32)}
		rows := schema.Rows{
			Statuses: []schema.StatusRow{{Source: src, EventID: s, EventTime: at, Status: s, ErrorCodes: codes,
				PricingBillable: int8(n), Extra: s, ConversationExpiry: at.Add(time.Duration(nsec))}},
			Inbound: []schema.InboundRow{{Source: src, EventID: s, EventTime: at, Type: s, ContextForwarded: flag,
				ErrorCodes: codes[:n&1], Extra: s, Content: s}},
			Management: []schema.ManagementRow{{Source: src, EventID: s, Kind: schema.Kind(s), EventTime: at, Raw: s, Reason: s}},
		}
		checkEventJSON(t, &rows)
	})
}
