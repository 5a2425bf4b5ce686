package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/wahook/wahook/loadtest/campaign"
)

// runCampaign is "wahook loadtest campaign": a campaign through the Meta
// simulator (started in this process) with the naive and the paced sender
// side by side, against a running wahook (--url for the simulator's
// webhooks, --nats-url for the pacer's signal).
func runCampaign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("loadtest campaign", stderr)
	c := campaign.DefaultConfig()
	var secret, hashKey, dataDir, chart, senders string
	var asJSON bool
	var runID uint64
	f.StringVar(&c.WebhookURL, "url", "http://127.0.0.1:8080/webhook", "wahook's webhook endpoint (loopback only), where the simulator posts its webhooks")
	f.StringVar(&secret, "app-secret", "", "app secret the simulator signs its webhooks with (secret)")
	f.Secret("app-secret")
	f.StringVar(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS of the running wahook: the pacer reads wahook_pacing, wahook_pair_cooldown and wahook_accounts and reports send results there (secret: may hold credentials)")
	f.Secret("nats-url")
	f.StringVar(&hashKey, "phone-hash-key", "", "wahook's phone hash key, so that the pacer finds wahook's pair cool-downs (secret; empty: <data-dir>/phone-hash-key)")
	f.Secret("phone-hash-key")
	f.StringVar(&dataDir, "data-dir", "./data", "serve's data directory, read for the phone hash key when --phone-hash-key is not set")
	f.IntVar(&c.Messages, "messages", c.Messages, "messages each sender sends")
	f.IntVar(&c.Numbers, "numbers", c.Numbers, "numbers each sender sends from (each sender has its own)")
	f.IntVar(&c.Tier, "tier", c.Tier, "the numbers' tier in messages per second")
	f.IntVar(&c.Upgradable, "upgradable", c.Upgradable, "of the numbers, those that earn THROUGHPUT_UPGRADE (1,000 mps) once they sustain high use")
	f.Float64Var(&c.RepeatShare, "repeat-share", c.RepeatShare, "share of each number's recipients messaged repeatedly")
	f.IntVar(&c.RepeatCount, "repeat-count", c.RepeatCount, "messages each of those recipients gets (Meta's pair rule allows bursts of 45, then 1 per 6 s)")
	f.Float64Var(&c.RepeatWindow, "repeat-window", c.RepeatWindow, "width of the window of the plan's order (0 to 1) a repeated recipient's messages are placed in; they start below 0.6 minus it")
	f.IntVar(&c.Workers, "workers", c.Workers, "workers per number, both senders")
	f.Float64Var(&c.NaiveMPS, "naive-mps", c.NaiveMPS, "the naive sender's fixed rate per number")
	f.IntVar(&c.NaiveAttempts, "naive-attempts", c.NaiveAttempts, "the naive sender's most sends of one message (rate-limit errors retried at once)")
	f.StringVar(&senders, "senders", "naive,paced", "the senders to run side by side")
	f.Float64Var(&c.Sim.ReplyShare, "reply-share", c.Sim.ReplyShare, "simulator: read messages answered with an inbound reply")
	f.Func("failure-mix", "simulator: async failures by code (default 131049=1%,131026=0.5%; none)", func(v string) error {
		m, err := parseFailures(v)
		c.Sim.Failures = m
		return err
	})
	f.DurationVar(&c.Sim.UpgradeAfter, "upgrade-after", c.Sim.UpgradeAfter, "simulator: sustained use that earns the upgrade")
	f.DurationVar(&c.Sim.UpgradeMaintenance, "upgrade-maintenance", c.Sim.UpgradeMaintenance, "simulator: 131057 for this long after the upgrade (Meta: up to a minute)")
	f.Uint64Var(&runID, "run-id", 0, "id the numbers' ids carry, up to 8 digits (0: random)")
	f.Uint64Var(&c.Seed, "seed", 0, "seed of the plan and the simulator (0: the run id)")
	f.DurationVar(&c.Timeout, "timeout", c.Timeout, "longest the campaign may take")
	f.StringVar(&chart, "chart", "", "write the rate over time against the tier line, with the errors, to this SVG file")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	c.RunID = uint32(min(runID, 1<<32-1))
	if runID > 99_999_999 {
		return fmt.Errorf("%w: --run-id: up to 8 digits", errUsage)
	}
	c.Senders = splitList(senders)
	c.AppSecret = []byte(secret)
	if strings.Contains(senders, "paced") {
		key, err := phoneHashKey(hashKey, dataDir, false)
		if err != nil {
			fmt.Fprintf(stderr, "loadtest campaign: no phone hash key (%v): the pacer keeps its own pair rule but cannot match wahook's cool-downs\n", err)
		} else {
			c.PhoneHashKey = key
		}
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	started := time.Now()
	fmt.Fprintf(stderr, "loadtest campaign: %d messages per sender over %d numbers, senders %s\n", c.Messages, c.Numbers, strings.Join(c.Senders, ", "))
	rep, err := campaign.Run(ctx, c)
	err = redactNATSError(err) // its connection's error may quote --nats-url
	if rep == nil {
		return err
	}
	if chart != "" {
		out, cerr := os.Create(chart)
		if cerr != nil {
			return cerr
		}
		if cerr := rep.WriteChart(out); cerr != nil {
			out.Close()
			return cerr
		}
		if cerr := out.Close(); cerr != nil {
			return cerr
		}
	}
	if asJSON {
		if jerr := rep.WriteJSON(stdout); jerr != nil {
			return jerr
		}
	} else {
		rep.WriteText(stdout)
	}
	fmt.Fprintf(stderr, "loadtest campaign: done in %v\n", time.Since(started).Round(time.Millisecond))
	return err
}
