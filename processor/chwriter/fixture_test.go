package chwriter

import (
	"context"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// Names shared by the fixture and the queries in schema/migrations/README.md.
const (
	number = "106540352242922"
	waba   = "102290129340398"
)

var base = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// newWriter gives the test a migrated database and a Writer on it.
func newWriter(t testing.TB, opts ...Option) (*Writer, *schematest.ClickHouseDB) {
	t.Helper()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(context.Background(), ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	return New(ch.Conn, ch.Database, opts...), ch
}

func src(seq uint64) schema.Source {
	return schema.Source{App: "default", ReceivedAt: base.Add(time.Duration(seq) * time.Second), RawSeq: seq}
}

// status returns a status of message msg to recipient (participant, for a
// group send) with its deterministic id.
func status(msg, recipient, participant, st string, at time.Time, codes ...int32) schema.StatusRow {
	r := schema.StatusRow{
		Source:             src(1),
		EventTime:          at,
		WabaID:             waba,
		PhoneNumberID:      number,
		DisplayPhoneNumber: "15550783881",
		MessageID:          msg,
		Status:             st,
		RecipientHash:      recipient,
		ParticipantHash:    participant,
		ErrorCodes:         codes,
		PricingBillable:    -1,
	}
	if participant != "" {
		r.RecipientHash, r.RecipientType, r.GroupID = "", "group", "120363040000000000@g.us"
	}
	r.EventID = schema.EventID(schema.KindStatus, number, msg, r.RecipientHash, participant, st,
		at.Format(time.RFC3339), schema.CodesPart(codes))
	return r
}

// failure returns error number index of the event owner.
func failure(owner schema.StatusRow, index uint16, code int32) schema.ErrorRow {
	return schema.ErrorRow{
		Source: owner.Source, EventID: owner.EventID, Index: index, Origin: "status",
		EventTime: owner.EventTime, WabaID: owner.WabaID, PhoneNumberID: owner.PhoneNumberID,
		MessageID: owner.MessageID, RecipientHash: owner.RecipientHash, Code: code,
		Title: "Message undeliverable", Message: "Message undeliverable",
		Details: "Message could not be delivered", Href: "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/",
		Campaign: owner.Campaign, Template: owner.Template,
	}
}

// fixture returns rows for every table: the statuses of five messages (one a
// group send to two participants), their errors, a value-level error and a
// send result's error, two inbound messages, two management events and
// three dead letters, two of them items of the same body.
func fixture() *schema.Rows {
	var rows schema.Rows
	spring := func(r schema.StatusRow) schema.StatusRow {
		r.Campaign = "spring"
		r.PricingBillable, r.PricingModel, r.PricingType, r.PricingCategory = 1, "PMP", "regular", "marketing"
		return r
	}
	a1 := spring(status("wamid.A", "r1", "", "sent", base))
	a1.ConversationID, a1.ConversationOrigin = "c0ffee", "marketing"
	a1.ConversationExpiry = base.Add(24 * time.Hour)
	a1.RecipientUserHash = "u1"
	a1.Template = "promo_v2"
	a1.Extra = `{"new_key":1}`
	a2 := spring(status("wamid.A", "r1", "", "delivered", base.Add(5*time.Second)))
	a3 := spring(status("wamid.A", "r1", "", "read", base.Add(60*time.Second)))
	b1 := spring(status("wamid.B", "r2", "", "sent", base.Add(1*time.Second)))
	b2 := spring(status("wamid.B", "r2", "", "failed", base.Add(3*time.Second), 131026))
	c1 := spring(status("wamid.C", "", "p1", "sent", base.Add(2*time.Second)))
	c2 := spring(status("wamid.C", "", "p1", "delivered", base.Add(4*time.Second)))
	c3 := spring(status("wamid.C", "", "p2", "sent", base.Add(2*time.Second)))
	d1 := status("wamid.D", "r3", "", "failed", base.Add(70*time.Second), 131049, 131000)
	d1.Campaign = "autumn"
	e1 := status("wamid.E", "r4", "", "played", base.Add(90*time.Second))
	e1.Campaign = "autumn"
	rows.Statuses = []schema.StatusRow{a1, a2, a3, b1, b2, c1, c2, c3, d1, e1}

	value := schema.ErrorRow{
		Source: src(2), EventID: schema.EventID(schema.KindOther, waba, "value-error"), Origin: "value",
		EventTime: base.Add(10 * time.Second), WabaID: waba, PhoneNumberID: number, Code: 131000,
		Title: "Something went wrong", Message: "Something went wrong",
	}
	sendResult := schema.ErrorRow{
		Source: schema.Source{App: "sender", ReceivedAt: base.Add(120 * time.Second)}, Origin: "send_result",
		EventID:   schema.EventID(schema.KindSendResult, number, "r5", "2026-03-14T15:11:26Z"),
		EventTime: base.Add(120 * time.Second), WabaID: waba, PhoneNumberID: number, RecipientHash: "r5",
		Code: 130429, Title: "Rate limit hit", Message: "Cloud API message throughput has been reached.",
		Campaign: "spring", Template: "promo_v2",
	}
	rows.Errors = []schema.ErrorRow{failure(b2, 0, 131026), failure(d1, 0, 131049), failure(d1, 1, 131000), value, sendResult}

	rows.Inbound = []schema.InboundRow{{
		Source: src(3), EventID: schema.EventID(schema.KindInbound, number, "wamid.IN1"),
		EventTime: base.Add(30 * time.Second), WabaID: waba, PhoneNumberID: number, DisplayPhoneNumber: "15550783881",
		MessageID: "wamid.IN1", Type: "interactive", FromHash: "f1", FromUserHash: "fu1", GroupID: "120363040000000000@g.us",
		ContextMessageID: "wamid.A", ContextForwarded: true, InteractiveType: "button_reply",
		ReferralSourceType: "ad", ReferralSourceID: "1200", ReferralCtwaClid: "ctwa1",
		ErrorCodes: []int32{131051}, Extra: `{"x":true}`,
	}, {
		Source: src(3), EventID: schema.EventID(schema.KindInbound, number, "wamid.IN2"),
		EventTime: base.Add(31 * time.Second), WabaID: waba, PhoneNumberID: number,
		MessageID: "wamid.IN2", Type: "text", FromHash: "f2", Content: "Is the store open on Sunday? <&> \u00e9",
	}}

	rows.Management = []schema.ManagementRow{{
		Source: src(4), EventID: schema.EventID(schema.KindNumber, "phone_number_quality_update", waba, number),
		Kind: schema.KindNumber, Field: "phone_number_quality_update", EventTime: base.Add(40 * time.Second),
		WabaID: waba, PhoneNumberID: number, DisplayPhoneNumber: "15550783881", Event: "THROUGHPUT_UPGRADE",
		OldValue: "TIER_1K", NewValue: "TIER_10K", Raw: `{"event":"THROUGHPUT_UPGRADE"}`,
	}, {
		Source: src(4), EventID: schema.EventID(schema.KindTemplate, "message_template_status_update", waba, "998877"),
		Kind: schema.KindTemplate, Field: "message_template_status_update", EventTime: base.Add(41 * time.Second),
		WabaID: waba, Event: "REJECTED", SubjectID: "998877", SubjectName: "promo_v2", Reason: "INVALID_FORMAT",
		Raw: `{"event":"REJECTED"}`,
	}}

	rows.DeadLetters = []schema.DeadLetter{
		{Source: src(5), RawMsgID: "h1", Item: "entry[0].changes[0].value.statuses[1]", Reason: "bad_status",
			Error: `status: want a string`, Body: `{"object":"whatsapp_business_account"}`},
		{Source: src(5), RawMsgID: "h1", Item: "entry[0].changes[0].value.statuses[3]", Reason: "bad_status",
			Error: `timestamp: not a number`, Body: `{"object":"whatsapp_business_account"}`},
		{Source: src(6), RawMsgID: "h2", Reason: "not_json", Error: "unexpected end of JSON input", Body: `{"object":`},
	}
	return &rows
}
