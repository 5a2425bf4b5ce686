package stage2

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// markerTTL is how long a bucket keeps the marker a key leaves when it
// expires (a cool-down at its end, a signal at --pacing-ttl), so that a
// watcher sees it go (nats-server 2.11 and later).
const markerTTL = time.Minute

// ensureBuckets opens the KV buckets, creating those that are absent:
// wahook_pacing (one value per number, history 1), wahook_pair_cooldown and
// wahook_accounts (one value per WABA).
// The cool-down bucket expires each key at its own time (a per-message
// TTL, nats-server 2.11 and later); on an older server it keeps every key
// for the longest cool-down instead, and readers go by the value's until.
// It reports whether the cool-down bucket has per-key expiry.
func ensureBuckets(ctx context.Context, js jetstream.JetStream, replicas int, signalTTL time.Duration, setTTL bool) (pacingKV, cooldownKV jetstream.KeyValue, keyTTL bool, err error) {
	// A signal that expires leaves a marker, so that the live page and the
	// pacers watching the bucket forget the number then, not at their
	// next start.
	pcfg := jetstream.KeyValueConfig{
		Bucket:         schema.BucketPacing,
		Description:    "wahook: pacing signal per business number (schema.PacingSignal)",
		History:        1,
		TTL:            signalTTL,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: markerTTL,
	}
	if pacingKV, err = ensureMarked(ctx, js, &pcfg, nil); err != nil {
		return nil, nil, false, err
	}
	// Stage 2 gives an existing bucket its --pacing-ttl (setTTL); migrate,
	// which has no such flag, only one made by an earlier version, which
	// keeps every signal for ever (it set the default back at every run,
	// until stage 2 started again). Both give a bucket made by an earlier
	// version its markers. The rest of the bucket's stream stays as it is
	// (its replica count: an update from wahook's own settings took
	// --replicas, 1 by default, and moved an R3 bucket to one copy at every
	// start; an operator's limits).
	if st, err := pacingKV.Status(ctx); err == nil {
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
			if kv := updatePacing(ctx, js, bs.StreamInfo().Config, signalTTL, setTTL, pcfg.LimitMarkerTTL); kv != nil {
				pacingKV = kv
			}
		}
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:         schema.BucketPairCooldown,
		Description:    "wahook: pair-rate cool-downs after 131056 (schema.PairCooldown), each key kept until its until and its wait once more",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: markerTTL,
	}
	cooldownKV, err = ensureMarked(ctx, js, &cfg, func(c *jetstream.KeyValueConfig) {
		c.TTL = 2*pacing.MaxPairWait + time.Minute
		c.Description = "wahook: pair-rate cool-downs after 131056 (schema.PairCooldown); an entry holds until its until"
	})
	if err != nil {
		return nil, nil, false, err
	}
	if _, err := kvbucket.Ensure(ctx, js, accountsConfig(replicas)); err != nil {
		return nil, nil, false, err
	}
	st, err := cooldownKV.Status(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("provision bucket %s: %w", schema.BucketPairCooldown, err)
	}
	keyTTL = st.LimitMarkerTTL() > 0
	return pacingKV, cooldownKV, keyTTL, nil
}

// updatePacing gives the stream sc of an existing wahook_pacing the signals'
// TTL (when setTTL, or when it has none) and markers (when it has none and
// markers is not 0), and returns the bucket so updated, or nil when
// nothing changed or the server refused. A server that cannot add markers
// to an existing stream (before 2.11.2) still takes the TTL.
func updatePacing(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, signalTTL time.Duration, setTTL bool, markers time.Duration) jetstream.KeyValue {
	want := sc
	if sc.MaxAge != signalTTL && (setTTL || sc.MaxAge == 0) {
		want.MaxAge = signalTTL
		if want.MaxAge > 0 && want.Duplicates > want.MaxAge {
			want.Duplicates = want.MaxAge
		}
	}
	if sc.SubjectDeleteMarkerTTL == 0 && markers > 0 {
		want.AllowMsgTTL, want.SubjectDeleteMarkerTTL = true, markers
	}
	tries := []jetstream.StreamConfig{want}
	if want.MaxAge != sc.MaxAge && want.SubjectDeleteMarkerTTL != sc.SubjectDeleteMarkerTTL {
		ttl := want // the TTL alone
		ttl.AllowMsgTTL, ttl.SubjectDeleteMarkerTTL = sc.AllowMsgTTL, sc.SubjectDeleteMarkerTTL
		tries = append(tries, ttl)
	}
	for _, try := range tries {
		if reflect.DeepEqual(try, sc) {
			return nil
		}
		if _, err := js.UpdateStream(ctx, try); err == nil {
			kv, err := js.KeyValue(ctx, schema.BucketPacing)
			if err != nil {
				return nil
			}
			return kv
		}
	}
	return nil
}

// ensureMarked opens the bucket of cfg, or makes it with its
// LimitMarkerTTL; on a server that has no markers (before 2.11), without
// them, cfg changed by older (nil: nothing more). cfg is left as made.
func ensureMarked(ctx context.Context, js jetstream.JetStream, cfg *jetstream.KeyValueConfig, older func(*jetstream.KeyValueConfig)) (jetstream.KeyValue, error) {
	kv, err := kvbucket.Ensure(ctx, js, *cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		cfg.LimitMarkerTTL = 0
		if older != nil {
			older(cfg)
		}
		kv, err = kvbucket.Ensure(ctx, js, *cfg)
	}
	return kv, err
}

// ensureConsumer creates or updates the durable pull consumer of this
// instance's EVENTS subjects. A new consumer starts with the events
// published from now on; an existing one resumes where it was acked.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Consumer, error) {
	return ensureConsumerFrom(ctx, js, c, 0)
}

// remakeConsumer opens the consumer again after it failed. One that is
// gone (deleted by hand, or lost with a server's state) is made again from
// the event after ackFloor, the last ack floor seen (seen false: none, from
// the events published from now on): made new, it skipped every event
// published while it was gone, a 131048's stop among them. Events applied
// already come again; stage 2 tells them (its message memory).
func remakeConsumer(ctx context.Context, js jetstream.JetStream, c Config, ackFloor uint64, seen bool) (jetstream.Consumer, error) {
	cons, err := js.Consumer(ctx, schema.StreamEvents, c.Durable)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cons, err
	}
	from := ackFloor + 1
	if !seen {
		from = 0
	} else if st, err := js.Stream(ctx, schema.StreamEvents); err != nil {
		return nil, fmt.Errorf("provision consumer %s on %s: %w", c.Durable, schema.StreamEvents, err)
	} else if last := st.CachedInfo().State.LastSeq; from > last+1 {
		from = 0 // a stream made again since: its sequences started over
	}
	return ensureConsumerFrom(ctx, js, c, from)
}

// ensureConsumerFrom is ensureConsumer, with a consumer it makes starting
// at the stream sequence from (0: at the events published from now on).
func ensureConsumerFrom(ctx context.Context, js jetstream.JetStream, c Config, from uint64) (jetstream.Consumer, error) {
	cc := jetstream.ConsumerConfig{
		Durable:        c.Durable,
		Description:    "wahook stage 2: pacing state",
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.AckWait,
		MaxAckPending:  c.MaxAckPending,
		FilterSubjects: c.FilterSubjects,
	}
	if from > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	// An existing consumer keeps where it was made to start: the server
	// refuses to change it (one remade from a sequence would fail every
	// start after).
	if cur, err := js.Consumer(ctx, schema.StreamEvents, c.Durable); err == nil {
		if ci := cur.CachedInfo(); ci != nil {
			cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = ci.Config.DeliverPolicy, ci.Config.OptStartSeq, ci.Config.OptStartTime
		}
	}
	switch {
	case len(c.FilterSubjects) == 1 && c.FilterSubjects[0] == schema.SubjectEventsAll:
		cc.FilterSubjects = nil
	case len(c.FilterSubjects) == 1:
		cc.FilterSubject, cc.FilterSubjects = c.FilterSubjects[0], nil
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, schema.StreamEvents, cc)
	if err != nil {
		return nil, fmt.Errorf("provision consumer %s on %s: %w", c.Durable, schema.StreamEvents, err)
	}
	return cons, nil
}

// EnsureBuckets creates the pacing signal, pair cool-down and account buckets with
// replicas copies (and the signals' TTL) when they are absent, for wahook
// migrate; an existing bucket keeps its replica count (migrate applies a
// changed one to the bucket's stream) and its TTL (stage 2's
// --pacing-ttl), but for one that has none.
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, replicas int, signalTTL time.Duration) error {
	_, _, _, err := ensureBuckets(ctx, js, replicas, signalTTL, false)
	return err
}
