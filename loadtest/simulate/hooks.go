package simulate

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wahook/wahook/schema"
)

type itemKind uint8

const (
	kindStatus itemKind = iota
	kindInbound
	kindNumberEvent
)

// item is one webhook item due at due.
type item struct {
	due      time.Time
	kind     itemKind
	number   *num
	wamid    string
	to       string
	callback string
	status   string
	code     int32
	at       int64 // Meta's timestamp
	inID     string
	event    string
}

type itemHeap []item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// hooks schedules the webhooks and posts them, signed, in POSTs of up to
// ItemsPerPost items of one number and kind.
type hooks struct {
	s      *Simulator
	client *http.Client

	mu       sync.Mutex
	pending  itemHeap
	inflight int
	posts    chan []item
	done     chan struct{}
	wg       sync.WaitGroup

	posted, items, retries, givenUp, notSent atomic.Int64
	badMu                                    sync.Mutex
	bad                                      map[int]int64
}

func newHooks(s *Simulator) *hooks {
	return &hooks{s: s, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: s.cfg.Connections}},
		posts: make(chan []item, 4096), done: make(chan struct{}), bad: map[int]int64{}}
}

func (h *hooks) start() {
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.dispatch() }()
	for range h.s.cfg.Connections {
		h.wg.Add(1)
		go func() { defer h.wg.Done(); h.post() }()
	}
}

func (h *hooks) stop() {
	close(h.done)
	h.wg.Wait()
	h.client.CloseIdleConnections()
	h.mu.Lock()
	h.notSent.Add(int64(len(h.pending)))
	h.pending = nil
	h.mu.Unlock()
}

func (h *hooks) add(it item) {
	h.mu.Lock()
	heap.Push(&h.pending, it)
	h.mu.Unlock()
}

func (h *hooks) fill(st *Stats) {
	h.mu.Lock()
	st.WebhookPending = len(h.pending) + h.inflight
	h.mu.Unlock()
	st.WebhookPosts, st.WebhookItems, st.WebhookRetries = h.posted.Load(), h.items.Load(), h.retries.Load()
	st.WebhookGivenUp, st.WebhookNotSent = h.givenUp.Load(), h.notSent.Load()
	h.badMu.Lock()
	if len(h.bad) > 0 {
		st.WebhookBadCodes = maps(h.bad)
	}
	h.badMu.Unlock()
}

// drain waits until nothing due before until is left to post.
func (h *hooks) drain(ctx context.Context, until time.Time) error {
	for {
		h.mu.Lock()
		left := h.inflight > 0 || (len(h.pending) > 0 && !h.pending[0].due.After(until))
		h.mu.Unlock()
		if !left {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return errClosed
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dispatch takes the due items every linger (at most 20 ms), counts the
// inbound ones against their number's tier, and groups them into POSTs.
func (h *hooks) dispatch() {
	tick := min(max(h.s.cfg.Linger, time.Millisecond), 20*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	defer close(h.posts)
	type group struct {
		n    *num
		kind itemKind
	}
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		now := time.Now()
		var due []item
		h.mu.Lock()
		for len(h.pending) > 0 && !h.pending[0].due.After(now) {
			due = append(due, heap.Pop(&h.pending).(item))
		}
		h.mu.Unlock()
		if len(due) == 0 {
			continue
		}
		groups := map[group][]item{}
		var order []group
		for _, it := range due {
			if it.kind == kindInbound {
				it.number.inbound(h.s, it.due)
			}
			g := group{it.number, it.kind}
			if it.kind == kindNumberEvent {
				h.send([]item{it})
				continue
			}
			if _, ok := groups[g]; !ok {
				order = append(order, g)
			}
			groups[g] = append(groups[g], it)
			if len(groups[g]) >= h.s.cfg.ItemsPerPost {
				h.send(groups[g])
				groups[g] = nil
			}
		}
		for _, g := range order {
			if len(groups[g]) > 0 {
				h.send(groups[g])
			}
		}
	}
}

func (h *hooks) send(items []item) {
	if h.s.cfg.WebhookURL == "" {
		return
	}
	h.mu.Lock()
	h.inflight++
	h.mu.Unlock()
	select {
	case h.posts <- items:
	case <-h.done:
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
	}
}

// post posts the bodies, each again after a non-200 (1 s, doubling) up to
// Attempts times, as Meta retries.
func (h *hooks) post() {
	for items := range h.posts {
		body := h.s.body(items)
		sig := schema.Sign(h.s.cfg.AppSecret, body)
		backoff := time.Second
		for attempt := 1; ; attempt++ {
			code := h.postOnce(body, sig)
			if code == http.StatusOK {
				h.posted.Add(1)
				h.items.Add(int64(len(items)))
				break
			}
			h.badMu.Lock()
			h.bad[code]++
			h.badMu.Unlock()
			if attempt >= h.s.cfg.Attempts {
				h.givenUp.Add(1)
				break
			}
			h.retries.Add(1)
			select {
			case <-h.done:
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
	}
}

func (h *hooks) postOnce(body []byte, sig string) int {
	req, err := http.NewRequest(http.MethodPost, h.s.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(schema.SignatureHeader, sig)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The webhook JSON, as Meta nests it.
type (
	whBody struct {
		Object string    `json:"object"`
		Entry  []whEntry `json:"entry"`
	}
	whEntry struct {
		ID      string     `json:"id"`
		Time    int64      `json:"time,omitempty"`
		Changes []whChange `json:"changes"`
	}
	whChange struct {
		Value any    `json:"value"`
		Field string `json:"field"`
	}
	whMetadata struct {
		Display string `json:"display_phone_number"`
		ID      string `json:"phone_number_id"`
	}
	whMessages struct {
		MessagingProduct string      `json:"messaging_product"`
		Metadata         whMetadata  `json:"metadata"`
		Contacts         []whContact `json:"contacts,omitempty"`
		Messages         []whInbound `json:"messages,omitempty"`
		Statuses         []whStatus  `json:"statuses,omitempty"`
	}
	whPricing struct {
		Billable     bool   `json:"billable"`
		PricingModel string `json:"pricing_model"`
		Type         string `json:"type"`
		Category     string `json:"category"`
	}
	whErrorData struct {
		Details string `json:"details"`
	}
	whError struct {
		Code      int32       `json:"code"`
		Title     string      `json:"title"`
		Message   string      `json:"message"`
		ErrorData whErrorData `json:"error_data"`
		Href      string      `json:"href"`
	}
	whStatus struct {
		ID          string     `json:"id"`
		Status      string     `json:"status"`
		Timestamp   string     `json:"timestamp"`
		RecipientID string     `json:"recipient_id"`
		Pricing     *whPricing `json:"pricing,omitempty"`
		Biz         string     `json:"biz_opaque_callback_data,omitempty"`
		Errors      []whError  `json:"errors,omitempty"`
	}
	whProfile struct {
		Name string `json:"name"`
	}
	whContact struct {
		Profile whProfile `json:"profile"`
		WaID    string    `json:"wa_id"`
	}
	whContext struct {
		From string `json:"from"`
		ID   string `json:"id"`
	}
	whText struct {
		Body string `json:"body"`
	}
	whInbound struct {
		Context   *whContext `json:"context,omitempty"`
		From      string     `json:"from"`
		ID        string     `json:"id"`
		Timestamp string     `json:"timestamp"`
		Type      string     `json:"type"`
		Text      whText     `json:"text"`
	}
	whQuality struct {
		Display      string `json:"display_phone_number"`
		Event        string `json:"event"`
		CurrentLimit string `json:"current_limit"`
		MaxDaily     string `json:"max_daily_conversations_per_business,omitempty"`
	}
)

// body is the webhook JSON of items of one number and kind.
func (s *Simulator) body(items []item) []byte {
	first := items[0]
	n := first.number
	entry := whEntry{ID: n.WABAID}
	switch first.kind {
	case kindNumberEvent:
		entry.Time = first.at
		q := whQuality{Display: n.Display, Event: first.event, CurrentLimit: "TIER_10K"}
		if first.event == "THROUGHPUT_UPGRADE" {
			q.CurrentLimit, q.MaxDaily = "TIER_UNLIMITED", "TIER_UNLIMITED"
		}
		entry.Changes = []whChange{{Value: q, Field: "phone_number_quality_update"}}
	default:
		v := whMessages{MessagingProduct: "whatsapp", Metadata: whMetadata{Display: n.Display, ID: n.PhoneNumberID}}
		for _, it := range items {
			ts := strconv.FormatInt(it.at, 10)
			if it.kind == kindInbound {
				v.Contacts = append(v.Contacts, whContact{Profile: whProfile{Name: "Simulated User"}, WaID: it.to})
				v.Messages = append(v.Messages, whInbound{Context: &whContext{From: n.Display, ID: it.wamid}, From: it.to, ID: it.inID,
					Timestamp: ts, Type: "text", Text: whText{Body: "Simulated reply"}})
				continue
			}
			st := whStatus{ID: it.wamid, Status: it.status, Timestamp: ts, RecipientID: it.to, Biz: it.callback}
			switch it.status {
			case "sent", "delivered":
				st.Pricing = &whPricing{Billable: true, PricingModel: "PMP", Type: "regular", Category: "marketing"}
			case "failed":
				e, _ := schema.LookupError(it.code)
				st.Errors = []whError{{Code: it.code, Title: e.Title, Message: e.Title, ErrorData: whErrorData{Details: e.Title},
					Href: "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}}
			}
			v.Statuses = append(v.Statuses, st)
		}
		entry.Changes = []whChange{{Value: v, Field: "messages"}}
	}
	b, _ := json.Marshal(whBody{Object: "whatsapp_business_account", Entry: []whEntry{entry}})
	return b
}
