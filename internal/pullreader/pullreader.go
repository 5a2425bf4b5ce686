// Package pullreader reads a JetStream pull consumer one message at a
// time, as nats.go's Messages iterator does, but on top of its Consume.
//
// The iterator has two failings that stage 1 and stage 2 meet:
//   - it buffers messages in a channel as long as one pull, which the
//     server's status messages share: when the reader is busy and the
//     channel fills, the client drops what comes next as a slow consumer's.
//     A dropped message comes back only after AckWait, and the iterator
//     still counts it as on its way, so it asks for one fewer each time,
//     until it asks for none;
//   - it watches for the server's heartbeats only within one Next, and
//     the stages wait in Nexts shorter than that watch, so a pull request
//     lost on its way is never noticed: the reader waits for ever (while
//     another reader's request waits, nothing on the server shows it).
//
// Consume hands each message to a callback, which here queues it for
// Next, bounded by a count and by bytes; while the queue is full the
// callback waits, and the client asks for no more. Its watch of the
// heartbeats runs for as long as it reads: a lost request is made again
// after two are missed.
package pullreader

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/wahook/wahook/internal/throttle"
)

// Heartbeat is how often the server is asked to show a waiting pull
// request is alive; a reader that misses two pulls again. Besides a pull
// request lost on its way, that is how nats.go (v1.56.0) recovers a pull
// it skipped: its check for the next pull does nothing while the request
// before is still being sent (checkPending and fetchInProgress, pull.go),
// so a batch delivered and read in that moment leaves no request waiting,
// no heartbeat coming, and the reader idle with a backlog until it misses
// two. At 5 s that was a 10 s stall (one read of TestBytesBound, under
// -race on a loaded machine, with pulls of 4 messages; stage 1's pulls of
// up to 5,000 make it far rarer). 2 s makes it 4 s, and a reader starved
// of the CPU for 4 s, not 10, makes one pull more than needed.
const Heartbeat = 2 * time.Second

// Reader is a consumer read with Consume. Next and Stop may be called
// from different goroutines.
type Reader struct {
	cc     jetstream.ConsumeContext
	closed <-chan struct{}
	msgs   chan jetstream.Msg
	// held bounds the bytes of the messages queued for Next.
	held     *semaphore.Weighted
	maxBytes int64
	stop     chan struct{}
	stopCtx  context.Context
	cancel   context.CancelFunc
	once     sync.Once
	// gone is closed when a pull reached no consumer.
	gone     chan struct{}
	goneOnce sync.Once
}

// Open starts reading cons with opts (a pull's size, say) and Heartbeat.
// Up to buffer messages, of maxBytes at most together, wait for Next:
// with buffer and maxBytes those of a pull, the client's goroutine seldom
// waits for the reader's. While they wait, the client asks for no more,
// but what it asked for still comes: the rest of one pull and a whole
// other at most, held in its subscription (whose own bound is 64 MiB; the
// client drops what passes it). onErr, when set, is told of what the client reports without
// stopping: a missed heartbeat (jetstream.ErrNoHeartbeat, after which it
// pulls again), a status from the server. It is called on the client's
// goroutines.
func Open(cons jetstream.Consumer, buffer int, maxBytes int64, onErr func(error), opts ...jetstream.PullConsumeOpt) (*Reader, error) {
	r := &Reader{
		msgs: make(chan jetstream.Msg, buffer), held: semaphore.NewWeighted(maxBytes), maxBytes: maxBytes,
		stop: make(chan struct{}), gone: make(chan struct{}),
	}
	r.stopCtx, r.cancel = context.WithCancel(context.Background())
	opts = append([]jetstream.PullConsumeOpt{jetstream.PullHeartbeat(Heartbeat)}, opts...)
	opts = append(opts, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if onErr != nil {
			onErr(err)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// No consumer took the pull: deleted before it came (a
			// deletion while a pull waits ends the reading by itself),
			// or without a leader yet. The client would ask it again
			// and again; the reading ends instead, and the stage opens
			// the consumer again.
			r.goneOnce.Do(func() { close(r.gone) })
		}
	}))
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if r.held.Acquire(r.stopCtx, r.weight(m)) != nil {
			_ = m.Nak() // stopped: back to the consumer at once
			return
		}
		select {
		case r.msgs <- m:
			// Queued as Stop emptied the queue (both cases were
			// ready): empty it again.
			select {
			case <-r.stop:
				r.nakQueued()
			default:
			}
		case <-r.stop:
			_ = m.Nak()
		}
	}, opts...)
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.cc, r.closed = cc, cc.Closed()
	return r, nil
}

// weight is what m counts against maxBytes: its data, and no more than
// maxBytes, so that a larger message still passes once the queue is empty.
func (r *Reader) weight(m jetstream.Msg) int64 {
	return min(int64(len(m.Data())), r.maxBytes)
}

// Next returns the next message, waiting until ctx ends (ctx's error).
// It returns jetstream.ErrMsgIteratorClosed once the reader is stopped, or
// once the client stopped consuming (a closed connection, a deleted
// consumer) or a pull reached no consumer, and the messages it had given
// are read.
func (r *Reader) Next(ctx context.Context) (jetstream.Msg, error) {
	select {
	case <-r.stop:
		return nil, jetstream.ErrMsgIteratorClosed
	default:
	}
	select {
	case m := <-r.msgs:
		return r.took(m), nil
	default:
	}
	select {
	case m := <-r.msgs:
		return r.took(m), nil
	case <-r.stop:
		return nil, jetstream.ErrMsgIteratorClosed
	case <-r.closed:
		return r.last()
	case <-r.gone:
		return r.last()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// last returns a message still queued once the reading ended, and
// jetstream.ErrMsgIteratorClosed when none is.
func (r *Reader) last() (jetstream.Msg, error) {
	select {
	case m := <-r.msgs:
		return r.took(m), nil
	default:
	}
	return nil, jetstream.ErrMsgIteratorClosed
}

// took frees m's bytes for the messages behind it.
func (r *Reader) took(m jetstream.Msg) jetstream.Msg {
	r.held.Release(r.weight(m))
	return m
}

// Stop ends the reading. The messages delivered and not yet returned by
// Next, queued here or in the client's subscription, are nak'ed, so that
// the consumer delivers them again at once (to the next reader, or another
// instance's); left unacked they waited AckWait, and a stage restarted on
// its consumer went without them that long. A Next waiting returns, and so
// do those after.
func (r *Reader) Stop() {
	r.once.Do(func() {
		close(r.stop)
		r.cancel()
		// Drain, not Stop: the client hands what its subscription holds
		// to the callback, which naks it now.
		r.cc.Drain()
		r.nakQueued()
	})
}

// nakQueued naks the messages queued for Next, once stopped.
func (r *Reader) nakQueued() {
	for {
		select {
		case m := <-r.msgs:
			_ = m.Nak()
		default:
			return
		}
	}
}

// reportEvery is how often at most Reports warns of each kind of report.
const reportEvery = 10 * time.Second

// Reports returns an onErr for Open that takes what the client reports on
// reading a consumer, across the readers opened with it. A pull request
// whose heartbeats stopped was lost on its way; the client makes it
// again, and it counts in lost. Each kind is warned of at most once per
// 10 s, with the count since; name begins the warnings.
func Reports(log *zap.Logger, name string, lost prometheus.Counter) func(error) {
	lostLog := &throttle.Throttle{Every: reportEvery}
	otherLog := &throttle.Throttle{Every: reportEvery}
	return func(err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			lost.Inc()
			if n, due := lostLog.Note(); due {
				log.Warn(name+": its pull request missed two heartbeats (lost on its way), pulling again", zap.Int64("times_since_last_line", n))
			}
			return
		}
		if n, due := otherLog.Note(); due {
			log.Warn(name+": the client reports an error", zap.Error(err), zap.Int64("reports_since_last_line", n))
		}
	}
}
