package ingest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/schema"
)

// The fast-ingest batch protocol of nats-server 2.14+ (server/stream.go,
// FastBatch* and processJetStreamFastBatchMsg; server/jetstream_batching.go).
// Each message of a batch carries the reply subject
//
//	<inbox>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI
//
// and the stream answers on it: a flow ack {"type":"ack","seq":N} once the
// messages 1..N of the batch are stored (every <flow> messages; gap mode
// "fail" stops the batch at the first missing message), gap and error
// notices, and a PubAck with "batch" and "count" when the batch ends, which
// covers the messages 1..count. Nats-Msg-Id de-duplication applies to batch
// messages as to single ones (checkMsgHeadersPreClusteredProposal): a
// message the stream already holds within its duplicate window is skipped
// and covered like a stored one.
const (
	fastBatchSuffix   = ".$FI"
	fastBatchGapFail  = "fail"
	fastBatchOpStart  = "0"
	fastBatchOpAppend = "1"
	fastBatchOpCommit = "2" // commit with this message
	fastBatchOpEOB    = "3" // commit without a message of its own
	// errCodeBatchUnknown is JSBatchPublishUnknownBatchIDErr: the stream has
	// no batch of that id (it ended, timed out, or the server restarted), so
	// the message was not stored.
	errCodeBatchUnknown = 10208
)

// BatchOptions tune a BatchPublisher.
type BatchOptions struct {
	// Flow is the most messages one flow ack covers: a stored message waits
	// for at most Flow-1 later ones, or for the batch to end. A batch asks
	// for a quarter of the messages in flight when it starts, up to Flow.
	Flow int
	// Linger is how long the current batch waits for another message after
	// one; then it ends, and its PubAck covers the messages no flow ack did.
	// Under steady traffic the publisher looks less often (see MaxDelay).
	Linger time.Duration
	// MaxDelay ends the current batch once its oldest message not yet
	// covered by an ack was sent this long ago, even while messages keep
	// coming: at moderate rates a flow group fills slowly.
	MaxDelay time.Duration
	// MaxBatch is the most messages of one batch.
	MaxBatch int
	// MaxResends is how often a message the stream refused for its batch
	// (not for itself) is published again in a new batch before it fails.
	MaxResends int
}

// DefaultBatchOptions returns the options wahook runs with.
func DefaultBatchOptions() BatchOptions {
	return BatchOptions{Flow: 16, Linger: 200 * time.Microsecond, MaxDelay: time.Millisecond, MaxBatch: 1 << 16, MaxResends: 3}
}

// Validate reports the first problem of o.
func (o BatchOptions) Validate() error {
	switch {
	case o.Flow < 1 || o.Flow > 500:
		return fmt.Errorf("batch flow %d: use 1 to 500 (the server caps it at 500)", o.Flow)
	case o.Linger <= 0 || o.Linger > 100*time.Millisecond:
		return fmt.Errorf("batch linger %s: use more than 0 and at most 100ms", o.Linger)
	case o.MaxDelay < o.Linger || o.MaxDelay > time.Second:
		return fmt.Errorf("batch max delay %s: use at least the linger %s and at most 1s", o.MaxDelay, o.Linger)
	case o.MaxBatch < o.Flow:
		return fmt.Errorf("max batch %d must not be less than the flow %d", o.MaxBatch, o.Flow)
	case o.MaxResends < 0:
		return errors.New("max resends must not be negative")
	}
	return nil
}

// BatchPublisher publishes to the RAW stream with JetStream's fast-ingest
// batches (the stream needs allow_batched): concurrent requests share one
// open batch, the stream answers with a flow ack every few messages instead
// of a PubAck per message, and each request is answered once an ack covering
// its message has come back. A batch ends after Linger without a new
// message, or MaxDelay after its oldest uncovered message, and its PubAck
// covers the rest. A message alone in flight goes as a batch of one that
// commits itself, answered like a single publish.
//
// The stream's duplicate window applies to batch messages: a retried body
// is stored once. Publish reports a duplicate when it knows one: for a
// message alone in its batch, or a batch of only duplicates. A duplicate
// among stored messages of a busy batch is reported as stored.
//
// A message the stream refused for its batch (the batch ended after a gap or
// an error, or the server lost it in a restart) is published again in a new
// batch, which the duplicate window makes safe as long as it is at least the
// ack timeout (StreamConfig.CheckAckTimeout); a message refused for itself
// fails. Publish never reports success for a message no ack covers.
type BatchPublisher struct {
	nc         *nats.Conn
	opts       BatchOptions
	ackTimeout time.Duration
	window     chan struct{} // a slot per message awaiting its ack
	adm        admission
	inbox      string // <inbox>.<batch id>... is a batch's reply prefix
	idPrefix   string // unique per publisher; the batch counter follows
	sub        *nats.Subscription
	status     chan nats.Status
	subjects   sync.Map // app -> subject
	pool       sync.Pool
	inflight   atomic.Int64
	stop       chan struct{}
	stopped    sync.WaitGroup
	kick       chan struct{}
	expireWake chan struct{} // a publish began with none in flight (expireLoop)

	mu      sync.Mutex
	cur     *batch            // the batch new messages join; nil: start one
	batches map[string]*batch // batches with messages not yet resolved
	nextID  uint64
	sends   uint64 // messages published, for the linger check
	closed  bool
}

// batch is one fast-ingest batch.
type batch struct {
	id       string
	prefix   string // <inbox>.<id>.<flow>.fail.
	subject  string // of the last message: the commit goes there
	sent     uint64 // the last batch sequence published
	acked    uint64 // the messages 1..acked are stored
	first    uint64 // the sequence of waiting[0]
	waiting  []*pending
	lastSend time.Time
	ending   bool // no more messages: committed, or ended by the server
	single   bool // a batch of one message that commits itself
}

// pending is a message awaiting the ack that covers it.
type pending struct {
	msg      nats.Msg
	vals     [3]string
	b        *batch
	seq      uint64
	deadline time.Time
	resends  int
	sentAt   time.Time
	refused  error // the stream's own error for this message, if any

	resolved bool // under BatchPublisher.mu
	dup      bool
	err      error
	done     chan struct{}
}

// NewBatchPublisher returns a fast-batch publisher on nc with at most
// maxInflight messages awaiting an ack, each given up after ackTimeout. Close
// stops it.
func NewBatchPublisher(nc *nats.Conn, maxInflight int, ackTimeout time.Duration, opts BatchOptions) (*BatchPublisher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if maxInflight < 1 {
		return nil, errors.New("max in-flight publishes must be at least 1")
	}
	p := &BatchPublisher{
		nc:         nc,
		opts:       opts,
		ackTimeout: ackTimeout,
		window:     make(chan struct{}, maxInflight),
		inbox:      nc.NewInbox(),
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		expireWake: make(chan struct{}, 1),
		batches:    map[string]*batch{},
	}
	// The inbox ends in a unique token (a NUID); batch ids, which the stream
	// keys its batches by, are that token and a counter.
	p.idPrefix = p.inbox[strings.LastIndexByte(p.inbox, '.')+1:]
	p.pool.New = func() any {
		pd := &pending{done: make(chan struct{}, 1)}
		pd.msg.Header = nats.Header{
			schema.HeaderMsgID:      pd.vals[0:1:1],
			schema.HeaderReceivedAt: pd.vals[1:2:2],
			schema.HeaderApp:        pd.vals[2:3:3],
		}
		return pd
	}
	sub, err := nc.Subscribe(p.inbox+".>", p.handleReply)
	if err != nil {
		return nil, fmt.Errorf("subscribe to batch acks: %w", err)
	}
	// Acks must never be dropped as a slow consumer's: a lost flow ack
	// only delays answers until the batch's PubAck, but keep the limits
	// generous all the same.
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	p.status = nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	p.stopped.Add(3)
	go p.lingerLoop()
	go p.statusLoop()
	go p.expireLoop()
	return p, nil
}

// Publish implements Publisher.
func (p *BatchPublisher) Publish(app, id string, body []byte, receivedAt, deadline time.Time) (bool, error) {
	wait := time.Until(deadline)
	if wait <= 0 {
		return false, ErrAckTimeout
	}
	select {
	case p.window <- struct{}{}:
	default:
		// A full window makes the publish wait for a slot, at most the
		// queue wait (admission), else until the request's deadline.
		slotWait, shed := p.adm.slotWait(wait)
		timer := time.NewTimer(slotWait)
		select {
		case p.window <- struct{}{}:
			timer.Stop()
		case <-timer.C:
			if shed {
				return false, fmt.Errorf("publish %s: in-flight window full for %s: %w", p.subject(app), slotWait, ErrOverloaded)
			}
			return false, fmt.Errorf("publish %s: in-flight window full: %w", p.subject(app), ErrAckTimeout)
		}
	}
	defer func() { <-p.window }()
	if p.adm.late(deadline) {
		return false, fmt.Errorf("publish %s: its ack would come after the deadline: %w", p.subject(app), ErrOverloaded)
	}
	sent := time.Now()
	if p.inflight.Add(1) == 1 {
		select {
		case p.expireWake <- struct{}{}:
		default: // a token is there already
		}
	}
	defer p.inflight.Add(-1)

	pd := p.pool.Get().(*pending)
	pd.msg.Subject = p.subject(app)
	pd.msg.Data = body
	pd.vals[0] = id
	pd.vals[1] = schema.FormatReceivedAt(receivedAt)
	pd.vals[2] = app
	pd.deadline = deadline

	p.mu.Lock()
	err := p.sendLocked(pd, time.Now())
	p.mu.Unlock()
	if err != nil {
		p.put(pd)
		return false, fmt.Errorf("publish %s: %w", p.subject(app), err)
	}
	// An ack, a refusal or the deadline (expireLoop) resolves pd, always
	// under p.mu, so that nothing publishes pd's message any more once its
	// waiter has the answer: body is not held after Publish returns.
	<-pd.done
	dup, err := pd.dup, pd.err
	if errors.Is(err, ErrAckTimeout) || errors.Is(err, ErrClosed) {
		// A batch may still hold pd: it is not reused.
		return false, err
	}
	p.put(pd)
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", p.subject(app), err)
	}
	p.adm.observe(time.Since(sent))
	return dup, nil
}

// LendsBody implements BodyLender: Publish returns only once nothing will
// publish the message again (see Publish).
func (p *BatchPublisher) LendsBody() {}

func (p *BatchPublisher) subject(app string) string {
	if s, ok := p.subjects.Load(app); ok {
		return s.(string)
	}
	s := schema.RawSubject(app)
	p.subjects.Store(app, s)
	return s
}

// put returns a pending whose waiter has its result to the pool.
func (p *BatchPublisher) put(pd *pending) {
	pd.msg.Data, pd.msg.Reply, pd.b, pd.refused, pd.err = nil, "", nil, nil, nil
	pd.dup, pd.resends, pd.seq, pd.resolved = false, 0, 0, false
	p.pool.Put(pd)
}

// sendLocked publishes pd as the next message of the current batch,
// starting a batch when there is none.
func (p *BatchPublisher) sendLocked(pd *pending, now time.Time) error {
	if p.closed {
		return ErrClosed
	}
	b := p.cur
	// The server forgets a batch after 10 s without messages; one idle
	// that long is ended and a new one started.
	if b != nil && (b.ending || b.sent >= uint64(p.opts.MaxBatch) || now.Sub(b.lastSend) > 5*time.Second) {
		p.endLocked(b)
		b = nil
	}
	if b == nil {
		p.nextID++
		id := p.idPrefix + strconv.FormatUint(p.nextID, 36)
		// A message waits for the Flow-1 after it, so a batch asks for
		// flow acks as often as the requests in flight fill a group
		// several times over: at moderate rates a message does not wait
		// long for a group to fill, at saturation one ack covers many.
		// A message alone in flight goes as a batch of one that commits
		// itself: its PubAck comes at once, and says whether the stream
		// held the body already. Its flow (the server's most) asks for no
		// flow ack besides.
		inflight := int(p.inflight.Load())
		single := inflight <= 1
		flow := min(max(inflight/4, 1), p.opts.Flow)
		if single {
			flow = 500
		}
		b = &batch{id: id, prefix: p.inbox + "." + id + "." + strconv.Itoa(flow) + "." + fastBatchGapFail + ".", first: 1, single: single}
		p.batches[id] = b
		if !single {
			p.cur = b
		}
	}
	seq := b.sent + 1
	op := fastBatchOpAppend
	switch {
	case b.single:
		op = fastBatchOpCommit
		b.ending = true
	case seq == 1:
		op = fastBatchOpStart
	}
	pd.msg.Reply = b.prefix + strconv.FormatUint(seq, 10) + "." + op + fastBatchSuffix
	if err := p.nc.PublishMsg(&pd.msg); err != nil {
		// Not sent. The connection may have lost messages sent before
		// this one, so the batch takes no more.
		if b.sent == 0 {
			delete(p.batches, b.id)
			if p.cur == b {
				p.cur = nil
			}
		} else {
			p.endLocked(b)
		}
		return err
	}
	b.sent = seq
	b.subject = pd.msg.Subject
	b.lastSend = now
	b.waiting = append(b.waiting, pd)
	pd.b, pd.seq, pd.sentAt = b, seq, now
	p.sends++
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return nil
}

// endLocked ends batch b: no more messages join it, and a commit asks the
// stream for the PubAck that covers what it stored.
func (p *BatchPublisher) endLocked(b *batch) {
	if p.cur == b {
		p.cur = nil
	}
	if b.ending {
		return
	}
	b.ending = true
	if b.allNil() {
		delete(p.batches, b.id) // nothing waits; the commit only frees the server's state
	}
	if b.sent > 0 {
		p.commitLocked(b)
	}
}

// commitLocked asks the stream to end b. The commit carries no message of
// its own; its subject only routes it to the stream. If it cannot be sent,
// it is sent again when the connection is back, or the waiters time out.
func (p *BatchPublisher) commitLocked(b *batch) {
	eob := &nats.Msg{Subject: b.subject, Reply: b.prefix + strconv.FormatUint(b.sent+1, 10) + "." + fastBatchOpEOB + fastBatchSuffix}
	_ = p.nc.PublishMsg(eob)
}
