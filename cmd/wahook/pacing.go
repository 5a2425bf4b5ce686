package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/stage2"
	"github.com/wahook/wahook/schema"
)

// pacingOptions are the flags of stage 2: each number's throughput, tier
// and quality state, published as its pacing signal.
type pacingOptions struct {
	cfg      stage2.Config
	tiers    *stringList // --number-tier, shared with the API's options
	levels   *tierLevels // --tier-default, --tier-upgraded, --tier-coexistence, shared too
	members  string
	disabled bool
}

func (o *pacingOptions) register(f *flags) {
	f.Section("stage 2: pacing signal", func() {
		o.cfg = stage2.DefaultConfig()
		f.BoolVar(&o.disabled, "no-pacing", false, "run without stage 2 (no pacing signals in "+schema.BucketPacing+")")
		registerTierLevels(f, &o.levels)
		registerNumberTier(f, &o.tiers)
		f.DurationVar(&o.cfg.Coalesce, "pacing-coalesce", o.cfg.Coalesce, fmt.Sprintf("least time between two writes of one number's signal (at most %s: the events a write carries are acked once it is stored)", o.cfg.AckWait/4))
		f.DurationVar(&o.cfg.Refresh, "pacing-refresh", o.cfg.Refresh, "how often an active number's signal is written again while its rates change")
		f.DurationVar(&o.cfg.SignalTTL, "pacing-ttl", o.cfg.SignalTTL, "how long a number's last signal stays in "+schema.BucketPacing+" after its last write; a number without events for that long is forgotten")
		f.DurationVar(&o.cfg.MessageMemory, "stage2-message-memory", o.cfg.MessageMemory, "how long stage 2 remembers a message it counted: a message counts once, at its first evidence (send result, any status, echo), and its later statuses within this time (and up to 64 s more) do not count it again (about 15 bytes per message)")
		f.DurationVar(&o.cfg.MemoryWarmup, "stage2-memory-warmup", o.cfg.MemoryWarmup, "at the start, how long stage 2 may read EVENTS back (the message memory's span, up to what its consumer acked), consuming nothing meanwhile, to remember the messages counted before the start so that their later statuses do not count them again; the newest part when it cannot read all (0: not at all); a group member (--stage2-partitions) reads so for the partitions it gains, at the start and at each handover")
		f.DurationVar(&o.cfg.StallAfter, "stage2-stall-after", o.cfg.StallAfter, "how long stage 2 waits for an event while its consumer holds events and no pull request waits for them before it reads the consumer again (a pull request lost with a NATS node is never answered)")
		f.IntVar(&o.cfg.Partitions, "stage2-partitions", 0, "share the numbers among several stage 2 instances in this many partitions, fixed for the group's life (0: this instance owns every number)")
		f.StringVar(&o.cfg.Member, "stage2-member", "", "with --stage2-partitions: this instance's member name in the group")
		f.StringVar(&o.members, "stage2-members", "", "with --stage2-partitions: every member's name, comma-separated; set as the group's membership at start (empty: leave it as it is)")
	})
}

// build parses the overrides and validates the configuration.
func (o *pacingOptions) build() error {
	ov, err := parseTierOverrides(*o.tiers)
	if err != nil {
		return err
	}
	o.cfg.Tiers.Overrides = ov
	o.cfg.Tiers.Default, o.cfg.Tiers.Upgraded, o.cfg.Tiers.Coexistence = o.levels.Default, o.levels.Upgraded, o.levels.Coexistence
	if o.members != "" {
		o.cfg.Members = strings.Split(o.members, ",")
	}
	if err := o.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// registerNumberTier defines --number-tier, the one flag of a number's tier
// for the pacing signal and the reports alike, with --tier-override as its
// old spelling, unless f has it already: dst then shares its values.
func registerNumberTier(f *flags, dst **stringList) {
	if fl := f.Lookup("number-tier"); fl != nil {
		*dst = fl.Value.(*stringList)
		return
	}
	*dst = new(stringList)
	f.ListVar(*dst, "number-tier", "PHONE_NUMBER_ID=MPS: this number's throughput tier, whatever its webhooks say, in the pacing signal and the reports; repeat for several numbers")
	f.ListVar(*dst, "tier-override", "the old spelling of --number-tier")
}

// tierLevels are the tiers of numbers by kind, the values of --tier-default,
// --tier-upgraded and --tier-coexistence: one set per command, read by the
// pacing signal and by the reports alike (serve's API took Meta's tiers
// while its signal took the flags).
type tierLevels struct{ Default, Upgraded, Coexistence int }

// levelFlag is one of tierLevels' flags.
type levelFlag struct {
	levels *tierLevels
	p      *int
}

func (v levelFlag) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v levelFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a whole number of messages per second", s)
	}
	*v.p = n
	return nil
}

// registerTierLevels defines the tier flags, or when the command has them
// already (serve: the API's options and the pacing options), points dst at
// theirs.
func registerTierLevels(f *flags, dst **tierLevels) {
	if fl := f.Lookup("tier-default"); fl != nil {
		*dst = fl.Value.(levelFlag).levels
		return
	}
	l := &tierLevels{Default: schema.TierDefaultMPS, Upgraded: schema.TierUpgradedMPS, Coexistence: schema.TierCoexistenceMPS}
	*dst = l
	f.Var(levelFlag{l, &l.Default}, "tier-default", "throughput tier of a number, messages per second (in and out together), in the pacing signal and the reports")
	f.Var(levelFlag{l, &l.Upgraded}, "tier-upgraded", "tier of a number after THROUGHPUT_UPGRADE")
	f.Var(levelFlag{l, &l.Coexistence}, "tier-coexistence", "tier of a number also on the WhatsApp Business app")
}

// tierFlag names the flag in errors, with its old spelling.
const tierFlag = "--number-tier (--tier-override)"

// parseTierOverrides reads --number-tier values, PHONE_NUMBER_ID=MPS.
func parseTierOverrides(values []string) (map[string]int, error) {
	if len(values) == 0 {
		return nil, nil
	}
	m := make(map[string]int, len(values))
	for _, v := range values {
		id, mps, ok := strings.Cut(v, "=")
		n, err := strconv.Atoi(mps)
		switch {
		case !ok || id == "":
			return nil, fmt.Errorf("%w: %s %q: want PHONE_NUMBER_ID=MPS", errUsage, tierFlag, v)
		case strings.ContainsAny(id, ".*> \t"):
			return nil, fmt.Errorf("%w: %s %q: %q is not a phone number id", errUsage, tierFlag, v, id)
		case err != nil || n < 1:
			return nil, fmt.Errorf("%w: %s %q: the tier must be a positive number of messages per second", errUsage, tierFlag, v)
		}
		if _, dup := m[id]; dup {
			return nil, fmt.Errorf("%w: %s: %s given twice", errUsage, tierFlag, id)
		}
		m[id] = n
	}
	return m, nil
}

// runStage2 provisions WAHOOK_EVENTS if absent (stage 2 does not wait for
// stage 1's ClickHouse) and runs stage 2 until ctx ends; it reports on done.
func runStage2(ctx context.Context, log *zap.Logger, nc *nats.Conn, o *pacingOptions, events processor.EventsConfig,
	replicas int, reg prometheus.Registerer, done chan<- error) {
	js, err := jetstream.New(nc)
	if err != nil {
		done <- err
		return
	}
	wait := time.Second
	for {
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = processor.EnsureEventsStream(ectx, js, events, false)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		log.Warn("stage 2: JetStream not ready", zap.Error(err), zap.Duration("retry_in", wait))
		sleepCtx(ctx, wait)
		wait = min(2*wait, 30*time.Second)
	}
	if ctx.Err() != nil {
		done <- nil
		return
	}
	cfg := o.cfg
	cfg.Replicas = replicas
	s2, err := stage2.New(cfg, js, reg, log)
	if err != nil {
		done <- err
		return
	}
	done <- s2.Run(ctx)
}

// enabled reports whether stage 2 runs beside stage 1: it needs stage 1's
// events.
func (o *pacingOptions) enabled(po *processOptions, log *zap.Logger) bool {
	switch {
	case o.disabled:
		log.Info("stage 2 off: --no-pacing")
	case po.disabled:
		log.Info("stage 2 off: --no-process")
	case !po.cfg.PublishEvents:
		log.Info("stage 2 off: --publish-events=false, so no events reach it")
	default:
		return true
	}
	return false
}
