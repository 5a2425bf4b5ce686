// Package campaign runs a sending campaign through the Meta simulator
// (loadtest/simulate) with two senders side by side: "naive", a fixed pool
// of workers at a fixed rate that retries rate-limit errors at once, as
// many senders do, and "paced", the same pool driven by package pacer
// against a running wahook that receives the simulator's webhooks. It
// reports per sender the completion time against the ideal, the rate per
// number against its tier, the 130429 and 131056 counts, messages given up
// and sent twice, and a chart over time.
package campaign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/wahook/wahook/loadtest/simulate"
)

// message is one message of the campaign.
type message struct {
	seq       int // in the campaign
	recipient string
	attempt   int
	due       time.Time
}

// plan is the messages of each number, in the order they are queued.
type plan struct {
	lanes [][]message
	// heavy recipients: per lane, the queue positions of each one's first
	// message, for the ideal's pair bound.
	heavyFirst [][]int
}

// makePlan spreads cfg.Messages over cfg.Numbers lanes. In each lane a
// share RepeatShare of the recipients get RepeatCount messages each, the
// others one; each message is placed by a random key, a repeated
// recipient's keys within a window of RepeatWindow starting below
// 0.6 - RepeatWindow, a single's anywhere in [0, 1).
func makePlan(cfg *Config) plan {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	p := plan{lanes: make([][]message, cfg.Numbers), heavyFirst: make([][]int, cfg.Numbers)}
	seq := 0
	for lane := range cfg.Numbers {
		m := cfg.Messages / cfg.Numbers
		if lane < cfg.Messages%cfg.Numbers {
			m++
		}
		k := max(cfg.RepeatCount, 1)
		recipients := int(math.Round(float64(m) / ((1 - cfg.RepeatShare) + cfg.RepeatShare*float64(k))))
		heavy := int(math.Round(cfg.RepeatShare * float64(recipients)))
		if heavy*k > m {
			heavy = m / k
		}
		type keyed struct {
			key float64
			msg message
			h   int // heavy recipient index + 1, 0 for a single
		}
		all := make([]keyed, 0, m)
		win := cfg.RepeatWindow
		for h := range heavy {
			start := r.Float64() * math.Max(0, 0.6-win)
			rcpt := recipient(lane, h)
			for range k {
				all = append(all, keyed{key: start + r.Float64()*win, msg: message{recipient: rcpt}, h: h + 1})
			}
		}
		for i := 0; len(all) < m; i++ {
			all = append(all, keyed{key: r.Float64(), msg: message{recipient: recipient(lane, heavy+i)}})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
		first := map[int]int{}
		q := make([]message, len(all))
		for i, kk := range all {
			kk.msg.seq = seq
			seq++
			q[i] = kk.msg
			if kk.h > 0 {
				if _, ok := first[kk.h]; !ok {
					first[kk.h] = i
				}
			}
		}
		for _, pos := range first {
			p.heavyFirst[lane] = append(p.heavyFirst[lane], pos)
		}
		sort.Ints(p.heavyFirst[lane])
		p.lanes[lane] = q
	}
	return p
}

// recipient is a fictional user number of a lane: 1 (area 300+lane) 555
// and four digits.
func recipient(lane, i int) string {
	return fmt.Sprintf("1%03d%03d%04d", 300+lane%700, 555+i/10000, i%10000)
}

// ideal is the least time the plan can take at Meta's limits, keeping
// each number's queue in its order: each number at its tier less the
// inbound replies it draws (Meta counts both), an upgradable number at the
// upgraded tier once it has earned it and sat out the upgrade's
// maintenance, and no recipient faster than the pair rule allows (its
// first message at its place in the queue, then the burst, then one per
// pair interval). It returns the whole plan's ideal and each number's.
func (p plan) ideal(cfg *Config) (float64, []float64) {
	sc := cfg.Sim
	fails := 0.0
	for _, s := range sc.Failures {
		fails += s
	}
	rho := sc.DeliveredShare * (1 - fails) * sc.ReadShare * sc.ReplyShare
	lanes := make([]float64, len(p.lanes))
	worst := 0.0
	for i, q := range p.lanes {
		out := float64(cfg.Tier) / (1 + rho)
		// at is the ideal time of the message at queue position pos.
		at := func(pos float64) float64 { return pos / out }
		if i < cfg.Upgradable && sc.UpgradeAfter > 0 {
			earn := sc.UpgradeAfter.Seconds() // the simulator averages whole seconds, the first one partly used
			sent := out * earn
			up := simulate.UpgradedTier / (1 + rho)
			maint := sc.UpgradeMaintenance.Seconds()
			at = func(pos float64) float64 {
				if pos < sent {
					return pos / out
				}
				return earn + maint + (pos-sent)/up
			}
		}
		t := at(float64(len(q)))
		if extra := cfg.RepeatCount - sc.PairBurst; extra > 0 {
			for _, pos := range p.heavyFirst[i] {
				t = math.Max(t, at(float64(pos))+float64(extra)*sc.PairInterval.Seconds())
			}
		}
		lanes[i] = t
		worst = math.Max(worst, t)
	}
	return worst, lanes
}
