package campaign

import (
	"math"
	"testing"
	"time"
)

// TestPlan: the messages are spread over the numbers, a tenth of each
// number's recipients get RepeatCount messages within about a sixth of the
// queue in its first 86%, the others one; the ideal is the tier's (with the replies) for a number that
// cannot upgrade, and for the upgradable one the upgrade, its maintenance,
// the 1,000 mps after it and the pair rule's tail.
func TestPlan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Messages, cfg.Numbers, cfg.Seed = 10_001, 2, 3
	p := makePlan(&cfg)
	if len(p.lanes[0])+len(p.lanes[1]) != 10_001 || len(p.lanes[0]) != 5001 {
		t.Fatalf("lanes of %d and %d messages", len(p.lanes[0]), len(p.lanes[1]))
	}
	seqs := map[int]bool{}
	for lane, q := range p.lanes {
		count := map[string]int{}
		first, last := map[string]int{}, map[string]int{}
		for i, m := range q {
			if seqs[m.seq] {
				t.Fatalf("message %d twice", m.seq)
			}
			seqs[m.seq] = true
			if _, ok := first[m.recipient]; !ok {
				first[m.recipient] = i
			}
			last[m.recipient] = i
			count[m.recipient]++
		}
		heavy := 0
		for r, n := range count {
			switch n {
			case 1:
			case cfg.RepeatCount:
				heavy++
				if span := float64(last[r]-first[r]) / float64(len(q)); span > 0.25 || float64(first[r])/float64(len(q)) > 0.86 {
					t.Errorf("lane %d: a repeated recipient's messages from %d to %d of %d", lane, first[r], last[r], len(q))
				}
			default:
				t.Errorf("lane %d: a recipient with %d messages", lane, n)
			}
		}
		if share := float64(heavy) / float64(len(count)); math.Abs(share-cfg.RepeatShare) > 0.01 || len(p.heavyFirst[lane]) != heavy {
			t.Errorf("lane %d: %d of %d recipients repeated", lane, heavy, len(count))
		}
	}
	ideal, lanes := p.ideal(&cfg)
	sc := cfg.Sim
	rho := sc.DeliveredShare * (1 - 0.015) * sc.ReadShare * sc.ReplyShare
	if tierOnly := 5000 * (1 + rho) / 80; lanes[1] < tierOnly-0.01 {
		t.Errorf("the plain number's ideal %.1f s is below its tier's %.1f s", lanes[1], tierOnly)
	}
	// The upgradable number: 10 s at 80 mps, a minute's maintenance, then
	// 1,000 mps, and no faster than the pair rule.
	if min := 10 + sc.UpgradeMaintenance.Seconds() + (5001-10*80/(1+rho))/(1000/(1+rho)); lanes[0] < min-0.01 || lanes[0] > min+float64(cfg.RepeatCount-45)*6+1 {
		t.Errorf("the upgradable number's ideal %.1f s, want from %.1f s to its pair tail", lanes[0], min)
	}
	if ideal != math.Max(lanes[0], lanes[1]) {
		t.Errorf("ideal %.1f of %v", ideal, lanes)
	}
	cfg.Sim.UpgradeMaintenance = 2 * time.Minute
	if longer, _ := p.ideal(&cfg); longer <= ideal {
		t.Errorf("a longer maintenance, ideal %.1f <= %.1f", longer, ideal)
	}
}
