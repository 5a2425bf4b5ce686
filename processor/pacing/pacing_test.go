package pacing

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/wahook/wahook/schema"
)

var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

func TestClassCount(t *testing.T) {
	if numClasses != len(schema.ErrorClasses()) {
		t.Fatalf("numClasses %d, schema has %d classes", numClasses, len(schema.ErrorClasses()))
	}
}

// traffic is synthetic traffic of one number at known rates.
type traffic struct {
	id          string
	out, in     int // messages per second
	coexistence bool
	tier        int
}

// Synthetic traffic at known per-number rates, in and out, delivered late,
// out of order and partly twice: the observed rates equal the truth in
// every window (the bar is 1%), and a coexistence number is measured
// against 20.
func TestObservedRates(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	nums := []traffic{
		{id: "1001", out: 50, in: 10, tier: 80},
		{id: "1002", out: 700, in: 90, tier: 1000},
		{id: "1003", out: 15, in: 3, coexistence: true, tier: 20},
		{id: "1004", out: 1, in: 0, tier: 80},
	}
	type ev struct {
		num string
		id  string
		e   Event
	}
	var evs []ev
	const seconds = 90
	for _, n := range nums {
		if n.tier == 1000 {
			evs = append(evs, ev{n.id, "up-" + n.id, Event{At: t0.Unix() - 600, Field: "phone_number_quality_update", Name: "THROUGHPUT_UPGRADE"}})
		}
		if n.coexistence {
			evs = append(evs, ev{n.id, "co-" + n.id, Event{At: t0.Unix() - 600, Coexistence: true}})
		}
		for s := 0; s < seconds; s++ {
			at := t0.Unix() + int64(s)
			for k := 0; k < n.out; k++ {
				id := fmt.Sprintf("%s-o-%d-%d", n.id, s, k)
				evs = append(evs, ev{n.id, id, Event{Kind: schema.KindStatus, At: at, Status: "sent", Outbound: true}})
				// The message's later statuses are not traffic.
				evs = append(evs, ev{n.id, id + "-d", Event{Kind: schema.KindStatus, At: at + 1, Status: "delivered"}})
			}
			for k := 0; k < n.in; k++ {
				evs = append(evs, ev{n.id, fmt.Sprintf("%s-i-%d-%d", n.id, s, k), Event{Kind: schema.KindInbound, At: at, Inbound: true}})
			}
		}
	}
	// Late and out of order: each event arrives up to 5 s after its time, in
	// arrival order; 2% arrive twice.
	type arrival struct {
		at int64
		ev ev
	}
	var arrivals []arrival
	for _, e := range evs {
		arrivals = append(arrivals, arrival{e.e.At + rng.Int63n(6), e})
		if rng.Intn(50) == 0 {
			arrivals = append(arrivals, arrival{e.e.At + rng.Int63n(6), e})
		}
	}
	rng.Shuffle(len(arrivals), func(i, j int) { arrivals[i], arrivals[j] = arrivals[j], arrivals[i] })
	state := map[string]*Number{}
	dd := NewDeduper()
	for _, a := range arrivals {
		counted := a.ev.e.Inbound || a.ev.e.Outbound || len(a.ev.e.Codes) > 0
		if counted && dd.Seen(a.ev.id, a.ev.e.At) {
			continue
		}
		n := state[a.ev.num]
		if n == nil {
			n = NewNumber(a.ev.num)
			state[a.ev.num] = n
		}
		n.Apply(a.ev.e)
	}
	now := t0.Add(seconds*time.Second + Settle)
	for _, tn := range nums {
		s := state[tn.id].Signal(now, DefaultTiers())
		want := float64(tn.out + tn.in)
		for name, got := range map[string]float64{"1s": s.Observed.S1, "10s": s.Observed.S10, "60s": s.Observed.S60} {
			if math.Abs(got-want) > 0.01*want {
				t.Errorf("number %s, %s: %v mps, want %v", tn.id, name, got, want)
			}
		}
		if s.Observed.Inbound10 != float64(tn.in) || s.Observed.Outbound10 != float64(tn.out) {
			t.Errorf("number %s: in %v out %v", tn.id, s.Observed.Inbound10, s.Observed.Outbound10)
		}
		if s.TierMPS != tn.tier || s.Utilization != want/float64(tn.tier) {
			t.Errorf("number %s: tier %d (%s), utilization %v", tn.id, s.TierMPS, s.TierSource, s.Utilization)
		}
	}
	if s := state["1003"].Signal(now, DefaultTiers()); s.TierSource != "coexistence" || s.Advice != schema.AdviceSlowDown {
		t.Errorf("coexistence number at 18 of 20 mps: %+v", s)
	}
}

func at(sec int) int64 { return t0.Unix() + int64(sec) }

func TestThroughputUpgradeOpensMaintenance(t *testing.T) {
	n := NewNumber("1001")
	if s := n.Signal(t0, DefaultTiers()); s.TierMPS != 80 || s.Advice != schema.AdviceOK || s.RecommendedMPS != 80 {
		t.Fatalf("before: %+v", s)
	}
	n.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "THROUGHPUT_UPGRADE", NewValue: "TIER_UNLIMITED"})
	s := n.Signal(t0.Add(30*time.Second), DefaultTiers())
	if s.TierMPS != 1000 || s.TierSource != "throughput_upgrade" || s.Advice != schema.AdvicePause || s.RecommendedMPS != 0 ||
		s.MaintenanceUntil == nil || !s.MaintenanceUntil.Equal(t0.Add(time.Minute)) || s.MessagingLimit != "TIER_UNLIMITED" {
		t.Fatalf("during maintenance: %+v", s)
	}
	if s := n.Signal(t0.Add(61*time.Second), DefaultTiers()); s.Advice != schema.AdviceOK || s.RecommendedMPS != 1000 || s.MaintenanceUntil != nil {
		t.Fatalf("after maintenance: %+v", s)
	}
	// A 131057 from a send opens it again.
	n.Apply(Event{At: at(100), Codes: []int32{131057}})
	if s := n.Signal(t0.Add(120*time.Second), DefaultTiers()); s.Advice != schema.AdvicePause || s.RecentErrors[schema.ClassMaintenance] != 1 {
		t.Fatalf("after 131057: %+v", s)
	}
}

// A burst of 130429 gives slow_down with a lower recommended rate; a
// minute after it stops, ok again.
func TestThrottleBurst(t *testing.T) {
	n := NewNumber("1001")
	for s := 0; s < 20; s++ {
		for k := 0; k < 70; k++ {
			n.Apply(Event{At: at(s), Outbound: true})
		}
		for k := 0; k < 5; k++ {
			n.Apply(Event{At: at(s), Inbound: true})
		}
	}
	before := n.Signal(t0.Add(20*time.Second), DefaultTiers())
	if before.Advice != schema.AdviceSlowDown || before.RecommendedMPS != 67 { // 75 of 80: over 90%; 72 - 5 inbound
		t.Fatalf("at 75 of 80 mps: %+v", before)
	}
	for k := 0; k < 30; k++ {
		n.Apply(Event{At: at(19), Codes: []int32{130429}})
	}
	s := n.Signal(t0.Add(21*time.Second), DefaultTiers())
	if s.Advice != schema.AdviceSlowDown || s.RecommendedMPS != 35 || s.RecentErrors[schema.ClassThroughput] != 30 {
		t.Fatalf("after the burst: %+v", s)
	}
	s = n.Signal(t0.Add(45*time.Second), DefaultTiers()) // traffic stopped at 20 s; 130429 26 s ago
	if s.Advice != schema.AdviceSlowDown || s.RecommendedMPS != 64 {
		t.Fatalf("within the minute: %+v", s)
	}
	s = n.Signal(t0.Add(80*time.Second), DefaultTiers())
	if s.Advice != schema.AdviceOK || s.RecommendedMPS != 80 || len(s.RecentErrors) != 0 {
		t.Fatalf("a minute later: %+v", s)
	}
}

func TestQualityStop(t *testing.T) {
	n := NewNumber("1001")
	n.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(time.Second), DefaultTiers()); s.Advice != schema.AdviceOK || s.Quality != "flagged" || s.MessagingLimit != "TIER_250" {
		t.Fatalf("flagged: %+v", s)
	}
	n.Apply(Event{At: at(10), Codes: []int32{131048}})
	if s := n.Signal(t0.Add(11*time.Minute), DefaultTiers()); s.Advice != schema.AdviceStop || s.RecommendedMPS != 0 {
		t.Fatalf("after 131048: %+v", s)
	}
	if s := n.Signal(t0.Add(16*time.Minute), DefaultTiers()); s.Advice != schema.AdviceOK {
		t.Fatalf("15 min after 131048: %+v", s)
	}
	// Errors that are not the number's pace change nothing.
	n.Apply(Event{At: at(1000), Codes: []int32{131026, 131047}})
	if s := n.Signal(t0.Add(1001*time.Second), DefaultTiers()); s.Advice != schema.AdviceOK || s.RecentErrors[schema.ClassUndeliverable] != 1 {
		t.Fatalf("undeliverable: %+v", s)
	}
}

// TestUnusableNumberStop: an error saying the number cannot send at all
// (deleted, not registered) stops it, as a quality error does, and says so
// by its class.
func TestUnusableNumberStop(t *testing.T) {
	for _, code := range []int32{33, 131045, 133010} {
		n := NewNumber("1001")
		n.Apply(Event{At: at(10), Codes: []int32{code}})
		s := n.Signal(t0.Add(11*time.Second), DefaultTiers())
		if s.Advice != schema.AdviceStop || s.RecommendedMPS != 0 || s.RecentErrors[schema.ClassNumberUnusable] != 1 || s.StopUntil == nil {
			t.Errorf("after %d: %+v; want stop, its class counted", code, s)
		}
	}
}

// TestQualityByMetaTime: quality and messaging limit follow Meta's time,
// not the order of delivery: a retried or replayed older event changes
// neither.
func TestQualityByMetaTime(t *testing.T) {
	n := NewNumber("1001")
	n.Apply(Event{At: at(50), Field: "phone_number_quality_update", Name: "UNFLAGGED", NewValue: "TIER_1K"})
	n.Apply(Event{At: at(10), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(time.Minute), DefaultTiers()); s.Quality != "unflagged" || s.MessagingLimit != "TIER_1K" {
		t.Fatalf("the older FLAGGED delivered last won: %+v", s)
	}
	n.Apply(Event{At: at(60), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
	if s := n.Signal(t0.Add(2*time.Minute), DefaultTiers()); s.Quality != "flagged" || s.MessagingLimit != "TIER_250" {
		t.Fatalf("a newer FLAGGED: %+v", s)
	}
}

func TestOverrideTier(t *testing.T) {
	n := NewNumber("1001")
	n.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "THROUGHPUT_UPGRADE"})
	tiers := DefaultTiers()
	tiers.Overrides = map[string]int{"1001": 200}
	if s := n.Signal(t0.Add(2*time.Minute), tiers); s.TierMPS != 200 || s.TierSource != "override" {
		t.Fatalf("%+v", s)
	}
}

func TestPairCooldown(t *testing.T) {
	c, _ := NextCooldown(nil, "1001", "r1", "e0", t0)
	if c.Strikes != 1 || !c.Until.Equal(t0.Add(PairInterval)) {
		t.Fatalf("first: %+v", c)
	}
	waits := []time.Duration{6 * time.Second, 16 * time.Second, 64 * time.Second, 256 * time.Second}
	at := t0.Add(time.Second)
	for i, w := range waits {
		c, _ = NextCooldown(&c, "1001", "r1", fmt.Sprint("e", i+1), at)
		if c.Strikes != i+2 || !c.Until.Equal(at.Add(w)) {
			t.Fatalf("strike %d: %+v, want wait %v", i+2, c, w)
		}
		at = at.Add(time.Second)
	}
	for i := 0; i < 10; i++ {
		c, _ = NextCooldown(&c, "1001", "r1", fmt.Sprint("f", i), at)
	}
	if c.Strikes != maxPairStrikes {
		t.Fatalf("strikes not capped: %+v", c)
	}
	// An event of the last strikes again, in any order: no strike (a
	// redelivery after a crash found its own cool-down and counted it).
	for _, id := range []string{"f9", "f8", "f3"} {
		if again, same := NextCooldown(&c, "1001", "r1", id, at); !same || again.Strikes != c.Strikes || !again.Until.Equal(c.Until) {
			t.Fatalf("strike %s's event again: %+v (same %v), want %+v", id, again, same, c)
		}
	}
	if len(c.EventIDs) != maxStrikeIDs || c.EventIDs[len(c.EventIDs)-1] != "f9" {
		t.Fatalf("event ids %v: want the last %d, newest last", c.EventIDs, maxStrikeIDs)
	}
	// A distinct event, older than the last strike (out of order): a strike.
	c2 := NextCooldown2(t, &c, "old", at.Add(-time.Second))
	if c2.Strikes != maxPairStrikes || c2.EventIDs[len(c2.EventIDs)-1] != "old" {
		t.Fatalf("an older distinct event: %+v", c2)
	}
	// Two events of one second, each delivered again: no strike.
	b, _ := NextCooldown(nil, "1001", "r2", "B", at)
	bc, _ := NextCooldown(&b, "1001", "r2", "C", at)
	for _, id := range []string{"B", "C"} {
		if again, same := NextCooldown(&bc, "1001", "r2", id, at); !same || again.Strikes != 2 {
			t.Fatalf("%s of one second again: %+v", id, again)
		}
	}
	// Gone (its until, and its wait once more): the count starts again.
	if g, _ := NextCooldown(&c, "1001", "r1", "g", c.Kept()); g.Strikes != 1 {
		t.Fatalf("once gone: %+v", g)
	}
	// A sender that obeys: it waits until until, sends, and is refused
	// again, each time. The strikes go on, and so the waits grow (they
	// started again at each until, and stayed at 6 s).
	o, _ := NextCooldown(nil, "1001", "r3", "o0", t0)
	for i, w := range []time.Duration{6 * time.Second, 16 * time.Second, 64 * time.Second, 256 * time.Second} {
		next := o.Until.Add(200 * time.Millisecond)
		o, _ = NextCooldown(&o, "1001", "r3", fmt.Sprint("o", i+1), next)
		if o.Strikes != i+2 || !o.Until.Equal(next.Add(w)) {
			t.Fatalf("obeyed cool-down %d, refused again: %+v, want strike %d and a wait of %v", i+1, o, i+2, w)
		}
	}
	if kept := o.Kept(); o.Strikes != 5 || !kept.Equal(o.Until.Add(256*time.Second)) {
		t.Fatalf("kept until %v, want until and 256 s", kept)
	}
}

func TestDeduper(t *testing.T) {
	d := NewDeduper()
	if d.Seen("a", at(0)) || !d.Seen("a", at(0)) || d.Seen("b", at(0)) || d.Seen("a", at(1)) {
		t.Fatal("within a second")
	}
	if d.Seen("c", at(100)) || !d.Seen("a", at(0)) {
		t.Fatal("an event older than the window counts as seen")
	}
	if d.Seen("a", at(99)) {
		t.Fatal("the window moved: a at 99 is new")
	}
}

// A message key counts once across seconds, and is forgotten once its
// epoch leaves the message memory (here as short as it gets: the window).
func TestDeduperMessage(t *testing.T) {
	d := NewDeduperFor(0)
	if d.SeenMessage("m1", at(10)) || !d.SeenMessage("m1", at(11)) || !d.SeenMessage("m1", at(9)) || d.SeenMessage("m2", at(9)) {
		t.Fatal("within the window")
	}
	if d.Seen("m1", at(10)) {
		t.Fatal("event ids and message keys are apart")
	}
	if !d.SeenMessage("m3", at(10-64)) {
		t.Fatal("older than the window counts as seen")
	}
	d.SeenMessage("m4", at(10+2*64)) // 10's epoch has left the memory
	if d.messages() != 1 || d.SeenMessage("m1", at(10+2*64-1)) || d.messages() != 2 {
		t.Fatalf("forgotten keys: %d left", d.messages())
	}
}

// With the default memory, a message is remembered past the windows: a
// read ten seconds short of the memory after the message's sent status
// does not count it again; once the memory and an epoch have passed, the
// key is gone.
func TestDeduperMessageMemory(t *testing.T) {
	d := NewDeduper()
	mem := int(DefaultMessageMemory / time.Second)
	if d.SeenMessage("m1", at(10)) {
		t.Fatal("new")
	}
	for s := 11; s < 10+mem; s += 7 { // traffic of other messages meanwhile
		d.SeenMessage(fmt.Sprint("other-", s), at(s))
	}
	if !d.SeenMessage("m1", at(mem)) {
		t.Fatal("a message seen within the memory counted again")
	}
	d.SeenMessage("late", at(10+mem+1<<epochBits))
	if d.SeenMessage("m1", at(10+mem+1<<epochBits)) {
		t.Fatal("a message outlived the memory and an epoch")
	}
	if n := d.messages(); n > (mem+1<<epochBits)/7+3 {
		t.Errorf("%d keys held, want at most the memory's and an epoch's", n)
	}
}

// TestRememberEarlier: a memory read back while the head is at the clock
// (a stage 2 member taking partitions over) keeps the messages of the
// whole memory, not only those of the windows, which FirstEvidence alone
// kept: a status five minutes after a message sent before the handover
// does not count it again. Messages already held, repeated, or older than
// the memory are not kept again.
func TestRememberEarlier(t *testing.T) {
	const now = 2000
	fill := func(d *Deduper) {
		for s := now - 900; s <= now; s += 3 { // the member's own traffic
			d.SeenMessage(fmt.Sprint("live-", s), at(s))
		}
	}
	// What the read-back kept before: only the windows' messages.
	before := NewDeduper()
	fill(before)
	before.FirstEvidence("sent-5min-ago", at(now-300))
	if before.SeenMessage("sent-5min-ago", at(now)) {
		t.Fatal("FirstEvidence kept evidence older than the windows: the test no longer shows what RememberEarlier is for")
	}

	d := NewDeduper()
	fill(d)
	for _, c := range []struct {
		key  string
		sec  int
		want bool
	}{
		{"sent-5min-ago", now - 300, true},
		{"sent-5min-ago", now - 290, false}, // its read, also read back
		{"sent-70s-ago", now - 70, true},    // the epoch before the head's
		{"sent-9min-ago", now - 540, true},
		{"sent-20s-ago", now - 20, true}, // in the windows: FirstEvidence's way
		{"live-1700", now - 300, false},  // held already
		{"sent-15min-ago", now - 900, false},
	} {
		if got := d.RememberEarlier(c.key, at(c.sec)); got != c.want {
			t.Errorf("RememberEarlier(%s, now-%d) = %v, want %v", c.key, now-c.sec, got, c.want)
		}
	}
	// Those of the epochs held as sets wait for FlushEarlier: 5 and 9
	// minutes ago, and 70 s ago unless that is the epoch before the head's.
	held, waiting := d.messages(), 0
	for _, m := range d.earlier {
		waiting += len(m)
	}
	d.FlushEarlier()
	if got := d.messages(); waiting < 2 || got != held+waiting {
		t.Errorf("%d messages after FlushEarlier, want %d held and the %d waiting (at least 2)", got, held, waiting)
	}
	for _, key := range []string{"sent-5min-ago", "sent-70s-ago", "sent-9min-ago", "sent-20s-ago", "live-1700"} {
		if !d.SeenMessage(key, at(now)) {
			t.Errorf("%s counted again after the read-back", key)
		}
	}
	if d.SeenMessage("sent-15min-ago", at(now)) {
		t.Error("a message older than the memory was kept")
	}
	// The sets stay in order of their epochs, and age out as before.
	for i := 1; i < len(d.old); i++ {
		if d.old[i-1].epoch >= d.old[i].epoch {
			t.Fatalf("epochs out of order: %d then %d", d.old[i-1].epoch, d.old[i].epoch)
		}
	}
	d.SeenMessage("later", at(now+int(DefaultMessageMemory/time.Second)+1<<epochBits))
	if d.SeenMessage("sent-70s-ago", at(now+int(DefaultMessageMemory/time.Second)+1<<epochBits)) {
		t.Error("a message read back outlived the memory and an epoch")
	}
}

// The message memory against a model of its contract, over random
// traffic: evidence late, early, repeated within and past the memory, and
// gaps in time. A message first seen at second s in epoch e (s>>6) is
// remembered while e is the head's epoch or the one before, or e's last
// second is within the memory: at least the memory after s, at most an
// epoch longer. Within the windows' two epochs it counts at its earliest
// evidence.
func TestDeduperMessageModel(t *testing.T) {
	for _, memory := range []time.Duration{0, 200 * time.Second, DefaultMessageMemory} {
		d := NewDeduperFor(memory)
		span := max(int64(memory/time.Second), slots)
		type msg struct{ epoch, min int64 }
		// remembered: the epoch is one of the head's two or its last
		// second is within the memory.
		remembered := func(epoch, head int64) bool {
			return epoch >= head>>epochBits-1 || epoch<<epochBits+1<<epochBits-1 > head-span
		}
		model := map[string]msg{}
		rng := rand.New(rand.NewSource(int64(memory)))
		head := at(0)
		for i := range 200_000 {
			switch r := rng.Intn(1000); {
			case r == 0:
				head += int64(rng.Intn(3 * int(span)))
			case r == 1: // past an epoch or two, within the memory
				head += int64(64 + rng.Intn(128))
			case r < 300:
				head++
			}
			sec := head - int64(rng.Intn(70)) // late, some past the windows
			key := fmt.Sprint("m", rng.Intn(20_000))
			mhead := max(d.head, sec)
			var wantSeen bool
			wantAt := sec
			switch m, ok := model[key]; {
			case sec <= mhead-slots:
				wantSeen = true
			case ok && remembered(m.epoch, mhead):
				wantSeen = true
				if m.epoch >= mhead>>epochBits-1 {
					wantAt = m.min
					if sec < m.min {
						model[key] = msg{m.epoch, sec}
					}
				} else {
					wantAt = m.epoch<<epochBits + 1<<epochBits - 1
				}
			default:
				model[key] = msg{sec >> epochBits, sec}
			}
			seen, counted := d.FirstEvidence(key, sec)
			if seen != wantSeen || counted != wantAt {
				t.Fatalf("memory %s, event %d (%s at %d, head %d): seen %v at %d, want %v at %d",
					memory, i, key, sec-at(0), mhead-at(0), seen, counted-at(0), wantSeen, wantAt-at(0))
			}
		}
		held := 0
		for _, m := range model {
			if remembered(m.epoch, d.head) {
				held++
			}
		}
		if n := d.messages(); n != held {
			t.Errorf("memory %s: %d messages held, the model holds %d", memory, n, held)
		}
	}
}

// The state of one number stays under the 4 KiB bar.
func TestNumberSize(t *testing.T) {
	if sz := unsafe.Sizeof(Number{}); sz > 4096 {
		t.Fatalf("Number is %d bytes", sz)
	}
}

// BenchmarkNumberMemory reports the heap per active number: 100,000
// numbers, each with traffic, errors and a quality event.
func BenchmarkNumberMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const numbers = 100_000
		state := make(map[string]*Number, numbers)
		for k := 0; k < numbers; k++ {
			id := fmt.Sprintf("1065403522%05d", k)
			n := NewNumber(id)
			n.Apply(Event{At: at(k % 60), Outbound: true})
			n.Apply(Event{At: at(k % 60), Codes: []int32{130429}})
			n.Apply(Event{At: at(0), Field: "phone_number_quality_update", Name: "FLAGGED", NewValue: "TIER_250"})
			state[id] = n
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/numbers, "bytes/number")
		runtime.KeepAlive(state)
	}
}

func BenchmarkApplyAndSignal(b *testing.B) {
	n := NewNumber("1001")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n.Apply(Event{At: at(i / 1000), Outbound: true})
		if i%100 == 0 {
			_ = n.Signal(t0.Add(time.Duration(i/1000)*time.Second), DefaultTiers())
		}
	}
}

// An event stamped ahead of the clock (stage 2 counts one up to 2 s
// ahead where it is stamped) keeps every second of the 60 s rate: with a
// window of 64 seconds its head moved so far that the rate's first second
// left it, and a steady 1 mps read 59/60.
func TestWindowHoldsMinuteWithEventAhead(t *testing.T) {
	n := NewNumber("1001")
	now := t0.Add(62 * time.Second)
	last := schema.PacingLastSecond(now)
	for s := last - 59; s <= last; s++ {
		n.Apply(Event{At: s, Outbound: true})
	}
	n.Apply(Event{At: now.Unix() + 2, Outbound: true})
	if s := n.Signal(now, DefaultTiers()); s.Observed.S60 != 1 || s.Observed.S10 != 1 {
		t.Fatalf("1 mps for a minute, then one event 2 s ahead: 60 s rate %v, 10 s rate %v; want 1 and 1", s.Observed.S60, s.Observed.S10)
	}
}

// recent_errors is the last 60 s to the second: ten-second buckets made it
// anything from 51 to 60 s.
func TestRecentErrorsLast60Seconds(t *testing.T) {
	n := NewNumber("1001")
	n.Apply(Event{At: at(3), Codes: []int32{131026}})
	n.Apply(Event{At: at(3), Codes: []int32{131026, 131049}})
	n.Apply(Event{At: at(20), Codes: []int32{131026}})
	for _, c := range []struct {
		sec               int
		undeliverable, en int
	}{
		{3, 2, 1}, {20, 3, 1}, {62, 3, 1}, {63, 1, 0}, {79, 1, 0}, {80, 0, 0},
	} {
		s := n.Signal(time.Unix(at(c.sec), 0), DefaultTiers())
		if s.RecentErrors[schema.ClassUndeliverable] != c.undeliverable || s.RecentErrors[schema.ClassEngagement] != c.en {
			t.Errorf("at %d s: recent errors %v, want undeliverable %d, engagement %d", c.sec, s.RecentErrors, c.undeliverable, c.en)
		}
	}
}

// 130497 (the business may not message users in one country) leaves the
// number sending: its recipients elsewhere are fine.
func TestCountryRestrictionDoesNotStop(t *testing.T) {
	n := NewNumber("1001")
	n.Apply(Event{At: at(5), Codes: []int32{130497}})
	s := n.Signal(time.Unix(at(6), 0), DefaultTiers())
	if s.Advice != schema.AdviceOK || s.RecentErrors[schema.ClassCountry] != 1 || s.StopUntil != nil {
		t.Fatalf("after 130497: advice %s, recent %v, stop until %v", s.Advice, s.RecentErrors, s.StopUntil)
	}
}

// FirstEvidence gives the second a message counts at; earlier evidence
// that comes later becomes it, and a move of the count follows it in the
// window, as far as the window holds the seconds.
func TestFirstEvidenceMoves(t *testing.T) {
	d := NewDeduper()
	if seen, at := d.FirstEvidence("m", 100); seen || at != 100 {
		t.Fatalf("new: %v %d", seen, at)
	}
	if seen, was := d.FirstEvidence("m", 98); !seen || was != 100 {
		t.Fatalf("earlier: %v %d, want seen at 100", seen, was)
	}
	if seen, was := d.FirstEvidence("m", 99); !seen || was != 98 {
		t.Fatalf("later again: %v %d, want seen at 98", seen, was)
	}
	n := NewNumber("1")
	n.Apply(Event{Kind: schema.KindStatus, At: 100, Outbound: true})
	if !n.MoveOutbound(100, 98) {
		t.Fatal("no move")
	}
	if in, out := n.traffic.sum(100, 1); in != 0 || out != 0 {
		t.Errorf("second 100 keeps %d", out)
	}
	if _, out := n.traffic.sum(98, 1); out != 1 {
		t.Errorf("second 98 has %d, want 1", out)
	}
	if _, out := n.traffic.sum(100, 60); out != 1 {
		t.Errorf("the minute has %d, want 1", out)
	}
	n.MoveOutbound(98, 100-windowSlots) // out of the window: the count leaves it
	if _, out := n.traffic.sum(100, windowSlots); out != 0 {
		t.Errorf("moved out of the window, still %d", out)
	}
}

// BenchmarkMessageMemory drives the message memory as stage 2 does at
// 8,000 new messages a second, each with a sent, delivered and read status
// (the read a minute later), for 12 minutes of Meta's time: past the
// default memory, so that it holds its steady state. It reports the heap
// the Deduper holds per message remembered and the time per status.
func BenchmarkMessageMemory(b *testing.B) {
	const rate, seconds = 8000, 12 * 60
	keys := make([]string, rate*seconds)
	for i := range keys {
		keys[i] = fmt.Sprintf("wamid.HBgLMTY1MDM4NzkwOTkVAgARGBI%016X", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		d := NewDeduper()
		for s := range seconds {
			sec := at(s)
			for k := range rate {
				d.FirstEvidence(keys[s*rate+k], sec)
				if s >= 2 {
					d.FirstEvidence(keys[(s-2)*rate+k], sec)
				}
				if s >= 60 {
					d.FirstEvidence(keys[(s-60)*rate+k], sec)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := int(DefaultMessageMemory/time.Second) * rate
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(held), "bytes/message")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i+1)/float64(3*rate*seconds), "ns/status")
		runtime.KeepAlive(d)
	}
}

// Seconds at and before 0 (no event of Meta's has them) are taken, not a
// panic, by a Deduper that has seen nothing yet, and by one that has.
func TestDeduperSecondZero(t *testing.T) {
	d := NewDeduper()
	if d.SeenMessage("m", 0) || !d.SeenMessage("m", 0) || d.SeenMessage("n", -10) || !d.SeenMessage("o", -100) {
		t.Fatal("seconds at and before 0 on a new Deduper")
	}
	if d.SeenMessage("m", at(0)) || !d.SeenMessage("m", 0) {
		t.Fatal("then a real second")
	}
}

// TestSeenAhead: an id stamped ahead of the clock is seen again however it
// comes back (ahead again, or at its own second once the head reaches it),
// and forgotten once the windows leave its second.
func TestSeenAhead(t *testing.T) {
	d := NewDeduper()
	if d.Seen("now", 100) {
		t.Fatal("a new id seen")
	}
	if d.SeenAhead("x", 3700) {
		t.Fatal("a new id ahead seen")
	}
	if !d.SeenAhead("x", 3700) {
		t.Fatal("an id ahead not seen again ahead")
	}
	if !d.Seen("x", 3700) {
		t.Fatal("an id ahead not seen at its own second")
	}
	if len(d.ahead) != 1 {
		t.Fatalf("ids ahead: %d, want 1", len(d.ahead))
	}
	d.Seen("later", 3700+slots+1<<epochBits)
	if len(d.ahead) != 0 {
		t.Fatalf("ids ahead once the windows left their second: %d, want 0", len(d.ahead))
	}
}

// TestMaxPairCooldown: however many 131056 in a row, a cool-down runs at
// most MaxPairCooldown from its event.
func TestMaxPairCooldown(t *testing.T) {
	at := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	var prev *schema.PairCooldown
	for i := range 12 {
		c, _ := NextCooldown(prev, "1", "r", fmt.Sprint("e", i), at)
		if d := c.Until.Sub(at); d > MaxPairCooldown {
			t.Fatalf("strike %d: %s from its event, past %s", i+1, d, MaxPairCooldown)
		}
		prev = &c
		at = at.Add(time.Second)
	}
	if prev.Until.Sub(at.Add(-time.Second)) != MaxPairCooldown {
		t.Errorf("the longest cool-down: %s, want %s", prev.Until.Sub(at.Add(-time.Second)), MaxPairCooldown)
	}
}

// NextCooldown2 is NextCooldown for a new strike, failing t if it is not.
func NextCooldown2(t *testing.T, prev *schema.PairCooldown, id string, at time.Time) schema.PairCooldown {
	t.Helper()
	c, same := NextCooldown(prev, "1001", "r1", id, at)
	if same {
		t.Fatalf("%s: no strike", id)
	}
	return c
}

// The signal names the number's WABA from the newest event that named one:
// after Meta moves the number, the old WABA's late webhooks do not move it
// back; an event naming none changes nothing; a restored number keeps its
// WABA until an event names one.
func TestNumberWABA(t *testing.T) {
	n := NewNumber("1001")
	at := func(s int) int64 { return t0.Unix() + int64(s) }
	if !n.Apply(Event{Kind: schema.KindStatus, At: at(1), Waba: "w1"}) || n.Signal(t0.Add(5*time.Second), DefaultTiers()).WabaID != "w1" {
		t.Fatal("the first WABA")
	}
	if !n.Apply(Event{Kind: schema.KindInbound, At: at(5), Inbound: true, Waba: "w2"}) {
		t.Fatal("a move to another WABA changes the signal")
	}
	n.Apply(Event{Kind: schema.KindStatus, At: at(3), Waba: "w1"})
	n.Apply(Event{Kind: schema.KindError, At: at(6), Codes: []int32{131000}})
	sig := n.Signal(t0.Add(10*time.Second), DefaultTiers())
	if sig.WabaID != "w2" {
		t.Fatalf("after a late webhook of the old WABA and an event naming none: %q, want w2", sig.WabaID)
	}
	r := NewNumber("1001")
	r.Restore(sig)
	if got := r.Signal(t0.Add(11*time.Second), DefaultTiers()).WabaID; got != "w2" {
		t.Fatalf("restored: %q", got)
	}
	// A webhook of the old WABA redelivered after the restart, older than
	// the signal: the number stays.
	r.Apply(Event{Kind: schema.KindStatus, At: at(3), Waba: "w1"})
	if got := r.Signal(t0.Add(11*time.Second), DefaultTiers()).WabaID; got != "w2" {
		t.Fatalf("restored, then a redelivered webhook of the old WABA: %q, want w2", got)
	}
	r.Apply(Event{Kind: schema.KindStatus, At: at(12), Waba: "w3"})
	if got := r.Signal(t0.Add(13*time.Second), DefaultTiers()).WabaID; got != "w3" {
		t.Fatalf("restored, then an event of another WABA: %q", got)
	}
}
