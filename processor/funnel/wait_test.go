package funnel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wahook/wahook/schema/schematest"
)

func TestNextWait(t *testing.T) {
	const interval, maxWait = 5 * time.Second, time.Minute
	for _, c := range []struct{ took, want time.Duration }{
		{0, interval},
		{200 * time.Millisecond, 4800 * time.Millisecond}, // what is left of the interval
		{time.Second, 9 * time.Second},                    // a tenth of the time
		{6 * time.Second, 54 * time.Second},
		{10 * time.Second, maxWait}, // never more than maxWait
		{5 * time.Minute, maxWait},
	} {
		if got := nextWait(interval, maxWait, c.took); got != c.want {
			t.Errorf("a pass of %v: wait %v, want %v", c.took, got, c.want)
		}
	}
	// An interval longer than maxWait is kept.
	if got := nextWait(10*time.Minute, maxWait, time.Second); got != 10*time.Minute-time.Second {
		t.Errorf("--funnel-interval 10m: wait %v", got)
	}
}

// TestPassesUnderSustainedLoad: a pass's length grows with the messages
// touched since the last one (here 20 µs each, what a pass took at 8,345
// webhooks/s on 2 cores, with a fixed 0.5 s); with passes nine times their
// length apart and nothing else, each is longer than the last and the
// funnel's lag has no end; with maxWait it settles.
func TestPassesUnderSustainedLoad(t *testing.T) {
	const rate, perMessage, fixed = 8345.0, 20 * time.Microsecond, 500 * time.Millisecond
	run := func(maxWait time.Duration) (last, lag time.Duration) {
		took := fixed
		for range 50 {
			wait := nextWait(5*time.Second, maxWait, took)
			lag = wait + took // the oldest message the next pass resolves
			took = fixed + time.Duration(rate*lag.Seconds())*perMessage
		}
		return took, lag
	}
	if took, lag := run(1 << 62); took < time.Hour {
		t.Fatalf("without a bound the passes settled at %v (lag %v): the model no longer shows the runaway", took, lag)
	}
	took, lag := run(time.Minute)
	if took > 20*time.Second || lag > 80*time.Second {
		t.Errorf("with maxWait 1m: passes of %v, lag %v; want them bounded", took, lag)
	}
	t.Logf("with maxWait 1m: passes of %v, lag %v", took, lag)
}

func TestSplitSample(t *testing.T) {
	s := func(ids ...string) []msgBound {
		var out []msgBound
		for _, id := range ids {
			out = append(out, msgBound{"p", id})
		}
		return out
	}
	sample := s("a", "b", "c", "d", "e", "f", "g", "h")
	for _, c := range []struct {
		parts int
		want  []msgBound
	}{
		{1, nil},
		{2, s("e")},
		{4, s("c", "e", "g")},
		{8, s("b", "c", "d", "e", "f", "g", "h")},
		{20, s("b", "c", "d", "e", "f", "g", "h")}, // fewer parts than asked: the sample is smaller
	} {
		got := splitSample(sample, c.parts)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%d parts: %v, want %v", c.parts, got, c.want)
		}
	}
	if got := splitSample(nil, 5); len(got) != 0 {
		t.Errorf("an empty sample: %v", got)
	}
}

func TestKeyRange(t *testing.T) {
	b := []msgBound{{"p1", "m'5"}, {"p2", `m\3`}}
	for i, want := range []string{
		`(phone_number_id < 'p1' OR phone_number_id = 'p1' AND message_id < 'm\'5')`,
		`(phone_number_id > 'p1' OR phone_number_id = 'p1' AND message_id >= 'm\'5') AND (phone_number_id < 'p2' OR phone_number_id = 'p2' AND message_id < 'm\\3')`,
		`(phone_number_id > 'p2' OR phone_number_id = 'p2' AND message_id >= 'm\\3')`,
	} {
		if got := keyRange(b, i); got != want {
			t.Errorf("part %d: %s\nwant %s", i, got, want)
		}
	}
	if got := keyRange(nil, 0); got != "" {
		t.Errorf("one part: %q", got)
	}
}

// TestChStringRoundTrip: a bound's literal reads back as the bytes it was
// made of, whatever they are (message ids come from Meta's payloads).
func TestChStringRoundTrip(t *testing.T) {
	ch := schematest.ClickHouse(t)
	for _, s := range []string{"", "wamid.HBgLMTU1NTc4MTAwMDEVAgARGBI=", `it's`, `back\slash`, `\'`, "tab\there\nline", "ü\x00\xff"} {
		var got string
		if err := ch.Conn.QueryRow(context.Background(), "SELECT "+chString(s)).Scan(&got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got != s {
			t.Errorf("%q read back as %q", s, got)
		}
	}
}
