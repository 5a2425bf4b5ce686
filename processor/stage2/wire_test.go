package stage2

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
)

// stage1Events are EVENTS messages as stage 1 writes them (its encoder
// writes json.Marshal's bytes: processor's TestEventJSONMatchesEncodingJSON),
// with every field stage 2 reads set.
func stage1Events(t testing.TB) [][]byte {
	src := schema.Source{App: "app-1", ReceivedAt: t0.Add(time.Second), RawSeq: 42}
	at := t0.Add(1500 * time.Millisecond)
	events := []processor.Event{
		{Kind: schema.KindStatus, V: 1, Row: schema.StatusRow{Source: src, EventID: "st-1", EventTime: at, WabaID: "w", PhoneNumberID: "1001",
			DisplayPhoneNumber: "15550001", MessageID: "wamid.HBgLMTU1NTAxMjM0NTY=", Status: "failed", RecipientHash: "ab12", ErrorCodes: []int32{131056, 131049},
			PricingBillable: 1, PricingModel: "PMP", PricingCategory: "marketing", ConversationExpiry: at.Add(time.Hour), Campaign: "spring", Template: "t1"}},
		{Kind: schema.KindStatus, V: 1, Row: schema.StatusRow{Source: src, EventID: "st-2", EventTime: t0, PhoneNumberID: "1001", MessageID: "wamid.2", Status: "sent"}},
		{Kind: schema.KindInbound, V: 1, Row: schema.InboundRow{Source: src, EventID: "in-1", EventTime: t0, PhoneNumberID: "1001", MessageID: "wamid.3",
			Type: "text", FromHash: "cd34", ContextForwarded: true, ErrorCodes: []int32{}}},
		{Kind: schema.KindError, V: 1, Row: schema.ErrorRow{Source: src, EventID: "st-1", Index: 1, Origin: "status", EventTime: t0, PhoneNumberID: "1001",
			Code: 131049, Title: "Marketing message not delivered"}},
		{Kind: schema.KindSendResult, V: 1, Row: schema.SendResultRow{EventID: "sr-1", EventTime: t0, PhoneNumberID: "1001", MessageID: "wamid.4",
			Status: schema.SendAccepted}},
		{Kind: schema.KindNumber, V: 1, Row: schema.ManagementRow{Source: src, EventID: "q-1", Kind: schema.KindNumber, Field: "phone_number_quality_update",
			EventTime: t0, PhoneNumberID: "1001", Event: "FLAGGED", NewValue: "TIER_1K"}},
	}
	var out [][]byte
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestReadWireStage1: what stage 1 writes takes the fast path, and reads
// as encoding/json reads it.
func TestReadWireStage1(t *testing.T) {
	for _, b := range stage1Events(t) {
		var fast, std wireEvent
		if !readWire(b, &fast) {
			t.Errorf("not read by the fast path: %s", b)
			continue
		}
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Errorf("%s:\nfast %+v\n std %+v", b, fast, std)
		}
	}
}

// TestReadWireLeavesToEncodingJSON: what the fast path cannot be sure of
// goes to encoding/json, which reads it (or refuses it) itself.
func TestReadWireLeavesToEncodingJSON(t *testing.T) {
	for _, c := range []struct{ name, in string }{
		{"an escape", `{"kind":"status","v":1,"row":{"event_id":"a\"b","phone_number_id":"1"}}`},
		{"non-ASCII", `{"kind":"status","v":1,"row":{"event_id":"é","phone_number_id":"1"}}`},
		{"a key in another case", `{"kind":"status","v":1,"row":{"Event_ID":"x","phone_number_id":"1"}}`},
		{"a null", `{"kind":"status","v":1,"row":{"event_id":null}}`},
		{"a fraction", `{"kind":"status","v":1.0,"row":{}}`},
		{"too large for int32", `{"kind":"error","v":1,"row":{"code":2147483648}}`},
		{"an index below 0", `{"kind":"error","v":1,"row":{"index":-1}}`},
		{"a bad time", `{"kind":"status","v":1,"row":{"event_time":"yesterday"}}`},
		{"trailing bytes", `{"kind":"status","v":1,"row":{}} x`},
		{"not an object", `[1]`},
		{"a leading zero", `{"kind":"status","v":01,"row":{}}`},
		{"-0 for an unsigned field", `{"kind":"error","v":1,"row":{"index":-0}}`},
		{"cut off in a string", `{"kind":"status","v":1,"row":{"event_id":"abc`},
		{"cut off in a key", `{"kind`},
		{"cut off at a key's quote", `{"`},
	} {
		var fast wireEvent
		if readWire([]byte(c.in), &fast) {
			t.Errorf("%s: read by the fast path: %s", c.name, c.in)
		}
		var got, want wireEvent
		errGot, errWant := unmarshalWire([]byte(c.in), &got), json.Unmarshal([]byte(c.in), &want)
		if (errGot == nil) != (errWant == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v; encoding/json %+v, %v", c.name, got, errGot, want, errWant)
		}
	}
}

// FuzzReadWire: whatever the fast path reads, encoding/json reads the same
// way; unmarshalWire is encoding/json's result always.
func FuzzReadWire(f *testing.F) {
	for _, b := range stage1Events(f) {
		f.Add(b)
	}
	for _, s := range []string{
		`{"kind":"status","v":1,"row":{"event_id":"a","event_id":"b","error_codes":[1],"error_codes":[2,3]},"row":{"status":"sent"}}`,
		` { "v" : 1 , "row" : { "x" : [ {}, [], true, false, -0.5e+3, "s" ] } } `,
		`{"kind":"status","v":1,"row":{"event_time":"2026-03-14T10:00:00.5+02:00","code":-7,"index":65535}}`,
		`{"v":9223372036854775808}`,
		`{"Kind":"status"}`,
		`{"v":1,"row":{"index":-0,"code":-0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, std wireEvent
		ok := readWire(b, &fast)
		errStd := json.Unmarshal(b, &std)
		if ok && (errStd != nil || !reflect.DeepEqual(fast, std)) {
			t.Fatalf("%q: fast path %+v; encoding/json %+v, %v", b, fast, std, errStd)
		}
		var got wireEvent
		if err := unmarshalWire(b, &got); (err == nil) != (errStd == nil) || !reflect.DeepEqual(got, std) {
			t.Fatalf("%q: %+v, %v; encoding/json %+v, %v", b, got, err, std, errStd)
		}
	})
}

// BenchmarkDecodeEvent: one status event as stage 1 writes it, decoded as
// stage 2 does.
func BenchmarkDecodeEvent(b *testing.B) {
	data := stage1Events(b)[0]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var ev event
		if err := decodeEvent(data, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEventEncodingJSON is the same with encoding/json alone,
// for comparison.
func BenchmarkDecodeEventEncodingJSON(b *testing.B) {
	data := stage1Events(b)[0]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var w wireEvent
		if err := json.Unmarshal(data, &w); err != nil {
			b.Fatal(err)
		}
	}
}
