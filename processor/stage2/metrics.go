package stage2

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/schema"
)

type metrics struct {
	events     *prometheus.CounterVec // by result
	signals    prometheus.Counter
	urgent     prometheus.Counter
	cooldowns  prometheus.Counter
	numbers    prometheus.Gauge
	partitions prometheus.Gauge
	writeFails *prometheus.CounterVec // by bucket
	clamped    prometheus.Counter
	// seedFailures counts reads of a number's last signal that failed.
	seedFailures prometheus.Counter
	restarts     prometheus.Counter
	evicted      prometheus.Counter
	advice       *prometheus.GaugeVec
	// warmups counts the message memory's read-backs by outcome; warmed
	// the messages they remembered.
	warmups *prometheus.CounterVec
	warmed  prometheus.Counter
	// accountEvents counts the account events by result (accounts.go).
	accountEvents *prometheus.CounterVec
	// wabas counts the WABAs of wahook_accounts by state (accounts.go).
	wabas *prometheus.GaugeVec
}

// adviceMoved moves a number from one advice to another in the advice
// gauge; "" is none (a number not written yet, or forgotten).
func (m *metrics) adviceMoved(from, to schema.Advice) {
	if from == to {
		return
	}
	if from != "" {
		m.advice.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.advice.WithLabelValues(string(to)).Inc()
	}
}

// The results of an event.
const (
	resultApplied   = "applied"   // folded into its number's state
	resultDuplicate = "duplicate" // seen before (a redelivery or a replay)
	resultMoved     = "moved"     // earlier evidence of a message counted already: it now counts at this event's second
	resultIgnored   = "ignored"   // nothing for stage 2 (no number, a kind it does not use)
	resultBad       = "bad"       // not an event it can decode
	resultNotOwned  = "not_owned" // its number's partition is another instance's (Config.Partitions)
)

// The outcomes of a read-back of the message memory (warm).
const (
	warmComplete = "complete"    // everything taken within the memory was read
	warmNewest   = "newest_only" // the budget could not read it all: the newest part was read
	warmPartial  = "partial"     // the budget ran out, or EVENTS could not be read, part-way
	warmFailed   = "failed"      // what was taken could not be told: nothing read
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_stage2_events_total", Help: "EVENTS messages taken by stage 2, by result (applied, duplicate, moved, ignored, bad, not_owned).",
		}, []string{"result"}),
		signals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_signals_published_total", Help: "Pacing signals written to " + "wahook_pacing and its subjects.",
		}),
		urgent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_signals_urgent_total", Help: "Pacing signals written at once, without coalescing, because an event changed the advice, tier, quality, messaging limit or maintenance window.",
		}),
		cooldowns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_cooldowns_written_total", Help: "Pair-rate cool-downs written after 131056.",
		}),
		numbers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_stage2_numbers", Help: "Business numbers whose state this instance holds.",
		}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_stage2_partitions", Help: "Partitions of the numbers this instance owns in its consumer group (0 without partitions).",
		}),
		clamped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_events_ahead_total", Help: "Events stamped more than 2 s ahead of this clock, counted as now.",
		}),
		seedFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_seed_failures_total", Help: "Reads of a number's last signal that failed; the number's event was nak'ed and is tried again.",
		}),
		advice: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wahook_stage2_numbers_by_advice", Help: "Numbers this instance holds, by the advice of their last written signal (ok, slow_down, pause, stop).",
		}, []string{"advice"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_numbers_evicted_total", Help: "Numbers forgotten from memory once neither traffic nor a hold could change their signal; an event seeds them again from their last signal.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_consumer_restarts_total", Help: "Times stage 2's consumer failed (a closed connection, a deleted consumer) or stalled (it held events and delivered none for --stage2-stall-after) and was read again, or its pull request missed two heartbeats (lost on its way) and was made again.",
		}),
		warmups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_stage2_memory_warmups_total", Help: "Read-backs of the message memory from EVENTS at a start or a handover (--stage2-memory-warmup), by outcome (complete, newest_only, partial, failed); one with nothing taken to read is not counted.",
		}, []string{"outcome"}),
		warmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_stage2_memory_warmed_messages_total", Help: "Messages remembered by the message memory's read-backs: their later statuses do not count them again.",
		}),
		accountEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_stage2_account_events_total", Help: "Account events (account_update) read for wahook_accounts, by result (applied, unchanged, ignored, bad, failed: not written, tried again).",
		}, []string{"result"}),
		wabas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wahook_stage2_wabas", Help: "WABAs whose state in wahook_accounts is, by state: disabled (banned by Meta), schedule_for_disable, restricted_business_initiated, restricted_customer_initiated (a restriction in force). Every instance counts them all.",
		}, []string{"state"}),
		writeFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_stage2_write_failures_total", Help: "KV writes that failed, by bucket.",
		}, []string{"bucket"}),
	}
	for _, r := range []string{resultApplied, resultDuplicate, resultMoved, resultIgnored, resultBad, resultNotOwned} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{accountApplied, accountUnchanged, accountIgnored, accountBad, accountFailed} {
		m.accountEvents.WithLabelValues(r)
	}
	for _, st := range []string{wabaDisabled, wabaScheduled, wabaRestrictedBusiness, wabaRestrictedReplies} {
		m.wabas.WithLabelValues(st)
	}
	for _, o := range []string{warmComplete, warmNewest, warmPartial, warmFailed} {
		m.warmups.WithLabelValues(o)
	}
	for _, a := range []schema.Advice{schema.AdviceOK, schema.AdviceSlowDown, schema.AdvicePause, schema.AdviceStop} {
		m.advice.WithLabelValues(string(a))
	}
	// Every series exists from the start, so that a rate or an alert on it
	// has one before the first failure.
	for _, b := range []string{schema.BucketPacing, schema.BucketPairCooldown, schema.BucketAccounts} {
		m.writeFails.WithLabelValues(b)
	}
	reg.MustRegister(m.events, m.signals, m.urgent, m.cooldowns, m.numbers, m.partitions, m.writeFails, m.clamped, m.seedFailures, m.restarts, m.evicted, m.advice, m.warmups, m.warmed, m.accountEvents, m.wabas)
	return m
}
