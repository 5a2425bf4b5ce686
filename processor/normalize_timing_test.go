package processor

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// Run with, for one core:
//
//	go test ./processor/ -run '^$' -bench Normalize -benchmem -cpu 1
//
// events/s counts status rows (the bodies hold nothing else), so it reads
// as statuses per second per core.

// singleStatusBody is a ~900-byte body with one delivered status, in the
// compact form of captured bodies: contacts, pricing, conversation,
// campaign.
func singleStatusBody() []byte {
	return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"contacts":[{"profile":{"name":"Devin Castellanos"},"wa_id":"16505550142","user_id":"US.20571938846102937745"}],"statuses":[{"id":"wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJGMDk0QUIzM0M3RDE1RTIyOEEA","status":"delivered","timestamp":"1781514312","recipient_id":"16505550142","recipient_user_id":"US.20571938846102937745","recipient_identity_key_hash":"q7Zc0Lw1XkM=","biz_opaque_callback_data":"campaign-2026-06-spring-sale-segment-a","conversation":{"id":"CONVERSATION_ID_8f3a9c2e4b1d7a6f0e5c3b2a1d9e8f7c","expiration_timestamp":"1781600712","origin":{"type":"marketing"}},"pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"marketing"}}]},"field":"messages"}]}]}`)
}

// manyStatusesBody is one POST with n statuses of one number (Meta batches
// up to 1,000 updates per POST), mixed sent, delivered, read and failed.
func manyStatusesBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		recipient := fmt.Sprintf("1650555%04d", i%10000)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, `{"id":"wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJG%08d","status":"sent","timestamp":"%d","recipient_id":"%s","recipient_user_id":"US.2057193884610%07d","biz_opaque_callback_data":"campaign-42","pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"marketing"}}`, i, 1781514312+i, recipient, i)
		case 1:
			fmt.Fprintf(&b, `{"id":"wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJG%08d","status":"delivered","timestamp":"%d","recipient_id":"%s","recipient_user_id":"US.2057193884610%07d","biz_opaque_callback_data":"campaign-42","pricing":{"billable":true,"pricing_model":"PMP","type":"regular","category":"marketing"}}`, i, 1781514312+i, recipient, i)
		case 2:
			fmt.Fprintf(&b, `{"id":"wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJG%08d","status":"read","timestamp":"%d","recipient_id":"%s","recipient_user_id":"US.2057193884610%07d"}`, i, 1781514312+i, recipient, i)
		case 3:
			fmt.Fprintf(&b, `{"id":"wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJG%08d","status":"failed","timestamp":"%d","recipient_id":"%s","biz_opaque_callback_data":"campaign-42","errors":[{"code":131049,"title":"This message was not delivered to maintain healthy ecosystem engagement.","message":"This message was not delivered to maintain healthy ecosystem engagement.","error_data":{"details":"In order to maintain a healthy ecosystem engagement, the message failed to be delivered."},"href":"https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}]}`, i, 1781514312+i, recipient)
		}
	}
	b.WriteString(`]},"field":"messages"}]}]}`)
	return b.Bytes()
}

func BenchmarkNormalize(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
		want int
	}{
		{"status_1", singleStatusBody(), 1},
		{"statuses_1000", manyStatusesBody(1000), 1000},
	} {
		if !json.Valid(c.body) {
			b.Fatalf("%s: not JSON", c.name)
		}
		n := NewNormalizer(schema.NewHasher(normKey))
		src := schema.Source{App: "bench", ReceivedAt: time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC), RawSeq: 1}
		id := schema.RawMsgID(c.body)
		var rows schema.Rows
		n.Normalize(c.body, src, id, &rows)
		if len(rows.Statuses) != c.want || len(rows.DeadLetters) != 0 {
			b.Fatalf("%s: %d statuses, %d dead letters, want %d statuses", c.name, len(rows.Statuses), len(rows.DeadLetters), c.want)
		}
		b.Run(fmt.Sprintf("%s_%dB", c.name, len(c.body)), func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				rows.Reset()
				n.Normalize(c.body, src, id, &rows)
			}
			b.ReportMetric(float64(c.want)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		// What the decoder alone costs, for the share of the rest.
		b.Run(fmt.Sprintf("%s_decode_only", c.name), func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := meta.Decode(c.body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.want)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkNormalizeHash is the keyed hash of one number, which every
// status pays two or three times.
func BenchmarkNormalizeHash(b *testing.B) {
	h := schema.NewHasher(normKey)
	b.ReportAllocs()
	for b.Loop() {
		if s := h.Hash("16505550142"); len(s) != 32 {
			b.Fatal(s)
		}
	}
}

// BenchmarkNormalizeEventID is the id of one status.
func BenchmarkNormalizeEventID(b *testing.B) {
	parts := strings.Fields("107655290331184 wamid.HBgLMTY1MDU1NTAxNDIVAgARGBJGMDk0QUIzM0M3RDE1RTIyOEEA 0a1b2c3d4e5f60718293a4b5c6d7e8f9 - - delivered 1781514312 -")
	b.ReportAllocs()
	for b.Loop() {
		schema.EventID(schema.KindStatus, parts...)
	}
}

// TestNormalizeHasherOutput: the pooled Hasher gives exactly HMAC-SHA256
// under the key, first 16 bytes in hex, from any number of goroutines.
func TestNormalizeHasherOutput(t *testing.T) {
	h := schema.NewHasher(normKey)
	want := func(s string) string {
		if s == "" {
			return ""
		}
		m := hmac.New(sha256.New, normKey)
		m.Write([]byte(s))
		return hex.EncodeToString(m.Sum(nil)[:16])
	}
	inputs := []string{"", "16505550142", "US.20571938846102937745", strings.Repeat("x", 64), strings.Repeat("é", 3000)}
	for i := 0; i < 200; i++ {
		inputs = append(inputs, fmt.Sprintf("4915155%05d", i))
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				for _, s := range inputs {
					if got := h.Hash(s); got != want(s) {
						t.Errorf("Hash(%.20q) = %s, want %s", s, got, want(s))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// A value computed outside Go (openssl dgst -sha256 -hmac k), so that
	// a change of the output is seen even if the reference changed with it.
	if got := schema.NewHasher([]byte("k")).Hash("16505550142"); got != "ef120b8b982a9142bdb94f2ed9f45119" {
		t.Errorf("Hash under key k: %s, want ef120b8b982a9142bdb94f2ed9f45119", got)
	}
}
