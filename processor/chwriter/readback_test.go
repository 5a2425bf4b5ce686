package chwriter

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// These read the tables back into rows, with column lists and scans written
// independently of tables.go, so that a column written from the wrong field
// shows.

func readStatuses(t *testing.T, ch *schematest.ClickHouseDB) []schema.StatusRow {
	return readAll(t, ch, "SELECT event_id, event_time, waba_id, phone_number_id, display_phone_number, message_id, "+
		"status, recipient_hash, recipient_user_hash, recipient_type, group_id, participant_hash, error_codes, "+
		"pricing_billable, pricing_model, pricing_type, pricing_category, conversation_id, conversation_origin, "+
		"conversation_expiry, campaign, template, extra, received_at, app, raw_seq FROM status_events FINAL ORDER BY event_id",
		func(r *schema.StatusRow) []any {
			return []any{&r.EventID, &r.EventTime, &r.WabaID, &r.PhoneNumberID, &r.DisplayPhoneNumber, &r.MessageID,
				&r.Status, &r.RecipientHash, &r.RecipientUserHash, &r.RecipientType, &r.GroupID, &r.ParticipantHash, &r.ErrorCodes,
				&r.PricingBillable, &r.PricingModel, &r.PricingType, &r.PricingCategory, &r.ConversationID, &r.ConversationOrigin,
				&r.ConversationExpiry, &r.Campaign, &r.Template, &r.Extra, &r.ReceivedAt, &r.App, &r.RawSeq}
		}, nil)
}

func readErrors(t *testing.T, ch *schematest.ClickHouseDB) []schema.ErrorRow {
	return readAll(t, ch, "SELECT event_id, error_index, origin, event_time, waba_id, phone_number_id, message_id, "+
		"recipient_hash, code, title, message, details, href, campaign, template, received_at, app, raw_seq "+
		"FROM errors FINAL ORDER BY event_id, error_index",
		func(r *schema.ErrorRow) []any {
			return []any{&r.EventID, &r.Index, &r.Origin, &r.EventTime, &r.WabaID, &r.PhoneNumberID, &r.MessageID,
				&r.RecipientHash, &r.Code, &r.Title, &r.Message, &r.Details, &r.Href, &r.Campaign, &r.Template,
				&r.ReceivedAt, &r.App, &r.RawSeq}
		}, nil)
}

func readInbound(t *testing.T, ch *schematest.ClickHouseDB) []schema.InboundRow {
	var forwarded uint8
	return readAll(t, ch, "SELECT event_id, event_time, waba_id, phone_number_id, display_phone_number, message_id, "+
		"type, from_hash, from_user_hash, group_id, context_message_id, context_forwarded, interactive_type, "+
		"referral_source_type, referral_source_id, referral_ctwa_clid, error_codes, extra, content, received_at, app, raw_seq "+
		"FROM inbound_messages FINAL ORDER BY event_id",
		func(r *schema.InboundRow) []any {
			return []any{&r.EventID, &r.EventTime, &r.WabaID, &r.PhoneNumberID, &r.DisplayPhoneNumber, &r.MessageID,
				&r.Type, &r.FromHash, &r.FromUserHash, &r.GroupID, &r.ContextMessageID, &forwarded, &r.InteractiveType,
				&r.ReferralSourceType, &r.ReferralSourceID, &r.ReferralCtwaClid, &r.ErrorCodes, &r.Extra, &r.Content,
				&r.ReceivedAt, &r.App, &r.RawSeq}
		}, func(r *schema.InboundRow) { r.ContextForwarded = forwarded == 1 })
}

func readManagement(t *testing.T, ch *schematest.ClickHouseDB) []schema.ManagementRow {
	var kind string
	return readAll(t, ch, "SELECT event_id, kind, field, event_time, waba_id, phone_number_id, display_phone_number, "+
		"event, subject_id, subject_name, old_value, new_value, reason, raw, received_at, app, raw_seq "+
		"FROM management_events FINAL ORDER BY event_id",
		func(r *schema.ManagementRow) []any {
			return []any{&r.EventID, &kind, &r.Field, &r.EventTime, &r.WabaID, &r.PhoneNumberID, &r.DisplayPhoneNumber,
				&r.Event, &r.SubjectID, &r.SubjectName, &r.OldValue, &r.NewValue, &r.Reason, &r.Raw,
				&r.ReceivedAt, &r.App, &r.RawSeq}
		}, func(r *schema.ManagementRow) { r.Kind = schema.Kind(kind) })
}

func readDeadLetters(t *testing.T, ch *schematest.ClickHouseDB) []schema.DeadLetter {
	return readAll(t, ch, "SELECT received_at, app, raw_seq, raw_msg_id, item, reason, error, body "+
		"FROM dead_letters FINAL ORDER BY received_at, raw_msg_id, item",
		func(r *schema.DeadLetter) []any {
			return []any{&r.ReceivedAt, &r.App, &r.RawSeq, &r.RawMsgID, &r.Item, &r.Reason, &r.Error, &r.Body}
		}, nil)
}

// readAll runs query and scans each row into a T through dest; after, when
// not nil, finishes a row from values scanned into temporaries.
func readAll[T any](t *testing.T, ch *schematest.ClickHouseDB, query string, dest func(*T) []any, after func(*T)) []T {
	t.Helper()
	rows, err := ch.Conn.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var r T
		if err := rows.Scan(dest(&r)...); err != nil {
			t.Fatalf("scan: %v", err)
		}
		if after != nil {
			after(&r)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// normalize makes a row as written comparable with the row read back: times
// in UTC at second precision (the zero time is read back as the Unix epoch)
// and empty arrays as nil, in every field of every element of rows.
func normalize[T any](rows []T) []T {
	out := append([]T(nil), rows...)
	for i := range out {
		normalizeValue(reflect.ValueOf(&out[i]).Elem())
	}
	return out
}

var timeType = reflect.TypeOf(time.Time{})

func normalizeValue(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		tm := v.Interface().(time.Time)
		if tm.IsZero() {
			tm = time.Unix(0, 0)
		}
		v.Set(reflect.ValueOf(tm.UTC().Truncate(time.Second)))
	case v.Kind() == reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			normalizeValue(v.Field(i))
		}
	case v.Kind() == reflect.Slice && v.Len() == 0:
		v.Set(reflect.Zero(v.Type()))
	}
}

// sorted returns a sorted copy of rows.
func sorted[T any](rows []T, cmp func(a, b T) int) []T {
	out := slices.Clone(rows)
	slices.SortStableFunc(out, cmp)
	return out
}

func checkRows[T any](t *testing.T, table string, got, want []T) {
	t.Helper()
	got, want = normalize(got), normalize(want)
	if len(got) != len(want) {
		t.Errorf("%s: got %d rows, want %d:\n got %+v\nwant %+v", table, len(got), len(want), got, want)
		return
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("%s row %d:\n got %+v\nwant %+v", table, i, got[i], want[i])
		}
	}
}
