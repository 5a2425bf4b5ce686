package loadtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// TestLedgerCountsOnce posts the same events in several ways and finds each
// once in the ledger, and only after a 200.
func TestLedgerCountsOnce(t *testing.T) {
	m := quiet()
	m.Numbers, m.OutboundMPS, m.PerPost, m.RepeatShare, m.RetryShare = 3, 30, 4, 0.2, 0.2
	m.Failures, _ = ParseFailureMix("131049=5%")
	m.QualityEvery = time.Second
	g, posts := runTraffic(t, m, 20*time.Second)
	l := NewLedger(g)
	// Every POST is posted; only the even ones get a 200; retries get a
	// 200 too (a POST and its retry count once).
	unique := map[string]bool{}
	failures := map[int32]uint64{}
	for i := range posts {
		p := &posts[i]
		l.Posted(p)
		if i%2 == 1 && !p.Retry {
			continue
		}
		l.Acked(p)
		l.Acked(p) // an answer counted twice changes nothing
		for _, it := range p.items {
			key := string(g.fleet.appendMessageID([]byte{byte(it.kind), it.sub}, byte(it.kind), it.number, it.seq))
			if it.kind == itemNumber {
				key += time.Unix(it.at, 0).String()
			}
			if !unique[key] && it.kind == itemStatus && it.sub == statusFailed {
				failures[it.code]++
			}
			unique[key] = true
		}
	}
	tot := l.Totals()
	if tot.Events != uint64(len(unique)) {
		t.Fatalf("ledger has %d events, want the %d distinct acked ones", tot.Events, len(unique))
	}
	if tot.Failures["131049"] != failures[131049] || failures[131049] == 0 {
		t.Errorf("failures %v, want 131049=%d", tot.Failures, failures[131049])
	}
	var perNumber, perSecond, byFailure uint64
	for _, n := range tot.PerNumber {
		perNumber += n
	}
	for _, s := range l.PerSecond() {
		perSecond += s.Events
	}
	for _, n := range l.Failures() {
		byFailure += n
	}
	if perNumber != tot.Events || perSecond != tot.Events || byFailure != failures[131049] {
		t.Errorf("per number %d, per second %d, by failure %d: want %d, %d", perNumber, perSecond, byFailure, tot.Events, failures[131049])
	}
	// The states the check reads.
	var acked, posted int
	for i := range posts {
		for _, it := range posts[i].items {
			if it.kind != itemStatus {
				continue
			}
			switch l.statusState(it.number, it.seq, int(it.sub)) {
			case stateAcked:
				acked++
			case statePosted:
				posted++
			default:
				t.Fatal("a posted status is unknown to the ledger")
			}
		}
	}
	if acked == 0 || posted == 0 {
		t.Errorf("acked %d, posted only %d: want both", acked, posted)
	}
	if l.statusState(0, 1<<30, 0) != stateUnknown {
		t.Error("a status never posted is known")
	}
}

// TestLoadRunRetriesAndLedger runs a short traffic model against a server
// on loopback that checks each signature, answers 503 to every third body
// it sees first (Meta then retries), and keeps the events of bodies it
// answered 200: they must equal the ledger.
func TestLoadRunRetriesAndLedger(t *testing.T) {
	secret := []byte("loadtest-secret")
	var mu sync.Mutex
	seen := map[string]int{}
	stored := map[string]bool{}
	var bad atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get(schema.SignatureHeader) != schema.Sign(secret, b) {
			bad.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen[string(b)]++
		if seen[string(b)] == 1 && len(seen)%3 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		p, err := meta.Decode(b)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for s := range p.Statuses() {
			stored[s.Item.ID+" "+s.Item.Status] = true
		}
		for m := range p.InboundMessages() {
			stored[m.Item.ID] = true
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	m := quiet()
	m.Numbers, m.OutboundMPS, m.PerPost, m.RetryShare = 2, 40, 3, 0.05
	c := DefaultConfig()
	c.URL, c.Secret, c.Traffic, c.Duration, c.Connections = "http://"+ln.Addr().String()+"/webhook", secret, &m, 2*time.Second, 8
	c.RetryBackoff, c.MetricsURL = 10*time.Millisecond, "-"
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary()
	if bad.Load() > 0 || s.Statuses["503"] == 0 || s.Retried == 0 || s.GaveUp != 0 || s.Errors != 0 {
		t.Fatalf("bad signatures %d, answers %v, retried %d, gave up %d, errors %d: want 503s retried to a 200",
			bad.Load(), s.Statuses, s.Retried, s.GaveUp, s.Errors)
	}
	tot := res.Ledger.Totals()
	mu.Lock()
	defer mu.Unlock()
	if want := uint64(len(stored)); tot.Events != want || want < 300 {
		t.Fatalf("ledger %d events, server stored %d distinct ones (want equal, at least 300)", tot.Events, want)
	}
	if s.Traffic == nil || s.Traffic.Acked.Events != tot.Events || len(s.Timeline) < 2 || s.Mode != "traffic-model" {
		t.Fatalf("summary %+v", s)
	}
}
