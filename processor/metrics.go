package processor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/schema"
)

type metrics struct {
	bodies      prometheus.Counter
	rows        *prometheus.CounterVec
	batches     prometheus.Counter
	batchRows   prometheus.Histogram
	flush       prometheus.Histogram
	failures    prometheus.Counter
	deadLetters prometheus.Counter
	poison      prometheus.Counter
	restarts    prometheus.Counter
	// errors counts the error rows written, by class; rawPending is stage
	// 1's backlog on WAHOOK_RAW as its consumer reported it last.
	errors     *prometheus.CounterVec
	rawPending prometheus.Gauge
	// Display numbers (resolve.go).
	numberLookups  *prometheus.CounterVec
	numbersLearned prometheus.Counter
	numbersHeld    prometheus.Counter
	numbersApplied prometheus.Counter
	numbersPending prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bodies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_bodies_total", Help: "RAW bodies whose rows stage 1 wrote, and acked (a body whose batch failed counts when a later write stores it).",
		}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_processor_rows_total", Help: "Rows written by stage 1, by table.",
		}, []string{"table"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_batches_total", Help: "Batches written and acked by stage 1.",
		}),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wahook_processor_batch_rows", Help: "Rows per written batch.",
			Buckets: prometheus.ExponentialBuckets(10, 4, 8),
		}),
		flush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wahook_processor_flush_duration_seconds", Help: "Time to write a batch and ack it (its events were published before).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_write_failures_total", Help: "Batches not stored (ClickHouse or NATS down), nak'ed for a retry.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_dead_letters_total", Help: "Bodies or items written as dead letters.",
		}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_retries_exhausted_total", Help: "Bodies that failed on their own --max-deliver times while ClickHouse and NATS answered, kept as dead letters and acked.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_consumer_restarts_total", Help: "Times stage 1's consumer on RAW stopped (a closed connection, a deleted consumer) or stalled (it held bodies and delivered none for --stall-after) and was read again, or its pull request missed two heartbeats (lost on its way) and was made again.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_processor_errors_total", Help: "Error rows written by stage 1 (failed statuses, value-level, inbound and send-result errors), by the class of their code (throughput, quality, pair_rate, ...). A redelivered body counts again: for rates and alerts; the reports are exact.",
		}, []string{"class"}),
		rawPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_processor_raw_pending", Help: "Stage 1's backlog on WAHOOK_RAW: bodies not yet delivered plus delivered and not yet acked, as its consumer reported it last (every 5 s).",
		}),
		numberLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_processor_number_lookups_total", Help: "Display numbers of number-level events looked up by stage 1, by how the answer came: cached, bucket, miss, miss_cached (a miss a moment ago, not asked again), error (the bucket did not answer: the batch is tried again).",
		}, []string{"result"}),
		numbersLearned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_numbers_learned_total", Help: "Display number -> phone number id pairs stage 1 wrote to " + schema.BucketNumbers + " (once per number and process).",
		}),
		numbersHeld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_number_events_held_total", Help: "Number-level events stored without a phone number id, since no message webhook had shown their display number yet, and held in " + schema.BucketNumbersPending + ".",
		}),
		numbersApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_processor_number_events_applied_total", Help: "Held number-level events applied with their phone number id once it was learned (stored again, and published to the number's EVENTS subject).",
		}),
		numbersPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_processor_number_events_pending", Help: "Held number-level events whose display number is still not known, as stage 1's last sweep (every 30 s) counted them.",
		}),
	}
	for _, h := range []string{LookupCached, LookupBucket, LookupMiss, LookupMissCached, LookupError} {
		m.numberLookups.WithLabelValues(h)
	}
	for _, c := range schema.ErrorClasses() {
		m.errors.WithLabelValues(string(c))
	}
	reg.MustRegister(m.bodies, m.rows, m.batches, m.batchRows, m.flush, m.failures, m.deadLetters, m.poison, m.restarts, m.errors, m.rawPending,
		m.numberLookups, m.numbersLearned, m.numbersHeld, m.numbersApplied, m.numbersPending)
	return m
}

// observe counts a batch written and acked.
func (m *metrics) observe(b *batch, took time.Duration) {
	m.batches.Inc()
	m.bodies.Add(float64(len(b.msgs)))
	m.deadLetters.Add(float64(len(b.rows.DeadLetters)))
	m.batchRows.Observe(float64(b.rows.Len()))
	m.flush.Observe(took.Seconds())
	m.rows.WithLabelValues("status_events").Add(float64(len(b.rows.Statuses)))
	m.rows.WithLabelValues("errors").Add(float64(len(b.rows.Errors)))
	m.rows.WithLabelValues("inbound_messages").Add(float64(len(b.rows.Inbound)))
	m.rows.WithLabelValues("management_events").Add(float64(len(b.rows.Management)))
	m.rows.WithLabelValues("dead_letters").Add(float64(len(b.rows.DeadLetters)))
	for i := range b.rows.Errors {
		e, _ := schema.LookupError(b.rows.Errors[i].Code)
		m.errors.WithLabelValues(string(e.Class)).Inc()
	}
}
