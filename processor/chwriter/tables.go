package chwriter

import (
	"time"

	"github.com/wahook/wahook/schema"
)

// table is a ClickHouse table of rows T and its columns, in the order of the
// INSERT's column list. The column names are those of schema/migrations/sql;
// TestColumnsMatchTables checks them against the migrated tables.
type table[T any] struct {
	name string
	cols []column[T]
}

// Source columns, shared by every table.
func sourceCols[T any](src func(*T) *schema.Source) []column[T] {
	return []column[T]{
		dateTime("received_at", func(r *T) time.Time { return src(r).ReceivedAt }),
		str("app", func(r *T) string { return src(r).App }),
		uint64Col("raw_seq", func(r *T) uint64 { return src(r).RawSeq }),
	}
}

var statusEvents = table[schema.StatusRow]{name: "status_events", cols: append([]column[schema.StatusRow]{
	str("event_id", func(r *schema.StatusRow) string { return r.EventID }),
	dateTime("event_time", func(r *schema.StatusRow) time.Time { return r.EventTime }),
	str("waba_id", func(r *schema.StatusRow) string { return r.WabaID }),
	str("phone_number_id", func(r *schema.StatusRow) string { return r.PhoneNumberID }),
	str("display_phone_number", func(r *schema.StatusRow) string { return r.DisplayPhoneNumber }),
	str("message_id", func(r *schema.StatusRow) string { return r.MessageID }),
	str("status", func(r *schema.StatusRow) string { return r.Status }),
	str("recipient_hash", func(r *schema.StatusRow) string { return r.RecipientHash }),
	str("recipient_user_hash", func(r *schema.StatusRow) string { return r.RecipientUserHash }),
	str("recipient_type", func(r *schema.StatusRow) string { return r.RecipientType }),
	str("group_id", func(r *schema.StatusRow) string { return r.GroupID }),
	str("participant_hash", func(r *schema.StatusRow) string { return r.ParticipantHash }),
	int32Array("error_codes", func(r *schema.StatusRow) []int32 { return r.ErrorCodes }),
	int8Col("pricing_billable", func(r *schema.StatusRow) int8 { return r.PricingBillable }),
	str("pricing_model", func(r *schema.StatusRow) string { return r.PricingModel }),
	str("pricing_type", func(r *schema.StatusRow) string { return r.PricingType }),
	str("pricing_category", func(r *schema.StatusRow) string { return r.PricingCategory }),
	str("conversation_id", func(r *schema.StatusRow) string { return r.ConversationID }),
	str("conversation_origin", func(r *schema.StatusRow) string { return r.ConversationOrigin }),
	dateTime("conversation_expiry", func(r *schema.StatusRow) time.Time { return r.ConversationExpiry }),
	str("campaign", func(r *schema.StatusRow) string { return r.Campaign }),
	str("template", func(r *schema.StatusRow) string { return r.Template }),
	str("extra", func(r *schema.StatusRow) string { return r.Extra }),
}, sourceCols(func(r *schema.StatusRow) *schema.Source { return &r.Source })...)}

var errorEvents = table[schema.ErrorRow]{name: "errors", cols: append([]column[schema.ErrorRow]{
	str("event_id", func(r *schema.ErrorRow) string { return r.EventID }),
	uint16Col("error_index", func(r *schema.ErrorRow) uint16 { return r.Index }),
	str("origin", func(r *schema.ErrorRow) string { return r.Origin }),
	dateTime("event_time", func(r *schema.ErrorRow) time.Time { return r.EventTime }),
	str("waba_id", func(r *schema.ErrorRow) string { return r.WabaID }),
	str("phone_number_id", func(r *schema.ErrorRow) string { return r.PhoneNumberID }),
	str("message_id", func(r *schema.ErrorRow) string { return r.MessageID }),
	str("recipient_hash", func(r *schema.ErrorRow) string { return r.RecipientHash }),
	int32Col("code", func(r *schema.ErrorRow) int32 { return r.Code }),
	str("title", func(r *schema.ErrorRow) string { return r.Title }),
	str("message", func(r *schema.ErrorRow) string { return r.Message }),
	str("details", func(r *schema.ErrorRow) string { return r.Details }),
	str("href", func(r *schema.ErrorRow) string { return r.Href }),
	str("campaign", func(r *schema.ErrorRow) string { return r.Campaign }),
	str("template", func(r *schema.ErrorRow) string { return r.Template }),
}, sourceCols(func(r *schema.ErrorRow) *schema.Source { return &r.Source })...)}

var inboundMessages = table[schema.InboundRow]{name: "inbound_messages", cols: append([]column[schema.InboundRow]{
	str("event_id", func(r *schema.InboundRow) string { return r.EventID }),
	dateTime("event_time", func(r *schema.InboundRow) time.Time { return r.EventTime }),
	str("waba_id", func(r *schema.InboundRow) string { return r.WabaID }),
	str("phone_number_id", func(r *schema.InboundRow) string { return r.PhoneNumberID }),
	str("display_phone_number", func(r *schema.InboundRow) string { return r.DisplayPhoneNumber }),
	str("message_id", func(r *schema.InboundRow) string { return r.MessageID }),
	str("type", func(r *schema.InboundRow) string { return r.Type }),
	str("from_hash", func(r *schema.InboundRow) string { return r.FromHash }),
	str("from_user_hash", func(r *schema.InboundRow) string { return r.FromUserHash }),
	str("group_id", func(r *schema.InboundRow) string { return r.GroupID }),
	str("context_message_id", func(r *schema.InboundRow) string { return r.ContextMessageID }),
	boolCol("context_forwarded", func(r *schema.InboundRow) bool { return r.ContextForwarded }),
	str("interactive_type", func(r *schema.InboundRow) string { return r.InteractiveType }),
	str("referral_source_type", func(r *schema.InboundRow) string { return r.ReferralSourceType }),
	str("referral_source_id", func(r *schema.InboundRow) string { return r.ReferralSourceID }),
	str("referral_ctwa_clid", func(r *schema.InboundRow) string { return r.ReferralCtwaClid }),
	int32Array("error_codes", func(r *schema.InboundRow) []int32 { return r.ErrorCodes }),
	str("extra", func(r *schema.InboundRow) string { return r.Extra }),
	str("content", func(r *schema.InboundRow) string { return r.Content }), // 0009; "" unless content storage is on
}, sourceCols(func(r *schema.InboundRow) *schema.Source { return &r.Source })...)}

var managementEvents = table[schema.ManagementRow]{name: "management_events", cols: append([]column[schema.ManagementRow]{
	str("event_id", func(r *schema.ManagementRow) string { return r.EventID }),
	str("kind", func(r *schema.ManagementRow) string { return string(r.Kind) }),
	str("field", func(r *schema.ManagementRow) string { return r.Field }),
	dateTime("event_time", func(r *schema.ManagementRow) time.Time { return r.EventTime }),
	str("waba_id", func(r *schema.ManagementRow) string { return r.WabaID }),
	str("phone_number_id", func(r *schema.ManagementRow) string { return r.PhoneNumberID }),
	str("display_phone_number", func(r *schema.ManagementRow) string { return r.DisplayPhoneNumber }),
	str("event", func(r *schema.ManagementRow) string { return r.Event }),
	str("subject_id", func(r *schema.ManagementRow) string { return r.SubjectID }),
	str("subject_name", func(r *schema.ManagementRow) string { return r.SubjectName }),
	str("old_value", func(r *schema.ManagementRow) string { return r.OldValue }),
	str("new_value", func(r *schema.ManagementRow) string { return r.NewValue }),
	str("reason", func(r *schema.ManagementRow) string { return r.Reason }),
	str("raw", func(r *schema.ManagementRow) string { return r.Raw }),
}, sourceCols(func(r *schema.ManagementRow) *schema.Source { return &r.Source })...)}

var sendResults = table[schema.SendResultRow]{name: "send_results", cols: append([]column[schema.SendResultRow]{
	str("event_id", func(r *schema.SendResultRow) string { return r.EventID }),
	dateTime("event_time", func(r *schema.SendResultRow) time.Time { return r.EventTime }),
	str("waba_id", func(r *schema.SendResultRow) string { return r.WabaID }),
	str("phone_number_id", func(r *schema.SendResultRow) string { return r.PhoneNumberID }),
	str("message_id", func(r *schema.SendResultRow) string { return r.MessageID }),
	str("request_id", func(r *schema.SendResultRow) string { return r.RequestID }),
	str("recipient_hash", func(r *schema.SendResultRow) string { return r.RecipientHash }),
	str("status", func(r *schema.SendResultRow) string { return r.Status }),
	int32Array("error_codes", func(r *schema.SendResultRow) []int32 { return r.ErrorCodes }),
	str("campaign", func(r *schema.SendResultRow) string { return r.Campaign }),
	str("template", func(r *schema.SendResultRow) string { return r.Template }),
}, sourceCols(func(r *schema.SendResultRow) *schema.Source { return &r.Source })...)}

var deadLetters = table[schema.DeadLetter]{name: "dead_letters", cols: append([]column[schema.DeadLetter]{
	str("raw_msg_id", func(r *schema.DeadLetter) string { return r.RawMsgID }),
	str("item", func(r *schema.DeadLetter) string { return r.Item }),
	str("reason", func(r *schema.DeadLetter) string { return r.Reason }),
	str("error", func(r *schema.DeadLetter) string { return r.Error }),
	str("body", func(r *schema.DeadLetter) string { return r.Body }),
}, sourceCols(func(r *schema.DeadLetter) *schema.Source { return &r.Source })...)}
