package simulate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/loadtest/simulate"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

const secret = "simulate-test-secret"

// receiver is a webhook endpoint that checks Meta's signature and decodes
// every body with wahook's own decoder.
type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	bodies   int
	statuses map[string][]string // message id -> statuses in order
	codes    map[string]int64    // message id -> error code of its failed status
	callback map[string]string   // message id -> biz_opaque_callback_data
	inbound  []*meta.Message
	quality  []string // events
	problems []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, statuses: map[string][]string{}, codes: map[string]int64{}, callback: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.Header.Get(schema.SignatureHeader) != schema.Sign([]byte(secret), body) {
		r.mu.Lock()
		r.problems = append(r.problems, "bad signature")
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	p, err := meta.Decode(body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies++
	if err != nil || len(p.Problems) > 0 || len(p.Unknown) > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%v %v %v: %s", err, p.Problems, p.Unknown, body))
	}
	for s := range p.Statuses() {
		r.statuses[s.Item.ID] = append(r.statuses[s.Item.ID], s.Item.Status)
		r.callback[s.Item.ID] = s.Item.BizOpaqueCallbackData
		for _, e := range s.Item.Errors {
			r.codes[s.Item.ID] = int64(e.Code)
		}
		if s.PhoneNumberID() == "" {
			r.problems = append(r.problems, "status without its number")
		}
	}
	for m := range p.InboundMessages() {
		r.inbound = append(r.inbound, m.Item)
	}
	for env := range p.Changes() {
		if q := env.Change.QualityUpdate; q != nil {
			r.quality = append(r.quality, q.Event)
		}
	}
}

func (r *receiver) snapshot() (map[string][]string, int, []string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := map[string][]string{}
	for k, v := range r.statuses {
		st[k] = append([]string(nil), v...)
	}
	return st, len(r.inbound), append([]string(nil), r.quality...), append([]string(nil), r.problems...)
}

func start(t *testing.T, edit func(*simulate.Config)) *simulate.Simulator {
	t.Helper()
	c := simulate.DefaultConfig()
	c.Seed = 7
	c.Numbers = simulate.Fleet(1234, 0, 2, 0, 1000)
	if edit != nil {
		edit(&c)
	}
	s, err := simulate.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// answer is Meta's answer to a send.
type answer struct {
	HTTP     int
	Contacts []struct {
		Input string `json:"input"`
		WaID  string `json:"wa_id"`
	} `json:"contacts"`
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
	Error *struct {
		Message   string `json:"message"`
		Type      string `json:"type"`
		Code      int32  `json:"code"`
		ErrorData struct {
			MessagingProduct string `json:"messaging_product"`
			Details          string `json:"details"`
		} `json:"error_data"`
		FBTraceID string `json:"fbtrace_id"`
	} `json:"error"`
}

func (a answer) code() int32 {
	if a.Error != nil {
		return a.Error.Code
	}
	return 0
}

func send(t *testing.T, s *simulate.Simulator, number, to, callback string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"messaging_product":"whatsapp","recipient_type":"individual","to":%q,"type":"template","template":{"name":"promo","language":{"code":"en_US"}},"biz_opaque_callback_data":%q}`, to, callback)
	resp, err := http.Post(s.URL()+"/v23.0/"+number+"/messages", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	a.HTTP = resp.StatusCode
	if a.Error != nil && (a.Error.Type != "OAuthException" || a.Error.ErrorData.MessagingProduct != "whatsapp" || a.Error.FBTraceID == "" ||
		a.Error.Message != fmt.Sprintf("(#%d) %s", a.Error.Code, a.Error.Message[len(fmt.Sprintf("(#%d) ", a.Error.Code)):])) {
		t.Errorf("error not in Meta's shape: %+v", a.Error)
	}
	if a.Error == nil && (a.HTTP != 200 || len(a.Messages) != 1 || len(a.Contacts) != 1 || a.Contacts[0].Input != to) {
		t.Errorf("success not in Meta's shape: %+v", a)
	}
	return a
}

// TestTier: the tier's bucket (a second's worth), 130429 beyond it with
// HTTP 429, and inbound replies counted against the tier with outbound.
func TestTier(t *testing.T) {
	// Outbound alone first: without replies (which count against the tier
	// too, and would take its tokens if they landed between the sends).
	// A tier of 2: a token comes back every 500 ms, so the sends within the
	// tier and the one beyond it have that long on a loaded machine (with a
	// tier of 10 they had 100 ms, and a slow CI run refilled a token).
	const tier = 2
	quiet := start(t, func(c *simulate.Config) {
		c.Numbers = simulate.Fleet(1233, 0, 1, 0, tier)
		c.ReplyShare, c.Failures = 0, nil
	})
	id := quiet.Stats().Numbers[0].PhoneNumberID
	t0 := time.Now()
	for i := range tier {
		if a := send(t, quiet, id, fmt.Sprint("1555010", 1000+i), ""); a.code() != 0 {
			t.Fatalf("send %d within the tier: %+v", i+1, a.Error)
		}
	}
	if a := send(t, quiet, id, "15550100999", ""); a.code() != 130429 || a.HTTP != http.StatusTooManyRequests {
		t.Fatalf("beyond the tier, %v after the first send: %d %+v", time.Since(t0), a.HTTP, a.Error)
	}
	if got := quiet.Stats().Numbers[0].SyncErrors[130429]; got != 1 {
		t.Errorf("130429 counted %d times", got)
	}

	s := start(t, func(c *simulate.Config) {
		c.Numbers = simulate.Fleet(1234, 0, 1, 0, 1)
		c.ReplyShare, c.ReadShare, c.DeliveredShare, c.Failures = 1, 1, 1, nil
		c.Delays = simulate.Delays{Sent: time.Millisecond, Delivered: time.Millisecond, Read: time.Millisecond, Reply: time.Millisecond, Failed: time.Millisecond}
	})
	// Tier 1: one send, its reply comes at once and takes the next second's
	// token, so a send 1.2 s later is refused; 2.1 s later it goes. The
	// send reaches the simulator between t0 and t1: the refusal is timed
	// from t0 (refused until 2 s after it), the send that goes from t1.
	one := s.Stats().Numbers[0].PhoneNumberID
	t0 = time.Now()
	if a := send(t, s, one, "15550100001", ""); a.code() != 0 {
		t.Fatal(a.Error)
	}
	t1 := time.Now()
	testutil.Poll(time.Second, func() bool { return s.Stats().Numbers[0].Inbound != 0 })
	if s.Stats().Numbers[0].Inbound != 1 {
		t.Fatal("no reply")
	}
	// The tier's one-second bucket is the subject: the sends go at set times.
	time.Sleep(time.Until(t0.Add(1200 * time.Millisecond)))
	if a := send(t, s, one, "15550100002", ""); a.code() != 130429 {
		t.Errorf("1.2 s after a send and its reply at 1 mps: %+v; want 130429 (inbound counts)", a.Error)
	}
	time.Sleep(time.Until(t1.Add(2100 * time.Millisecond)))
	if a := send(t, s, one, "15550100003", ""); a.code() != 0 {
		t.Errorf("2.1 s after: %+v", a.Error)
	}
}

// TestPairRule: 45 messages to one recipient at once, the 46th 131056;
// then one per interval; other recipients unaffected.
//
// The pair bucket fills from the first send, which reaches the simulator
// between t0 and t1: the 46th is refused before t0+interval, a send goes
// from t1+interval, and the one right after it is refused before
// t0+2*interval. The sends are timed from the first, not from each other:
// a slow burst (over 280 ms under -race in CI, against an interval of
// 300 ms then) let the bucket refill a second token before the last send.
func TestPairRule(t *testing.T) {
	const interval = time.Second
	s := start(t, func(c *simulate.Config) { c.PairInterval = interval })
	id := s.Stats().Numbers[0].PhoneNumberID
	t0 := time.Now()
	if a := send(t, s, id, "15550100100", ""); a.code() != 0 {
		t.Fatalf("send 1 of the burst: %+v", a.Error)
	}
	t1 := time.Now()
	for i := 1; i < 45; i++ {
		if a := send(t, s, id, "15550100100", ""); a.code() != 0 {
			t.Fatalf("send %d of the burst: %+v", i+1, a.Error)
		}
	}
	if a := send(t, s, id, "15550100100", ""); a.code() != 131056 || a.HTTP != http.StatusTooManyRequests {
		t.Fatalf("the 46th, %v after the first send (refused until %v): %d %+v", time.Since(t0), interval, a.HTTP, a.Error)
	}
	if a := send(t, s, id, "15550100101", ""); a.code() != 0 {
		t.Fatalf("another recipient: %+v", a.Error)
	}
	// Past the interval from the first send: the time window is the subject.
	time.Sleep(time.Until(t1.Add(interval + 20*time.Millisecond)))
	if a := send(t, s, id, "15550100100", ""); a.code() != 0 {
		t.Fatalf("after the interval: %+v", a.Error)
	}
	if a := send(t, s, id, "15550100100", ""); a.code() != 131056 {
		t.Fatalf("right after, %v after the first send (refused until %v): %+v", time.Since(t0), 2*interval, a.Error)
	}
}

// TestMaintenance: a configured window answers 131057, then sends go. The
// window opens when the simulator starts, between t0 and t1, and the sends
// are timed from those.
func TestMaintenance(t *testing.T) {
	const window = time.Second
	t0 := time.Now()
	s := start(t, func(c *simulate.Config) {
		c.Maintenance = []simulate.Window{{PhoneNumberID: c.Numbers[0].PhoneNumberID, Duration: window}}
	})
	t1 := time.Now()
	n := s.Stats().Numbers
	if a := send(t, s, n[0].PhoneNumberID, "15550100200", ""); a.code() != 131057 {
		t.Fatalf("in the window, %v after the start (open for %v): %+v", time.Since(t0), window, a.Error)
	}
	if a := send(t, s, n[1].PhoneNumberID, "15550100200", ""); a.code() != 0 {
		t.Fatalf("another number: %+v", a.Error)
	}
	time.Sleep(time.Until(t1.Add(window + 20*time.Millisecond))) // past the window: the time window is the subject
	if a := send(t, s, n[0].PhoneNumberID, "15550100200", ""); a.code() != 0 {
		t.Fatalf("after the window: %+v", a.Error)
	}
}

// TestWebhooks: every accepted message gets sent, delivered and read (3x)
// with its callback data, failures their code, replies their context; all
// signed and decoded by schema/meta without a problem or an unknown key.
// Failures flag the number (FLAGGED, then 131048); sustained use earns
// THROUGHPUT_UPGRADE, 131057 during its maintenance, then 1,000 mps.
func TestWebhooks(t *testing.T) {
	rcv := newReceiver(t)
	fast := simulate.Delays{Sent: 5 * time.Millisecond, Delivered: 5 * time.Millisecond, Read: 5 * time.Millisecond, Reply: 5 * time.Millisecond, Failed: 5 * time.Millisecond}
	s := start(t, func(c *simulate.Config) {
		c.WebhookURL, c.AppSecret = rcv.srv.URL, []byte(secret)
		c.Numbers = simulate.Fleet(1234, 0, 3, 1, 20)
		c.DeliveredShare, c.ReadShare, c.ReplyShare = 1, 1, 0.5
		c.Failures = map[int32]float64{131049: 0.2}
		c.Delays = fast
		c.FlagShare, c.FlagWindow = 0.5, 20
		c.UpgradeAfter, c.UpgradeUse, c.UpgradeMaintenance = 2*time.Second, 0.5, 300*time.Millisecond
	})
	n := s.Stats().Numbers
	up, plain := n[0].PhoneNumberID, n[1].PhoneNumberID

	// Sustained use of the upgradable number: 15 a second for 3.5 s.
	var ids []string
	tick := time.NewTicker(time.Second / 15)
	for i := 0; ; i++ {
		<-tick.C
		a := send(t, s, up, fmt.Sprint("155501", 10000+i), fmt.Sprint("cb-", i))
		if a.code() == 131057 {
			break
		}
		if a.code() != 0 {
			t.Fatalf("send %d: %+v", i, a.Error)
		}
		ids = append(ids, a.Messages[0].ID)
		if i > 15*10 {
			t.Fatal("no upgrade after 10 s of sustained use")
		}
	}
	tick.Stop()
	// Past the upgrade's 300 ms maintenance window: the window is the subject.
	time.Sleep(350 * time.Millisecond)
	if tier := s.Tier(up); tier != simulate.UpgradedTier {
		t.Errorf("tier after the upgrade's maintenance: %d", tier)
	}
	if tier := s.Tier(plain); tier != 20 {
		t.Errorf("a number that may not upgrade: %d", tier)
	}
	// Failures flag a number: on a simulator where every message fails.
	s2 := start(t, func(c *simulate.Config) {
		c.WebhookURL, c.AppSecret = rcv.srv.URL, []byte(secret)
		c.Numbers = simulate.Fleet(5678, 0, 1, 0, 1000)
		c.Failures, c.Delays = map[int32]float64{131026: 1}, fast
		c.FlagShare, c.FlagWindow = 0.5, 20
	})
	flagged := s2.Stats().Numbers[0].PhoneNumberID
	var flagCode int32
	for i := range 30 {
		a := send(t, s2, flagged, fmt.Sprint("155502", 10000+i), "")
		if flagCode = a.code(); flagCode != 0 {
			break
		}
	}
	if flagCode != 131048 {
		t.Errorf("the failing number: %d, want 131048 once flagged", flagCode)
	}
	if err := s2.Drain(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if !s2.Stats().Numbers[0].Flagged {
		t.Error("not flagged in the stats")
	}
	if err := s.Drain(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	// Drained, every post has had its answer: the receiver has served each
	// body the simulators counted as posted.
	testutil.Eventually(t, 5*time.Second, "the receiver to have every posted body", func() (bool, string) {
		posts := s.Stats().WebhookPosts + s2.Stats().WebhookPosts
		rcv.mu.Lock()
		bodies := rcv.bodies
		rcv.mu.Unlock()
		return int64(bodies) == posts, fmt.Sprintf("%d bodies received, %d posted", bodies, posts)
	})
	statuses, inbound, quality, problems := rcv.snapshot()
	if len(problems) > 0 {
		t.Fatalf("%d bodies with problems: %v", len(problems), problems[:min(3, len(problems))])
	}
	three, failed := 0, 0
	// POSTs go out over concurrent connections, so a message's statuses may
	// arrive in any order, as Meta's do: each message's are compared in the
	// order of its lifecycle.
	rank := map[string]int{"sent": 1, "delivered": 2, "read": 3, "failed": 3}
	for _, id := range ids {
		st := statuses[id]
		slices.SortStableFunc(st, func(a, b string) int { return rank[a] - rank[b] })
		switch {
		case len(st) == 3 && st[0] == "sent" && st[1] == "delivered" && st[2] == "read":
			three++
		case len(st) == 2 && st[0] == "sent" && st[1] == "failed" && rcv.codes[id] == 131049:
			failed++
		default:
			t.Errorf("%s: statuses %v", id, st)
		}
		if cb := rcv.callback[id]; cb == "" {
			t.Errorf("%s: no callback data", id)
		}
	}
	if three == 0 || failed == 0 || inbound == 0 {
		t.Errorf("%d messages read, %d failed, %d replies; want each", three, failed, inbound)
	}
	has := map[string]bool{}
	for _, q := range quality {
		has[q] = true
	}
	if !has["THROUGHPUT_UPGRADE"] || !has["FLAGGED"] {
		t.Errorf("quality events %v: want THROUGHPUT_UPGRADE and FLAGGED", quality)
	}
	st := s.Stats()
	if st.WebhookGivenUp != 0 || st.WebhookItems == 0 || st.Numbers[0].UpgradedAt == nil {
		t.Errorf("stats: %+v", st)
	}
}

// TestDeterministic: the same sends with the same seed get the same fates;
// and a message sent twice (same callback data) is counted.
func TestDeterministic(t *testing.T) {
	fates := func(seed uint64) []int64 {
		s := start(t, func(c *simulate.Config) {
			c.Seed = seed
			c.Failures = map[int32]float64{131026: 0.3, 131049: 0.2}
		})
		id := s.Stats().Numbers[0].PhoneNumberID
		for i := range 60 {
			send(t, s, id, fmt.Sprint("155503", 10000+i), fmt.Sprint("m-", i))
		}
		send(t, s, id, "15550310000", "m-0")
		st := s.Stats().Numbers[0]
		if st.SentTwice != 1 {
			t.Errorf("sent twice: %d, want 1", st.SentTwice)
		}
		return []int64{st.AsyncFailures[131026], st.AsyncFailures[131049], st.Statuses["delivered"], st.Statuses["read"]}
	}
	a, b, c := fates(11), fates(11), fates(12)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("seed 11 twice: %v and %v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Logf("seeds 11 and 12 happen to give the same counts: %v", a)
	}
}

// TestLoopbackOnly: the simulator listens and posts on this machine only.
func TestLoopbackOnly(t *testing.T) {
	c := simulate.DefaultConfig()
	c.Numbers = simulate.Fleet(1, 0, 1, 0, 80)
	c.Listen = "0.0.0.0:0"
	if _, err := simulate.Start(c); err == nil {
		t.Error("listening on every interface was accepted")
	}
	c.Listen, c.WebhookURL, c.AppSecret = "127.0.0.1:0", "http://10.1.2.3/webhook", []byte("s")
	if _, err := simulate.Start(c); err == nil {
		t.Error("a remote webhook url was accepted")
	}
}
