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
// Consume takes what the server sends without a bound (a pull bounds it),
// and watches the heartbeats for as long as it runs: a lost request is
// made again after two heartbeats are missed.
package pullreader

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Heartbeat is how often the server is asked to show a waiting pull
// request is alive; a reader that misses two pulls again.
const Heartbeat = 5 * time.Second

// Reader is a consumer read with Consume. Next and Stop may be called
// from different goroutines.
type Reader struct {
	cc     jetstream.ConsumeContext
	closed <-chan struct{}
	msgs   chan jetstream.Msg
	stop   chan struct{}
	once   sync.Once
}

// Open starts reading cons with opts (a pull's size, say) and Heartbeat.
// The reader takes up to buffer messages from the client ahead of Next:
// as many as a pull, so that the client's goroutine seldom waits for the
// reader's (the client then pulls more, so up to two pulls' worth is on
// its way or held). onErr, when set, is told of what the client reports without stopping:
// a missed heartbeat (jetstream.ErrNoHeartbeat, after which it pulls
// again), a status from the server. It is called on the client's
// goroutines.
func Open(cons jetstream.Consumer, buffer int, onErr func(error), opts ...jetstream.PullConsumeOpt) (*Reader, error) {
	r := &Reader{msgs: make(chan jetstream.Msg, buffer), stop: make(chan struct{})}
	opts = append([]jetstream.PullConsumeOpt{jetstream.PullHeartbeat(Heartbeat)}, opts...)
	opts = append(opts, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if onErr != nil {
			onErr(err)
		}
	}))
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case r.msgs <- m:
		case <-r.stop:
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	r.cc, r.closed = cc, cc.Closed()
	return r, nil
}

// Next returns the next message, waiting until ctx ends (ctx's error).
// It returns jetstream.ErrMsgIteratorClosed once the reader is stopped, or
// once the client stopped consuming (a closed connection, a deleted
// consumer) and the messages it had given are read.
func (r *Reader) Next(ctx context.Context) (jetstream.Msg, error) {
	select {
	case m := <-r.msgs:
		return m, nil
	default:
	}
	select {
	case m := <-r.msgs:
		return m, nil
	case <-r.stop:
		return nil, jetstream.ErrMsgIteratorClosed
	case <-r.closed:
		select {
		case m := <-r.msgs:
			return m, nil
		default:
		}
		return nil, jetstream.ErrMsgIteratorClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stop ends the reading; messages not yet returned by Next are not acked,
// so they come back after AckWait. A Next waiting returns.
func (r *Reader) Stop() {
	r.once.Do(func() {
		close(r.stop)
		r.cc.Stop()
	})
}
