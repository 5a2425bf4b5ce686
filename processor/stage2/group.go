package stage2

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// With Config.Partitions, stage 2 instances share the numbers through an
// elastic partitioned consumer group (github.com/synadia-io/orbit.go/pcgroups)
// named Config.Durable on WAHOOK_EVENTS. pcgroups keeps the group's
// configuration (partitions, filter, membership) in the KV bucket
// elastic-consumer-groups under WAHOOK_EVENTS.<group>, and makes a
// work-queue stream WAHOOK_EVENTS-<group> that sources WAHOOK_EVENTS
// through the subject transform
//
//	wahook.events.*.* -> {{Partition(P,1)}}.wahook.events.{{Wildcard(1)}}.{{Wildcard(2)}}
//
// so every event of a number lands in one partition, whatever its kind.
// Each member has a consumer on that stream, named after it, whose filters
// are its partitions; pcgroups recreates it when the membership changes.
// The EVENTS subjects are untouched.

const (
	// groupBucket is the KV bucket where pcgroups keeps the elastic
	// groups' configurations (its kvElasticBucketName). Stage 2 watches
	// its group's key to know the partitions it owns; a test checks the
	// name against the library.
	groupBucket = "elastic-consumer-groups"
	// groupFilter is the EVENTS subjects the group partitions, by their
	// first wildcard: the phone number id.
	groupFilter = schema.SubjectEventsPrefix + "*.*"
	// groupBufferedMsgs bounds the group's work-queue stream. When it is
	// full the server pauses the sourcing, which resumes as members ack;
	// nothing is lost while WAHOOK_EVENTS still holds the events. It is
	// part of the group's configuration: changing it means deleting the
	// group.
	groupBufferedMsgs = 1_000_000
	// inboxSize bounds the messages handed from pcgroups' callback to
	// Run's loop; a full inbox blocks the callback, which holds the
	// consumer's pulls back.
	inboxSize = 512
	// notOwnedRetry is the delay of the redelivery of an event whose
	// number this instance no longer owns.
	notOwnedRetry = 250 * time.Millisecond
	// membersAttempts is how often SetMembers tries when other instances
	// change the membership at the same time.
	membersAttempts = 5
	// headerPinID names the pull client a message went to, on a consumer
	// with pinned priority (nats-server 2.11 and later).
	headerPinID = "Nats-Pin-Id"
	// stepDownTimeout bounds the unpinning of a stopped member's consumer.
	stepDownTimeout = 2 * time.Second
)

// errGroupDeleted ends Run when its consumer group is deleted.
var errGroupDeleted = errors.New("the consumer group was deleted")

// errPartitionsFixed: the group exists with another number of partitions;
// pcgroups cannot change it, so trying again cannot help.
var errPartitionsFixed = errors.New("the partitions of a consumer group are fixed")

// groupStream is the name of the work-queue stream of the consumer group
// group: pcgroups names it <stream>-<group>.
func groupStream(group string) string { return schema.StreamEvents + "-" + group }

// groupKey is the key of the group's configuration in groupBucket.
func groupKey(group string) string { return schema.StreamEvents + "." + group }

// ensureGroup creates the consumer group of c when it is absent, and with
// c.Members sets its membership. An existing group is kept as it is; one
// with another number of partitions is an error, since pcgroups cannot
// change it. A group made now sources WAHOOK_EVENTS from its first event,
// so its members replay what the stream holds (up to its max age).
func ensureGroup(ctx context.Context, js jetstream.JetStream, c Config) error {
	cur, err := pcgroups.GetElasticConsumerGroupConfig(ctx, js, schema.StreamEvents, c.Durable)
	if err == nil && cur.MaxMembers != uint(c.Partitions) {
		return fmt.Errorf("consumer group %s on %s has %d partitions, not %d: %w; "+
			"delete it to change them (pcgroups.DeleteElastic, or `cg elastic delete %s %s`)",
			c.Durable, schema.StreamEvents, cur.MaxMembers, c.Partitions, errPartitionsFixed, schema.StreamEvents, c.Durable)
	}
	filters := []pcgroups.PartitioningFilter{{Filter: groupFilter, PartitioningWildcards: []int{1}}}
	if _, err := pcgroups.CreateElastic(ctx, js, schema.StreamEvents, c.Durable, uint(c.Partitions), filters, groupBufferedMsgs, 0); err != nil {
		return fmt.Errorf("provision consumer group %s on %s: %w", c.Durable, schema.StreamEvents, err)
	}
	if len(c.Members) > 0 {
		return SetMembers(ctx, js, c.Durable, c.Members)
	}
	return nil
}

// SetMembers sets the membership of the stage 2 consumer group named group
// (Config.Durable) to members, when it differs: the partitions are shared
// among them, in the order of their sorted names (pcgroups' balanced
// distribution). Members that join get their partitions and members that
// leave lose them, each within about AckWait (Config.AckWait). pcgroups
// has no call that sets a membership, so SetMembers adds the new members
// before it drops the old ones: a change that does both moves partitions
// twice. Updates are compare-and-set; when other instances change the
// membership at the same time it reads it again and retries. A group whose
// partitions are mapped to members by hand (pcgroups.SetMemberMappings) is
// left as it is, with an error.
func SetMembers(ctx context.Context, js jetstream.JetStream, group string, members []string) error {
	if len(members) == 0 {
		return fmt.Errorf("set members of %s: no members", group)
	}
	var err error
	for attempt := 1; attempt <= membersAttempts; attempt++ {
		var cur *pcgroups.ElasticConsumerGroupConfig
		cur, err = pcgroups.GetElasticConsumerGroupConfig(ctx, js, schema.StreamEvents, group)
		if err != nil {
			return fmt.Errorf("set members of %s: %w", group, err)
		}
		if len(cur.MemberMappings) > 0 {
			return fmt.Errorf("set members of %s: its partitions are mapped to members by hand; delete the mappings first", group)
		}
		add, drop := membersDiff(cur.Members, members)
		if len(add) == 0 && len(drop) == 0 {
			return nil
		}
		if len(add) > 0 {
			_, err = pcgroups.AddMembers(ctx, js, schema.StreamEvents, group, add)
		}
		if err == nil && len(drop) > 0 {
			_, err = pcgroups.DeleteMembers(ctx, js, schema.StreamEvents, group, drop)
		}
		if err == nil {
			continue // read it again: another instance may have changed it too
		}
		// Most likely another instance updated it first: wait a little,
		// read it again.
		select {
		case <-ctx.Done():
			return fmt.Errorf("set members of %s: %w", group, ctx.Err())
		case <-time.After(time.Duration((50+rand.IntN(100))*attempt) * time.Millisecond):
		}
	}
	return fmt.Errorf("set members of %s: the membership did not settle in %d attempts: %w", group, membersAttempts, err)
}

// membersDiff is what to add to have to make want, and what to drop.
func membersDiff(have, want []string) (add, drop []string) {
	for _, m := range want {
		if !slices.Contains(have, m) && !slices.Contains(add, m) {
			add = append(add, m)
		}
	}
	for _, m := range have {
		if !slices.Contains(want, m) && !slices.Contains(drop, m) {
			drop = append(drop, m)
		}
	}
	return add, drop
}

// memberConsumer is the template of this member's consumer on the group's
// stream. pcgroups names it after the member and sets its filters (its
// partitions), its priority group (pinned: one instance of a member gets
// the messages at a time, for AckWait after its last pull) and its
// inactivity threshold (AckWait).
func memberConsumer(c Config) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Description:   "wahook stage 2: pacing state, member " + c.Member,
		DeliverPolicy: jetstream.DeliverAllPolicy, // a work queue: everything not acked yet
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxAckPending: c.MaxAckPending,
	}
}

// runGroup is Run with Config.Partitions. pcgroups delivers the messages
// of this member's partitions to a callback on its consumer's goroutine;
// the callback hands them to this loop over a bounded channel, so that
// the state stays on one goroutine, unlocked, as without partitions. The
// loop also follows the group's membership (ownership.go) and forgets the
// numbers of the partitions this instance loses.
func (s *Stage2) runGroup(ctx context.Context) error {
	if err := ensureGroup(ctx, s.js, s.cfg); err != nil {
		return err
	}
	own, err := watchOwnership(ctx, s.js, s.cfg)
	if err != nil {
		return err
	}
	defer own.stop()
	s.own = own
	if len(s.nums) > 0 {
		// Joining again, after its consumer failed: partitions may have
		// moved meanwhile, and the numbers of those it lost must not be
		// kept, nor written (their signals, stale, would be written over
		// their new owner's).
		if forgot := s.forgetNotOwned(ctx, false); forgot > 0 {
			s.log.Info("joined again without some partitions: their numbers forgotten", zap.String("member", s.cfg.Member),
				zap.Ints("partitions", own.list()), zap.Int("numbers_forgotten", forgot))
		}
	}

	// The messages of the partitions owned, before any is delivered: the
	// events wait in the queue meanwhile, not in AckWait. All of them, on
	// joining again too: a partition may have moved away and back while
	// this member was out, and reading known messages again is harmless.
	s.warmPartitions(ctx, own.list(), s.cfg.MemoryWarmup)
	s.m.partitions.Set(float64(own.count)) // once warmed

	inbox := make(chan jetstream.Msg, inboxSize)
	quit := make(chan struct{})
	deliver := func(msg jetstream.Msg) {
		select {
		case inbox <- msg:
		case <-quit: // Run returned: the message is redelivered after AckWait
		}
	}
	// pcgroups watches the group's configuration with the context it is
	// given, until that ends: one of this join's own, or each join again
	// would leave a watcher behind.
	joinCtx, leave := context.WithCancel(ctx)
	cc, err := pcgroups.ElasticConsume(joinCtx, s.js, schema.StreamEvents, s.cfg.Durable, s.cfg.Member, deliver, memberConsumer(s.cfg))
	if err != nil {
		leave()
		return fmt.Errorf("join consumer group %s as %s: %w", s.cfg.Durable, s.cfg.Member, err)
	}
	done := cc.Done()
	var pin string // the pin id of the messages this instance got
	defer func() {
		close(quit)
		cc.Stop()
		defer leave()
		if done != nil {
			<-done
		}
		s.stepDown(pin)
	}()
	s.log.Info("stage 2 started", zap.String("group", s.cfg.Durable), zap.String("stream", groupStream(s.cfg.Durable)),
		zap.String("member", s.cfg.Member), zap.Ints("partitions", own.list()))
	if own.count == 0 {
		s.log.Warn("this member owns no partition: it is not in the group's membership, or the group has more members than partitions",
			zap.String("group", s.cfg.Durable), zap.String("member", s.cfg.Member))
	}
	s.seedHeld(ctx)

	nextRefresh := time.Now().Add(s.cfg.Refresh)
	// The member's consumer is looked for every check: pcgroups makes it
	// again only when the membership changes, and its reader ends for good
	// when the consumer is deleted (by hand, or by the server once it is
	// inactive for its threshold).
	check := min(consumerCheck, s.cfg.StallAfter/2)
	nextCheck, missing := time.Now().Add(check), 0
	wake := func() time.Duration { return time.Until(minTime(s.nextWake(nextRefresh), nextCheck)) }
	timer := time.NewTimer(wake())
	defer timer.Stop()
	// stop writes what is pending and returns err; with ctx ended, nil:
	// the watchers (pcgroups' and ownership's) end with ctx too, and may be
	// seen first.
	stop := func(err error) error {
		ferr := s.lastFlush()
		if ctx.Err() != nil {
			if ferr != nil {
				return ferr
			}
			s.log.Info("stage 2 stopped")
			return nil
		}
		return &consumeError{err}
	}
	for {
		select {
		case <-ctx.Done():
			return stop(nil)
		case err := <-done:
			done = nil
			if err == nil {
				err = errGroupDeleted
			}
			return stop(fmt.Errorf("consume group %s: %w", s.cfg.Durable, err))
		case e, ok := <-own.w.Updates():
			if err := s.applyOwnership(ctx, e, ok); err != nil {
				return stop(err)
			}
		case msg := <-inbox:
			// A change of ownership goes first: the consumer that delivered
			// msg may be on its way out.
			if err := s.pollOwnership(ctx); err != nil {
				return stop(err)
			}
			if p := msg.Headers().Get(headerPinID); p != "" {
				pin = p
			}
			s.handle(ctx, msg)
		case <-timer.C:
			// As for a message: a partition that moved meanwhile is not
			// written by the tick.
			if err := s.pollOwnership(ctx); err != nil {
				return stop(err)
			}
		}
		now := time.Now()
		nextRefresh = s.tick(ctx, now, nextRefresh)
		if !now.Before(nextCheck) {
			if own.count > 0 && s.memberConsumerGone(ctx) {
				// Twice in a row: a membership change deletes the consumer
				// and makes it again in a moment.
				if missing++; missing >= 2 {
					return stop(fmt.Errorf("consume group %s: member %s: %w", s.cfg.Durable, s.cfg.Member, jetstream.ErrConsumerNotFound))
				}
			} else {
				missing = 0
			}
			nextCheck = now.Add(check)
		}
		timer.Reset(wake())
	}
}

// memberConsumerGone reports whether this member's consumer on the group's
// stream is known not to exist (an answer of not found; any other failure
// says nothing).
func (s *Stage2) memberConsumerGone(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.js.Consumer(ctx, groupStream(s.cfg.Durable), s.cfg.Member)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// consumeError is a failure of a group member that was consuming: Run
// joins the group again.
type consumeError struct{ err error }

func (e *consumeError) Error() string { return e.err.Error() }
func (e *consumeError) Unwrap() error { return e.err }

// stepDown unpins this member's consumer if its pinned client is this
// instance (pin, from the messages it got), once the instance has stopped
// pulling: the next instance of the member, restarted or standing by, is
// pinned at once, instead of after AckWait. It is best effort: without it
// the pin expires.
func (s *Stage2) stepDown(pin string) {
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepDownTimeout)
	defer cancel()
	c, err := s.js.Consumer(ctx, groupStream(s.cfg.Durable), s.cfg.Member)
	if err != nil {
		return
	}
	for _, pg := range c.CachedInfo().PriorityGroups {
		if pg.PinnedClientID != pin {
			continue
		}
		if err := pcgroups.ElasticMemberStepDown(ctx, s.js, schema.StreamEvents, s.cfg.Durable, s.cfg.Member); err != nil {
			s.log.Info("unpin the member's consumer", zap.String("member", s.cfg.Member), zap.Error(err))
		}
	}
}
