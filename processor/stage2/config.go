package stage2

import (
	"errors"
	"fmt"
	"time"

	"github.com/wahook/wahook/processor/pacing"
	"github.com/wahook/wahook/schema"
)

// Config configures stage 2.
type Config struct {
	// Tiers are the throughput tiers and per-number overrides.
	Tiers pacing.Tiers
	// Coalesce is the least time between two writes of one number's signal:
	// the first change after a quiet spell is written at once, later ones
	// at most once per Coalesce.
	Coalesce time.Duration
	// Refresh is how often a number's signal is written again while its
	// rates change without events: during the minute after its last
	// traffic (so the observed rates decay to 0 in the KV), and while an
	// error, maintenance window or stop still shapes its advice.
	Refresh time.Duration
	// Durable is the durable consumer's name on WAHOOK_EVENTS; with
	// Partitions, the name of the consumer group, whose work queue is the
	// stream WAHOOK_EVENTS-<Durable> (group.go).
	Durable string
	// FilterSubjects are the EVENTS subjects this instance consumes
	// without Partitions: every number by default. With Partitions they
	// must be that default: the group partitions every number.
	FilterSubjects []string

	// Partitions, when positive, shares the numbers among several
	// instances, each number owned by one of them: the EVENTS subjects are
	// hashed by phone number id into Partitions partitions, and this
	// instance consumes the partitions the group's membership gives to
	// Member (an elastic partitioned consumer group of
	// github.com/synadia-io/orbit.go/pcgroups, named Durable). It is the
	// group's largest number of members, and it is fixed for the life of
	// the group: Run fails when the group has another. 0, the default,
	// consumes every number with the durable consumer Durable, as on one
	// machine.
	Partitions int
	// Member is this instance's name in the group; required with
	// Partitions. Two instances with one name are one member: one of them
	// gets its partitions, the other stands by and takes over when the
	// first stops pulling (after AckWait).
	Member string
	// Members is the group's membership, with Partitions: Run sets the
	// group's to it when it differs, so every instance should be given the
	// same list. Empty leaves the membership as the group has it (set by
	// another instance, by SetMembers or by the pcgroups CLI).
	Members []string

	// MaxAckPending bounds the events fetched and not yet acked.
	MaxAckPending int
	// StallAfter is how long stage 2 waits for an event while its
	// consumer holds events and no pull request waits for them (two
	// checks in a row saw it, not paused) before it reads the consumer
	// again: a pull request lost with the consumer's leader is never
	// answered. The reader (internal/pullreader, or pcgroups for a
	// partitioned stage 2, both on nats.go's Consume) pulls again once it
	// misses two of the server's heartbeats on it; this rule is the second
	// line.
	StallAfter time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering.
	// With Partitions it also times the hand-over (pcgroups): a stopped
	// member's consumer goes after AckWait without pulls, and a member
	// whose new partitions are still held retries every AckWait + 0.5 s.
	AckWait time.Duration
	// Replicas are the replicas of the KV buckets when stage 2 creates them
	// (1 on one machine, 3 on a cluster).
	Replicas int
	// SignalTTL is how long a number's last signal stays in wahook_pacing
	// after its last write: a number without any event for that long is
	// forgotten (its next event starts from the defaults), so that the
	// bucket does not keep, and a restart reload, numbers long gone. A
	// number with traffic is written every Refresh.
	SignalTTL time.Duration
	// MessageMemory is how long stage 2 remembers a message it counted
	// (pacing.Deduper): a message counts once, at its first evidence (a
	// send result, any status, an echo), and its statuses within
	// MessageMemory after that (and up to 64 s more: the memory is kept by
	// epochs of 64 s) do not count it again. A status later than that (a
	// read hours after the send) would count it once more.
	MessageMemory time.Duration
	// MemoryWarmup bounds the time stage 2 spends at its start reading
	// EVENTS back to fill its message memory with the messages counted
	// before it started (warmMemory); 0 reads nothing, and a later status
	// of a message sent before a restart counts that message again. A
	// group member (Partitions) reads so for each partition it gains, at
	// its start and at each handover (warmPartitions).
	MemoryWarmup time.Duration
	// Now is the clock of the signals (updated_at, the end of the windows,
	// the expiry of cool-downs); time.Now unless a test sets it. Timers
	// (coalescing, refreshes) use the real clock.
	Now func() time.Time
}

// DefaultConfig returns the one-machine defaults.
func DefaultConfig() Config {
	return Config{
		Tiers:          pacing.DefaultTiers(),
		Coalesce:       100 * time.Millisecond,
		Refresh:        time.Second,
		Durable:        "wahook_stage2",
		FilterSubjects: []string{schema.SubjectEventsAll},
		MaxAckPending:  10_000,
		StallAfter:     30 * time.Second,
		AckWait:        30 * time.Second,
		Replicas:       1,
		SignalTTL:      30 * 24 * time.Hour,
		MessageMemory:  pacing.DefaultMessageMemory,
		MemoryWarmup:   10 * time.Second,
		Now:            time.Now,
	}
}

// maxPartitions bounds Config.Partitions: each partition an instance owns
// is a filter subject of its consumer, and a few hundred keep that cheap.
const maxPartitions = 256

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.Durable == "":
		return errors.New("durable consumer name must not be empty")
	case len(c.FilterSubjects) == 0:
		return errors.New("filter subjects must not be empty")
	case c.Partitions < 0 || c.Partitions > maxPartitions:
		return fmt.Errorf("partitions must be between 0 and %d", maxPartitions)
	case c.Partitions == 0 && (c.Member != "" || len(c.Members) > 0):
		return errors.New("member and members need partitions")
	case c.Partitions > 0:
		if err := c.validateGroup(); err != nil {
			return err
		}
	}
	switch {
	case c.Coalesce <= 0:
		return errors.New("coalesce interval must be positive")
	case c.Refresh < c.Coalesce:
		return errors.New("refresh interval must not be shorter than the coalesce interval")
	case c.MaxAckPending < 1:
		return errors.New("max ack pending must be positive")
	case c.StallAfter < time.Second:
		return fmt.Errorf("stall after %s: use at least 1s", c.StallAfter)
	case c.MessageMemory < 0:
		return errors.New("message memory must not be negative")
	case c.MemoryWarmup < 0:
		return errors.New("memory warm-up must not be negative")
	case c.AckWait < time.Second:
		return errors.New("ack wait must be at least 1s")
	case c.Coalesce > c.AckWait/4:
		// A message's ack waits for its number's next write: at most
		// Coalesce, and the write's own ack, well inside AckWait.
		return fmt.Errorf("coalesce interval %s must be at most %s, a quarter of the ack wait (%s)", c.Coalesce, c.AckWait/4, c.AckWait)
	case c.SignalTTL < time.Hour:
		return errors.New("signal TTL must be at least an hour")
	case c.Replicas < 1:
		return errors.New("replicas must be positive")
	case c.Tiers.Default < 1 || c.Tiers.Upgraded < 1 || c.Tiers.Coexistence < 1:
		return errors.New("tiers must be positive")
	}
	return nil
}

// validateGroup reports the first problem of c's partitioning.
func (c Config) validateGroup() error {
	switch {
	case !validName(c.Durable):
		return fmt.Errorf("durable consumer name %q names the consumer group: it must be 1 to 64 ASCII letters, digits, '-' or '_'", c.Durable)
	case len(c.FilterSubjects) != 1 || c.FilterSubjects[0] != schema.SubjectEventsAll:
		return errors.New("filter subjects cannot be combined with partitions: the group partitions every number")
	case c.Member == "":
		return errors.New("member must not be empty with partitions")
	case !validName(c.Member):
		return fmt.Errorf("member %q: a member name must be 1 to 64 ASCII letters, digits, '-' or '_'", c.Member)
	case len(c.Members) > c.Partitions:
		return fmt.Errorf("%d members for %d partitions: members must not outnumber partitions", len(c.Members), c.Partitions)
	}
	if len(c.Members) == 0 {
		return nil
	}
	seen := map[string]bool{}
	for _, m := range c.Members {
		switch {
		case !validName(m):
			return fmt.Errorf("member %q: a member name must be 1 to 64 ASCII letters, digits, '-' or '_'", m)
		case seen[m]:
			return fmt.Errorf("member %q is listed twice", m)
		}
		seen[m] = true
	}
	if !seen[c.Member] {
		return fmt.Errorf("member %q must be one of the members %v", c.Member, c.Members)
	}
	return nil
}

// validName reports whether name can name a consumer group or a member: it
// becomes part of a stream name, a consumer name and a KV key.
func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
