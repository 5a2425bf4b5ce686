package loadtest

import (
	"sort"
	"strconv"
	"sync"

	"github.com/wahook/wahook/schema"
)

// EventKind is the kind of an event in the ledger.
type EventKind uint8

// Kinds of events. The first four are the statuses of outbound messages.
const (
	KindSent EventKind = iota
	KindDelivered
	KindRead
	KindFailed
	KindInbound
	KindEcho
	KindQuality
	KindThroughputUpgrade
	numKinds
)

var kindNames = [numKinds]string{"sent", "delivered", "read", "failed", "inbound", "echo", "quality", "throughput_upgrade"}

func (k EventKind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// TallyKey is one cell of the ledger's counts: a number, a second (Meta's
// timestamp, unix seconds), a kind and, for failed statuses, the code.
type TallyKey struct {
	Number int // index into the run's numbers
	Second int64
	Kind   EventKind
	Code   int32
}

// Ledger records what a run delivered: each event once, as soon as a body
// holding it got a 200, and which events were posted at all. An event
// posted several times (Meta's retries, repeats in other POSTs) counts
// once. It is what the end-to-end check compares ClickHouse with. It is safe
// for concurrent use.
type Ledger struct {
	mu    sync.Mutex
	fleet *fleet
	// Per number and message sequence: bits 0-3 the statuses acked, bits
	// 4-7 the statuses posted.
	out [][]uint8
	// Per number and message sequence: the second (Meta's) of the
	// message's earliest acked status, 0 before one: where the pacing
	// signal counts the message (schema/outbound.go).
	first [][]int64
	// Per number and sequence: bit 0 acked, bit 1 posted.
	in, echo [][]uint8
	// Number events by (number, event, time): bit 0 acked, bit 1 posted.
	number map[numberEventKey]uint8
	tally  map[TallyKey]uint64
}

type numberEventKey struct {
	number int32
	event  uint8
	at     int64
}

// NewLedger returns an empty ledger for the numbers of g.
func NewLedger(g *Traffic) *Ledger {
	n := len(g.fleet.numbers)
	return &Ledger{fleet: g.fleet, out: make([][]uint8, n), first: make([][]int64, n), in: make([][]uint8, n), echo: make([][]uint8, n),
		number: map[numberEventKey]uint8{}, tally: map[TallyKey]uint64{}}
}

// Numbers are the run's business numbers.
func (l *Ledger) Numbers() []Number { return l.fleet.numbers }

// slot returns the ledger entry of a message, growing its slice.
func slot[T uint8 | int64](s [][]T, n int32, seq uint32) *T {
	row := s[n]
	if int(seq) >= len(row) {
		grown := make([]T, int(seq)+1, max(2*len(row), int(seq)+1, 64))
		copy(grown, row)
		row = grown[:cap(grown)]
		s[n] = row
	}
	return &row[seq]
}

// Posted records that the items of p are about to be posted.
func (l *Ledger) Posted(p *Post) { l.mark(p, false) }

// Acked records that a body holding the items of p got a 200.
func (l *Ledger) Acked(p *Post) { l.mark(p, true) }

func (l *Ledger) mark(p *Post, acked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range p.items {
		it := &p.items[i]
		key := TallyKey{Number: int(it.number), Second: it.at}
		var fresh bool
		switch it.kind {
		case itemStatus:
			bit := uint8(1) << it.sub
			if !acked {
				bit <<= 4
			}
			key.Kind = EventKind(it.sub)
			if it.sub == statusFailed {
				key.Code = it.code
			}
			fresh = setBit(slot(l.out, it.number, it.seq), bit)
			if acked {
				if f := slot(l.first, it.number, it.seq); *f == 0 || it.at < *f {
					*f = it.at
				}
			}
		case itemInbound, itemEcho:
			s := l.in
			key.Kind = KindInbound
			if it.kind == itemEcho {
				s, key.Kind = l.echo, KindEcho
			}
			fresh = setBit(slot(s, it.number, it.seq), doneBit(acked))
		case itemNumber:
			nk := numberEventKey{it.number, it.sub, it.at}
			v := l.number[nk]
			fresh = setBit(&v, doneBit(acked))
			l.number[nk] = v
			key.Kind = KindQuality
			if it.sub == eventThroughput {
				key.Kind = KindThroughputUpgrade
			}
		}
		if fresh && acked {
			l.tally[key]++
		}
	}
}

// setBit sets bit in *b and reports whether it was clear.
func setBit(b *uint8, bit uint8) bool {
	if *b&bit != 0 {
		return false
	}
	*b |= bit
	return true
}

// doneBit is the bit of a message or event: 1 acked, 2 posted.
func doneBit(acked bool) uint8 {
	if acked {
		return 1
	}
	return 2
}

func itoa(c int32) string { return strconv.Itoa(int(c)) }

// Tally returns the acked events counted by number, second, kind and code.
func (l *Ledger) Tally() map[TallyKey]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[TallyKey]uint64, len(l.tally))
	for k, v := range l.tally {
		out[k] = v
	}
	return out
}

// Totals are the acked events of a run.
type Totals struct {
	Events   uint64            `json:"events"`
	ByKind   map[string]uint64 `json:"by_kind"`
	Failures map[string]uint64 `json:"failures_by_code,omitempty"`
	// PerNumber is the events per number, in the order of Numbers.
	PerNumber []uint64 `json:"per_number"`
	// FirstSecond and LastSecond bound Meta's timestamps of the events.
	FirstSecond int64 `json:"first_second"`
	LastSecond  int64 `json:"last_second"`
}

// Totals adds up the acked events.
func (l *Ledger) Totals() Totals {
	t := Totals{ByKind: map[string]uint64{}, Failures: map[string]uint64{}, PerNumber: make([]uint64, len(l.fleet.numbers))}
	for k, n := range l.Tally() {
		t.Events += n
		t.ByKind[k.Kind.String()] += n
		if k.Kind == KindFailed {
			t.Failures[itoa(k.Code)] += n
		}
		t.PerNumber[k.Number] += n
		if t.FirstSecond == 0 || k.Second < t.FirstSecond {
			t.FirstSecond = k.Second
		}
		t.LastSecond = max(t.LastSecond, k.Second)
	}
	return t
}

// FailureKey is a cell of the failure distribution: a number, a minute (unix
// seconds at its start) and an error code.
type FailureKey struct {
	Number int
	Minute int64
	Code   int32
}

// Failures is the acked failed statuses by number, minute and code: the
// distribution that failures_by_minute must hold.
func (l *Ledger) Failures() map[FailureKey]uint64 {
	out := map[FailureKey]uint64{}
	for k, n := range l.Tally() {
		if k.Kind == KindFailed {
			out[FailureKey{k.Number, k.Second - k.Second%60, k.Code}] += n
		}
	}
	return out
}

// PerSecond is the acked events per second of Meta's timestamps, in order.
func (l *Ledger) PerSecond() []SecondCount {
	m := map[int64]uint64{}
	for k, n := range l.Tally() {
		m[k.Second] += n
	}
	out := make([]SecondCount, 0, len(m))
	for s, n := range m {
		out = append(out, SecondCount{s, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Second < out[j].Second })
	return out
}

// SecondCount is the events of one second.
type SecondCount struct {
	Second int64  `json:"second"`
	Events uint64 `json:"events"`
}

// ledgerState is what the ledger knows of one event: acked, posted.
type ledgerState uint8

const (
	stateUnknown ledgerState = iota // never posted
	statePosted                     // posted, never acked
	stateAcked
)

// statusState tells what happened to status s of message seq of number n.
func (l *Ledger) statusState(n int32, seq uint32, s int) ledgerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	row := l.out[n]
	if int(seq) >= len(row) {
		return stateUnknown
	}
	switch v := row[seq]; {
	case v&(1<<s) != 0:
		return stateAcked
	case v&(1<<(s+4)) != 0:
		return statePosted
	}
	return stateUnknown
}

// messageState tells the same of an inbound message or an echo.
func (l *Ledger) messageState(echo bool, n int32, seq uint32) ledgerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.in
	if echo {
		s = l.echo
	}
	row := s[n]
	if int(seq) >= len(row) {
		return stateUnknown
	}
	switch v := row[seq]; {
	case v&1 != 0:
		return stateAcked
	case v&2 != 0:
		return statePosted
	}
	return stateUnknown
}

func (l *Ledger) numberEventState(n int32, ev uint8, at int64) ledgerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch v := l.number[numberEventKey{n, ev, at}]; {
	case v&1 != 0:
		return stateAcked
	case v&2 != 0:
		return statePosted
	}
	return stateUnknown
}

// ackedEvent is one acked event, for listing what the database lacks.
type ackedEvent struct {
	kind   EventKind
	number int32
	seq    uint32
	event  uint8
	at     int64
}

// acked calls fn for every acked event.
func (l *Ledger) acked(fn func(ackedEvent)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for n, row := range l.out {
		for seq, v := range row {
			for s := 0; s < numStatuses; s++ {
				if v&(1<<s) != 0 {
					fn(ackedEvent{kind: EventKind(s), number: int32(n), seq: uint32(seq)})
				}
			}
		}
	}
	for k, s := range [][][]uint8{l.in, l.echo} {
		for n, row := range s {
			for seq, v := range row {
				if v&1 != 0 {
					fn(ackedEvent{kind: KindInbound + EventKind(k), number: int32(n), seq: uint32(seq)})
				}
			}
		}
	}
	for k, v := range l.number {
		if v&1 != 0 {
			kind := KindQuality
			if k.event == eventThroughput {
				kind = KindThroughputUpgrade
			}
			fn(ackedEvent{kind: kind, number: k.number, event: k.event, at: k.at})
		}
	}
}

// Observed is what the pacing signal of number n (an index into Numbers)
// must show when its windows end with second last
// (schema.PacingLastSecond): the acked messages per second of the last 1,
// 10 and 60 seconds, inbound and outbound, an outbound message once at its
// earliest acked status and an echo at its own time
// (schema/outbound.go). Events posted without a 200 are not in the
// ledger; if the service stored them, it counts them too.
func (l *Ledger) Observed(n int, last int64) schema.ObservedMPS {
	var in, out [60]uint64 // by seconds before last
	add := func(counts *[60]uint64, at int64, k uint64) {
		if d := last - at; d >= 0 && d < 60 {
			counts[d] += k
		}
	}
	l.mu.Lock()
	for _, at := range l.first[n] {
		if at != 0 {
			add(&out, at, 1)
		}
	}
	for k, c := range l.tally {
		if k.Number != n {
			continue
		}
		switch k.Kind {
		case KindInbound:
			add(&in, k.Second, c)
		case KindEcho:
			add(&out, k.Second, c)
		}
	}
	l.mu.Unlock()
	rate := func(c *[60]uint64, span int) float64 {
		var sum uint64
		for _, v := range c[:span] {
			sum += v
		}
		return float64(sum) / float64(span)
	}
	// As stage 2 adds them up: each direction's rate, then their sum.
	in1, out1 := rate(&in, 1), rate(&out, 1)
	in10, out10 := rate(&in, 10), rate(&out, 10)
	in60, out60 := rate(&in, 60), rate(&out, 60)
	return schema.ObservedMPS{S1: in1 + out1, S10: in10 + out10, S60: in60 + out60, Inbound10: in10, Outbound10: out10}
}
