package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/schema"
)

// NumberMap maps display phone numbers to phone number ids, and holds the
// number-level events that came before their number was known.
//
// Number-level webhooks (quality, limits, throughput upgrades, names) carry
// only the display number (docs/meta-webhooks.md 9.1); message webhooks
// carry both in their metadata, so the map learns from them. The map is
// kept in a KV bucket shared by every instance, with a local cache in
// front, and a cache of misses. An event whose display number no message
// webhook has paired with an id yet is held in a second bucket until one
// does (docs/architecture.md, "Numbers learned late"); stage 1 then applies
// it with its id.
//
// It is safe for concurrent use.
type NumberMap struct {
	kv, pending jetstream.KeyValue
	// maxPayload is the server's largest message (0 while unknown): a
	// held event must fit it (Hold).
	maxPayload func() int64
	// missTTL is how long a display number that the bucket did not know is
	// not looked up again by Resolve.
	missTTL time.Duration

	mu     sync.RWMutex
	known  map[string]string    // digits -> phone number id, as the bucket holds it
	misses map[string]time.Time // digits -> when the bucket last did not know them
}

// PendingMaxAge is how long a number-level event waits for its number to be
// learned. The event is in ClickHouse all along (without a phone number id,
// listed as pending by the query API), so only its effect on the pacing
// signal and on the reports' per-number state is given up after that.
const PendingMaxAge = 30 * 24 * time.Hour

// kvTimeout bounds each request of the map to its buckets; the cached
// answers, nearly all of them, make none.
const kvTimeout = 2 * time.Second

// maxMisses bounds the cache of misses; it is emptied when full.
const maxMisses = 10000

// NewNumberMap opens the numbers bucket and the bucket of pending events,
// creating them when absent.
func NewNumberMap(ctx context.Context, js jetstream.JetStream, replicas int) (*NumberMap, error) {
	kv, err := kvbucket.Ensure(ctx, js, jetstream.KeyValueConfig{
		Bucket:      schema.BucketNumbers,
		Description: "wahook: display phone number -> phone number id",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, err
	}
	pending, err := kvbucket.Ensure(ctx, js, jetstream.KeyValueConfig{
		Bucket:      schema.BucketNumbersPending,
		Description: "wahook: number-level events waiting for their display number to be learned",
		History:     1,
		TTL:         PendingMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, err
	}
	return &NumberMap{kv: kv, pending: pending, maxPayload: js.Conn().MaxPayload, missTTL: 10 * time.Second,
		known: map[string]string{}, misses: map[string]time.Time{}}, nil
}

// NumberKey normalizes a display number to its digits: Meta writes it with
// or without '+' and spaces in different places.
func NumberKey(display string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, display)
}

// Learn records that display belongs to phone number id. It writes to the
// bucket when this instance has not seen the pair yet (once per number and
// process: cheap, and it repairs a bucket that lost the key), and reports
// whether it did, so that the caller applies the events held for it.
func (n *NumberMap) Learn(ctx context.Context, display, id string) (bool, error) {
	k := NumberKey(display)
	if k == "" || id == "" {
		return false, nil
	}
	n.mu.RLock()
	known := n.known[k] == id
	n.mu.RUnlock()
	if known {
		return false, nil
	}
	// Cached only once the bucket holds it, so that every instance can
	// resolve it; a failed write is tried again on the next message webhook.
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	if _, err := n.kv.PutString(ctx, k, id); err != nil {
		return false, fmt.Errorf("kv %s: learn a display number: %w", schema.BucketNumbers, err)
	}
	n.remember(k, id)
	return true, nil
}

func (n *NumberMap) remember(k, id string) {
	n.mu.Lock()
	n.known[k] = id
	delete(n.misses, k)
	n.mu.Unlock()
}

// How Resolve found its answer, for wahook_processor_number_lookups_total.
const (
	LookupCached     = "cached"      // the local cache knew the number
	LookupBucket     = "bucket"      // the bucket knew it
	LookupMiss       = "miss"        // the bucket did not know it
	LookupMissCached = "miss_cached" // the bucket did not know it a moment ago: not asked again
	LookupError      = "error"       // the bucket did not answer
)

// Resolve returns the phone number id of display, or "" when no message
// webhook has shown it yet, and how it found that out. An error means the
// bucket could not be asked: the caller tries again later rather than
// taking the number for unknown.
func (n *NumberMap) Resolve(ctx context.Context, display string) (string, string, error) {
	k := NumberKey(display)
	if k == "" {
		return "", LookupMiss, nil
	}
	n.mu.RLock()
	id, ok := n.known[k]
	missed, wasMissed := n.misses[k]
	n.mu.RUnlock()
	if ok {
		return id, LookupCached, nil
	}
	if wasMissed && time.Since(missed) < n.missTTL {
		return "", LookupMissCached, nil
	}
	return n.lookup(ctx, k)
}

// lookup asks the bucket for the id of digits k.
func (n *NumberMap) lookup(ctx context.Context, k string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	e, err := n.kv.Get(ctx, k)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		n.mu.Lock()
		if len(n.misses) >= maxMisses {
			clear(n.misses)
		}
		n.misses[k] = time.Now()
		n.mu.Unlock()
		return "", LookupMiss, nil
	case err != nil:
		return "", LookupError, fmt.Errorf("kv %s: resolve a display number: %w", schema.BucketNumbers, err)
	}
	id := string(e.Value())
	n.remember(k, id)
	return id, LookupBucket, nil
}

// HeldEvent is a number-level event held until its number was learned,
// with the phone number id filled in, and its key in the pending bucket.
type HeldEvent struct {
	Key string
	Row schema.ManagementRow
}

// Hold keeps r, whose display number has no id yet, until the number is
// learned. It must be called once r is stored without its id: whoever
// applies it later then writes it after that row, and the copy with the id
// is the one that stays. It then asks the bucket once more, past the cache
// of misses, and returns the id if the number was learned meanwhile (by
// this instance or another): the caller applies r with it and releases the
// key, since a learner that listed the held events before r was held did
// not see it.
//
// An event too large for the bucket (the server's max_payload) is held
// without raw, and if still too large with every string cut, as EVENTS
// carries it: it failed its body's batch for ever before. The copy applied
// later replaces the stored one, so that event's raw value is then kept by
// RAW only, for its retention (cut reports it).
func (n *NumberMap) Hold(ctx context.Context, r *schema.ManagementRow) (key, id string, cut bool, err error) {
	k := NumberKey(r.DisplayPhoneNumber)
	key = k + "." + r.EventID
	v, err := json.Marshal(r)
	if limit := int(n.maxPayload()) - 4096; err == nil && limit > 0 && len(v) > limit {
		small := *r
		small.Raw, cut = "", true
		if v, err = json.Marshal(&small); err == nil && len(v) > limit {
			cutStrings(&small, limit/256)
			v, err = json.Marshal(&small)
		}
	}
	if err != nil {
		return key, "", cut, fmt.Errorf("hold event %s: %w", r.EventID, err)
	}
	if _, err := n.pending.Put(ctx, key, v); err != nil {
		return key, "", cut, fmt.Errorf("kv %s: hold an event: %w", schema.BucketNumbersPending, err)
	}
	id, _, err = n.lookup(ctx, k)
	return key, id, cut, err
}

// Held returns the events held for display number digits k, with id as
// their phone number id.
func (n *NumberMap) Held(ctx context.Context, k, id string) ([]HeldEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	var out []HeldEvent
	err := n.watchHeld(ctx, k+".*", func(key string, r schema.ManagementRow) error {
		r.PhoneNumberID, r.Late = id, true
		out = append(out, HeldEvent{Key: key, Row: r})
		return nil
	})
	return out, err
}

// Sweep returns every held event whose number is known by now, with its id,
// and how many events stay held. Stage 1 runs it now and then: it applies
// what a learner missed (a crash between learning and applying, a write
// that failed).
func (n *NumberMap) Sweep(ctx context.Context) ([]HeldEvent, int, error) {
	var out []HeldEvent
	waiting := 0
	ids := map[string]string{}
	err := n.watchHeld(ctx, ">", func(key string, r schema.ManagementRow) error {
		k, _, _ := strings.Cut(key, ".")
		id, ok := ids[k]
		if !ok {
			var err error
			if id, _, err = n.lookup(ctx, k); err != nil {
				return err
			}
			ids[k] = id
		}
		if id == "" {
			waiting++
			return nil
		}
		r.PhoneNumberID, r.Late = id, true
		out = append(out, HeldEvent{Key: key, Row: r})
		return nil
	})
	if err == nil && waiting == 0 && len(out) == 0 {
		// Nothing held: drop the delete markers of released events (older
		// than 30 minutes), so that an empty bucket reads as empty
		// (watchHeld).
		if st, serr := n.pending.Status(ctx); serr == nil && st.Values() > 0 {
			_ = n.pending.PurgeDeletes(ctx)
		}
	}
	return out, waiting, err
}

// watchHeld calls f with each held event whose key matches filter.
func (n *NumberMap) watchHeld(ctx context.Context, filter string, f func(key string, r schema.ManagementRow) error) error {
	// Nothing held, the usual case: one request instead of a watcher
	// (a consumer on the bucket's stream) per number learned.
	if st, err := n.pending.Status(ctx); err == nil && st.Values() == 0 {
		return nil
	}
	w, err := n.pending.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("kv %s: list held events: %w", schema.BucketNumbersPending, err)
	}
	defer kvbucket.StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kv %s: list held events: %w", schema.BucketNumbersPending, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return nil // every held event seen
			}
			var r schema.ManagementRow
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				// Not one of ours: it can never be applied.
				_ = n.pending.Delete(ctx, e.Key())
				continue
			}
			if err := f(e.Key(), r); err != nil {
				return err
			}
		}
	}
}

// Release deletes held events that were applied.
func (n *NumberMap) Release(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := n.pending.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("kv %s: release an event: %w", schema.BucketNumbersPending, err)
		}
	}
	return nil
}
