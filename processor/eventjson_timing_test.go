package processor

import (
	"strings"
	"testing"

	"github.com/wahook/wahook/schema"
)

// BenchmarkEventJSON encodes the events of 1,000 statuses (mixed sent,
// delivered, read, failed, as from manyStatusesBody) and of the inbound
// fixtures: "encoding_json" is json.Marshal(Event{...}), what PublishEvents
// did before; "append" is the hand-written encoder into a reused buffer.
//
//	go test ./processor -run '^$' -bench EventJSON -benchmem -count 3
func BenchmarkEventJSON(b *testing.B) {
	h := schema.NewHasher(normKey)
	statuses := normalizeBody(NewNormalizer(h), manyStatusesBody(1000), normSource(1))
	var inbound schema.Rows
	for _, name := range []string{"inbound_text_reply.json", "inbound_media_types.json", "inbound_interactive_replies.json",
		"inbound_location_contacts.json", "inbound_referral_ctwa.json", "group_message_and_statuses.json"} {
		r := normalizeBody(NewNormalizer(h, WithContent(true)), readBody(b, normFixtures, name), normSource(2))
		inbound.Inbound = append(inbound.Inbound, r.Inbound...)
	}
	for _, c := range []struct {
		name string
		rows *schema.Rows
	}{{"statuses", &statuses}, {"inbound", &inbound}} {
		n := len(c.rows.Statuses) + len(c.rows.Inbound)
		b.Run(c.name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				size = 0
				for i := range c.rows.Statuses {
					data, err := marshalEventStd(schema.KindStatus, &c.rows.Statuses[i])
					if err != nil {
						b.Fatal(err)
					}
					size += len(data)
				}
				for i := range c.rows.Inbound {
					data, err := marshalEventStd(schema.KindInbound, &c.rows.Inbound[i])
					if err != nil {
						b.Fatal(err)
					}
					size += len(data)
				}
			}
			b.SetBytes(int64(size))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
		b.Run(c.name+"/append", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			var size int
			for b.Loop() {
				buf, size = buf[:0], 0
				for i := range c.rows.Statuses {
					var err error
					if buf, err = appendStatusEvent(buf[:0], &c.rows.Statuses[i]); err != nil {
						b.Fatal(err)
					}
					size += len(buf)
				}
				for i := range c.rows.Inbound {
					var err error
					if buf, err = appendInboundEvent(buf[:0], &c.rows.Inbound[i]); err != nil {
						b.Fatal(err)
					}
					size += len(buf)
				}
			}
			b.SetBytes(int64(size))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}

// BenchmarkAppendJSONString escapes one ~480-byte string of message text in
// three scripts: ASCII is passed eight bytes at a time, text outside it one
// character at a time.
//
//	go test ./processor -run '^$' -bench AppendJSONString -count 6
func BenchmarkAppendJSONString(b *testing.B) {
	for _, c := range []struct{ name, unit string }{
		{"ascii", "campaign=winter-sale;batch=7 "},
		{"portuguese", "Olá! Sua encomenda já saiu. "},
		{"japanese", "ご注文の商品を発送しました。"},
	} {
		s := strings.Repeat(c.unit, 480/len(c.unit))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			buf := make([]byte, 0, 2*len(s))
			for b.Loop() {
				buf = appendJSONString(buf[:0], s)
			}
		})
	}
}
