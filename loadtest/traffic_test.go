package loadtest

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema/meta"
)

var testStart = time.Unix(1_781_514_000, 0)

// runTraffic makes the POSTs of m over d of virtual time, polled every
// 10 ms as the scheduler polls it every millisecond.
func runTraffic(t *testing.T, m Model, d time.Duration) (*Traffic, []Post) {
	t.Helper()
	if m.RunID == 0 {
		m.RunID = 4242
	}
	g, err := NewTraffic(m, testStart)
	if err != nil {
		t.Fatal(err)
	}
	var posts []Post
	for now := time.Duration(0); now < d; now += 10 * time.Millisecond {
		posts = append(posts, g.Due(now)...)
	}
	return g, posts
}

// quiet is a model without Meta's duplicates, batching or events, for
// counting.
func quiet() Model {
	m := DefaultModel()
	m.Coexistence, m.Failures, m.RetryShare, m.RepeatShare, m.PerPost = 0, nil, 0, 0, 1
	m.QualityEvery, m.UpgradeEvery = 0, 0
	return m
}

func near(t *testing.T, what string, got, want, tolerance float64) {
	t.Helper()
	if math.Abs(got-want) > tolerance*want {
		t.Errorf("%s: got %.4g, want %.4g within %.1f%%", what, got, want, 100*tolerance)
	}
}

func TestTrafficRates(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS, m.ReplyRate = 10, 20, 0.3
	const seconds = 300
	g, _ := runTraffic(t, m, seconds*time.Second)
	gen := g.Generated()
	near(t, "outbound msgs/s", float64(gen.Messages)/seconds, 200, 0.03)
	near(t, "inbound msgs/s", float64(gen.Inbound)/seconds, 60, 0.05)
	r := m.Rates()
	if r.Outbound != 200 || math.Abs(r.Inbound-60) > 1e-9 || math.Abs(r.Events-660) > 1e-9 {
		t.Errorf("planned rates %+v, want 200 out, 60 in, 660 events/s", r)
	}

	// An explicit inbound rate replaces the reply rate and is spread evenly.
	m.InboundMPS = 25
	g, _ = runTraffic(t, m, seconds*time.Second)
	near(t, "explicit inbound msgs/s", float64(g.Generated().Inbound)/seconds, 25, 0.06)
}

// TestTrafficStatusMultiplication checks Meta's 3x: every message gives
// sent, delivered and read, at the outbound rate each, from the first second
// (the run starts in steady state).
func TestTrafficStatusMultiplication(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS = 5, 40
	const seconds = 120
	g, posts := runTraffic(t, m, seconds*time.Second)
	gen := g.Generated()
	out := float64(gen.Messages)
	for s := 0; s < statusFailed; s++ {
		near(t, statusNames[s]+" per message", float64(gen.Statuses[s])/out, 1, 0.04)
	}
	if gen.Statuses[statusFailed] != 0 {
		t.Errorf("%d failed statuses without failures", gen.Statuses[statusFailed])
	}
	// The rate holds in the first seconds too: the history is warm.
	var first, statuses int
	for _, p := range posts {
		for _, it := range p.items {
			if it.kind != itemStatus {
				continue
			}
			if p.At < 10*time.Second {
				first++
			}
			statuses++
		}
	}
	near(t, "statuses in the first 10 s", float64(first), 3*200*10, 0.08)
	near(t, "statuses/s", float64(statuses)/seconds, 3*200, 0.04)

	// Fewer reads with a read share below 1.
	m.ReadShare = 0.5
	g, _ = runTraffic(t, m, seconds*time.Second)
	gen = g.Generated()
	near(t, "reads per message at share 0.5", float64(gen.Statuses[statusRead])/float64(gen.Messages), 0.5, 0.06)
}

func TestTrafficFailureMix(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS = 10, 50
	var err error
	if m.Failures, err = ParseFailureMix("131049=2%,130429=0.5%, 131026=0.01"); err != nil {
		t.Fatal(err)
	}
	const seconds = 200
	g, posts := runTraffic(t, m, seconds*time.Second)
	gen := g.Generated()
	out := float64(gen.Messages)
	for code, share := range map[int32]float64{131049: 0.02, 130429: 0.005, 131026: 0.01} {
		near(t, "failures "+strconv.Itoa(int(code)), float64(gen.Failures[code])/out, share, 0.12)
	}
	// A failed message is sent and failed: never delivered or read.
	failed := map[string]bool{}
	delivered := map[string]bool{}
	for _, p := range posts {
		for _, it := range p.items {
			id := g.fleet.messageID(idOutbound, it.number, it.seq)
			switch {
			case it.kind == itemStatus && it.sub == statusFailed:
				failed[id] = true
			case it.kind == itemStatus && it.sub != statusSent:
				delivered[id] = true
			}
		}
	}
	for id := range failed {
		if delivered[id] {
			t.Fatalf("%s failed and was delivered or read", id)
		}
	}
	near(t, "statuses per message", float64(gen.Statuses[0]+gen.Statuses[1]+gen.Statuses[2]+gen.Statuses[3])/out,
		3-0.035, 0.03)
}

func TestTrafficParseFailureMix(t *testing.T) {
	for in, want := range map[string]string{
		"131049=2%,130429=0.5%": "130429=0.5%,131049=2%",
		" 131026 = 0.01 ":       "131026=1%",
		"":                      "none",
		"none":                  "none",
	} {
		m, err := ParseFailureMix(in)
		if err != nil || m.String() != want {
			t.Errorf("ParseFailureMix(%q) = %v, %v; want %s", in, m, err, want)
		}
	}
	for _, bad := range []string{"131049", "x=1%", "131049=abc", "131049=60%,131026=50%", "131049=1%,131049=2%", "131049=-1%"} {
		if _, err := ParseFailureMix(bad); err == nil {
			t.Errorf("ParseFailureMix(%q): no error", bad)
		}
	}
}

// TestTrafficTiers holds numbers to their tier and lets a
// THROUGHPUT_UPGRADE lift one to 1,000 mps.
func TestTrafficTiers(t *testing.T) {
	m := quiet()
	m.Numbers, m.Coexistence, m.Upgraded, m.OutboundMPS, m.ReplyRate = 3, 1, 1, 200, 0
	r := m.Rates()
	// coexistence 20, upgraded 200, standard 80
	if r.Outbound != 300 || r.Clamped != 2 {
		t.Fatalf("rates %+v: want 300 msgs/s out with 2 numbers clamped", r)
	}
	m.UpgradeEvery = 10 * time.Second
	g, posts := runTraffic(t, m, 30*time.Second)
	if got := g.Generated().Upgrades; got != 1 {
		t.Fatalf("%d upgrades, want 1 (one standard number)", got)
	}
	var before, after float64
	for _, p := range posts {
		for _, it := range p.items {
			if it.kind == itemStatus && it.sub == statusSent && it.number == 2 {
				switch {
				case it.due < 10*time.Second:
					before++
				case it.due > 12*time.Second:
					after++
				}
			}
		}
	}
	near(t, "sent/s of the standard number before its upgrade", before/10, 80, 0.12)
	near(t, "after", after/18, 200, 0.08)
}

// decoded decodes a body and fails on anything the decoder did not know.
func decoded(t *testing.T, body []byte) *meta.Payload {
	t.Helper()
	if !json.Valid(body) {
		t.Fatalf("not JSON: %s", body)
	}
	p, err := meta.Decode(body)
	if err != nil || len(p.Problems) > 0 || len(p.Unknown) > 0 {
		t.Fatalf("decode: %v, problems %v, unknown keys %v\n%s", err, p.Problems, p.Unknown, body)
	}
	return p
}

// TestTrafficBodies decodes every body of a busy model with the decoder
// stage 1 uses: nothing unknown, every item where it belongs, timestamps as
// strings of unix seconds, unique message ids, fictional recipients, and
// several items, changes and entries in one POST.
func TestTrafficBodies(t *testing.T) {
	m := DefaultModel()
	m.Numbers, m.Coexistence, m.OutboundMPS, m.PerPost = 12, 3, 30, 6
	m.QualityEvery, m.UpgradeEvery = time.Second, 2*time.Second
	m.Failures, _ = ParseFailureMix("131049=3%,130429=1%")
	g, posts := runTraffic(t, m, 20*time.Second)
	var statuses, inbound, echoes, quality, multiEntry, multiChange, multiItem int
	ids := map[string]string{}
	numbers := map[string]bool{}
	for _, n := range g.Numbers() {
		numbers[n.PhoneNumberID] = true
		if !strings.HasPrefix(n.Display, "1") || n.Display[4:9] != "55501" {
			t.Fatalf("display number %s is not a fictional 555-01XX number", n.Display)
		}
	}
	var buf []byte
	for i := range posts {
		p := &posts[i]
		buf = g.Body(buf[:0], p)
		if again := g.Body(nil, p); !bytes.Equal(again, buf) {
			t.Fatal("the same POST made different bytes")
		}
		pl := decoded(t, buf)
		if len(pl.Entries) > 1 {
			multiEntry++
		}
		if p.Len() > 1 {
			multiItem++
		}
		changes := 0
		for env := range pl.Changes() {
			changes++
			if env.Field() == "phone_number_quality_update" {
				quality++
				if env.EntryTime() == 0 {
					t.Fatal("quality update without entry.time")
				}
			}
		}
		if changes > len(pl.Entries) {
			multiChange++
		}
		for r := range pl.Statuses() {
			s := r.Item
			statuses++
			if !numbers[r.PhoneNumberID()] {
				t.Fatalf("status for unknown number %s", r.PhoneNumberID())
			}
			if !bytes.Contains(s.Raw, []byte(`"timestamp":"`+strconv.FormatInt(int64(s.Timestamp), 10)+`"`)) || int64(s.Timestamp) < testStart.Unix() {
				t.Fatalf("status timestamp not a string of unix seconds: %s", s.Raw)
			}
			if !strings.HasPrefix(s.ID, "wamid.") || s.Recipient()[4:9] != "55501" {
				t.Fatalf("status %s to %s: want a wamid and a fictional recipient", s.ID, s.Recipient())
			}
			if prev, ok := ids[s.ID+s.Status]; ok && prev != string(s.Raw) && !p.Retry {
				t.Fatalf("status %s %s twice with different content", s.ID, s.Status)
			}
			ids[s.ID+s.Status] = string(s.Raw)
			if (s.Status == "failed") != (len(s.Errors) == 1) {
				t.Fatalf("status %s with %d errors", s.Status, len(s.Errors))
			}
		}
		for r := range pl.InboundMessages() {
			inbound++
			if r.Item.ID == "" || r.Item.Sender()[4:9] != "55501" {
				t.Fatalf("inbound %s from %s", r.Item.ID, r.Item.Sender())
			}
		}
		for range pl.Echoes() {
			echoes++
		}
	}
	gen := g.Generated()
	if statuses == 0 || inbound == 0 || echoes == 0 || quality == 0 {
		t.Fatalf("statuses %d, inbound %d, echoes %d, quality %d: want some of each", statuses, inbound, echoes, quality)
	}
	if uint64(quality) < gen.Quality+gen.Upgrades {
		t.Errorf("%d number events in bodies, %d generated", quality, gen.Quality+gen.Upgrades)
	}
	if multiItem == 0 || multiChange == 0 || multiEntry == 0 {
		t.Errorf("POSTs with several items %d, changes %d, entries %d: want some of each", multiItem, multiChange, multiEntry)
	}
	near(t, "items per POST", float64(gen.Items)/float64(gen.Posts), 3.5, 0.1)
}

// TestTrafficDuplicates checks Meta's duplicates: retried POSTs carry the
// same items, and repeated statuses come again in other POSTs.
func TestTrafficDuplicates(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS, m.RetryShare, m.RepeatShare, m.PerPost = 4, 50, 0.05, 0.02, 3
	g, posts := runTraffic(t, m, 60*time.Second)
	gen := g.Generated()
	near(t, "Meta retries per POST", float64(gen.Retries)/float64(gen.Posts), 0.05, 0.15)
	var statuses uint64
	for _, n := range gen.Statuses {
		statuses += n
	}
	near(t, "repeats per status", float64(gen.Repeats)/float64(statuses), 0.02, 0.15)
	seen := map[string]int{}
	var buf []byte
	for i := range posts {
		if !posts[i].Retry {
			buf = g.Body(buf[:0], &posts[i])
			seen[string(buf)]++
		}
	}
	for i := range posts {
		if posts[i].Retry {
			if seen[string(g.Body(nil, &posts[i]))] == 0 {
				t.Fatal("a retried POST differs from every first POST")
			}
		}
	}
}

func TestTrafficModelValidate(t *testing.T) {
	for name, mod := range map[string]func(*Model){
		"no numbers":        func(m *Model) { m.Numbers = 0 },
		"too many special":  func(m *Model) { m.Coexistence, m.Upgraded = 3, 2 },
		"over the top tier": func(m *Model) { m.OutboundMPS = 1001 },
		"no traffic":        func(m *Model) { m.OutboundMPS, m.InboundMPS = 0, 0 },
		"reply rate":        func(m *Model) { m.ReplyRate = 1.5 },
		"per post":          func(m *Model) { m.PerPost = 0 },
		"max delay":         func(m *Model) { m.Delays.Max = 0 },
	} {
		m := DefaultModel()
		mod(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := DefaultModel().Validate(); err != nil {
		t.Fatal(err)
	}
}
