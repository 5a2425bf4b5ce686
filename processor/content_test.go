package processor

import (
	"reflect"
	"testing"

	"github.com/wahook/wahook/schema"
)

// TestNormalizeContent: with content storage on, each inbound message of
// the fixtures keeps what its user wrote or chose, and nothing for types
// without text; with it off (the default) no row has content, and the
// event ids and every other column are the same both ways.
func TestNormalizeContent(t *testing.T) {
	want := map[string]map[string]string{ // file -> message type (and index when repeated) -> content
		normFixtures + "/inbound_text_reply.json": {"text": "Yes please, book me for 3pm on Thursday."},
		normFixtures + "/inbound_media_types.json": {"image": "Crack on the left hinge", "video": "How it rattles",
			"audio": "", "document": "", "sticker": ""},
		normFixtures + "/inbound_interactive_replies.json": {"interactive#0": "Reschedule", "interactive#1": "Thu 18 Jun, 15:00",
			"interactive#2": ""}, // nfm_reply: a flow's answers are data, not text
		normFixtures + "/inbound_location_contacts.json": {"location": "British Museum\nGreat Russell St, London WC1B 3DG",
			"contacts": ""},
		normFixtures + "/inbound_order.json":                       {"order": "Please deliver after 6pm"},
		normFixtures + "/inbound_reaction.json":                    {"reaction#0": "👍", "reaction#1": ""},
		normFixtures + "/inbound_template_button.json":             {"button": "Parar promoções"},
		normFixtures + "/inbound_system_user_changed_number.json":  {"system": ""},
		normFixtures + "/inbound_unsupported.json":                 {"unsupported": ""},
		normFixtures + "/inbound_referral_ctwa.json":               {"text": "Oi, vi o anúncio do frete grátis"},
		normFixtures + "/group_message_and_statuses.json":          {"text": "Can we move the meetup to 7?"},
		normFixtures + "/batch_multiple_entries_mixed_fields.json": {"text": "Is the store open on Sunday?"},
		normTestdata + "/inbound_more_types.json": {"request_welcome": "", "edit": "Corrected text", "revoke": "",
			"text": "Is this in stock? 😀 café", "location": "", "interactive": "", "poll_vote": "", "reaction": "",
			"image": "", "system": "", "audio": ""},
	}
	h := schema.NewHasher(normKey)
	on, off := NewNormalizer(h, WithContent(true)), NewNormalizer(h)
	for path, types := range want {
		body := readBody(t, ".", path)
		rowsOn, rowsOff := normalizeBody(on, body, normSource(0)), normalizeBody(off, body, normSource(0))
		if len(rowsOn.Inbound) != len(types) {
			t.Errorf("%s: %d inbound rows, want %d", path, len(rowsOn.Inbound), len(types))
		}
		seen := map[string]int{}
		for i, r := range rowsOn.Inbound {
			key := r.Type
			if _, ok := types[key]; !ok {
				key = r.Type + "#" + string(rune('0'+seen[r.Type]))
			}
			seen[r.Type]++
			w, ok := types[key]
			if !ok {
				t.Errorf("%s: unexpected %s message %s", path, r.Type, r.MessageID)
				continue
			}
			if r.Content != w {
				t.Errorf("%s: %s content %q, want %q", path, key, r.Content, w)
			}
			o := rowsOff.Inbound[i]
			if o.Content != "" {
				t.Errorf("%s: %s has content %q with content storage off", path, key, o.Content)
			}
			o.Content = r.Content
			if o.EventID != r.EventID || !reflect.DeepEqual(o, r) {
				t.Errorf("%s: %s differs beyond content between off and on:\n%+v\n%+v", path, key, o, r)
			}
		}
		if len(rowsOn.Statuses) != len(rowsOff.Statuses) || len(rowsOn.Errors) != len(rowsOff.Errors) ||
			len(rowsOn.Management) != len(rowsOff.Management) {
			t.Errorf("%s: the switch changed other rows", path)
		}
	}
}

// TestContentEditDepth: content follows an edit to the edited message, and
// a deep nest of edits (which the decoder does not follow past the first
// anyway) ends with no content.
func TestContentEditDepth(t *testing.T) {
	n := NewNormalizer(schema.NewHasher(normKey), WithContent(true))
	for _, c := range []struct {
		edits int
		want  string
	}{{0, "deep"}, {1, "deep"}, {maxEditDepth + 5, ""}} {
		inner := `"type":"text","text":{"body":"deep"}`
		for i := 0; i < c.edits; i++ {
			inner = `"type":"edit","edit":{"original_message_id":"wamid.X","message":{` + inner + `}}`
		}
		body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"display_phone_number":"1","phone_number_id":"2"},"messages":[` +
			`{"from":"4915155500001","id":"wamid.E","timestamp":"1781514312",` + inner + `}]}}]}]}`)
		rows := normalizeBody(n, body, normSource(0))
		if len(rows.Inbound) != 1 {
			t.Fatalf("%d edits: %d inbound rows, dead letters %+v", c.edits, len(rows.Inbound), rows.DeadLetters)
		}
		if got := rows.Inbound[0].Content; got != c.want {
			t.Errorf("%d edits: content %q, want %q", c.edits, got, c.want)
		}
	}
}
