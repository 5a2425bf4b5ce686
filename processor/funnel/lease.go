package funnel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// LeaseKey is the key of the funnel resolver's lease in schema.BucketLeases.
const LeaseKey = "funnel"

// Lease is a lease on one key of the leases bucket, whose entries expire
// TTL after their last write: the holder renews it with a write that names
// the revision it last wrote, so two instances never both believe they hold
// it, and another takes it over once the holder has been silent for TTL.
type Lease struct {
	kv  jetstream.KeyValue
	key string
	id  string
	ttl time.Duration

	mu      sync.Mutex
	rev     uint64
	renewed time.Time // when the last successful write was sent
	tenure  uint64    // how many times this instance took the lease
}

// NewLease opens the leases bucket (creating it, with this TTL, when
// absent) for key, held under id (an instance's name; it is only shown).
func NewLease(ctx context.Context, js jetstream.JetStream, key, id string, ttl time.Duration, replicas int) (*Lease, error) {
	kv, err := js.KeyValue(ctx, schema.BucketLeases)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      schema.BucketLeases,
			Description: "wahook: leases; an entry expires TTL after its last renewal",
			History:     1,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", schema.BucketLeases, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", schema.BucketLeases, err)
	}
	// The bucket's TTL decides when a silent holder loses the lease.
	if st.TTL() > 0 {
		ttl = st.TTL()
	}
	return &Lease{kv: kv, key: key, id: id, ttl: ttl}, nil
}

// Hold takes the lease or renews it, and reports whether this instance
// holds it now.
func (l *Lease) Hold(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	if l.rev != 0 {
		rev, err := l.kv.Update(ctx, l.key, []byte(l.id), l.rev)
		if err == nil {
			l.rev, l.renewed = rev, sent
			return true, nil
		}
		// Expired and taken, or gone: hold it again only if nobody has.
		l.rev = 0
	}
	rev, err := l.kv.Create(ctx, l.key, []byte(l.id))
	switch {
	case err == nil:
		l.rev, l.renewed = rev, sent
		l.tenure++
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	default:
		return false, err
	}
}

// Valid reports whether the lease is held and its last renewal leaves a
// margin of half the TTL: a pass checks it before writing.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev != 0 && time.Since(l.renewed) < l.ttl/2
}

// Tenure numbers this instance's holds of the lease: it changes each time
// the instance takes the lease anew (another may have held it between), and
// stays while renewals keep it.
func (l *Lease) Tenure() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenure
}

// TTL is how long the lease outlives its last renewal: the bucket's.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Release gives the lease up, if this instance still holds it.
func (l *Lease) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rev == 0 {
		return
	}
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
	l.rev = 0
}

// Run keeps the lease (renewing it every third of its TTL, and taking it
// when free) and, while it holds it, passes every Interval, until ctx ends;
// then it releases the lease. A pass runs under a context that ends when the
// lease is lost, and checks the lease again before each write, so that a
// pass, the backfill included, does not go on writing once another instance
// may have begun. A failed pass is logged and tried again at the next
// interval (an outage of ClickHouse or NATS delays the funnel; the
// watermark does not move, so nothing is missed). A pass also stops writing
// when the instance took the lease anew since the pass began.
func (r *Resolver) Run(ctx context.Context, lease *Lease) error {
	var mu sync.Mutex
	held := false
	var lost context.CancelFunc = func() {}
	keep := func() {
		ok, err := lease.Hold(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("funnel: lease", zap.Error(err))
		}
		mu.Lock()
		defer mu.Unlock()
		if ok != held {
			held = ok
			r.log.Info("funnel: lease", zap.Bool("held", held))
			if r.m != nil {
				r.m.held(held)
			}
		}
		if !ok {
			lost()
		}
	}
	keep()
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		t := time.NewTicker(max(lease.TTL()/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				keep()
			}
		}
	}()
	defer func() {
		<-keeperDone
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		lease.Release(rctx)
		if r.m != nil {
			r.m.held(false)
		}
	}()
	t := time.NewTimer(r.cfg.Interval)
	defer t.Stop()
	for {
		mu.Lock()
		pctx, cancel := context.WithCancel(ctx)
		lost = cancel
		run := held
		mu.Unlock()
		wait := r.cfg.Interval
		if run {
			// What the resolver remembers holds for one tenure: another
			// instance may have written between two.
			tenure := lease.Tenure()
			if tenure != r.tenure {
				r.mem.forget()
				r.tenure = tenure
			}
			start := time.Now()
			st, err := r.Pass(pctx, func() bool { return lease.Valid() && lease.Tenure() == tenure })
			// Passes take a tenth of the time at most: under a burst they
			// come less often (each covers more), and the funnel lags
			// rather than stage 1's writes, which share ClickHouse; but
			// never more than MaxWait apart, so that a sustained load
			// that needs more of the resolver's time than that does not
			// make each pass longer than the last.
			took := time.Since(start) - r.synced
			r.synced = 0
			wait = nextWait(wait, r.cfg.MaxWait, took)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				r.log.Warn("funnel: pass failed; the next one catches up", zap.Error(err))
			case st.Backfill:
				r.log.Info("funnel: backfill done", zap.Time("watermark", st.Watermark))
			}
		}
		cancel()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
