package ingest

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a webhook request, the values of the result label.
const (
	resultOK           = "ok"            // 200 after the ack
	resultDuplicate    = "duplicate"     // 200; the index or JetStream already held the body
	resultBadSignature = "bad_signature" // 401
	resultUnknownApp   = "unknown_app"   // 404
	resultTooLarge     = "too_large"     // 413
	resultBadEncoding  = "bad_encoding"  // 415: a Content-Encoding; 400: chunks not well formed; 411: HTTP/1.0 without a length
	resultIncomplete   = "incomplete"    // 408: the body cut short, or not received within the read timeout
	resultUnavailable  = "unavailable"   // 503: publish failed or timed out
	resultShed         = "shed"          // 503: overloaded, not published (admission)
)

type metrics struct {
	requests     *prometheus.CounterVec
	sigFailures  *prometheus.CounterVec
	latency      prometheus.Histogram
	publish      prometheus.Histogram
	bytes        prometheus.Counter
	handshakes   *prometheus.CounterVec
	inflight     atomic.Int64
	readyFailure prometheus.Counter
	// dupIndex and dupStream split the duplicates: answered from the
	// endpoint's index without a publish, or published and reported by
	// JetStream as held already.
	dupIndex, dupStream prometheus.Counter
}

// appMetrics holds the counters of one app resolved once, so that the hot
// path does no label look-ups.
type appMetrics struct {
	ok, duplicate, badSignature, unavailable, shed prometheus.Counter
	sigMissing, sigMalformed, sigMismatch          prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_ingest_requests_total",
			Help: "Webhook POSTs by app and result (ok, duplicate, bad_signature, unknown_app, too_large, bad_encoding, unavailable, shed: 503 with nothing published because the service is past capacity).",
		}, []string{"app", "result"}),
		sigFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_ingest_signature_failures_total",
			Help: "Webhook POSTs refused for their signature, by app and reason (missing, malformed, mismatch).",
		}, []string{"app", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "wahook_ingest_request_duration_seconds",
			Help:    "Time from reading a webhook POST to its answer.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		publish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "wahook_ingest_publish_duration_seconds",
			Help:    "Time from publishing a body to JetStream's ack.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_ingest_bytes_total",
			Help: "Bytes of webhook bodies stored.",
		}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_ingest_handshakes_total",
			Help: "Verification handshakes by result (ok, refused).",
		}, []string{"result"}),
		readyFailure: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_ingest_readiness_failures_total",
			Help: "Readiness checks that failed.",
		}),
	}
	dups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wahook_ingest_duplicates_total",
		Help: "Webhook POSTs answered 200 as duplicates, by where the body was found: index (remembered by this endpoint, not published) or stream (published; JetStream held it already).",
	}, []string{"source"})
	m.dupIndex, m.dupStream = dups.WithLabelValues("index"), dups.WithLabelValues("stream")
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wahook_ingest_inflight_requests",
		Help: "Webhook POSTs being handled; nearly all of their time is the wait for JetStream's ack.",
	}, func() float64 { return float64(m.inflight.Load()) })
	reg.MustRegister(m.requests, m.sigFailures, m.latency, m.publish, m.bytes, m.handshakes, m.readyFailure, dups, inflight)
	return m
}

// registerDedupe registers the gauges of the duplicate index x.
func registerDedupe(reg prometheus.Registerer, x *dupIndex) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wahook_ingest_dedupe_entries",
			Help: "Body ids the duplicate index remembers.",
		}, func() float64 { n, _ := x.stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wahook_ingest_dedupe_bytes",
			Help: "Bytes of the duplicate index's tables (outside the Go heap where the platform allows).",
		}, func() float64 { _, b := x.stats(); return float64(b) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "wahook_ingest_dedupe_evictions_total",
			Help: "Body ids the duplicate index forgot before their window ended, to stay within --dedupe-max-entries.",
		}, func() float64 { return float64(x.evictions()) }),
	)
}

func (m *metrics) forApp(app string) *appMetrics {
	return &appMetrics{
		ok:           m.requests.WithLabelValues(app, resultOK),
		duplicate:    m.requests.WithLabelValues(app, resultDuplicate),
		badSignature: m.requests.WithLabelValues(app, resultBadSignature),
		unavailable:  m.requests.WithLabelValues(app, resultUnavailable),
		shed:         m.requests.WithLabelValues(app, resultShed),
		sigMissing:   m.sigFailures.WithLabelValues(app, "missing"),
		sigMalformed: m.sigFailures.WithLabelValues(app, "malformed"),
		sigMismatch:  m.sigFailures.WithLabelValues(app, "mismatch"),
	}
}
