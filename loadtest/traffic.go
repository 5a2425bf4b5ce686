package loadtest

import (
	"container/heap"
	"crypto/rand"
	"encoding/binary"
	"math"
	mrand "math/rand/v2"
	"sort"
	"time"
)

// BatchWindow is the longest an item waits for others to share its POST,
// when a model puts several items in one.
const BatchWindow = 100 * time.Millisecond

// Kinds of items a POST carries.
type itemKind uint8

const (
	itemStatus  itemKind = iota // a status of an outbound message
	itemInbound                 // an inbound message
	itemEcho                    // a coexistence number's message sent from the Business app
	itemNumber                  // a phone_number_quality_update event
)

// Statuses of outbound messages.
const (
	statusSent = iota
	statusDelivered
	statusRead
	statusFailed
	numStatuses
)

var statusNames = [numStatuses]string{"sent", "delivered", "read", "failed"}

// Types of inbound messages, with their share.
const (
	inText = iota
	inButton
	inImage
	inReaction
)

// numberEvents are the phone_number_quality_update events: the quality
// events in turn, and the throughput upgrade.
var numberEvents = []struct{ event, old, current string }{
	{"FLAGGED", "", "TIER_10K"},
	{"UNFLAGGED", "", "TIER_10K"},
	{"DOWNGRADE", "TIER_10K", "TIER_2K"},
	{"UPGRADE", "TIER_2K", "TIER_10K"},
	{"THROUGHPUT_UPGRADE", "", "TIER_UNLIMITED"},
}

const (
	qualityEvents   = 4 // the first four of numberEvents
	eventThroughput = 4
)

// item is one thing a webhook reports. Everything a body says about it
// follows from these fields, so the same items make the same bytes.
type item struct {
	due    time.Duration // from the run's start
	at     int64         // Meta's timestamp, unix seconds
	seq    uint32        // the message's sequence within its number and kind
	number int32
	code   int32 // failed: the error code; inbound: seq+1 of the message replied to, 0 none
	kind   itemKind
	sub    uint8 // status; inbound type; number event
	repeat bool  // a status Meta sends again in another POST
}

// Post is one POST of a run: the items of its body, and when it is due.
type Post struct {
	At time.Duration // from the run's start
	// Retry marks Meta posting a body again although it got a 200.
	Retry bool
	items []item
}

// Len is the number of items in the body.
func (p *Post) Len() int { return len(p.items) }

// Generated counts what a Traffic has made due so far: the intended
// traffic, before any answer.
type Generated struct {
	Messages uint64                // outbound messages sent in the run (not in the history before it)
	Statuses [numStatuses]uint64   // status items, by status, repeats included
	Failures map[int32]uint64      // failed status items by code, repeats included
	Inbound  uint64                // inbound messages
	Echoes   uint64                // Business-app echoes
	Quality  uint64                // quality events
	Upgrades uint64                // THROUGHPUT_UPGRADE events
	Repeats  uint64                // statuses that come again in another POST
	Posts    uint64                // POSTs, Meta's retries included
	Retries  uint64                // Meta's identical retries of a POST that got a 200
	Items    uint64                // items in all POSTs, Meta's retries included
	PerPost  map[int]uint64        // POSTs by items in the body
	Numbers  [][numStatuses]uint64 // status items per number
}

// Traffic makes the POSTs of a Model, in time order. It is not safe for
// concurrent use; Body is.
type Traffic struct {
	m     Model
	fleet *fleet
	start time.Time
	rng   *mrand.Rand

	tier              []int
	outCum, inCum     []float64
	outTotal, inTotal float64
	outSeq, inSeq     []uint32
	echoSeq           []uint32

	nextOut, nextIn, nextQuality, nextUpgrade time.Duration
	quality, upgraded                         int

	pending itemHeap
	retries postHeap
	ready   []item // due, waiting for the rest of their POST
	want    int    // items the next POST takes
	gen     Generated
}

// NewTraffic returns the traffic of m for a run that starts at start (the
// wall time that Meta's timestamps count from). A zero RunID is drawn at
// random.
func NewTraffic(m Model, start time.Time) (*Traffic, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if m.RunID == 0 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		m.RunID = binary.LittleEndian.Uint32(b[:])%99_999_999 + 1
	}
	if m.Seed == 0 {
		m.Seed = uint64(m.RunID)
	}
	g := &Traffic{
		m: m, fleet: newFleet(m), start: start,
		rng:     mrand.New(mrand.NewPCG(m.Seed, 0x5eed)),
		tier:    make([]int, m.Numbers),
		outSeq:  make([]uint32, m.Numbers),
		inSeq:   make([]uint32, m.Numbers),
		echoSeq: make([]uint32, m.Numbers),
		gen: Generated{Failures: map[int32]uint64{}, PerPost: map[int]uint64{},
			Numbers: make([][numStatuses]uint64, m.Numbers)},
	}
	for n := range g.tier {
		g.tier[n] = m.tier(n)
	}
	g.rerate()
	// The history: messages sent before the run whose statuses are due in
	// it, so that the status rate holds from the first second.
	g.nextOut = -m.Delays.Max + g.gap(g.outTotal)
	g.nextIn = g.gap(g.inTotal)
	g.nextQuality, g.nextUpgrade = m.QualityEvery/2, m.UpgradeEvery
	return g, nil
}

// Model is the model, with its RunID and Seed filled in.
func (g *Traffic) Model() Model { return g.m }

// Numbers are the run's business numbers.
func (g *Traffic) Numbers() []Number { return g.fleet.numbers }

// Generated is what has been made due so far.
func (g *Traffic) Generated() Generated { return g.gen }

// rerate computes the numbers' rates after a tier change.
func (g *Traffic) rerate() {
	g.outCum, g.inCum = g.outCum[:0], g.inCum[:0]
	g.outTotal, g.inTotal = 0, 0
	for _, t := range g.tier {
		out, in := g.m.rates(t)
		g.outTotal += out
		g.inTotal += in
		g.outCum = append(g.outCum, g.outTotal)
		g.inCum = append(g.inCum, g.inTotal)
	}
}

// gap is the time to the next arrival of a Poisson process at rate per s.
func (g *Traffic) gap(rate float64) time.Duration {
	if rate <= 0 {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(g.rng.ExpFloat64() / rate * float64(time.Second))
}

// pick chooses a number with probability proportional to its rate.
func (g *Traffic) pick(cum []float64, total float64) int32 {
	r := g.rng.Float64() * total
	i := sort.SearchFloat64s(cum, r)
	for i < len(cum)-1 && cum[i] <= r {
		i++
	}
	return int32(min(i, len(cum)-1))
}

// delay draws a log-normal delay around median.
func (g *Traffic) delay(median time.Duration) time.Duration {
	if median <= 0 {
		return 0
	}
	d := time.Duration(float64(median) * math.Exp(0.7*g.rng.NormFloat64()))
	return min(d, g.m.Delays.Max)
}

// Due returns the POSTs due by now (from the run's start), in time order.
func (g *Traffic) Due(now time.Duration) []Post {
	for g.nextOut <= now {
		g.send(g.nextOut)
		g.nextOut += g.gap(g.outTotal)
	}
	for g.nextIn <= now {
		g.receive(g.nextIn)
		g.nextIn += g.gap(g.inTotal)
	}
	for g.m.QualityEvery > 0 && g.nextQuality <= now {
		n := int32(g.quality % g.m.Numbers)
		ev := uint8(g.quality / g.m.Numbers % qualityEvents)
		g.push(item{due: g.nextQuality, kind: itemNumber, number: n, sub: ev})
		g.quality++
		g.nextQuality += g.m.QualityEvery
	}
	for g.m.UpgradeEvery > 0 && g.nextUpgrade <= now {
		n := g.m.Coexistence + g.m.Upgraded + g.upgraded
		if n >= g.m.Numbers {
			g.nextUpgrade = time.Duration(math.MaxInt64 / 2)
			break
		}
		g.push(item{due: g.nextUpgrade, kind: itemNumber, number: int32(n), sub: eventThroughput})
		g.tier[n] = TierUpgraded
		g.rerate()
		g.upgraded++
		g.nextUpgrade += g.m.UpgradeEvery
	}
	ready := g.ready
	for len(g.pending) > 0 && g.pending[0].due <= now {
		it := heap.Pop(&g.pending).(item)
		g.count(&it)
		ready = append(ready, it)
	}
	// Meta gathers items into a POST for a short while: a POST takes the
	// next want items, or what came due within BatchWindow of its first.
	var posts []Post
	for len(ready) > 0 {
		if g.want == 0 {
			g.want = 1 + g.rng.IntN(g.m.PerPost)
		}
		k := g.want
		at := ready[min(k, len(ready))-1].due
		if len(ready) < k {
			if now-ready[0].due < BatchWindow {
				break // wait for more
			}
			k, at = len(ready), ready[0].due+BatchWindow
		}
		p := Post{At: at, items: append([]item(nil), ready[:k]...)}
		ready = ready[k:]
		g.want = 0
		posts = append(posts, p)
		if g.m.RetryShare > 0 && g.rng.Float64() < g.m.RetryShare {
			r := p
			r.Retry = true
			r.At += 500*time.Millisecond + time.Duration(g.rng.Int64N(int64(2500*time.Millisecond)))
			heap.Push(&g.retries, r)
		}
	}
	g.ready = append(g.ready[:0], ready...)
	for len(g.retries) > 0 && g.retries[0].At <= now {
		posts = append(posts, heap.Pop(&g.retries).(Post))
	}
	sort.SliceStable(posts, func(i, j int) bool { return posts[i].At < posts[j].At })
	for i := range posts {
		g.gen.Posts++
		g.gen.Items += uint64(len(posts[i].items))
		g.gen.PerPost[len(posts[i].items)]++
		if posts[i].Retry {
			g.gen.Retries++
		}
	}
	return posts
}

// push schedules an item that is due in the run; one due before it (in the
// history) is dropped.
func (g *Traffic) push(it item) {
	if it.due < 0 {
		return
	}
	if it.at == 0 { // a repeat keeps the time of its status
		it.at = g.start.Add(it.due).Unix()
	}
	heap.Push(&g.pending, it)
}

// count adds an item made due to Generated.
func (g *Traffic) count(it *item) {
	if it.repeat {
		g.gen.Repeats++
	}
	switch it.kind {
	case itemStatus:
		g.gen.Statuses[it.sub]++
		g.gen.Numbers[it.number][it.sub]++
		if it.sub == statusFailed {
			g.gen.Failures[it.code]++
		}
	case itemInbound:
		g.gen.Inbound++
	case itemEcho:
		g.gen.Echoes++
	case itemNumber:
		if it.sub == eventThroughput {
			g.gen.Upgrades++
		} else {
			g.gen.Quality++
		}
	}
}

// send makes an outbound message sent at t and schedules its statuses.
func (g *Traffic) send(t time.Duration) {
	n := g.pick(g.outCum, g.outTotal)
	if t >= 0 {
		g.gen.Messages++
	}
	if g.fleet.numbers[n].Coexistence && g.rng.Float64() < g.m.EchoShare {
		seq := g.echoSeq[n]
		g.echoSeq[n]++
		g.push(item{due: t + g.delay(g.m.Delays.Sent), kind: itemEcho, number: n, seq: seq})
		return
	}
	seq := g.outSeq[n]
	g.outSeq[n]++
	var code int32
	if r := g.rng.Float64(); len(g.m.Failures) > 0 {
		for _, f := range g.m.Failures {
			if r < f.Share {
				code = f.Code
				break
			}
			r -= f.Share
		}
	}
	last := t + g.m.Delays.Max // the whole chain stays within the history
	status := func(due time.Duration, s uint8) {
		it := item{due: min(due, last), kind: itemStatus, number: n, seq: seq, sub: s}
		it.at = g.start.Add(it.due).Unix()
		if s == statusFailed {
			it.code = code
		}
		g.push(it)
		if it.due >= 0 && g.m.RepeatShare > 0 && g.rng.Float64() < g.m.RepeatShare {
			it.due += time.Second + time.Duration(g.rng.Int64N(int64(4*time.Second)))
			it.repeat = true
			g.push(it)
		}
	}
	sent := t + g.delay(g.m.Delays.Sent)
	status(sent, statusSent)
	if code != 0 {
		status(sent+g.delay(g.m.Delays.Failed), statusFailed)
		return
	}
	delivered := sent + g.delay(g.m.Delays.Delivered)
	status(delivered, statusDelivered)
	if g.rng.Float64() < g.m.ReadShare {
		status(delivered+g.delay(g.m.Delays.Read), statusRead)
	}
}

// receive makes an inbound message at t: mostly text, some button replies
// to the number's last message, images and reactions.
func (g *Traffic) receive(t time.Duration) {
	n := g.pick(g.inCum, g.inTotal)
	seq := g.inSeq[n]
	g.inSeq[n]++
	it := item{due: t, kind: itemInbound, number: n, seq: seq}
	switch r := g.rng.Float64(); {
	case r < 0.70:
		it.sub = inText
	case r < 0.85:
		it.sub = inButton
	case r < 0.95:
		it.sub = inImage
	default:
		it.sub = inReaction
	}
	switch last := g.outSeq[n]; {
	case last == 0:
		it.sub = inText // nothing to reply or react to yet
	case it.sub != inText || g.rng.IntN(2) == 0:
		it.code = int32(last) // about message last-1
	}
	g.push(it)
}

// itemHeap orders items by due time.
type itemHeap []item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// postHeap orders POSTs by due time.
type postHeap []Post

func (h postHeap) Len() int           { return len(h) }
func (h postHeap) Less(i, j int) bool { return h[i].At < h[j].At }
func (h postHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *postHeap) Push(x any)        { *h = append(*h, x.(Post)) }
func (h *postHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
