package meta_test

import (
	"errors"
	"fmt"

	"github.com/wahook/wahook/schema/meta"
)

// A stage-1 processor decodes a body, turns each message status into a row
// with its context, and dead-letters what could not be decoded.
func Example() {
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":{
		"messaging_product":"whatsapp",
		"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},
		"statuses":[
			{"id":"wamid.A","status":"failed","timestamp":"1781514351","recipient_id":"4915155500734",
			 "errors":[{"code":131049,"title":"This message was not delivered to maintain healthy ecosystem engagement."}]},
			{"id":"wamid.B","status":"sent","timestamp":"1781514352","pricing":{"billable":"yes"}},
			{"id":"wamid.C","status":"delivered","timestamp":1781514353,"recipient_id":"16505550142",
			 "pricing":{"pricing_model":"PMP","type":"regular","category":"marketing"}}
		]},"field":"messages"}]}]}`)

	p, err := meta.Decode(body)
	if errors.Is(err, meta.ErrMalformed) {
		fmt.Println("dead letter, whole body:", err)
		return
	}
	for r := range p.Statuses() {
		s := r.Item
		codes := []int64{}
		for _, e := range s.Errors {
			codes = append(codes, int64(e.Code))
		}
		fmt.Println(r.WABAID(), r.PhoneNumberID(), s.ID, s.Status, s.Timestamp, s.Recipient(), codes)
	}
	for _, pr := range p.Problems {
		fmt.Println("dead letter, one item:", pr.PhoneNumberID, pr.Path, string(pr.Raw[:16]))
		fmt.Println("reason:", pr.Err)
	}
	// Output:
	// 104281907735512 107655290331184 wamid.A failed 1781514351 4915155500734 [131049]
	// 104281907735512 107655290331184 wamid.C delivered 1781514353 16505550142 []
	// dead letter, one item: 107655290331184 entry[0].changes[0].value.statuses[1] {"id":"wamid.B",
	// reason: pricing.billable: got string, want bool: wrong type
}

// Errors yields every error object with its place, which is how error-code
// analytics tell a failed send from a value-level or inbound error.
func ExamplePayload_Errors() {
	body := []byte(`{"entry":[{"id":"1","changes":[{"value":{
		"metadata":{"phone_number_id":"107655290331184"},
		"errors":[{"code":130429,"title":"Rate limit hit"}],
		"messages":[{"id":"wamid.U","type":"unsupported","errors":[{"code":"131051"}]}]
		},"field":"messages"}]}]}`)
	p, _ := meta.Decode(body)
	for r := range p.Errors() {
		fmt.Println(r.Place, r.Field(), r.Item.Code)
	}
	// Output:
	// value messages 130429
	// message messages 131051
}
