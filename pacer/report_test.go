package pacer_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/schema"
)

// TestReportHTTP: with ReportHTTPURL the results go to POST
// /api/v1/send-results in documents of at most ReportBatch results, with
// the API token; a 503 is tried again, and Close waits for the last batch.
func TestReportHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []schema.SendResult
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // JetStream did not ack: retry
			return
		}
		body, _ := io.ReadAll(r.Body)
		doc, bad, err := schema.ParseSendResults(body)
		if r.URL.Path != "/api/v1/send-results" || r.Header.Get("Authorization") != "Bearer pacer-test-token-0123" || err != nil || len(bad) > 0 || len(doc.Results) > 7 {
			t.Errorf("%s %q: %v %v", r.URL.Path, r.Header.Get("Authorization"), err, bad)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got = append(got, doc.Results...)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	cfg := pacer.DefaultConfig()
	cfg.ReportHTTPURL, cfg.APIToken = srv.URL+"/api/v1/send-results", "pacer-test-token-0123"
	cfg.ReportBatch, cfg.ReportInterval = 7, 10*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := pacer.New(context.Background(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "100000000000061", Status: schema.SendAccepted, MessageID: "wamid.h" + string(rune('a'+i))}})
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if st := p.Stats(); len(got) != 20 || st.Reported != 20 || st.ReportFailures < 1 || st.ReportDropped != 0 {
		t.Errorf("%d results posted, stats %+v", len(got), st)
	}
}
