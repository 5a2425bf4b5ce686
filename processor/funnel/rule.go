package funnel

import "github.com/wahook/wahook/schema"

// This file is the funnel's rule, pure: a message's states in, its resolved row out.

// never is the sentinel of a status that never came (schema.FunnelNever).
const never = schema.FunnelNever

// Stages of a resolved row.
const (
	StageSent      = 1
	StageDelivered = 2
	StageRead      = 3 // read or played
	StageFailed    = 4 // once failed, always failed
)

// Row is one resolved message and recipient, as funnel_messages holds it.
type Row struct {
	PhoneNumberID, MessageID, RecipientKey string
	First                                  uint32 // unix seconds of the first status
	WabaID, Campaign, Template             string
	Stage                                  uint8
	ToDeliver, ToRead                      int32 // seconds, -1 when unknown
}

func (r Row) key() msgKey { return msgKey{r.PhoneNumberID, r.MessageID, r.RecipientKey} }

type msgKey struct{ phone, message, recipient string }

// State is what message_states holds for a message: the first time of each
// status (never when it did not come), whether it ever failed, and its
// dimensions.
type State struct {
	PhoneNumberID, MessageID, RecipientKey string
	WabaID, Campaign, Template             string
	Sent, Delivered, Read, Played, Failed  uint32
	HasFailed                              bool
}

// Resolve is the funnel's rule for one message: it counts once, at its first
// status; a failed message is failed whatever else came; a later stage
// implies the earlier ones (a read message was delivered even if its
// delivered status was lost); the durations are from sent, when sent came
// and the later status is not earlier. ok is false for a message with none
// of these statuses.
func Resolve(s State) (r Row, ok bool) {
	delivered := min(s.Delivered, s.Read, s.Played)
	read := min(s.Read, s.Played)
	first := min(s.Sent, delivered, s.Failed)
	if first == never {
		return Row{}, false
	}
	r = Row{
		PhoneNumberID: s.PhoneNumberID, MessageID: s.MessageID, RecipientKey: s.RecipientKey,
		First: first, WabaID: s.WabaID, Campaign: s.Campaign, Template: s.Template,
		Stage: StageSent, ToDeliver: -1, ToRead: -1,
	}
	switch {
	case s.HasFailed:
		r.Stage = StageFailed
		return r, true
	case read != never:
		r.Stage = StageRead
	case delivered != never:
		r.Stage = StageDelivered
	}
	if s.Sent != never {
		if delivered != never && delivered >= s.Sent {
			r.ToDeliver = int32(delivered - s.Sent)
		}
		if read != never && read >= s.Sent {
			r.ToRead = int32(read - s.Sent)
		}
	}
	return r, true
}

// countColumns are funnel_messages' sums: n, and n where the row counts as
// sent, delivered, read, failed, or has a to_deliver or to_read.
const countColumns = "n, n_sent, n_delivered, n_read, n_failed, n_to_deliver, n_to_read"

// Counts are the values of funnel_messages' n, n_sent, n_delivered, n_read,
// n_failed, n_to_deliver and n_to_read for the row with multiplicity n.
func (r Row) Counts(n int32) [7]int32 {
	if0 := func(cond bool) int32 {
		if cond {
			return n
		}
		return 0
	}
	return [7]int32{n, if0(r.Stage != StageFailed), if0(r.Stage == StageDelivered || r.Stage == StageRead), if0(r.Stage == StageRead),
		if0(r.Stage == StageFailed), if0(r.ToDeliver >= 0), if0(r.ToRead >= 0)}
}
