package campaign

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/wahook/wahook/loadtest/simulate"
	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/schema"
)

// Run runs the campaign: it starts the simulator, sends the plan with each
// sender side by side (each over numbers of its own), and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RunID == 0 {
		cfg.RunID = uint32(rand.IntN(99_999_999) + 1)
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(cfg.RunID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	sc := cfg.Sim
	sc.Seed = cfg.Seed
	sc.WebhookURL, sc.AppSecret = cfg.WebhookURL, cfg.AppSecret
	sc.Numbers = nil
	fleets := map[string][]simulate.Number{}
	for i, name := range cfg.Senders {
		f := simulate.Fleet(cfg.RunID, i*cfg.Numbers, cfg.Numbers, cfg.Upgradable, cfg.Tier)
		fleets[name] = f
		sc.Numbers = append(sc.Numbers, f...)
	}
	sim, err := simulate.Start(sc)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	defer sim.Close()

	pl := makePlan(&cfg)
	ideal, laneIdeal := pl.ideal(&cfg)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: cfg.Workers * cfg.Numbers * len(cfg.Senders), MaxIdleConns: 1024}}

	var p *pacer.Pacer
	var nc *nats.Conn
	for _, s := range cfg.Senders {
		if s != SenderPaced {
			continue
		}
		nc, err = nats.Connect(cfg.NATSURL, nats.Name("wahook loadtest campaign"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		pc := pacer.DefaultConfig()
		pc.PhoneHashKey = cfg.PhoneHashKey
		pc.CooldownNoWait = true
		pc.Logger = cfg.Logger
		p, err = pacer.New(ctx, js, pc)
		if err != nil {
			return nil, err
		}
	}

	start := time.Now()
	senders := make([]*sender, len(cfg.Senders))
	for i, name := range cfg.Senders {
		senders[i] = newSender(name, &cfg, fleets[name], pl, sim, client, p, start)
	}
	// The tiers, once a second, for the chart and the rate per number.
	sampleDone := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			for _, s := range senders {
				s.sampleTiers(time.Now())
			}
			select {
			case <-sampleDone:
				return
			case <-t.C:
			}
		}
	}()
	var wg sync.WaitGroup
	for _, s := range senders {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	wg.Wait()
	close(sampleDone)
	sampler.Wait()
	client.CloseIdleConnections()

	rep := &Report{RunID: cfg.RunID, Seed: cfg.Seed, Messages: cfg.Messages, Numbers: cfg.Numbers, TierMPS: cfg.Tier,
		Upgradable: cfg.Upgradable, RepeatShare: cfg.RepeatShare, RepeatCount: cfg.RepeatCount, Workers: cfg.Workers,
		NaiveMPS: cfg.NaiveMPS, IdealS: ideal, SimulatorURL: sim.URL()}
	st := sim.Stats()
	for _, s := range senders {
		rep.Senders = append(rep.Senders, s.report(ideal, laneIdeal, st))
	}
	if p != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := p.Close(cctx)
		ccancel()
		ps := p.Stats()
		rep.Pacer = &ps
		if err != nil {
			cfg.Logger.Warn("campaign: pacer close", "error", err.Error())
		}
	}
	// Let the webhooks due within a few seconds reach wahook.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = sim.Drain(dctx, 2*time.Second)
	dcancel()
	st = sim.Stats()
	rep.Webhooks = WebhookFigures{Posts: st.WebhookPosts, Items: st.WebhookItems, Retries: st.WebhookRetries, GivenUp: st.WebhookGivenUp, BadCodes: st.WebhookBadCodes}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("campaign cut short: %w", err)
	}
	return rep, nil
}

// lane is one number's queue in one sender.
type lane struct {
	id    string
	index int
	mu    sync.Mutex
	queue []message
	next  int
	later laterHeap // messages to send again at their due time
	busy  int       // messages taken and not finished
	stop  bool

	firstAccept, lastAccept time.Time
	accepted                int64
	queueDone               time.Time // when the last fresh message was taken
	acceptedAtDone          int64
	tierSum                 float64 // sampled tiers while the lane was sending
	tierN                   int
}

type laterHeap []message

func (h laterHeap) Len() int           { return len(h) }
func (h laterHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h laterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *laterHeap) Push(x any)        { *h = append(*h, x.(message)) }
func (h *laterHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

// take returns the next message to send: a due retry first, then the
// queue; it waits while only retries not yet due are left, and reports
// false once the lane is done.
func (l *lane) take(ctx context.Context) (message, bool) {
	for {
		l.mu.Lock()
		now := time.Now()
		if l.stop {
			l.mu.Unlock()
			return message{}, false
		}
		if len(l.later) > 0 && !l.later[0].due.After(now) {
			m := heap.Pop(&l.later).(message)
			l.busy++
			l.mu.Unlock()
			return m, true
		}
		if l.next < len(l.queue) {
			m := l.queue[l.next]
			l.next++
			if l.next == len(l.queue) {
				l.queueDone, l.acceptedAtDone = now, l.accepted
			}
			l.busy++
			l.mu.Unlock()
			return m, true
		}
		wait := 10 * time.Millisecond
		if len(l.later) > 0 {
			wait = min(time.Until(l.later[0].due), 50*time.Millisecond)
		} else if l.busy == 0 {
			l.mu.Unlock()
			return message{}, false
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return message{}, false
		case <-time.After(max(wait, time.Millisecond)):
		}
	}
}

// again queues m to be sent at m.due.
func (l *lane) again(m message) {
	l.mu.Lock()
	heap.Push(&l.later, m)
	l.busy--
	l.mu.Unlock()
}

// finish ends m; accepted records its time.
func (l *lane) finish(accepted bool, at time.Time) {
	l.mu.Lock()
	l.busy--
	if accepted {
		l.accepted++
		if l.firstAccept.IsZero() {
			l.firstAccept = at
		}
		l.lastAccept = at
	}
	l.mu.Unlock()
}

// halt stops the lane and returns how many messages it leaves unsent
// (besides the one its caller holds).
func (l *lane) halt() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop {
		return 0
	}
	l.stop = true
	n := len(l.queue) - l.next + len(l.later)
	l.next, l.later = len(l.queue), nil
	return n
}

// sender is one of the campaign's senders.
type sender struct {
	name   string
	cfg    *Config
	lanes  []*lane
	sim    *simulate.Simulator
	client *http.Client
	pacer  *pacer.Pacer
	start  time.Time

	mu       sync.Mutex
	seconds  []second
	end      time.Time
	sends    atomic.Int64
	codes    sync.Map // int32 -> *atomic.Int64
	givenUp  atomic.Int64
	dropped  atomic.Int64
	accepted atomic.Int64
}

// second is one second of a sender's run.
type second struct {
	Accepted int64   `json:"accepted"`
	E130429  int64   `json:"errors_130429"`
	E131056  int64   `json:"errors_131056"`
	EOther   int64   `json:"errors_other"`
	TierMPS  float64 `json:"tier_mps"`            // sum of the sender's numbers' tiers
	PacerMPS float64 `json:"pacer_mps,omitempty"` // sum of the pacer's rates of the numbers still sending
}

func newSender(name string, cfg *Config, fleet []simulate.Number, pl plan, sim *simulate.Simulator, client *http.Client, p *pacer.Pacer, start time.Time) *sender {
	s := &sender{name: name, cfg: cfg, sim: sim, client: client, start: start}
	if name == SenderPaced {
		s.pacer = p
	}
	for i, n := range fleet {
		q := append([]message(nil), pl.lanes[i]...)
		s.lanes = append(s.lanes, &lane{id: n.PhoneNumberID, index: i, queue: q})
	}
	return s
}

func (s *sender) at(t time.Time) *second {
	i := max(int(t.Sub(s.start)/time.Second), 0)
	for len(s.seconds) <= i {
		s.seconds = append(s.seconds, second{})
	}
	return &s.seconds[i]
}

func (s *sender) sampleTiers(now time.Time) {
	sum, paced := 0.0, 0.0
	for _, l := range s.lanes {
		t := float64(s.sim.Tier(l.id))
		sum += t
		l.mu.Lock()
		active := !l.stop && (l.next < len(l.queue) || l.busy > 0 || len(l.later) > 0)
		if active {
			l.tierSum += t
			l.tierN++
		}
		l.mu.Unlock()
		if active && s.pacer != nil {
			r, _ := s.pacer.Rate(l.id)
			paced += r
		}
	}
	s.mu.Lock()
	if s.end.IsZero() {
		sec := s.at(now)
		sec.TierMPS, sec.PacerMPS = sum, paced
	}
	s.mu.Unlock()
}

func (s *sender) count(code int32, now time.Time) {
	v, _ := s.codes.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	s.mu.Lock()
	sec := s.at(now)
	switch code {
	case 0:
		sec.Accepted++
	case 130429:
		sec.E130429++
	case 131056:
		sec.E131056++
	default:
		sec.EOther++
	}
	s.mu.Unlock()
}

func (s *sender) codeCount(code int32) int64 {
	if v, ok := s.codes.Load(code); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// run sends every lane with its workers until done.
func (s *sender) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range s.lanes {
		var lim *rate.Limiter
		if s.pacer == nil {
			lim = rate.NewLimiter(rate.Limit(s.cfg.NaiveMPS), 1)
		}
		for range s.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.pacer == nil {
					s.naive(ctx, l, lim)
				} else {
					s.paced(ctx, l)
				}
			}()
		}
	}
	wg.Wait()
	s.mu.Lock()
	s.end = time.Now()
	s.mu.Unlock()
}

// naive sends at a fixed rate and retries every rate-limit error at once,
// up to NaiveAttempts sends.
func (s *sender) naive(ctx context.Context, l *lane, lim *rate.Limiter) {
	for {
		m, ok := l.take(ctx)
		if !ok {
			return
		}
		if err := lim.Wait(ctx); err != nil {
			l.finish(false, time.Time{})
			return
		}
		accepted, dropped := false, false
		for attempt := 1; attempt <= s.cfg.NaiveAttempts && ctx.Err() == nil; attempt++ {
			code, _ := s.send(ctx, l, m)
			if code == 0 {
				accepted = true
				break
			}
			if e, _ := schema.LookupError(code); e.Class != schema.ClassThroughput && e.Class != schema.ClassPairRate && e.Class != schema.ClassMaintenance {
				dropped = true
				break
			}
		}
		switch {
		case dropped:
			s.dropped.Add(1)
		case !accepted:
			s.givenUp.Add(1)
		}
		l.finish(accepted, time.Now())
	}
}

// paced sends as the pacer allows and does what its Outcome says.
func (s *sender) paced(ctx context.Context, l *lane) {
	for {
		m, ok := l.take(ctx)
		if !ok {
			return
		}
		err := s.pacer.Wait(ctx, l.id, m.recipient)
		var cool *pacer.CooldownError
		switch {
		case errors.As(err, &cool):
			m.due = cool.Until
			l.again(m)
			continue
		case errors.Is(err, pacer.ErrStopped):
			s.givenUp.Add(int64(1 + l.halt()))
			l.finish(false, time.Time{})
			continue
		case err != nil:
			l.finish(false, time.Time{})
			return
		}
		m.attempt++
		code, wamid := s.send(ctx, l, m)
		now := time.Now()
		res := schema.SendResult{PhoneNumberID: l.id, Recipient: m.recipient, Timestamp: schema.Timestamp{Time: now.UTC()},
			RequestID: strconv.FormatUint(uint64(s.cfg.RunID), 10) + "-" + strconv.Itoa(m.seq) + "-" + strconv.Itoa(m.attempt),
			Campaign:  s.callback(m)}
		if code == 0 {
			res.Status, res.MessageID = schema.SendAccepted, wamid
		} else {
			res.Status, res.ErrorCode = schema.SendFailed, code
		}
		d := s.pacer.Outcome(pacer.Result{SendResult: res, Attempt: m.attempt})
		switch d.Action {
		case pacer.ActionDone:
			l.finish(true, now)
		case pacer.ActionRetry:
			if m.attempt >= s.cfg.PacedMaxAttempts {
				s.givenUp.Add(1)
				l.finish(false, time.Time{})
				continue
			}
			m.due = now.Add(d.After)
			l.again(m)
		case pacer.ActionDrop:
			s.dropped.Add(1)
			l.finish(false, time.Time{})
		case pacer.ActionStopNumber:
			s.givenUp.Add(int64(1 + l.halt()))
			l.finish(false, time.Time{})
		case pacer.ActionStopCampaign:
			n := 1
			for _, o := range s.lanes {
				n += o.halt()
			}
			s.givenUp.Add(int64(n))
			l.finish(false, time.Time{})
		}
	}
}

func (s *sender) callback(m message) string {
	return "campaign-" + strconv.FormatUint(uint64(s.cfg.RunID), 10) + "-" + s.name + "-" + strconv.Itoa(m.seq)
}

// sendBody is Meta's send request of a template message.
type sendBody struct {
	MessagingProduct string       `json:"messaging_product"`
	RecipientType    string       `json:"recipient_type"`
	To               string       `json:"to"`
	Type             string       `json:"type"`
	Template         sendTemplate `json:"template"`
	BizOpaque        string       `json:"biz_opaque_callback_data"`
}

type sendTemplate struct {
	Name     string            `json:"name"`
	Language map[string]string `json:"language"`
}

// send posts one message to the simulator and returns Meta's error code
// (0: accepted) and the message id.
func (s *sender) send(ctx context.Context, l *lane, m message) (int32, string) {
	body, _ := json.Marshal(sendBody{MessagingProduct: "whatsapp", RecipientType: "individual", To: m.recipient, Type: "template",
		Template: sendTemplate{Name: "campaign_promo", Language: map[string]string{"code": "en_US"}}, BizOpaque: s.callback(m)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.sim.URL()+"/v23.0/"+l.id+"/messages", bytes.NewReader(body))
	if err != nil {
		return 1, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer campaign-token")
	s.sends.Add(1)
	resp, err := s.client.Do(req)
	code, wamid := int32(2), "" // no answer: Meta's service error
	if err == nil {
		var doc struct {
			Messages []struct {
				ID string `json:"id"`
			} `json:"messages"`
			Error *struct {
				Code int32 `json:"code"`
			} `json:"error"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		switch {
		case derr != nil:
		case resp.StatusCode == http.StatusOK && len(doc.Messages) == 1:
			code, wamid = 0, doc.Messages[0].ID
		case doc.Error != nil:
			code = doc.Error.Code
		}
	}
	s.count(code, time.Now())
	if code == 0 {
		s.accepted.Add(1)
	}
	return code, wamid
}
