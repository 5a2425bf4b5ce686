package loadtest

import (
	"strconv"
)

// StatusBody returns a realistic status webhook with a unique message id,
// of about size bytes, with the fields Meta sends on a delivered status
// (pricing, conversation, biz_opaque_callback_data).
func StatusBody(i uint64, size int) []byte {
	id := strconv.FormatUint(i, 10)
	b := make([]byte, 0, size+64)
	b = append(b, `{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.HBgLMTU1NTc4MTAwMDEVAgARGBI`...)
	b = append(b, id...)
	b = append(b, `","status":"delivered","timestamp":"1781514312","recipient_id":"4915155500734","conversation":{"id":"c6b2a8f5d1e4b3a29f8e7d6c5b4a3921","origin":{"type":"marketing"}},"pricing":{"billable":true,"pricing_model":"PMP","category":"marketing","type":"regular"},"biz_opaque_callback_data":"campaign=winter-sale;batch=`...)
	b = append(b, id...)
	// The callback data (up to 512 characters at Meta) takes the padding.
	for pad := size - len(b) - 29; pad > 0; pad-- {
		b = append(b, 'x')
	}
	b = append(b, `"}]},"field":"messages"}]}]}`...)
	return b
}
