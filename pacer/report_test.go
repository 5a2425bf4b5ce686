package pacer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wahook/wahook/internal/testutil"
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

// wahookLike answers send-results documents as wahook's API does: 202, or
// 400 with its error body naming the first result it refuses (here, any
// with MessageID refuse), so that nothing of the document is stored.
type wahookLike struct {
	mu     sync.Mutex
	refuse string
	down   bool // answer 503 to everything
	// unknown is a number wahook answers 404 for, as it does for a tenant's
	// number it has seen no webhook of yet.
	unknown string
	// foreignWaba is a WABA wahook answers 404 for in a result's waba_id,
	// as it does for one the tenant does not own.
	foreignWaba string
	posts       int
	stored      []schema.SendResult
}

func (s *wahookLike) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	if s.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	doc, bad, err := schema.ParseSendResults(body)
	if err != nil || len(bad) > 0 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"code":"bad_parameter","message":"%v %v","parameter":"results"}}`, err, bad)
		return
	}
	for i, res := range doc.Results {
		if s.unknown != "" && res.PhoneNumberID == s.unknown {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"not_found","message":"not found","parameter":"results[%d].phone_number_id"}}`, i)
			return
		}
		if s.foreignWaba != "" && res.WabaID == s.foreignWaba {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"not_found","message":"not found","parameter":"results[%d].waba_id"}}`, i)
			return
		}
		if res.MessageID == s.refuse {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"code":"bad_parameter","message":"refused","parameter":"results[%d].message_id"}}`, i)
			return
		}
	}
	s.stored = append(s.stored, doc.Results...)
	w.WriteHeader(http.StatusAccepted)
}

func httpPacer(t *testing.T, url string) *pacer.Pacer {
	t.Helper()
	cfg := pacer.DefaultConfig()
	cfg.ReportHTTPURL = url
	cfg.ReportBatch, cfg.ReportInterval = 8, 10*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := pacer.New(context.Background(), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func accepted(i int) pacer.Result {
	return pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "100000000000062", Status: schema.SendAccepted, MessageID: fmt.Sprint("wamid.r", i)}}
}

// TestReportRefusedResult: a result wahook refuses (400 naming it) is
// dropped, counted, and the results around it and after it are stored.
// Before, the batch was tried again without end and every later result
// queued behind it.
func TestReportRefusedResult(t *testing.T) {
	w := &wahookLike{refuse: "wamid.r5"}
	srv := httptest.NewServer(w)
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	for i := range 20 {
		p.Outcome(accepted(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Close's error counts the results dropped while it runs: the
	// refusal may come before it (a batch goes as soon as it is full), so
	// the drop is read from the stats, and Close must not have waited for
	// its deadline.
	if err := p.Close(ctx); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v; want the refused result dropped, not tried again until the deadline", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := p.Stats(); len(w.stored) != 19 || st.Reported != 19 || st.ReportDropped != 1 {
		t.Errorf("%d results stored, stats %+v; want 19 reported and 1 dropped", len(w.stored), st)
	}
	for _, res := range w.stored {
		if res.MessageID == w.refuse {
			t.Error("the refused result was stored")
		}
	}
}

// TestReportCloseUnreachable: Close while wahook answers 503 to every
// report makes a few more tries and returns, with the results dropped and
// counted. Before, it waited for wahook without end.
func TestReportCloseUnreachable(t *testing.T) {
	w := &wahookLike{down: true}
	srv := httptest.NewServer(w)
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	for i := range 20 {
		p.Outcome(accepted(i))
	}
	testutil.Eventually(t, 10*time.Second, "reports failing", func() (bool, string) {
		return p.Stats().ReportFailures >= 2, ""
	})
	done := make(chan error, 1)
	go func() { done <- p.Close(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Close: nil; want the results not reported")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return in 30 s while wahook was unreachable")
	}
	if st := p.Stats(); st.ReportDropped != 20 || st.Reported != 0 {
		t.Errorf("stats %+v; want all 20 dropped", st)
	}
}

// TestOutcomeInvalidResult: a result wahook would refuse is not reported
// (counted as invalid), a result with neither a message id nor an error
// code is a lost answer to retry, and the valid results still go.
func TestOutcomeInvalidResult(t *testing.T) {
	w := &wahookLike{}
	srv := httptest.NewServer(w)
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	// failed, but the number is no phone number id.
	d := p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "not-a-number", ErrorCode: 131026}})
	if d.Action != pacer.ActionDrop {
		t.Errorf("131026 of an invalid result: %+v; want the decision all the same (drop)", d)
	}
	// accepted, without the wamid wahook needs.
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "100000000000063", Status: schema.SendAccepted}})
	// no answer at all: neither status, wamid nor code.
	lost := p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "100000000000063", Recipient: "15550000009"}, Attempt: 1})
	if lost.Action != pacer.ActionRetry || !lost.Retry || lost.After <= 0 {
		t.Errorf("a lost answer: %+v; want a retry after a backoff", lost)
	}
	if last := p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: "100000000000063"}, Attempt: 5}); last.Action != pacer.ActionDrop {
		t.Errorf("a lost answer at the last attempt: %+v; want drop", last)
	}
	p.Outcome(accepted(1))
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := p.Stats(); len(w.stored) != 1 || st.Reported != 1 || st.ReportInvalid != 2 || st.ReportDropped != 0 || st.Unanswered != 2 {
		t.Errorf("%d stored, stats %+v; want 1 reported, 2 invalid and 2 unanswered", len(w.stored), st)
	}
}

// TestReportHeldForNow: results of a number wahook does not know yet (404
// naming it, as for a tenant's number before its first webhook) are held
// and tried again while the others go; once wahook knows the number they
// are stored. Results refused for now for longer than the hold are dropped.
func TestReportHeldForNow(t *testing.T) {
	// Held for 10 s while the number becomes known: the steps below take
	// a few seconds on a busy machine; the drop is tested with a shorter
	// hold at the end.
	pacer.SetHeld(t, 100*time.Millisecond, 10*time.Second)
	const newNumber = "100000000000064"
	w := &wahookLike{unknown: newNumber}
	srv := httptest.NewServer(w)
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	for i := range 20 {
		res := accepted(i)
		// Five known numbers, and the new one.
		res.PhoneNumberID = fmt.Sprint("10000000000008", i%5)
		if i%5 == 0 {
			res.PhoneNumberID = newNumber
		}
		p.Outcome(res)
	}
	testutil.Eventually(t, 10*time.Second, "the known numbers' results stored, the others held", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.stored) == 16 && p.Stats().ReportHeld == 4, fmt.Sprintf("%d stored in %d posts, %+v", len(w.stored), w.posts, p.Stats())
	})
	// A refused batch is sent again as two: the number wahook named, and
	// the rest (three posts for each of the two batches with the new
	// number, one for the third), not one per number in it.
	w.mu.Lock()
	if w.posts > 10 {
		t.Errorf("%d posts to report 20 results of 6 numbers, one refused for now", w.posts)
	}
	w.mu.Unlock()
	// Held together, by number: one post a round (10 rounds a second
	// here), not a halving of them each time.
	w.mu.Lock()
	before, t0 := w.posts, time.Now()
	w.mu.Unlock()
	time.Sleep(time.Second)
	w.mu.Lock()
	rounds, took := w.posts-before, time.Since(t0)
	w.mu.Unlock()
	// Against the time that passed: a busy machine oversleeps.
	if limit := int(took/(100*time.Millisecond)) + 2; rounds > limit {
		t.Errorf("%d posts in %v of retrying 4 held results of one number; want at most %d", rounds, took.Round(time.Millisecond), limit)
	}
	w.mu.Lock()
	w.unknown = ""
	w.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "the held results stored once the number is known", func() (bool, string) {
		st := p.Stats()
		return st.Reported == 20, fmt.Sprintf("%+v", st)
	})
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}

	// Refused for longer than the hold: dropped, and counted.
	pacer.SetHeld(t, 100*time.Millisecond, 3*time.Second)
	w2 := &wahookLike{unknown: newNumber}
	srv2 := httptest.NewServer(w2)
	defer srv2.Close()
	p2 := httpPacer(t, srv2.URL)
	res := accepted(99)
	res.PhoneNumberID = newNumber
	p2.Outcome(res)
	testutil.Eventually(t, 10*time.Second, "dropped after the hold", func() (bool, string) {
		st := p2.Stats()
		return st.ReportDropped == 1, fmt.Sprintf("%+v", st)
	})
	if err := p2.Close(context.Background()); err != nil {
		t.Errorf("Close after the drop: %v; want nil (nothing was dropped at Close)", err)
	}
}

// TestReportForeignWaba: wahook answers 404 for a result that names a WABA
// the token's tenant does not own. That is the result's own fault, for
// good: it is dropped alone and the number's other results are stored.
// Before, every 404 was taken for a number wahook does not know yet, and
// all the batch's results of that number were held and tried again
// together for 10 minutes, then dropped.
func TestReportForeignWaba(t *testing.T) {
	pacer.SetHeld(t, 100*time.Millisecond, 10*time.Minute)
	w := &wahookLike{foreignWaba: "999000000000001"}
	srv := httptest.NewServer(w)
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	for i := range 20 {
		res := accepted(i)
		if i == 5 {
			res.WabaID = w.foreignWaba
		}
		p.Outcome(res)
	}
	testutil.Eventually(t, 10*time.Second, "the other results stored and the foreign one dropped", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		st := p.Stats()
		return len(w.stored) == 19 && st.Reported == 19 && st.ReportDropped == 1 && st.ReportHeld == 0, fmt.Sprintf("%d stored, %+v", len(w.stored), st)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Close(ctx)
}

// TestCloseEndedContext: Close given a context that has already ended
// drops and counts what is queued, and says so with the context's error.
// Before, the reporter's goroutine sometimes stopped without counting them
// (its select chose between the close and the end of its context at
// random).
func TestCloseEndedContext(t *testing.T) {
	w := &wahookLike{}
	srv := httptest.NewServer(w)
	defer srv.Close()
	for i := range 30 {
		cfg := pacer.DefaultConfig()
		cfg.ReportHTTPURL = srv.URL
		cfg.ReportBatch, cfg.ReportInterval = 8, time.Hour // nothing leaves before Close
		cfg.Logger = slog.New(slog.DiscardHandler)
		p, err := pacer.New(context.Background(), nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			p.Outcome(accepted(j))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if i == 0 {
			// Nothing queued: nothing lost, no error.
			p2, err := pacer.New(context.Background(), nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p2.Close(ctx); err != nil {
				t.Errorf("Close of an empty reporter with an ended context: %v", err)
			}
		}
		err = p.Close(ctx)
		if st := p.Stats(); st.Reported+st.ReportDropped != 5 || (st.ReportDropped > 0 && !errors.Is(err, context.Canceled)) {
			t.Fatalf("run %d: Close: %v, stats %+v; want each of the 5 reported or dropped, and the context's error with the drops", i, err, st)
		}
	}
}

// TestReportURLChecked: New refuses a report URL that is not an absolute
// http(s) URL with a host, and plain http to a host other than loopback
// unless ReportInsecureHTTP says the network is private: the API token
// would cross it in the clear. A wrong URL was taken, and every report
// failed (or sent the token in the clear) from then on.
func TestReportURLChecked(t *testing.T) {
	for _, c := range []struct {
		url      string
		insecure bool
		want     string // in New's error; "" for none
	}{
		{"https://wahook.example.com/api/v1/send-results", false, ""},
		{"http://127.0.0.1:8081/api/v1/send-results", false, ""},
		{"http://localhost:8081/api/v1/send-results", false, ""},
		{"http://[::1]:8081/api/v1/send-results", false, ""},
		{"http://wahook-api:8081/api/v1/send-results", false, "in the clear"},
		{"http://10.0.0.7:8081/api/v1/send-results", false, "in the clear"},
		{"http://wahook-api:8081/api/v1/send-results", true, ""},
		{"ftp://wahook.example.com/send-results", false, "scheme"},
		{"wahook-api:8081/api/v1/send-results", false, "scheme"},
		{"https:///api/v1/send-results", false, "no host"},
		{"http://a b/", false, "report URL"},
	} {
		cfg := pacer.DefaultConfig()
		cfg.ReportHTTPURL, cfg.APIToken, cfg.ReportInsecureHTTP = c.url, "pacer-test-token-0123", c.insecure
		cfg.Logger = slog.New(slog.DiscardHandler)
		p, err := pacer.New(context.Background(), nil, cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s (insecure %v): %v; want a pacer", c.url, c.insecure, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s (insecure %v): %v; want an error saying %q", c.url, c.insecure, err, c.want)
		}
		if err == nil {
			if err := p.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestReportRedirectNotFollowed: a redirect of send-results is not
// followed, and the results are not reported: Go's client sends the
// Authorization header on to the same host, over plain http too, so an
// https URL redirected to http gave the token away in the clear.
func TestReportRedirectNotFollowed(t *testing.T) {
	var followed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Add(1)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusPermanentRedirect)
	}))
	defer srv.Close()
	p := httpPacer(t, srv.URL)
	for i := range 3 {
		p.Outcome(accepted(i))
	}
	testutil.Eventually(t, 10*time.Second, "reports failing", func() (bool, string) {
		return p.Stats().ReportFailures >= 1, ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = p.Close(ctx)
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times; want none", n)
	}
	if st := p.Stats(); st.Reported != 0 {
		t.Errorf("stats %+v; want none reported", st)
	}
}

// TestReportURLErrorsHideCredentials: New's errors about a report URL
// never show its user information (a token may be there): a URL that does
// not parse was quoted whole by url.Error, password included.
func TestReportURLErrorsHideCredentials(t *testing.T) {
	for _, u := range []string{"http://user:S3CRET@a b/", "http://TOKEN123@wahook-api:8081/x", "ftp://user:S3CRET@host/x",
		"http://user:S3/CRET@host/x", "ftp://host/x?token=S3CRET", "https:user:S3CRET@host/x"} {
		cfg := pacer.DefaultConfig()
		cfg.ReportHTTPURL = u
		cfg.Logger = slog.New(slog.DiscardHandler)
		_, err := pacer.New(context.Background(), nil, cfg)
		if err == nil || strings.Contains(err.Error(), "S3") || strings.Contains(err.Error(), "CRET") || strings.Contains(err.Error(), "TOKEN123") || strings.Contains(err.Error(), "user:") {
			t.Errorf("%s: %v; want an error without the URL's user information", u, err)
		}
	}
}
