package funnel

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the resolver's Prometheus metrics.
type Metrics struct{ m *metrics }

type metrics struct {
	passes   *prometheus.CounterVec
	seconds  prometheus.Histogram
	messages prometheus.Counter
	changed  prometheus.Counter
	rows     prometheus.Counter
	lookups  prometheus.Counter
	skipped  *prometheus.CounterVec
	lag      prometheus.GaugeFunc
	holder   prometheus.Gauge
	// mu guards watermark: the time since which the funnel is known
	// resolved while this instance holds the lease (the last complete
	// pass's watermark, or when the lease was taken before one
	// completed); zero while it does not hold the lease.
	mu        sync.Mutex
	watermark time.Time
}

// NewMetrics registers the resolver's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &metrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_funnel_passes_total", Help: "Passes of the funnel resolver, by result (ok, backfill, error, lease_lost).",
		}, []string{"result"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wahook_funnel_pass_seconds", Help: "Duration of a funnel resolver pass.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_funnel_messages_read_total", Help: "Message states the funnel resolver read.",
		}),
		changed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_funnel_messages_changed_total", Help: "Messages whose funnel row the resolver replaced or added.",
		}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_funnel_rows_written_total", Help: "Rows the funnel resolver inserted into funnel_messages (n = -1 and n = 1).",
		}),
		lookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_funnel_lookups_total", Help: "Queries of funnel_messages' current rows; a pass makes one per part and per LookupKeys message-days in it.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_funnel_lookups_skipped_total", Help: "Messages the funnel resolver did not look up, by reason: known (it remembered their rows) or new (it knew they had none).",
		}, []string{"reason"}),
		holder: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_funnel_lease_held", Help: "1 while this instance holds the funnel lease and resolves.",
		}),
	}
	// Read at the scrape, from the watermark m keeps.
	m.lag = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wahook_funnel_lag_seconds", Help: "How far the funnel's watermark (the start of the last complete pass) is behind the clock: it grows while a pass runs or fails; 0 where this instance does not resolve.",
	}, m.lagSeconds)
	reg.MustRegister(m.passes, m.seconds, m.messages, m.changed, m.rows, m.lookups, m.skipped, m.lag, m.holder)
	return &Metrics{m}
}

func (m *metrics) observe(st PassStats, err error, took time.Duration) {
	m.seconds.Observe(took.Seconds())
	switch {
	case errors.Is(err, errLeaseLost):
		m.passes.WithLabelValues("lease_lost").Inc()
	case err != nil:
		m.passes.WithLabelValues("error").Inc()
	case st.Backfill:
		m.passes.WithLabelValues("backfill").Inc()
	default:
		m.passes.WithLabelValues("ok").Inc()
	}
	m.messages.Add(float64(st.Messages))
	m.changed.Add(float64(st.Changed))
	m.rows.Add(float64(st.Rows))
	m.lookups.Add(float64(st.Lookups))
	m.skipped.WithLabelValues("known").Add(float64(st.Known))
	m.skipped.WithLabelValues("new").Add(float64(st.New))
	if err == nil && !st.Watermark.IsZero() {
		m.mu.Lock()
		// A pass that ends after the lease was lost is not this instance's
		// to report.
		if !m.watermark.IsZero() {
			m.watermark = st.Watermark
		}
		m.mu.Unlock()
	}
}

// lagSeconds is the time since the last complete pass's watermark, as the
// clock reads at the scrape: a pass that takes long, or passes that fail,
// show as a lag that grows, not as the last figure.
func (m *metrics) lagSeconds() float64 {
	m.mu.Lock()
	w := m.watermark
	m.mu.Unlock()
	if w.IsZero() {
		return 0
	}
	// ClickHouse's clock (the watermark's) may run ahead of this one.
	return max(time.Since(w).Seconds(), 0)
}

// held records whether this instance holds the lease. One that does not
// reports no lag (another instance's passes are not its own); one that
// took it counts its lag from then until its first pass completes, so
// that passes that fail from the start (ClickHouse down, a replica that
// does not catch up) show as a growing lag.
func (m *metrics) held(held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case held && m.watermark.IsZero():
		m.holder.Set(1)
		m.watermark = time.Now()
	case !held:
		m.holder.Set(0)
		m.watermark = time.Time{}
	}
}
