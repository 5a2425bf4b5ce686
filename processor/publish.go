package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/internal/jserr"
	"github.com/wahook/wahook/schema"
)

// Publishing to EVENTS is, after the server's own storing, the largest
// cost of stage 1 with EVENTS on: one message per event. eventPublisher
// does for it what jetstream's PublishMsgAsync did, with less work per
// message: each event is a core NATS publish whose reply subject is one
// slot of a window, on a subscription of the publisher's own, and the
// JetStream PubAck that comes back there frees the slot. Per event nothing
// is allocated on this side (the JSON is appended into a reused buffer;
// the message, its header map and the reply subjects are reused, since the
// connection copies them before PublishMsg returns), no timer runs, and a
// PubAck is recognized by its first bytes instead of being decoded.
//
// What is published is unchanged: each event's JSON on its per-number
// subject with Nats-Msg-Id = its event id, so the stream's duplicate window
// stores a republished event once. drain returns nil only once JetStream
// has acknowledged every event sent, so RAW is still acked only after
// EVENTS holds them.

const (
	// eventsWindow is the most events published and not yet acknowledged.
	// It slides: an ack frees a slot for the next event, so the server
	// always has events queued while the acks of earlier ones travel back.
	// 512 kept an embedded server as busy as 8,192 did, at about 5% less
	// CPU per event (BenchmarkPublishEvents): the replies then go to few
	// enough subjects for the server's subject cache (1,024 entries). Even
	// at 2 ms per ack (a replicated stream) it allows 250k events/s.
	eventsWindow = 512
	// eventsAckTimeout fails a publish when no ack at all has come for this
	// long (a lost connection loses the acks of what it carried).
	eventsAckTimeout = 10 * time.Second
)

// eventPublisher publishes events as stage 1 decodes them (send) and
// waits, once per batch, until JetStream holds them all (drain); it is not
// safe for concurrent use. After a failed publish its window is dropped
// and the next publish starts a new one on a new inbox, so that late acks
// of the failed batch cannot free the slots of the next.
type eventPublisher struct {
	nc         *nats.Conn
	size       int           // slots of a window
	ackTimeout time.Duration // eventsAckTimeout but in tests
	w          *ackWindow    // nil until the first publish and after a failure
	next       int           // the window's next slot

	msg  nats.Msg // reused for every event
	data []byte   // the JSON of the event being published

	// The subject of the last event, kept for the next of the same number
	// and kind (a body's statuses are mostly of one number).
	subjNumber, subject string
	subjKind            schema.Kind
}

func newEventPublisher(nc *nats.Conn, window int) *eventPublisher {
	p := &eventPublisher{nc: nc, size: window, ackTimeout: eventsAckTimeout}
	p.msg.Header = nats.Header{schema.HeaderMsgID: []string{""}}
	return p
}

// close drops the window; acks still in flight are dropped by the server.
func (p *eventPublisher) close() {
	if p.w != nil {
		p.w.close()
		p.w = nil
	}
}

// rowMarks are how many rows of each kind of a Rows were published.
type rowMarks struct{ statuses, inbound, management, sendResults, errors int }

// publish publishes every event of rows on its per-number subject with
// Nats-Msg-Id = its event id, and returns once all are acknowledged, or
// with the first error: a failed ack, the connection, ctx, or no ack within
// eventsAckTimeout.
func (p *eventPublisher) publish(ctx context.Context, rows *schema.Rows) error {
	var from rowMarks
	if err := p.send(ctx, rows, &from); err != nil {
		return err
	}
	return p.drain(ctx)
}

// drain returns once every event sent is acknowledged, or with the first
// error, as publish.
func (p *eventPublisher) drain(ctx context.Context) error {
	if p.w == nil {
		return nil
	}
	if err := p.w.drain(ctx); err != nil {
		p.close()
		return err
	}
	return nil
}

// send publishes the events of rows from the marks on and moves the marks
// to the end. It returns once they are sent, not acknowledged (drain
// waits for that), or with the first error; after an error the window is
// dropped, and the events sent since the last drain must be sent again.
func (p *eventPublisher) send(ctx context.Context, rows *schema.Rows, from *rowMarks) (err error) {
	if p.w == nil {
		if p.w, err = newAckWindow(p.nc, p.size, p.ackTimeout); err != nil {
			return err
		}
		p.next = 0
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	w := p.w
	send := func(number string, k schema.Kind, id string, encErr error) error {
		if encErr != nil {
			return fmt.Errorf("encode %s event %s: %w", k, id, encErr)
		}
		slot := p.next // round robin: the oldest event's
		if p.next++; p.next == len(w.reply) {
			p.next = 0
		}
		if err := w.acquire(ctx, slot); err != nil {
			return err
		}
		if number != p.subjNumber || k != p.subjKind || p.subject == "" {
			p.subjNumber, p.subjKind, p.subject = number, k, schema.EventsSubject(number, k)
		}
		p.msg.Subject = p.subject
		p.msg.Reply = w.reply[slot]
		p.msg.Data = p.data
		p.msg.Header[schema.HeaderMsgID][0] = id
		if err := p.nc.PublishMsg(&p.msg); err != nil {
			return fmt.Errorf("publish %s: %w", p.msg.Subject, err)
		}
		return nil
	}
	defer func() { p.msg.Data = nil }()
	// An event larger than the server takes (max_payload) would fail its
	// body for ever: it goes out without the fields that keep unknown JSON
	// or content as received (extra, raw, content), which ClickHouse has in
	// full, and if still too large with every string cut (cutStrings). So
	// are a number's errors (their title, message or details); a send
	// result's fields are bounded by schema.SendResult.Check.
	limit := int(p.nc.MaxPayload()) - 4096
	for ; from.statuses < len(rows.Statuses); from.statuses++ {
		r := &rows.Statuses[from.statuses]
		p.data, err = appendStatusEvent(p.data[:0], r)
		if err == nil && len(p.data) > limit {
			small := *r
			small.Extra = ""
			if p.data, err = appendStatusEvent(p.data[:0], &small); err == nil && len(p.data) > limit {
				cutStrings(&small, limit/256)
				p.data, err = appendStatusEvent(p.data[:0], &small)
			}
		}
		if err = send(r.PhoneNumberID, schema.KindStatus, r.EventID, err); err != nil {
			return err
		}
	}
	for ; from.inbound < len(rows.Inbound); from.inbound++ {
		r := &rows.Inbound[from.inbound]
		p.data, err = appendInboundEvent(p.data[:0], r)
		if err == nil && len(p.data) > limit {
			small := *r
			small.Extra, small.Content = "", ""
			if p.data, err = appendInboundEvent(p.data[:0], &small); err == nil && len(p.data) > limit {
				cutStrings(&small, limit/256)
				p.data, err = appendInboundEvent(p.data[:0], &small)
			}
		}
		if err = send(r.PhoneNumberID, schema.KindInbound, r.EventID, err); err != nil {
			return err
		}
	}
	for ; from.management < len(rows.Management); from.management++ {
		r := &rows.Management[from.management]
		p.data, err = appendManagementEvent(p.data[:0], r)
		if err == nil && len(p.data) > limit {
			small := *r
			small.Raw = ""
			if r.Kind == schema.KindAccount {
				small.Raw = accountEssentials(r.Raw, "")
			}
			if p.data, err = appendManagementEvent(p.data[:0], &small); err == nil && len(p.data) > limit {
				cutStrings(&small, limit/256)
				p.data, err = appendManagementEvent(p.data[:0], &small)
			}
		}
		if err = send(r.PhoneNumberID, r.Kind, schema.ManagementMsgID(r), err); err != nil {
			return err
		}
	}
	// Errors of a number that belong to no status, message or send result
	// (value.errors[], history[].errors[]): stage 2 applies them like a
	// failed status's, so that a value-level 131048 stops the number too.
	// Those of a past message a history sync carries (message id set) are
	// not traffic of now, and would stop a number for a message of months
	// ago: they are in ClickHouse only, as echoes' are.
	for ; from.errors < len(rows.Errors); from.errors++ {
		r := &rows.Errors[from.errors]
		if !publishedError(r) {
			continue
		}
		var b []byte
		b, err = json.Marshal(Event{Kind: schema.KindError, V: 1, Row: r})
		if err == nil && len(b) > limit {
			small := *r
			cutStrings(&small, limit/256)
			b, err = json.Marshal(Event{Kind: schema.KindError, V: 1, Row: &small})
		}
		p.data = append(p.data[:0], b...)
		if err = send(r.PhoneNumberID, schema.KindError, schema.ErrorEventID(r), err); err != nil {
			return err
		}
	}
	for ; from.sendResults < len(rows.SendResults); from.sendResults++ {
		r := &rows.SendResults[from.sendResults]
		// Few: encoding/json is fast enough.
		var b []byte
		b, err = json.Marshal(Event{Kind: schema.KindSendResult, V: 1, Row: r})
		p.data = append(p.data[:0], b...)
		if err = send(r.PhoneNumberID, schema.KindSendResult, r.EventID, err); err != nil {
			return err
		}
	}
	if cap(p.data) > 1<<20 {
		p.data = nil // do not keep one huge event's buffer
	}
	return nil
}

// ackWindow is the slots of one publisher's window and the subscription
// their acks come back on. Its handler runs on the subscription's
// goroutine; mu guards the rest.
type ackWindow struct {
	sub     *nats.Subscription
	prefix  string   // <inbox>.
	reply   []string // reply subject of each slot: <inbox>.<slot>
	timeout time.Duration

	mu       sync.Mutex
	busy     []bool // slot awaits its ack
	inflight int
	acks     uint64 // acks taken, for the timeout's progress check
	err      error  // the first failed ack, or the window closed
	// The one waiter (publish) sleeps on wake until busy[waitSlot] is
	// false (waitSlot -1: any) and at most lowWater slots are busy.
	waiting            bool
	waitSlot, lowWater int
	wake               chan struct{} // holds one signal
}

var errWindowClosed = errors.New("publish " + schema.StreamEvents + ": publisher closed")

// errCodeDuplicateInProcess is JetStream's JSStreamDuplicateMessageConflict
// (409): a message with the same Nats-Msg-Id is being stored right now.
const errCodeDuplicateInProcess = 10158

// errEventsDown marks a publish of EVENTS that failed because the stream
// did not answer (no leader during an election, no stream, no ack): an
// outage, never the fault of the body whose events they were.
var errEventsDown = errors.New("the events stream does not answer")

func newAckWindow(nc *nats.Conn, size int, timeout time.Duration) (*ackWindow, error) {
	w := &ackWindow{
		timeout: timeout,
		prefix:  nc.NewInbox() + ".",
		reply:   make([]string, size),
		busy:    make([]bool, size),
		wake:    make(chan struct{}, 1),
	}
	for i := range w.reply {
		w.reply[i] = w.prefix + strconv.Itoa(i)
	}
	sub, err := nc.Subscribe(w.prefix+"*", w.onAck)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the acks of %s: %w", schema.StreamEvents, err)
	}
	// At most one ack per slot is pending; the default limits would do,
	// but say so.
	if err := sub.SetPendingLimits(2*size, 64<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to the acks of %s: %w", schema.StreamEvents, err)
	}
	w.sub = sub
	return w, nil
}

func (w *ackWindow) close() {
	_ = w.sub.Unsubscribe()
	w.mu.Lock()
	if w.err == nil {
		w.err = errWindowClosed
	}
	w.signalLocked()
	w.mu.Unlock()
}

// okAck is how every successful PubAck of EVENTS begins,
// {"stream":"WAHOOK_EVENTS","seq":N,...}; an error reply begins with
// {"error": instead (nats-server's JSPubAckResponse).
var okAck = []byte(`{"stream":"` + schema.StreamEvents + `",`)

// onAck takes the reply to the event in one slot.
func (w *ackWindow) onAck(m *nats.Msg) {
	slot, err := strconv.Atoi(m.Subject[len(w.prefix):])
	if err != nil || slot < 0 || slot >= len(w.busy) {
		return
	}
	var ackErr error
	if !bytes.HasPrefix(m.Data, okAck) {
		ackErr = replyError(m)
	}
	w.mu.Lock()
	if w.busy[slot] {
		w.busy[slot] = false
		w.inflight--
		w.acks++
		if ackErr != nil && w.err == nil {
			w.err = ackErr
		}
		if w.waiting && (w.err != nil || (w.waitSlot < 0 || !w.busy[w.waitSlot]) && w.inflight <= w.lowWater) {
			w.signalLocked()
		}
	}
	w.mu.Unlock()
}

func (w *ackWindow) signalLocked() {
	w.waiting = false
	select {
	case w.wake <- struct{}{}:
	default: // a signal is pending already
	}
}

// replyError says what a reply other than a PubAck of EVENTS means.
func replyError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		switch st := m.Header.Get("Status"); st {
		case "503":
			return fmt.Errorf("publish %s: no stream takes the subject (503 no responders): %w", schema.StreamEvents, errEventsDown)
		case "":
		default:
			return fmt.Errorf("publish %s: status %s %s", schema.StreamEvents, st, m.Header.Get("Description"))
		}
	}
	var r struct {
		Stream string `json:"stream"`
		Error  *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	switch err := json.Unmarshal(m.Data, &r); {
	case err != nil:
		return fmt.Errorf("publish %s: the reply is no PubAck: %.200q", schema.StreamEvents, m.Data)
	case r.Error != nil && r.Error.Code == 503:
		// JetStream is not available now (no quorum, a leader moving).
		return fmt.Errorf("publish %s: %s (code %d, err_code %d): %w", schema.StreamEvents, r.Error.Description, r.Error.Code, r.Error.ErrCode, errEventsDown)
	case r.Error != nil && jserr.StoreFull(r.Error.ErrCode):
		// No room for the event (the account's JetStream limits, the
		// server's storage or memory spent): the stores are full, not
		// the event wrong. The bodies wait until room is made.
		return fmt.Errorf("publish %s: %s (code %d, err_code %d): the store is full: %w", schema.StreamEvents, r.Error.Description, r.Error.Code, r.Error.ErrCode, errEventsDown)
	case r.Error != nil && r.Error.ErrCode == errCodeDuplicateInProcess:
		// The same event is being stored by an earlier publish (of a batch
		// tried again while the first try's publish was still in a
		// clustered stream's proposal): its outcome is the stream's, and
		// the next try finds it stored (a duplicate) or stores it.
		return fmt.Errorf("publish %s: %s (code %d, err_code %d): %w", schema.StreamEvents, r.Error.Description, r.Error.Code, r.Error.ErrCode, errEventsDown)
	case r.Error != nil:
		return fmt.Errorf("publish %s: %s (code %d, err_code %d)", schema.StreamEvents, r.Error.Description, r.Error.Code, r.Error.ErrCode)
	default:
		return fmt.Errorf("publish %s: acknowledged by stream %q", schema.StreamEvents, r.Stream)
	}
}

// acquire takes slot once its previous event is acknowledged. When it must
// wait, it waits until a quarter of the window is free as well, so that
// it sleeps once per many events rather than once per ack.
func (w *ackWindow) acquire(ctx context.Context, slot int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.busy[slot] && w.err == nil {
		if err := w.waitLocked(ctx, slot, len(w.busy)-len(w.busy)/4); err != nil {
			return err
		}
	}
	if w.err != nil {
		return w.err
	}
	w.busy[slot] = true
	w.inflight++
	return nil
}

// drain waits until every event sent is acknowledged.
func (w *ackWindow) drain(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight > 0 && w.err == nil {
		if err := w.waitLocked(ctx, -1, 0); err != nil {
			return err
		}
	}
	return w.err
}

// waitLocked waits, with mu held on entry and on return, until busy[slot]
// is false (slot -1: any) and at most lowWater slots are busy, or an ack
// failed; it fails on ctx, or when no ack at all has come for
// eventsAckTimeout. It checks again after every wake, so a signal left
// over from an earlier wait costs one more turn of the loop.
func (w *ackWindow) waitLocked(ctx context.Context, slot, lowWater int) error {
	var t *time.Timer
	var acksAtTimer uint64
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for w.err == nil && ((slot >= 0 && w.busy[slot]) || w.inflight > lowWater) {
		if t == nil {
			t, acksAtTimer = time.NewTimer(w.timeout), w.acks
		}
		w.waiting, w.waitSlot, w.lowWater = true, slot, lowWater
		w.mu.Unlock()
		var err error
		fired := false
		select {
		case <-w.wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C:
			fired = true
		}
		w.mu.Lock()
		w.waiting = false
		if err != nil {
			return err
		}
		if fired {
			if w.acks == acksAtTimer {
				return fmt.Errorf("publish %s: no ack within %s: %w", schema.StreamEvents, w.timeout, errEventsDown)
			}
			t.Reset(w.timeout)
			acksAtTimer = w.acks
		}
	}
	return nil
}

// cutStrings cuts every string field of the struct v points to (and of
// the structs it holds) to at most max bytes, on a rune boundary. An event
// that is still too large for EVENTS without its raw fields goes out so:
// the strings that made it large come from the body (a 1 MB message id,
// say), and JSON escaping can make one six times its size. There are at
// most a few dozen fields, each escaped to at most six times max; a slice
// (error codes) keeps its first max/16 items.
func cutStrings(v any, max int) {
	cutValue(reflect.ValueOf(v).Elem(), max)
}

func cutValue(v reflect.Value, max int) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); len(s) > max {
			n := max
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			v.SetString(s[:n])
		}
	case reflect.Slice:
		if v.Len() > max/16 {
			v.Set(v.Slice(0, max/16))
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				cutValue(f, max)
			}
		}
	}
}

// publishedError reports whether an error row travels on EVENTS on its
// own: a value-level error, or a history chunk's own (no message id).
func publishedError(r *schema.ErrorRow) bool {
	return r.Origin == schema.OriginValue || (r.Origin == schema.OriginHistory && r.MessageID == "")
}
