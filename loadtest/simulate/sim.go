package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Simulator is a running simulated Cloud API. Start it with Start; Close
// stops it.
type Simulator struct {
	cfg     Config
	start   time.Time
	ln      net.Listener
	srv     *http.Server
	numbers map[string]*num
	order   []*num
	hooks   *hooks
	seq     atomic.Uint64
	done    chan struct{}
	wg      sync.WaitGroup
}

// bucket is a token bucket that may go into debt (inbound messages count
// against the tier whether or not there is room).
type bucket struct {
	tokens, rate, burst float64
	last                time.Time
}

func (b *bucket) fill(now time.Time) {
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	}
	b.last = now
}

// num is one number's state.
type num struct {
	Number
	mu          sync.Mutex
	tier        bucket
	pairs       map[string]*bucket
	second      int64 // the second of count
	count       float64
	sustained   time.Duration // UpgradeAfter once the average use of its last seconds earns the upgrade
	uses        []float64     // use of the last whole seconds
	upgradeAt   time.Time     // when the upgrade was earned
	maintUntil  time.Time
	flagged     bool
	recent      []bool // the last FlagWindow accepted messages: failed or not
	recentNext  int
	recentFails int
	keys        map[string]uint32 // accepted sends by biz_opaque_callback_data

	stats NumberStats
}

// NumberStats are one number's counts.
type NumberStats struct {
	PhoneNumberID string           `json:"phone_number_id"`
	Tier          int              `json:"tier_mps"` // now
	UpgradedAt    *time.Time       `json:"upgraded_at,omitempty"`
	Flagged       bool             `json:"flagged"`
	Requests      int64            `json:"requests"`
	Accepted      int64            `json:"accepted"`
	SyncErrors    map[int32]int64  `json:"sync_errors"`
	AsyncFailures map[int32]int64  `json:"async_failures"`
	Inbound       int64            `json:"inbound"`
	SentTwice     int64            `json:"sent_twice"` // callback data accepted more than once (counted once per extra send)
	Statuses      map[string]int64 `json:"statuses"`   // webhook statuses queued
}

// Stats are the simulator's counts.
type Stats struct {
	Numbers         []NumberStats `json:"numbers"`
	WebhookPosts    int64         `json:"webhook_posts"`
	WebhookItems    int64         `json:"webhook_items"`
	WebhookRetries  int64         `json:"webhook_retries"`
	WebhookGivenUp  int64         `json:"webhook_given_up"`
	WebhookPending  int           `json:"webhook_pending"`
	WebhookNotSent  int64         `json:"webhook_not_sent"` // due after Close
	WebhookBadCodes map[int]int64 `json:"webhook_bad_codes,omitempty"`
}

// Start starts a simulator on cfg.Listen.
func Start(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	s := &Simulator{cfg: cfg, start: time.Now(), ln: ln, numbers: map[string]*num{}, done: make(chan struct{})}
	for _, n := range cfg.Numbers {
		m := &num{Number: n, pairs: map[string]*bucket{}, keys: map[string]uint32{}, recent: make([]bool, 0, cfg.FlagWindow)}
		m.tier = bucket{tokens: float64(n.Tier), rate: float64(n.Tier), burst: float64(n.Tier)}
		m.stats = NumberStats{PhoneNumberID: n.PhoneNumberID, SyncErrors: map[int32]int64{}, AsyncFailures: map[int32]int64{}, Statuses: map[string]int64{}}
		s.numbers[n.PhoneNumberID] = m
		s.order = append(s.order, m)
	}
	s.hooks = newHooks(s)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{version}/{id}/messages", s.messages)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = s.srv.Serve(ln) }()
	s.hooks.start()
	return s, nil
}

// URL is the Graph API's base: URL + "/v23.0/<phone_number_id>/messages".
func (s *Simulator) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the API and the webhooks; webhooks not yet due are dropped
// (counted in Stats.WebhookNotSent). Drain first to send them.
func (s *Simulator) Close() error {
	err := s.srv.Close()
	s.hooks.stop()
	s.wg.Wait()
	return err
}

// Drain waits until every webhook due by now + within has been posted, or
// ctx ends.
func (s *Simulator) Drain(ctx context.Context, within time.Duration) error {
	return s.hooks.drain(ctx, time.Now().Add(within))
}

// Tier is a number's tier now (0: not a number of the simulator).
func (s *Simulator) Tier(id string) int {
	n := s.numbers[id]
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.roll(s, time.Now())
	return int(n.tier.rate)
}

// Stats returns the counts so far.
func (s *Simulator) Stats() Stats {
	st := Stats{}
	for _, n := range s.order {
		n.mu.Lock()
		ns := n.stats
		ns.Tier = int(n.tier.rate)
		ns.Flagged = n.flagged
		ns.SyncErrors = maps(n.stats.SyncErrors)
		ns.AsyncFailures = maps(n.stats.AsyncFailures)
		ns.Statuses = maps(n.stats.Statuses)
		if !n.upgradeAt.IsZero() {
			t := n.upgradeAt
			ns.UpgradedAt = &t
		}
		n.mu.Unlock()
		st.Numbers = append(st.Numbers, ns)
	}
	s.hooks.fill(&st)
	return st
}

func maps[K comparable](m map[K]int64) map[K]int64 {
	out := make(map[K]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sendRequest is the part of Meta's send request the simulator reads.
type sendRequest struct {
	MessagingProduct string `json:"messaging_product"`
	To               string `json:"to"`
	Type             string `json:"type"`
	BizOpaque        string `json:"biz_opaque_callback_data"`
}

// Meta's error titles of the synchronous errors.
var syncTitles = map[int32][2]string{
	130429: {"Rate limit hit", "Cloud API message throughput has been reached."},
	131056: {"(Business Account, Consumer Account) pair rate limit hit", "Too many messages sent from the sender phone number to the same recipient phone number in a short period of time."},
	131057: {"Account in maintenance mode", "Business Account is in maintenance mode. This could be due to a throughput upgrade."},
	131048: {"Spam rate limit hit", "Message failed to send because there are restrictions on how many messages can be sent from this phone number."},
	100:    {"Invalid parameter", "The request has an invalid or missing parameter."},
}

// messages answers POST /{version}/{phone_number_id}/messages.
func (s *Simulator) messages(w http.ResponseWriter, r *http.Request) {
	n := s.numbers[r.PathValue("id")]
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req sendRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if n == nil || err != nil || req.MessagingProduct != "whatsapp" || req.To == "" {
		writeError(w, 100, "unknown phone number id, or not a send request")
		return
	}
	now := time.Now()
	code, wamid := n.send(s, &req, now)
	if code != 0 {
		writeError(w, code, "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"messaging_product":"whatsapp","contacts":[{"input":%q,"wa_id":%q}],"messages":[{"id":%q}]}`, req.To, req.To, wamid)
}

func writeError(w http.ResponseWriter, code int32, details string) {
	t := syncTitles[code]
	if details == "" {
		details = t[1]
	}
	status := http.StatusBadRequest
	if code == 130429 || code == 131056 {
		status = http.StatusTooManyRequests
	}
	type errData struct {
		MessagingProduct string `json:"messaging_product"`
		Details          string `json:"details"`
	}
	doc := struct {
		Error struct {
			Message   string  `json:"message"`
			Type      string  `json:"type"`
			Code      int32   `json:"code"`
			ErrorData errData `json:"error_data"`
			FBTraceID string  `json:"fbtrace_id"`
		} `json:"error"`
	}{}
	doc.Error.Message = fmt.Sprintf("(#%d) %s", code, t[0])
	doc.Error.Type = "OAuthException"
	doc.Error.Code = code
	doc.Error.ErrorData = errData{MessagingProduct: "whatsapp", Details: details}
	doc.Error.FBTraceID = "AsimTrace" + strconv.FormatUint(rand.Uint64()%1e9, 36)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(doc)
}

// roll moves the number's per-second use on to now. The use of the last
// UpgradeAfter whole seconds, averaged, at UpgradeUse of the tier or more
// earns the upgrade (an average, so that a second's dip in a sender's rate
// does not start the count again). It also ends an upgrade's maintenance
// with the new tier. n.mu is held.
func (n *num) roll(s *Simulator, now time.Time) {
	sec := now.Unix()
	if sec != n.second {
		window := max(int(s.cfg.UpgradeAfter/time.Second), 1)
		if n.second != 0 {
			n.uses = append(n.uses, n.count)
			for gap := min(sec-n.second-1, int64(window)); gap > 0; gap-- {
				n.uses = append(n.uses, 0)
			}
		}
		if len(n.uses) > window {
			n.uses = n.uses[len(n.uses)-window:]
		}
		n.sustained = 0
		if len(n.uses) == window {
			sum := 0.0
			for _, u := range n.uses {
				sum += u
			}
			if sum/float64(window) >= s.cfg.UpgradeUse*n.tier.rate {
				n.sustained = time.Duration(window) * time.Second
			}
		}
		n.second, n.count = sec, 0
	}
	if n.Upgradable && n.upgradeAt.IsZero() && s.cfg.UpgradeAfter > 0 && n.sustained >= s.cfg.UpgradeAfter {
		n.upgradeAt = now
		n.maintUntil = now.Add(s.cfg.UpgradeMaintenance)
		s.hooks.add(item{due: now, kind: kindNumberEvent, number: n, event: "THROUGHPUT_UPGRADE", at: now.Unix()})
	}
	if !n.upgradeAt.IsZero() && !now.Before(n.maintUntil) && n.tier.rate < UpgradedTier {
		n.tier.fill(now)
		n.tier.rate, n.tier.burst = UpgradedTier, UpgradedTier
	}
}

// inMaintenance reports whether a window of the number is open at now.
func (n *num) inMaintenance(s *Simulator, now time.Time) bool {
	if now.Before(n.maintUntil) {
		return true
	}
	off := now.Sub(s.start)
	for _, w := range s.cfg.Maintenance {
		if w.PhoneNumberID == n.PhoneNumberID && off >= w.Start && off < w.Start+w.Duration {
			return true
		}
	}
	return false
}

// send decides one send: an error code, or 0 and the message id.
func (n *num) send(s *Simulator, req *sendRequest, now time.Time) (int32, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats.Requests++
	n.roll(s, now)
	code := int32(0)
	n.tier.fill(now)
	var pr *bucket
	switch {
	case n.flagged:
		code = 131048
	case n.inMaintenance(s, now):
		code = 131057
	case n.tier.tokens < 1:
		code = 130429
	default:
		pr = n.pairs[req.To]
		if pr == nil {
			pr = &bucket{tokens: float64(s.cfg.PairBurst), rate: 1 / s.cfg.PairInterval.Seconds(), burst: float64(s.cfg.PairBurst)}
			n.pairs[req.To] = pr
		}
		pr.fill(now)
		if pr.tokens < 1 {
			code = 131056
		}
	}
	if code != 0 {
		n.stats.SyncErrors[code]++
		return code, ""
	}
	n.tier.tokens--
	pr.tokens--
	n.count++
	n.stats.Accepted++
	if req.BizOpaque != "" {
		n.keys[req.BizOpaque]++
		if n.keys[req.BizOpaque] > 1 {
			n.stats.SentTwice++
		}
	}
	seq := s.seq.Add(1)
	wamid := "wamid.SIM" + n.PhoneNumberID + "x" + strconv.FormatUint(seq, 36)
	n.fate(s, req, wamid, now)
	return 0, wamid
}

// rng returns the random source of one message: from the seed and the
// message id, so that the same sends get the same fates.
func (s *Simulator) rng(key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(s.cfg.Seed, h.Sum64()))
}

// delay draws a delay around the median m (exponential, at most 4 m).
func delay(r *rand.Rand, m time.Duration) time.Duration {
	if m <= 0 {
		return 0
	}
	d := time.Duration(r.ExpFloat64() * float64(m) / math.Ln2)
	return min(d, 4*m)
}

// fate schedules the accepted message's webhooks. n.mu is held.
func (n *num) fate(s *Simulator, req *sendRequest, wamid string, now time.Time) {
	r := s.rng(wamid)
	c := &s.cfg
	base := item{number: n, wamid: wamid, to: req.To, callback: req.BizOpaque}
	sent := now.Add(delay(r, c.Delays.Sent))
	add := func(due time.Time, status string, code int32) {
		it := base
		it.kind, it.status, it.code, it.due, it.at = kindStatus, status, code, due, due.Unix()
		n.stats.Statuses[status]++
		s.hooks.add(it)
	}
	add(sent, "sent", 0)
	// Async failures: the first code whose share the draw falls in.
	x := r.Float64()
	var failCode int32
	codes := make([]int32, 0, len(c.Failures))
	for code := range c.Failures {
		codes = append(codes, code)
	}
	sort.Slice(codes, func(i, j int) bool { return codes[i] < codes[j] })
	for _, code := range codes {
		if x < c.Failures[code] {
			failCode = code
			break
		}
		x -= c.Failures[code]
	}
	n.remember(s, failCode != 0, now)
	if failCode != 0 {
		n.stats.AsyncFailures[failCode]++
		add(sent.Add(delay(r, c.Delays.Failed)), "failed", failCode)
		return
	}
	if r.Float64() >= c.DeliveredShare {
		return
	}
	delivered := sent.Add(delay(r, c.Delays.Delivered))
	add(delivered, "delivered", 0)
	if r.Float64() >= c.ReadShare {
		return
	}
	read := delivered.Add(delay(r, c.Delays.Read))
	add(read, "read", 0)
	if r.Float64() >= c.ReplyShare {
		return
	}
	reply := read.Add(delay(r, c.Delays.Reply))
	it := base
	it.kind, it.due, it.at = kindInbound, reply, reply.Unix()
	it.inID = "wamid.SIMin" + strings.TrimPrefix(wamid, "wamid.SIM")
	s.hooks.add(it)
}

// remember keeps the last FlagWindow messages' failures and flags the
// number when their share reaches FlagShare. n.mu is held.
func (n *num) remember(s *Simulator, failed bool, now time.Time) {
	if s.cfg.FlagShare <= 0 || n.flagged {
		return
	}
	if len(n.recent) < s.cfg.FlagWindow {
		n.recent = append(n.recent, failed)
	} else {
		if n.recent[n.recentNext] {
			n.recentFails--
		}
		n.recent[n.recentNext] = failed
		n.recentNext = (n.recentNext + 1) % s.cfg.FlagWindow
	}
	if failed {
		n.recentFails++
	}
	if len(n.recent) == s.cfg.FlagWindow && float64(n.recentFails) >= s.cfg.FlagShare*float64(s.cfg.FlagWindow) {
		n.flagged = true
		s.hooks.add(item{due: now, kind: kindNumberEvent, number: n, event: "FLAGGED", at: now.Unix()})
	}
}

// inbound counts a user's message against the number's tier when it is
// sent (Meta counts inbound and outbound together).
func (n *num) inbound(s *Simulator, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.roll(s, now)
	n.tier.fill(now)
	n.tier.tokens = math.Max(n.tier.tokens-1, -n.tier.burst)
	n.count++
	n.stats.Inbound++
}

var errClosed = errors.New("simulator closed")
