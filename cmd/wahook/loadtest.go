package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/loadtest"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/stage2"
	"github.com/wahook/wahook/schema"
)

// runLoadtest sends signed webhook traffic to an endpoint on this machine and
// reports rate, latency and Meta's verdict; with --numbers it sends traffic
// shaped like Meta's, keeps a ledger of what got a 200, and with
// --check-clickhouse-dsn checks ClickHouse against it once the service has
// drained. With --baseline-listen it instead serves the bare Fiber handler
// that figures are quoted against.
func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "campaign" {
		return runCampaign(ctx, args[1:], stdout, stderr)
	}
	f := newFlags("loadtest", stderr)
	c := loadtest.DefaultConfig()
	m := loadtest.DefaultModel()
	check := loadtest.DefaultCheckConfig()
	var secret, baseline, chart, dsn, capacityOut string
	var asJSON bool
	f.StringVar(&c.URL, "url", "http://127.0.0.1:8080/webhook", "webhook endpoint (loopback only); several, comma-separated: requests spread over them in turn and a retry goes to the next, as behind a load balancer")
	f.StringVar(&secret, "app-secret", "", "app secret to sign the bodies with (secret)")
	f.Secret("app-secret")
	f.Float64Var(&c.Rate, "rate", 0, "without --numbers: arrival rate in requests/s, open loop (0: closed loop, as fast as the connections allow)")
	f.DurationVar(&c.Duration, "duration", c.Duration, "how long to send")
	f.IntVar(&c.Connections, "connections", c.Connections, "most requests in flight")
	f.DurationVar(&c.Timeout, "timeout", c.Timeout, "client timeout of one request")
	f.IntVar(&c.Attempts, "attempts", c.Attempts, "most posts of one body: a non-200 or no answer is posted again, as Meta retries")
	f.DurationVar(&c.RetryBackoff, "retry-backoff", c.RetryBackoff, "wait before the first retry of a body; doubles each time")
	f.IntVar(&c.BodyBytes, "body-bytes", c.BodyBytes, "without --numbers: approximate size of each status webhook")
	f.StringVar(&c.MetricsURL, "metrics-url", "", "the service's Prometheus endpoint, read for its CPU time (default: /metrics beside --url; - skips)")
	// The plain status bodies unless --numbers asks for the model; a
	// quarter of the numbers are coexistence numbers unless told.
	m.Numbers, m.Coexistence = 0, -1
	modelFlags(f, &m, "business numbers sending traffic shaped like Meta's (0: the plain status bodies of --rate)", true)
	f.StringVar(&chart, "chart", "", "write the latency over time (p50, p99, max per second; Meta's 250 ms line) to this SVG file")
	f.StringVar(&dsn, "check-clickhouse-dsn", "", "after the run, wait for the service to drain and check that ClickHouse holds every event that got a 200 exactly once (needs --numbers; secret: may hold a password)")
	f.Secret("check-clickhouse-dsn")
	f.DurationVar(&check.Timeout, "check-timeout", check.Timeout, "longest wait for the service to drain before the check")
	f.DurationVar(&check.Quiet, "check-quiet", check.Quiet, "stop waiting once the counts in ClickHouse have not changed for this long (and, with --check-nats-url, stage 1 has nothing pending)")
	var checkNATS, pacingNATS string
	f.StringVar(&pacingNATS, "check-pacing-nats-url", "", "after the run, wait until the service has applied every event, then compare each number's pacing signal in "+schema.BucketPacing+" with the ledger: its 1, 10 and 60 s rates must be exact (needs --numbers; run it within a minute of the end; secret: may hold credentials)")
	f.Secret("check-pacing-nats-url")
	f.StringVar(&checkNATS, "check-nats-url", "", "NATS of the service under test: the check waits until stage 1's consumer has nothing pending, however long the counts stand still (a crash's redelivery waits out --ack-wait; secret: may hold credentials)")
	f.Secret("check-nats-url")
	f.StringVar(&capacityOut, "capacity-out", "", "write the per-core capacity this run measured (and ClickHouse bytes per row, with the check) to this JSON file, for wahook sizing --capacity")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&baseline, "baseline-listen", "", "serve a bare Fiber handler (200 to every POST /webhook) on this address until interrupted")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if baseline != "" {
		ln, err := net.Listen("tcp", baseline)
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); ln.Close() }()
		fmt.Fprintf(stderr, "baseline: bare Fiber handler on %s\n", ln.Addr())
		_ = loadtest.ServeBaseline(ln)
		return nil
	}
	c.Secret = []byte(secret)
	if m.Numbers > 0 {
		if err := validModel(&m); err != nil {
			return err
		}
		c.Traffic = &m
	} else if dsn != "" {
		return fmt.Errorf("%w: --check-clickhouse-dsn needs the traffic model (--numbers) and its ledger", errUsage)
	} else if pacingNATS != "" {
		return fmt.Errorf("%w: --check-pacing-nats-url needs the traffic model (--numbers) and its ledger", errUsage)
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	res, err := loadtest.Run(ctx, c)
	if err != nil {
		return err
	}
	s := res.Summary()
	if chart != "" {
		if err := writeChart(chart, s); err != nil {
			return err
		}
	}
	if s.Interrupted {
		// Partial figures are printed, marked, and the command fails: the
		// checks would read a run cut short, and a script must not take
		// the figures for a whole run.
		if err := writeSummary(stdout, s, asJSON); err != nil {
			return err
		}
		return fmt.Errorf("interrupted after %.1fs of %v: the figures are partial, the checks were not run", s.DurationS, c.Duration)
	}
	if pacingNATS != "" {
		// First: the signals' windows are the last minute.
		if s.Pacing, err = checkPacingSignals(ctx, pacingNATS, res.Ledger, check.Timeout); err != nil {
			return fmt.Errorf("pacing check: %w", err)
		}
	}
	if dsn != "" {
		fmt.Fprintf(stderr, "loadtest: %d events got a 200; waiting for ClickHouse to hold them (up to %v)\n",
			s.Traffic.Acked.Events, check.Timeout)
		conn, db, err := loadtest.OpenClickHouse(ctx, dsn)
		if err != nil {
			return err
		}
		check.Since = res.Started
		if checkNATS != "" {
			nc, err := nats.Connect(checkNATS)
			if err != nil {
				conn.Close()
				return fmt.Errorf("--check-nats-url: %w", redactNATSError(err))
			}
			defer nc.Close()
			check.Backlog = stage1Backlog(nc)
		}
		s.Check, err = loadtest.Check(ctx, conn, db, res.Ledger, check)
		conn.Close()
		if err != nil {
			return fmt.Errorf("end-to-end check: %w", err)
		}
		if s.Check.Drained {
			// The service's CPU through the drain: the cost of the
			// requests, the backlog they left included.
			s.SetDrainedCPU(res.CPUSinceStart(ctx))
		}
	}
	if err := writeSummary(stdout, s, asJSON); err != nil {
		return err
	}
	if capacityOut != "" {
		capacity, err := loadtest.CapacityFrom(s)
		if err != nil {
			return fmt.Errorf("--capacity-out: %w", err)
		}
		if err := loadtest.WriteCapacity(capacityOut, capacity); err != nil {
			return err
		}
	}
	if p := s.Pacing; p != nil && !p.OK() {
		if p.Exact != p.Numbers {
			return fmt.Errorf("pacing check failed: %d of %d numbers' signals differ from the ledger", p.Numbers-p.Exact, p.Numbers)
		}
		return fmt.Errorf("pacing check inconclusive: %s", p.Inconclusive)
	}
	if s.Check != nil && !s.Check.OK() {
		return fmt.Errorf("end-to-end check failed: lost %d, duplicates %d, failure distribution matches: %v",
			s.Check.Lost, s.Check.Duplicates, s.Check.FailuresMatch)
	}
	return nil
}

// writeSummary writes s as JSON or for people.
func writeSummary(w io.Writer, s loadtest.Summary, asJSON bool) error {
	if asJSON {
		return s.WriteJSON(w)
	}
	s.WriteText(w)
	return nil
}

// parseFlags parses args; a value the flag package refuses is bad usage
// (exit code 2), like every other configuration error.
func parseFlags(f *flags, args []string) error {
	err := f.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsage) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

func writeChart(path string, s loadtest.Summary) error {
	title := fmt.Sprintf("wahook loadtest %s: %.0f req/s, p50 %.1f ms, p99 %.1f ms, max %.0f ms", s.Mode, s.RatePerS, s.P50Ms, s.P99Ms, s.MaxMs)
	if n := s.Sent - s.OK; n > 0 {
		title += fmt.Sprintf(", %d not 200", n)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := loadtest.WriteChart(out, title, s.Timeline); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// modelFlags defines the traffic model's flags on f, filling m.
// forRun adds the flags that only a run uses (Meta's duplicates, events,
// delays, ids).
func modelFlags(f *flags, m *loadtest.Model, numbersUsage string, forRun bool) {
	f.IntVar(&m.Numbers, "numbers", m.Numbers, numbersUsage)
	f.IntVar(&m.Coexistence, "coexistence", m.Coexistence, "of the numbers, coexistence numbers (20 mps; some outbound as smb_message_echoes; -1: one in four)")
	f.IntVar(&m.Upgraded, "upgraded", m.Upgraded, "of the numbers, numbers already upgraded to 1,000 mps (the others have 80)")
	f.IntVar(&m.WABAs, "wabas", m.WABAs, "WhatsApp Business Accounts the numbers belong to (0: one per four numbers)")
	f.Float64Var(&m.OutboundMPS, "outbound-mps", m.OutboundMPS, "messages each number sends per second, each giving sent, delivered and read statuses (held to the number's tier)")
	f.Float64Var(&m.InboundMPS, "inbound-mps", m.InboundMPS, "inbound messages per second over all numbers (0: --reply-rate of the outbound)")
	f.Float64Var(&m.ReplyRate, "reply-rate", m.ReplyRate, "inbound messages per outbound message")
	f.Float64Var(&m.ReadShare, "read-share", m.ReadShare, "share of delivered messages that are read")
	f.Func("failure-mix", "share of messages that fail, by error code: 131049=2%,130429=0.5% (none: no failures; default "+m.Failures.String()+")", func(v string) error {
		fm, err := loadtest.ParseFailureMix(v)
		m.Failures = fm
		return err
	})
	f.Float64Var(&m.EchoShare, "echo-share", m.EchoShare, "share of a coexistence number's outbound typed in the Business app")
	f.IntVar(&m.PerPost, "statuses-per-post", m.PerPost, "most statuses, messages or events in one POST; each POST takes 1 to this many")
	if !forRun {
		return
	}
	f.Float64Var(&m.RetryShare, "retry-share", m.RetryShare, "share of POSTs Meta posts again, byte for byte, after a 200")
	f.Float64Var(&m.RepeatShare, "repeat-share", m.RepeatShare, "share of statuses that come again inside another POST")
	f.DurationVar(&m.QualityEvery, "quality-every", m.QualityEvery, "one phone_number_quality_update (FLAGGED, UNFLAGGED, ...) per period, numbers in turn (0: none)")
	f.DurationVar(&m.UpgradeEvery, "upgrade-every", m.UpgradeEvery, "one THROUGHPUT_UPGRADE per period for the next 80 mps number (0: none)")
	d := m.Delays
	f.Func("delays", fmt.Sprintf("median delays: sent=%v,delivered=%v,read=%v,failed=%v,max=%v", d.Sent, d.Delivered, d.Read, d.Failed, d.Max),
		func(v string) error { return parseDelays(v, &m.Delays) })
	f.Func("run-id", "id that this run's phone number, WABA and message ids carry, up to 8 digits (default: random)", func(v string) error {
		id, err := strconv.ParseUint(v, 10, 32)
		if err != nil || id > 99_999_999 {
			return errors.New("want a number of up to 8 digits")
		}
		m.RunID = uint32(id)
		return nil
	})
	f.Uint64Var(&m.Seed, "seed", 0, "seed of the traffic's random choices (0: from the run id)")
}

// validModel completes and checks m after Parse.
func validModel(m *loadtest.Model) error {
	if m.Coexistence < 0 {
		m.Coexistence = m.Numbers / 4
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: traffic model: %v", errUsage, err)
	}
	return nil
}

// parseDelays reads "sent=300ms,read=10s" into d.
func parseDelays(v string, d *loadtest.Delays) error {
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return errors.New("want NAME=DURATION,...")
		}
		dur, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil {
			return err
		}
		switch strings.TrimSpace(k) {
		case "sent":
			d.Sent = dur
		case "delivered":
			d.Delivered = dur
		case "read":
			d.Read = dur
		case "failed":
			d.Failed = dur
		case "max":
			d.Max = dur
		default:
			return fmt.Errorf("unknown delay %q (sent, delivered, read, failed, max)", k)
		}
	}
	return nil
}

// stage1Backlog reads what stage 1 has yet to take from RAW: its durable
// consumer's pending and unacked messages.
// checkPacingSignals runs loadtest.CheckPacing against the service's NATS at url.
func checkPacingSignals(ctx context.Context, url string, l *loadtest.Ledger, timeout time.Duration) (*loadtest.PacingResult, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, redactNATSError(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stage1 := stage1Backlog(nc)
	cfg := loadtest.PacingCheckConfig{
		Timeout: timeout,
		Backlog: func(ctx context.Context) (uint64, error) {
			n, err := stage1(ctx)
			if err != nil {
				return 0, err
			}
			cons, err := js.Consumer(ctx, schema.StreamEvents, stage2.DefaultConfig().Durable)
			if err != nil {
				return 0, fmt.Errorf("stage 2's consumer (a consumer group is not checked): %w", err)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				return 0, err
			}
			return n + info.NumPending + uint64(info.NumAckPending), nil
		},
		Signal: func(ctx context.Context, id string) (schema.PacingSignal, error) { return readSignal(ctx, js, id) },
	}
	return loadtest.CheckPacing(ctx, l, cfg)
}

// readSignal reads a number's pacing signal from wahook_pacing.
func readSignal(ctx context.Context, js jetstream.JetStream, number string) (schema.PacingSignal, error) {
	var sig schema.PacingSignal
	kv, err := js.KeyValue(ctx, schema.BucketPacing)
	if err != nil {
		return sig, err
	}
	e, err := kv.Get(ctx, schema.PacingKey(number))
	if err != nil {
		return sig, err
	}
	err = json.Unmarshal(e.Value(), &sig)
	return sig, err
}

func stage1Backlog(nc *nats.Conn) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return 0, err
		}
		cons, err := js.Consumer(ctx, schema.StreamRaw, processor.DefaultConfig().Consumer)
		if err != nil {
			return 0, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.NumPending + uint64(info.NumAckPending), nil
	}
}
