package pacerhttp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wahook/wahook/pacer"
)

// metrics are the handler's Prometheus metrics (Config.Registerer).
type metrics struct {
	waits    *prometheus.CounterVec // by result
	held     prometheus.Gauge
	waited   prometheus.Histogram
	outcomes *prometheus.CounterVec // by action
	refused  *prometheus.CounterVec // by route
}

// The results of a wait in wahook_pace_waits_total besides those answered:
// its client went away, or the sidecar was shutting down.
const (
	resultGone   = "gone"
	resultClosed = "closed"
)

func newMetrics(reg prometheus.Registerer, p *pacer.Pacer) *metrics {
	m := &metrics{
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_pace_waits_total",
			Help: "Waits answered, by result: send, stopped, cooldown, timeout, gone (the client went away), closed (shutting down).",
		}, []string{"result"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wahook_pace_waits_held",
			Help: "Waits held now for their number's turn, a pause or a cool-down.",
		}),
		waited: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "wahook_pace_wait_seconds",
			Help:    "How long a wait answered send was held.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_pace_outcomes_total",
			Help: "Outcomes decided, by action: done, retry, drop, stop_number, stop_campaign.",
		}, []string{"action"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_pace_requests_refused_total",
			Help: "Requests refused (400, 401, 404, 405, 413, 415), by route.",
		}, []string{"route"}),
	}
	for _, r := range []string{WaitSend, WaitStopped, WaitCooldown, WaitTimeout, resultGone, resultClosed} {
		m.waits.WithLabelValues(r)
	}
	for _, a := range []pacer.Action{pacer.ActionDone, pacer.ActionRetry, pacer.ActionDrop, pacer.ActionStopNumber, pacer.ActionStopCampaign} {
		m.outcomes.WithLabelValues(string(a))
	}
	reg.MustRegister(m.waits, m.held, m.waited, m.outcomes, m.refused)
	// The pacer's own counters, read at each scrape.
	stat := func(name, help string, counter bool, v func(pacer.Stats) float64) {
		f := func() float64 { return v(p.Stats()) }
		if counter {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
		} else {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
		}
	}
	stat("wahook_pace_signals_total", "Pacing signal values applied.", true, func(s pacer.Stats) float64 { return float64(s.Signals) })
	stat("wahook_pace_fallback_numbers", "Numbers sent from on the fallback rate now (no signal, or a stale one).", false, func(s pacer.Stats) float64 { return float64(s.FallbackNumbers) })
	stat("wahook_pace_reported_total", "Send results reported to wahook and acknowledged.", true, func(s pacer.Stats) float64 { return float64(s.Reported) })
	stat("wahook_pace_report_dropped_total", "Send results dropped: the queue full, wahook unreachable at shutdown, or refused by wahook.", true, func(s pacer.Stats) float64 { return float64(s.ReportDropped) })
	stat("wahook_pace_report_failures_total", "Reports that failed and were tried again.", true, func(s pacer.Stats) float64 { return float64(s.ReportFailures) })
	stat("wahook_pace_report_invalid_total", "Send results not reported: wahook would refuse them.", true, func(s pacer.Stats) float64 { return float64(s.ReportInvalid) })
	return m
}

// The methods take a nil *metrics (no Registerer) as no metrics.

func (m *metrics) holding(delta float64) {
	if m != nil {
		m.held.Add(delta)
	}
}

func (m *metrics) answered(result string, held float64) {
	if m == nil {
		return
	}
	m.waits.WithLabelValues(result).Inc()
	if result == WaitSend {
		m.waited.Observe(held)
	}
}

func (m *metrics) decided(a pacer.Action) {
	if m != nil {
		m.outcomes.WithLabelValues(string(a)).Inc()
	}
}

func (m *metrics) refusedOn(route string) {
	if m != nil {
		m.refused.WithLabelValues(route).Inc()
	}
}
