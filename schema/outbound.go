package schema

// One definition of an outbound message, shared by the pacing signal
// (stage 2) and the reports (/api/v1/throughput): a message counts once, at
// its earliest evidence of any kind: an accepted send result, any status
// of it (OutboundStatuses), or, for a message sent from the WhatsApp
// Business app, its echo. Meta can skip "sent" (a message may get only
// delivered and read), and a sending service may report its sends before
// any status comes.

// OutboundStatuses are the statuses that are evidence that a business number
// sent a message. The others (deleted: a user's message; warning: a
// catalog item) are about something else.
var OutboundStatuses = []string{"sent", "delivered", "read", "played", "failed"}

// OutboundEvidence reports whether status is one of OutboundStatuses.
func OutboundEvidence(status string) bool {
	switch status {
	case "sent", "delivered", "read", "played", "failed":
		return true
	}
	return false
}
