package stage2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// writeCooldown writes the cool-down of (number, recipient) after the
// 131056 eventID at at: one strike more than the entry in the bucket, if
// that is still kept by then (pacing.NextCooldown). The entry is kept past
// its until by its wait (schema.PairCooldown.Kept), to count the next strike;
// senders go by until. A cool-down no longer kept (a late event) is not
// written. The write is synchronous: the event is acked only once its
// cool-down is stored. A failed read or write is returned.
func (s *Stage2) writeCooldown(ctx context.Context, id, recipient, eventID string, at time.Time) error {
	key := schema.PairCooldownKey(id, recipient)
	var prev *schema.PairCooldown
	switch e, err := s.cooldownKV.Get(ctx, key); {
	case err == nil:
		var c schema.PairCooldown
		if json.Unmarshal(e.Value(), &c) == nil {
			prev = &c
		}
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
	default:
		// Without the entry the strikes would start again: retry instead.
		s.m.writeFails.WithLabelValues(schema.BucketPairCooldown).Inc()
		return fmt.Errorf("read cool-down %s: %w", key, err)
	}
	c, same := pacing.NextCooldown(prev, id, recipient, eventID, at)
	ttl := c.Kept().Sub(s.cfg.Now())
	if ttl <= 0 || same {
		return nil // gone, or written already for this event or a newer one
	}
	data, err := json.Marshal(&c)
	if err != nil {
		panic("BUG: cool-down does not encode: " + err.Error())
	}
	if s.keyTTL {
		// kv.Put takes no TTL; a put is a publish to the key's subject, and
		// the bucket allows per-message TTLs (LimitMarkerTTL). The TTL is
		// whole seconds, at least 1 s, rounded up.
		ttl = (ttl + time.Second - 1).Truncate(time.Second)
		_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + schema.BucketPairCooldown + "." + key, Data: data}, jetstream.WithMsgTTL(ttl))
	} else {
		_, err = s.cooldownKV.Put(ctx, key, data)
	}
	if err != nil {
		s.m.writeFails.WithLabelValues(schema.BucketPairCooldown).Inc()
		if ce := s.log.Check(zap.WarnLevel, "write cool-down"); ce != nil {
			ce.Write(zap.String("phone_number_id", id), zap.String("recipient_hash", recipient), zap.Error(err))
		}
		return fmt.Errorf("write cool-down %s: %w", key, err)
	}
	s.m.cooldowns.Inc()
	return nil
}
