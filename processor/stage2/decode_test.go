package stage2

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

func TestDecodeEvent(t *testing.T) {
	at := t0.Unix()
	cases := []struct {
		name string
		kind schema.Kind
		row  any
		want pacing.Event
		err  error
	}{
		{"sent", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "sent", RecipientHash: "r"},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "sent", Outbound: true}, nil},
		{"delivered is evidence of its message too", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "delivered"},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "delivered", Outbound: true}, nil},
		{"read", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "read"},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "read", Outbound: true}, nil},
		{"a status without a message id is no message", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", Status: "delivered"},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "delivered"}, nil},
		{"deleted is a user's message", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "deleted"},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "deleted"}, nil},
		{"failed", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "failed", RecipientHash: "r", ErrorCodes: []int32{131056}},
			pacing.Event{Kind: schema.KindStatus, At: at, Status: "failed", Outbound: true, Codes: []int32{131056}, Recipient: "r"}, nil},
		{"inbound", schema.KindInbound, schema.InboundRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", ErrorCodes: []int32{131051}},
			pacing.Event{Kind: schema.KindInbound, At: at, Inbound: true}, nil},
		{"echo is outbound", schema.KindOther, schema.ManagementRow{EventID: "a", Kind: schema.KindOther, Field: "smb_message_echoes", EventTime: t0, PhoneNumberID: "1", Event: "text"},
			pacing.Event{Kind: schema.KindOther, At: at, Outbound: true, Coexistence: true, Field: "smb_message_echoes", Name: "text"}, nil},
		{"history", schema.KindOther, schema.ManagementRow{EventID: "a", Kind: schema.KindOther, Field: "history", EventTime: t0, PhoneNumberID: "1", Event: "HISTORY_CHUNK"},
			pacing.Event{Kind: schema.KindOther, At: at, Coexistence: true, Field: "history", Name: "HISTORY_CHUNK"}, nil},
		{"state sync", schema.KindOther, schema.ManagementRow{EventID: "a", Kind: schema.KindOther, Field: "smb_app_state_sync", EventTime: t0, PhoneNumberID: "1", Event: "add"},
			pacing.Event{Kind: schema.KindOther, At: at, Coexistence: true, Field: "smb_app_state_sync", Name: "add"}, nil},
		{"quality", schema.KindNumber, schema.ManagementRow{EventID: "a", Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: t0, PhoneNumberID: "1", Event: "FLAGGED", NewValue: "TIER_250"},
			pacing.Event{Kind: schema.KindNumber, At: at, Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"}, nil},
		{"template has no number", schema.KindTemplate, schema.ManagementRow{EventID: "a", Kind: schema.KindTemplate, Field: "message_template_status_update", EventTime: t0},
			pacing.Event{}, errNoNumber},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := json.Marshal(processor.Event{Kind: c.kind, V: 1, Row: c.row})
			if err != nil {
				t.Fatal(err)
			}
			var ev event
			err = decodeEvent(data, &ev)
			if !errors.Is(err, c.err) {
				t.Fatalf("got error %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			if ev.id != "a" || ev.number != "1" || !reflect.DeepEqual(ev.e, c.want) {
				t.Fatalf("got %+v, want %+v", ev.e, c.want)
			}
		})
	}
	for _, bad := range []string{`{`, `{"kind":"status","v":2,"row":{"phone_number_id":"1"}}`, `{"kind":"status","v":1,"row":{"phone_number_id":"1","status":"sent"}}`} {
		var ev event
		if err := decodeEvent([]byte(bad), &ev); err == nil || errors.Is(err, errNoNumber) {
			t.Errorf("%s: got %v, want a decoding error", bad, err)
		}
	}
}

// A message counts once as outbound whether its send result or a status
// comes first: each is evidence of it under its message id. A failed send
// result carries its codes and recipient, keyed by its event id, and is
// no evidence that the message went out.
func TestDecodeSendResult(t *testing.T) {
	at := t0.Unix()
	cases := []struct {
		name    string
		kind    schema.Kind
		row     any
		wantID  string
		wantMsg string
		want    pacing.Event
	}{
		{"sent status", schema.KindStatus, schema.StatusRow{EventID: "a", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: "sent"},
			"a", "wamid.1", pacing.Event{Kind: schema.KindStatus, At: at, Status: "sent", Outbound: true}},
		{"accepted", schema.KindSendResult, schema.SendResultRow{EventID: "b", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: schema.SendAccepted, RecipientHash: "r"},
			"b", "wamid.1", pacing.Event{Kind: schema.KindSendResult, At: at, Status: "accepted", Outbound: true}},
		{"accepted without message id", schema.KindSendResult, schema.SendResultRow{EventID: "b", EventTime: t0, PhoneNumberID: "1", Status: schema.SendAccepted},
			"b", "", pacing.Event{Kind: schema.KindSendResult, At: at, Status: "accepted", Outbound: true}},
		{"failed", schema.KindSendResult, schema.SendResultRow{EventID: "c", EventTime: t0, PhoneNumberID: "1", MessageID: "wamid.1", Status: schema.SendFailed, RecipientHash: "r", ErrorCodes: []int32{130429}},
			"c", "", pacing.Event{Kind: schema.KindSendResult, At: at, Status: "failed", Codes: []int32{130429}, Recipient: "r"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := json.Marshal(processor.Event{Kind: c.kind, V: 1, Row: c.row})
			if err != nil {
				t.Fatal(err)
			}
			var ev event
			if err := decodeEvent(data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.id != c.wantID || ev.msg != c.wantMsg || ev.number != "1" || !reflect.DeepEqual(ev.e, c.want) {
				t.Fatalf("got id %q message %q %+v, want %q %q %+v", ev.id, ev.msg, ev.e, c.wantID, c.wantMsg, c.want)
			}
		})
	}
}

// An event whose number no subject or key can carry is bad, not a state.
func TestDecodeRefusesImpossibleNumber(t *testing.T) {
	var ev event
	data := []byte(`{"kind":"status","v":1,"row":{"event_id":"x","event_time":"2026-03-14T10:00:00Z","phone_number_id":"` + strings.Repeat("7", 65) + `","status":"sent","message_id":"m"}}`)
	if err := decodeEvent(data, &ev); err == nil || errors.Is(err, errNoNumber) {
		t.Fatalf("decode: %v", err)
	}
}
