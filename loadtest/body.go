package loadtest

import (
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
)

// StatusBody returns a realistic status webhook with a unique message id,
// of size bytes (more when the fields alone are longer), with the fields
// Meta sends on a delivered status (pricing, conversation,
// biz_opaque_callback_data), stamped at (unix seconds): Meta stamps a
// status when it happens, seconds before the webhook. The message id ends
// in 16 hex digits, a bijection of i that scrambles it, as the tail of
// Meta's ids is random: consecutive bodies' messages do not sort next to
// each other in ClickHouse, as real ones do not.
func StatusBody(i uint64, size int, at int64) []byte {
	id := strconv.FormatUint(i, 10)
	b := make([]byte, 0, size+64)
	b = append(b, `{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.HBgLMTU1NTc4MTAwMDEVAgARGBI`...)
	b = appendHex16(b, scramble(i))
	b = append(b, `","status":"delivered","timestamp":"`...)
	b = strconv.AppendInt(b, at, 10)
	b = append(b, `","recipient_id":"4915155500734","conversation":{"id":"c6b2a8f5d1e4b3a29f8e7d6c5b4a3921","origin":{"type":"marketing"}},"pricing":{"billable":true,"pricing_model":"PMP","category":"marketing","type":"regular"},"biz_opaque_callback_data":"campaign=winter-sale;batch=`...)
	b = append(b, id...)
	// The callback data (up to 512 characters at Meta) takes the padding.
	const tail = `"}]},"field":"messages"}]}]}`
	for pad := size - len(b) - len(tail); pad > 0; pad-- {
		b = append(b, 'x')
	}
	return append(b, tail...)
}

// Body appends the JSON body of p to dst, as Meta nests it: one entry per
// account (number events in entries of their own, with the event's time),
// one change per number and field, the items in the order they came due.
// The same POST always makes the same bytes. It is safe for concurrent use.
func (g *Traffic) Body(dst []byte, p *Post) []byte { return g.fleet.appendBody(dst, p.items) }

// entryKey and changeKey group the items of a body.
type entryKey struct {
	waba string
	at   int64 // number events only: entry.time
}

type changeKey struct {
	number int32
	kind   itemKind
	one    int // number events: the item's index, one change each
}

func (f *fleet) keys(it *item, i int) (entryKey, changeKey) {
	e := entryKey{waba: f.numbers[it.number].WABAID}
	c := changeKey{number: it.number, kind: it.kind, one: -1}
	if it.kind == itemNumber {
		e.at, c.one = it.at, i
	}
	return e, c
}

func (f *fleet) appendBody(b []byte, items []item) []byte {
	// Rank entries and changes by first appearance, then write the items
	// grouped, keeping their order within a change.
	entries := map[entryKey]int{}
	changes := map[changeKey]int{}
	order := make([]int, len(items))
	for i := range items {
		e, c := f.keys(&items[i], i)
		if _, ok := entries[e]; !ok {
			entries[e] = len(entries)
		}
		if _, ok := changes[c]; !ok {
			changes[c] = len(changes)
		}
		order[i] = i
	}
	rank := func(i int) (int, int) {
		e, c := f.keys(&items[i], i)
		return entries[e], changes[c]
	}
	sort.SliceStable(order, func(a, c int) bool {
		ea, ca := rank(order[a])
		ec, cc := rank(order[c])
		return ea < ec || ea == ec && ca < cc
	})
	b = append(b, `{"object":"whatsapp_business_account","entry":[`...)
	for k := 0; k < len(order); {
		i := order[k]
		e, _ := f.keys(&items[i], i)
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		b = append(b, e.waba...)
		b = append(b, '"')
		if items[i].kind == itemNumber {
			b = append(b, `,"time":`...)
			b = strconv.AppendInt(b, e.at, 10)
		}
		b = append(b, `,"changes":[`...)
		for first := true; k < len(order); first = false {
			i := order[k]
			ek, ck := f.keys(&items[i], i)
			if ek != e {
				break
			}
			if !first {
				b = append(b, ',')
			}
			end := k + 1
			for end < len(order) {
				ek2, ck2 := f.keys(&items[order[end]], order[end])
				if ek2 != ek || ck2 != ck {
					break
				}
				end++
			}
			b = f.appendChange(b, items, order[k:end])
			k = end
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}

// appendChange writes one change: the items idx of one number and kind.
func (f *fleet) appendChange(b []byte, items []item, idx []int) []byte {
	first := &items[idx[0]]
	num := &f.numbers[first.number]
	if first.kind == itemNumber {
		ev := numberEvents[first.sub]
		b = append(b, `{"value":{"display_phone_number":"`...)
		b = append(b, num.Display...)
		b = append(b, `","event":"`...)
		b = append(b, ev.event...)
		if ev.old != "" {
			b = append(b, `","old_limit":"`...)
			b = append(b, ev.old...)
		}
		b = append(b, `","current_limit":"`...)
		b = append(b, ev.current...)
		if first.sub == eventThroughput {
			b = append(b, `","max_daily_conversations_per_business":"TIER_UNLIMITED`...)
		}
		return append(b, `"},"field":"phone_number_quality_update"}`...)
	}
	b = append(b, `{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"`...)
	b = append(b, num.Display...)
	b = append(b, `","phone_number_id":"`...)
	b = append(b, num.PhoneNumberID...)
	b = append(b, `"},`...)
	field := "messages"
	switch first.kind {
	case itemStatus:
		b = append(b, `"statuses":[`...)
		for j, i := range idx {
			if j > 0 {
				b = append(b, ',')
			}
			b = f.appendStatus(b, &items[i])
		}
	case itemInbound:
		b = append(b, `"contacts":[`...)
		for j, i := range idx {
			if j > 0 {
				b = append(b, ',')
			}
			it := &items[i]
			b = append(b, `{"profile":{"name":"Load Test User `...)
			b = strconv.AppendUint(b, uint64(it.seq%1000), 10)
			b = append(b, `"},"wa_id":"`...)
			b = append(b, recipient(it.number, it.seq, true)...)
			b = append(b, `"}`...)
		}
		b = append(b, `],"messages":[`...)
		for j, i := range idx {
			if j > 0 {
				b = append(b, ',')
			}
			b = f.appendInbound(b, &items[i])
		}
	case itemEcho:
		field = "smb_message_echoes"
		b = append(b, `"message_echoes":[`...)
		for j, i := range idx {
			if j > 0 {
				b = append(b, ',')
			}
			it := &items[i]
			b = append(b, `{"from":"`...)
			b = append(b, num.Display...)
			b = append(b, `","to":"`...)
			b = append(b, recipient(it.number, it.seq, false)...)
			b = append(b, `","id":"`...)
			b = f.appendMessageID(b, idEcho, it.number, it.seq)
			b = append(b, '"')
			b = appendTimestamp(b, it.at)
			b = append(b, `,"type":"text","text":{"body":"Typed in the Business app"}}`...)
		}
	}
	b = append(b, `]},"field":"`...)
	b = append(b, field...)
	return append(b, `"}`...)
}

// appendTimestamp writes ,"timestamp":"<unix seconds>" (a string, as Meta
// sends it inside messages values).
func appendTimestamp(b []byte, at int64) []byte {
	b = append(b, `,"timestamp":"`...)
	b = strconv.AppendInt(b, at, 10)
	return append(b, '"')
}

// pricing categories of outbound messages, by sequence modulo 20.
func category(seq uint32) (cat, typ string) {
	switch r := seq % 20; {
	case r < 12:
		return "marketing", "regular"
	case r < 17:
		return "utility", "regular"
	case r < 19:
		return "authentication", "regular"
	}
	return "service", "free_customer_service"
}

func (f *fleet) appendStatus(b []byte, it *item) []byte {
	b = append(b, `{"id":"`...)
	b = f.appendMessageID(b, idOutbound, it.number, it.seq)
	b = append(b, `","status":"`...)
	b = append(b, statusNames[it.sub]...)
	b = append(b, '"')
	b = appendTimestamp(b, it.at)
	b = append(b, `,"recipient_id":"`...)
	b = append(b, recipient(it.number, it.seq, false)...)
	b = append(b, '"')
	// Pricing comes on sent and on one of delivered and read, never on
	// failed (docs/meta-webhooks.md 5.4).
	if it.sub == statusSent || it.sub == statusDelivered {
		cat, typ := category(it.seq)
		b = append(b, `,"pricing":{"billable":`...)
		b = strconv.AppendBool(b, typ == "regular")
		b = append(b, `,"pricing_model":"PMP","type":"`...)
		b = append(b, typ...)
		b = append(b, `","category":"`...)
		b = append(b, cat...)
		b = append(b, `"}`...)
	}
	b = append(b, `,"biz_opaque_callback_data":"campaign=loadtest-`...)
	b = strconv.AppendUint(b, uint64(it.seq/500%7), 10)
	b = append(b, '"')
	if it.sub == statusFailed {
		title, details := errorText(it.code)
		b = append(b, `,"errors":[{"code":`...)
		b = strconv.AppendInt(b, int64(it.code), 10)
		b = append(b, `,"title":"`...)
		b = append(b, title...)
		b = append(b, `","message":"`...)
		b = append(b, title...)
		b = append(b, `","error_data":{"details":"`...)
		b = append(b, details...)
		b = append(b, `"},"href":"https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}]`...)
	}
	return append(b, '}')
}

func (f *fleet) appendInbound(b []byte, it *item) []byte {
	b = append(b, '{')
	if it.code > 0 && it.sub != inReaction {
		b = append(b, `"context":{"from":"`...)
		b = append(b, f.numbers[it.number].Display...)
		b = append(b, `","id":"`...)
		b = f.appendMessageID(b, idOutbound, it.number, uint32(it.code-1))
		b = append(b, `"},`...)
	}
	b = append(b, `"from":"`...)
	b = append(b, recipient(it.number, it.seq, true)...)
	b = append(b, `","id":"`...)
	b = f.appendMessageID(b, idInbound, it.number, it.seq)
	b = append(b, '"')
	b = appendTimestamp(b, it.at)
	switch it.sub {
	case inButton:
		b = append(b, `,"type":"interactive","interactive":{"type":"button_reply","button_reply":{"id":"reply-yes","title":"Yes"}}}`...)
	case inImage:
		b = append(b, `,"type":"image","image":{"caption":"Photo","mime_type":"image/jpeg","sha256":"0IwPugSN4OXV7feQc4bzQlAXJlaTm7Vjek2PQnzj3Uw=","id":"`...)
		b = strconv.AppendUint(b, mediaID(it.number, it.seq), 10)
		b = append(b, `"}}`...)
	case inReaction:
		b = append(b, `,"type":"reaction","reaction":{"message_id":"`...)
		b = f.appendMessageID(b, idOutbound, it.number, uint32(it.code-1))
		b = append(b, `","emoji":"\ud83d\udc4d"}}`...)
	default:
		b = append(b, `,"type":"text","text":{"body":"Load test message `...)
		b = strconv.AppendUint(b, uint64(it.seq), 10)
		b = append(b, `"}}`...)
	}
	return b
}

// scramble is splitmix64's finalizer: a bijection of uint64, so distinct
// indexes make distinct ids, spread over the whole range.
func scramble(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// appendHex16 appends x as 16 lowercase hex digits.
func appendHex16(b []byte, x uint64) []byte {
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], x)
	return hex.AppendEncode(b, be[:])
}

// mediaID is the media id of number's image seq: one per number and seq.
// (Without the brackets Go adds the base first and ORs seq into its low
// bits, and seqs that differed only in those bits shared an id.)
func mediaID(number int32, seq uint32) uint64 {
	return 8_000_000_000_000_000 + (uint64(number)<<32 | uint64(seq))
}
