package stage2

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// TestOutboundEarliestEvidence: a message counts once in the signal's
// outbound rate, at its earliest evidence of any kind: an accepted send
// result, any status (Meta can skip "sent"), whichever comes first, however
// late the others come within the message memory. Messages that get only
// delivered and read statuses count (they gave no signal at all), so do
// those known only by their send result, and a read five minutes after its
// message's send does not count it again (it did, past the 64 s of the
// windows). Evidence comes out of order (a delivered before its sent): the
// message counts at its earliest all the same. The rates are compared
// exactly with the truth computed from the generated evidence.
func TestOutboundEarliestEvidence(t *testing.T) {
	const number, now = "9201", 400
	h := start(t, sec(now), nil)
	type ev struct {
		at   int
		kind schema.Kind
		st   string
		msg  int
		late int // publish order: at plus a delay of up to 5 s
	}
	rng := rand.New(rand.NewPCG(20, 3))
	var evs []ev
	earliest := map[int]int{}
	onlyLate := 0 // messages whose evidence is no sent status and no send result
	for m := 0; m < 3000; m++ {
		send := rng.IntN(now - 10)
		var mine []ev
		accepted, sent := rng.Float64() < 0.3, rng.Float64() < 0.7
		if accepted {
			mine = append(mine, ev{send, schema.KindSendResult, schema.SendAccepted, m, 0})
		}
		if sent {
			mine = append(mine, ev{send, schema.KindStatus, "sent", m, 0})
		}
		if rng.Float64() < 0.05 {
			mine = append(mine, ev{send + 1, schema.KindStatus, "failed", m, 0})
		} else {
			d := send + 1 + rng.IntN(5)
			mine = append(mine, ev{d, schema.KindStatus, "delivered", m, 0})
			if rng.Float64() < 0.6 {
				mine = append(mine, ev{d + 1 + rng.IntN(300), schema.KindStatus, "read", m, 0})
			}
		}
		if !accepted && !sent {
			onlyLate++
		}
		first := -1
		for _, e := range mine {
			if e.at >= now-int(pacing.Settle.Seconds()) {
				continue // not happened yet
			}
			e.late = e.at + rng.IntN(6)
			evs = append(evs, e)
			if first < 0 || e.at < first {
				first = e.at
			}
		}
		if first >= 0 {
			earliest[m] = first
		}
	}
	// Webhooks come late, and out of order: a delivered status may come
	// before its message's sent status (Meta retried the body of the
	// sent); the message then counts at the sent's second all the same.
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].late < evs[j].late })
	moved := 0
	firstSeen := map[int]int{}
	for _, e := range evs {
		if f, ok := firstSeen[e.msg]; !ok {
			firstSeen[e.msg] = e.at
		} else if e.at < f {
			moved++
			firstSeen[e.msg] = e.at
		}
	}
	for i, e := range evs {
		id := fmt.Sprintf("e%d", i)
		msg := fmt.Sprintf("wamid.m%d", e.msg)
		if e.kind == schema.KindSendResult {
			h.publish(e.kind, number, id, schema.SendResultRow{EventID: id, EventTime: sec(e.at), PhoneNumberID: number, MessageID: msg, Status: e.st})
			continue
		}
		row := schema.StatusRow{EventID: id, EventTime: sec(e.at), PhoneNumberID: number, MessageID: msg, Status: e.st, RecipientHash: "r"}
		if e.st == "failed" {
			row.ErrorCodes = []int32{131026}
		}
		h.publish(e.kind, number, id, row)
	}
	h.flushed()

	last := now - int(pacing.Settle.Seconds()) - 1
	truth := func(span int) float64 {
		n := 0
		for _, s := range earliest {
			if s > last-span && s <= last {
				n++
			}
		}
		return float64(n) / float64(span)
	}
	want := schema.ObservedMPS{S1: truth(1), S10: truth(10), S60: truth(60), Outbound10: truth(10)}
	got := h.waitSignal(number, "the last evidence counted", func(s schema.PacingSignal) bool { return s.Observed.S60 > 0 })
	h.eventually("rates equal to the truth", func() (bool, string) {
		var err error
		if got, _, err = h.signal(number); err != nil {
			return false, err.Error()
		}
		return got.Observed == want, fmt.Sprintf("got %+v, want %+v", got.Observed, want)
	})
	if onlyLate < 300 || want.S60 == 0 || moved < 100 {
		t.Fatalf("the model has %d messages without a sent status or send result, %d whose earliest evidence comes after later evidence, rate %v: it tests too little",
			onlyLate, moved, want.S60)
	}
	if n := h.count(resultMoved); n == 0 {
		t.Errorf("no event moved its message to an earlier second (%d should have, some outside the windows)", moved)
	}
	// The same traffic counted the old way (sent statuses and send results
	// only, reads past the windows again) is another rate: the test tells them apart.
	old := 0
	for _, e := range evs {
		if e.at > last-60 && e.at <= last && (e.st == "sent" || e.st == schema.SendAccepted) {
			old++
		}
	}
	if float64(old)/60 == want.S60 {
		t.Fatalf("sent statuses and send results alone give the same rate %v: the test tells nothing apart", want.S60)
	}
}
