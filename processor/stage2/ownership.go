package stage2

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/schema"
)

// ownership is the partitions an instance owns in its consumer group, as
// the group's configuration says; Run's loop keeps it current by watching
// the configuration's key, alongside pcgroups, which watches the same key
// to recreate the member's consumer. It lets the loop forget the numbers
// of a partition that moves away (so that only the new owner writes their
// signals) and refuse a message of such a number that the old consumer
// still delivers.
type ownership struct {
	member     string
	partitions int
	owned      []bool // by partition
	count      int    // of owned
	w          jetstream.KeyWatcher
}

// watchOwnership starts watching the group's configuration and reads the
// partitions the member owns now.
func watchOwnership(ctx context.Context, js jetstream.JetStream, c Config) (*ownership, error) {
	kv, err := js.KeyValue(ctx, groupBucket)
	if err != nil {
		return nil, fmt.Errorf("watch consumer group %s: %w", c.Durable, err)
	}
	w, err := kv.Watch(ctx, groupKey(c.Durable))
	if err != nil {
		return nil, fmt.Errorf("watch consumer group %s: %w", c.Durable, err)
	}
	o := &ownership{member: c.Member, partitions: c.Partitions, owned: make([]bool, c.Partitions), w: w}
	// The watcher sends the current value, then nil.
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch consumer group %s: the watcher stopped", c.Durable)
			}
			if e == nil {
				return o, nil
			}
			o.update(e)
		case <-ctx.Done():
			kvbucket.StopWatch(w)
			return nil, fmt.Errorf("watch consumer group %s: %w", c.Durable, ctx.Err())
		}
	}
}

func (o *ownership) stop() { kvbucket.StopWatch(o.w) }

// owns reports whether the number id is in a partition the member owns.
func (o *ownership) owns(id string) bool { return o.owned[partitionOf(id, o.partitions)] }

// list is the partitions the member owns.
func (o *ownership) list() []int {
	l := make([]int, 0, o.count)
	for p, ok := range o.owned {
		if ok {
			l = append(l, p)
		}
	}
	return l
}

// update applies a change of the group's configuration; it reports
// whether the member's partitions changed, and the ones it gained. A
// deleted configuration, or one that cannot be read, owns nothing
// (pcgroups stops the consumer and Run returns).
func (o *ownership) update(e jetstream.KeyValueEntry) (changed bool, gained []int) {
	owned := make([]bool, o.partitions)
	var gc pcgroups.ElasticConsumerGroupConfig
	if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &gc) == nil && gc.MaxMembers == uint(o.partitions) {
		// The filters are "<partition>.<filter>", or "<partition>.>" with
		// mappings.
		for _, f := range pcgroups.ElasticGetPartitionFilters(gc, o.member) {
			tok, _, _ := strings.Cut(f, ".")
			if p, err := strconv.Atoi(tok); err == nil && p >= 0 && p < o.partitions {
				owned[p] = true
			}
		}
	}
	count := 0
	for p := range owned {
		changed = changed || owned[p] != o.owned[p]
		if owned[p] {
			count++
			if !o.owned[p] {
				gained = append(gained, p)
			}
		}
	}
	o.owned, o.count = owned, count
	return changed, gained
}

// partitionOf is the partition of the number id among n: the partition
// the server's subject transform {{Partition(n,1)}} gives its subject
// token, an FNV-1a hash (32 bits) modulo n (nats-server
// subject_transform.go). A test checks it against the server.
func partitionOf(id string, n int) int { return partitionOfToken(schema.SubjectToken(id), n) }

// partitionOfToken is partitionOf of a number's subject token.
func partitionOfToken(token string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(token))
	return int(h.Sum32() % uint32(n))
}

// applyOwnership applies an update of the group's configuration from the
// watcher; ok false is a stopped watcher, an error.
func (s *Stage2) applyOwnership(ctx context.Context, e jetstream.KeyValueEntry, ok bool) error {
	if !ok {
		return fmt.Errorf("watch consumer group %s: the watcher stopped", s.cfg.Durable)
	}
	if e == nil {
		return nil
	}
	if changed, gained := s.own.update(e); changed {
		s.reown(ctx, gained)
	}
	return nil
}

// pollOwnership applies the updates of the group's configuration that
// have come, without waiting.
func (s *Stage2) pollOwnership(ctx context.Context) error {
	for {
		select {
		case e, ok := <-s.own.w.Updates():
			if err := s.applyOwnership(ctx, e, ok); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// forgetNotOwned forgets the numbers of the partitions this instance does
// not own, and returns how many; with write, after writing their pending
// changes (they were this instance's until now), else without (they were
// another's meanwhile: their messages go back to it).
func (s *Stage2) forgetNotOwned(ctx context.Context, write bool) int {
	sigNow, now := s.cfg.Now(), time.Now()
	forgot := 0
	for id, n := range s.nums {
		if !s.own.owns(id) {
			if write {
				s.w.forget(n, sigNow, now)
			} else {
				s.w.drop(n)
			}
			delete(s.nums, id)
			forgot++
		}
	}
	if forgot > 0 {
		s.w.reap(ctx, true)
	}
	s.m.numbers.Set(float64(len(s.nums)))
	return forgot
}

// reown forgets the numbers of the partitions the instance no longer owns,
// after writing their pending changes, and waits for the writes: the new
// owner seeds each number from its last signal when it first sees it
// (Stage2.number). The new owner's windows start empty, as after a
// restart, and fill within a minute. A number whose partition comes back
// later is seeded from the KV again. The message memory gets the messages
// of the partitions gained, read back as at the start (warmPartitions),
// while the events delivered meanwhile wait: within a third of their
// AckWait.
func (s *Stage2) reown(ctx context.Context, gained []int) {
	forgot := s.forgetNotOwned(ctx, true)
	s.log.Info("partitions changed", zap.String("member", s.cfg.Member), zap.Ints("partitions", s.own.list()),
		zap.Int("numbers_forgotten", forgot))
	// The held numbers (stop, pause) of partitions this instance gained
	// are seeded now, as those it owned at the start were: their holds end
	// without another event, and the end must be written.
	s.seedHeld(ctx)
	s.warmPartitions(ctx, gained, min(s.cfg.MemoryWarmup, s.cfg.AckWait/3))
	s.m.partitions.Set(float64(s.own.count)) // once warmed
}
