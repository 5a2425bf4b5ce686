package meta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// typicalStatus is a single sent status as a captured body looks (compact):
// per-message pricing, the conversation object of API v23 and older, a
// BSUID-era contact and biz_opaque_callback_data. It is about 900 bytes.
const typicalStatus = `{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":` +
	`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},` +
	`"contacts":[{"profile":{"name":"Devin Castellanos"},"wa_id":"16505550187","user_id":"US.98231074456120938811"}],` +
	`"statuses":[{"id":"wamid.HBgLMTY1MDU1NTAxODcVAgARGBJCRDFERjQ3MzhGRTU3OTNGQzYA","status":"sent","timestamp":"1781514031",` +
	`"recipient_id":"16505550187","recipient_user_id":"US.98231074456120938811",` +
	`"biz_opaque_callback_data":"campaign:summer-sale-2026:batch-07:segment-returning-customers:variant-b:send-9921",` +
	`"conversation":{"id":"3b2b696a2bb1a355e74c39643f38e49f","expiration_timestamp":"1781600412","origin":{"type":"marketing"}},` +
	`"pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"marketing"}}]},"field":"messages"}]}]}`

// manyStatuses builds one POST with n statuses over three numbers, the way
// Meta batches them (at most 1,000 updates per POST, docs/meta-webhooks.md 1.4).
func manyStatuses(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[`)
	perChange := (n + 2) / 3
	for c := range 3 {
		if c > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"1555781000%d","phone_number_id":"10765529033118%d"},"statuses":[`, c, c)
		for i := range min(perChange, n-c*perChange) {
			if i > 0 {
				b.WriteByte(',')
			}
			st := []string{"sent", "delivered", "read"}[i%3]
			fmt.Fprintf(&b, `{"id":"wamid.HBgLMTY1MDU1NTAxODcVAgARGBJCRDFERjQ3MzhGRTU3OTNG%06d","status":"%s","timestamp":"%d","recipient_id":"165055%05d","pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"utility"}}`,
				i, st, 1781514031+i, i)
		}
		b.WriteString(`]},"field":"messages"}`)
	}
	b.WriteString(`]}]}`)
	return []byte(b.String())
}

func countStatuses(p *Payload) int {
	n := 0
	for range p.Statuses() {
		n++
	}
	return n
}

// benchDecode decodes body b.N times and reports bytes/s, allocations and
// message status events per second.
func benchDecode(b *testing.B, body []byte) {
	p, err := Decode(body)
	if err != nil {
		b.Fatal(err)
	}
	events := countStatuses(p)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := Decode(body)
		if err != nil || len(p.Entries) == 0 {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecode(b *testing.B) {
	batch := loadFixture(b, "batch_statuses_three_phone_numbers.json")
	if !json.Valid([]byte(typicalStatus)) {
		b.Fatal("typicalStatus is not JSON")
	}
	b.Run(fmt.Sprintf("status_%dB", len(typicalStatus)), func(b *testing.B) { benchDecode(b, []byte(typicalStatus)) })
	b.Run(fmt.Sprintf("batch_fixture_7_statuses_%dB", len(batch)), func(b *testing.B) { benchDecode(b, batch) })
	big := manyStatuses(1000)
	b.Run(fmt.Sprintf("batch_1000_statuses_%dKB", len(big)/1024), func(b *testing.B) { benchDecode(b, big) })
}

// BenchmarkDecodeAndWalk adds what a stage-1 processor does next: walk every
// status with its context.
func BenchmarkDecodeAndWalk(b *testing.B) {
	body := []byte(typicalStatus)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		p, _ := Decode(body)
		for r := range p.Statuses() {
			if r.PhoneNumberID() != "" && r.Item.Status != "" {
				n++
			}
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEncodingJSON is the baseline from the same run: encoding/json
// decoding the same bytes into the same structs, without item isolation,
// unknown-key capture or routing by field (so it does less work).
func BenchmarkEncodingJSON(b *testing.B) {
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"status", []byte(typicalStatus)},
		{"batch_1000_statuses", manyStatuses(1000)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, _ := Decode(tc.body)
			events := countStatuses(p)
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				var env Payload
				if err := json.Unmarshal(tc.body, &env); err != nil {
					b.Fatal(err)
				}
				for _, e := range env.Entries {
					for _, c := range e.Changes {
						var v MessagingValue
						if err := json.NewDecoder(bytes.NewReader(c.Value)).Decode(&v); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
