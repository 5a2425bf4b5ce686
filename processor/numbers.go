package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// NumberMap maps display phone numbers to phone number ids. Number-level
// webhooks (quality, throughput upgrade) carry only the display number
// (docs/meta-webhooks.md 9.1); message webhooks carry both in their metadata, so the
// map learns from them. It is kept in a KV bucket, shared by every
// instance, with a local cache in front. It is safe for concurrent use.
type NumberMap struct {
	kv jetstream.KeyValue

	mu sync.RWMutex
	m  map[string]string
}

// NewNumberMap opens the numbers bucket, creating it when absent.
func NewNumberMap(ctx context.Context, js jetstream.JetStream, replicas int) (*NumberMap, error) {
	if kv, err := js.KeyValue(ctx, schema.BucketNumbers); err == nil {
		return &NumberMap{kv: kv, m: map[string]string{}}, nil
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("kv %s: %w", schema.BucketNumbers, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      schema.BucketNumbers,
		Description: "wahook: display phone number -> phone number id",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", schema.BucketNumbers, err)
	}
	return &NumberMap{kv: kv, m: map[string]string{}}, nil
}

// numberKey normalizes a display number to its digits: Meta writes it with
// or without '+' and spaces in different places.
func numberKey(display string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, display)
}

// Learn records that display belongs to phone number id. It writes through
// to the bucket only when the mapping is new or changed.
func (n *NumberMap) Learn(display, id string) {
	k := numberKey(display)
	if k == "" || id == "" {
		return
	}
	n.mu.RLock()
	known := n.m[k] == id
	n.mu.RUnlock()
	if known {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Cached only once the bucket holds it, so that every instance can
	// resolve it; a failed write is tried again on the next message webhook.
	if _, err := n.kv.PutString(ctx, k, id); err != nil {
		return
	}
	n.mu.Lock()
	n.m[k] = id
	n.mu.Unlock()
}

// Resolve returns the phone number id of display, or "" when no message
// webhook has shown it yet.
func (n *NumberMap) Resolve(display string) string {
	k := numberKey(display)
	if k == "" {
		return ""
	}
	n.mu.RLock()
	id, ok := n.m[k]
	n.mu.RUnlock()
	if ok {
		return id
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e, err := n.kv.Get(ctx, k)
	if err != nil {
		// Not known yet (ErrKeyNotFound), or the bucket is unreachable: the
		// event keeps its display number and no id.
		return ""
	}
	id = string(e.Value())
	n.mu.Lock()
	n.m[k] = id
	n.mu.Unlock()
	return id
}
