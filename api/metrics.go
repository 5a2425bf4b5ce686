package api

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	limited      *prometheus.CounterVec
	unauthorized prometheus.Counter
	sendResults  prometheus.Counter
	// numbersRefused counts send-result documents refused for taking
	// their token past the phone number ids it may report.
	numbersRefused prometheus.Counter
}

// newMetrics makes the API's metrics; tokensFileValid, when there is a
// tokens file, is its gauge's value (a configuration without one has no
// such gauge to alert on).
func newMetrics(reg prometheus.Registerer, tokensFileValid func() float64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_api_requests_total",
			Help: "Query API requests by report and HTTP status.",
		}, []string{"report", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wahook_api_query_duration_seconds",
			Help:    "Time to answer a report, ClickHouse included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .2, .5, 1, 2.5, 5, 10},
		}, []string{"report"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wahook_api_rate_limited_total",
			Help: "Requests answered 429, by the limit that refused them.",
		}, []string{"limit"}),
		unauthorized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_api_unauthorized_total",
			Help: "Requests answered 401: no bearer token, or not a configured one.",
		}),
		sendResults: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_api_send_results_total",
			Help: "Send results stored through POST /api/v1/send-results.",
		}),
		numbersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wahook_api_send_results_numbers_refused_total",
			Help: "Send-result documents refused (403 too_many_numbers) because they would take their token past --api-max-numbers-per-token phone number ids.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.limited, m.unauthorized, m.sendResults, m.numbersRefused)
		if tokensFileValid != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "wahook_api_tokens_file_valid",
				Help: "1 while the tokens accepted are those of --api-tokens-file as it is; 0 when it was removed (its tokens refused) or is there and cannot be read, a typo for instance (the tokens read before stay). Each scrape checks the file.",
			}, tokensFileValid))
		}
	}
	return m
}
