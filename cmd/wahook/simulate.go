package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/loadtest/simulate"
)

// runSimulate serves the Meta Cloud API simulator on loopback until
// interrupted, posting signed webhooks of what happens to --url.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("simulate", stderr)
	c := simulate.DefaultConfig()
	var secret, configFile, statsPath string
	var numbers, upgradable, tier int
	var runID uint64
	f.StringVar(&configFile, "config", "", "a file of flags, one 'name value' (or name=value) a line, # comments; the command line wins")
	f.StringVar(&c.Listen, "listen", "127.0.0.1:8090", "the Graph API's address (loopback only): POST /{version}/{phone_number_id}/messages")
	f.StringVar(&c.WebhookURL, "url", "", "wahook's webhook endpoint (loopback only) that gets the signed webhooks; empty: none")
	f.StringVar(&secret, "app-secret", "", "app secret the webhooks are signed with (secret)")
	f.Secret("app-secret")
	f.IntVar(&numbers, "numbers", 10, "business numbers")
	f.IntVar(&upgradable, "upgradable", 1, "of them, numbers that earn THROUGHPUT_UPGRADE once they sustain high use")
	f.IntVar(&tier, "tier", simulate.DefaultTier, "the numbers' tier in messages per second (80; 20 for coexistence numbers)")
	f.Uint64Var(&runID, "run-id", 1, "id the numbers' ids carry, up to 8 digits: phone number ids 7RRRRRRRRNNNNNN")
	f.Uint64Var(&c.Seed, "seed", 1, "seed of the per-message random choices")
	f.Float64Var(&c.DeliveredShare, "delivered-share", c.DeliveredShare, "accepted messages delivered")
	f.Float64Var(&c.ReadShare, "read-share", c.ReadShare, "delivered messages read")
	f.Float64Var(&c.ReplyShare, "reply-share", c.ReplyShare, "read messages answered with an inbound reply")
	f.Func("failure-mix", "async failures by code, e.g. 131049=1%,131026=0.5% (none: no failures)", func(v string) error {
		m, err := parseFailures(v)
		c.Failures = m
		return err
	})
	f.Func("delays", "median delays: sent=200ms,delivered=1s,read=3s,reply=2s,failed=1s", func(v string) error { return parseSimDelays(v, &c.Delays) })
	f.DurationVar(&c.UpgradeAfter, "upgrade-after", c.UpgradeAfter, "sustained use that earns the upgrade (0: none)")
	f.Float64Var(&c.UpgradeUse, "upgrade-use", c.UpgradeUse, "share of the tier a second must use to count as sustained")
	f.DurationVar(&c.UpgradeMaintenance, "upgrade-maintenance", c.UpgradeMaintenance, "131057 for this long after the upgrade, then 1,000 mps")
	f.Float64Var(&c.FlagShare, "flag-share", c.FlagShare, "share of async failures among a number's last --flag-window messages that flags it (131048 after; 0: never)")
	f.IntVar(&c.FlagWindow, "flag-window", c.FlagWindow, "messages the flag share is taken over")
	f.Func("maintenance", "a maintenance window: NUMBER_INDEX@START+DURATION, e.g. 0@30s+1m (repeat)", func(v string) error {
		w, err := parseWindow(v)
		if err == nil {
			c.Maintenance = append(c.Maintenance, w)
		}
		return err
	})
	f.StringVar(&statsPath, "stats", "", "on exit, write the counts as JSON to this file")
	if err := parseSimulateFlags(f, args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if runID > 99_999_999 || numbers < 1 || upgradable > numbers {
		return fmt.Errorf("%w: run id up to 8 digits, at least one number, upgradable at most the numbers", errUsage)
	}
	c.AppSecret = []byte(secret)
	c.Numbers = simulate.Fleet(uint32(runID), 0, numbers, upgradable, tier)
	for i := range c.Maintenance {
		idx, _ := strconv.Atoi(c.Maintenance[i].PhoneNumberID)
		if idx < 0 || idx >= numbers {
			return fmt.Errorf("%w: --maintenance: no number %d", errUsage, idx)
		}
		c.Maintenance[i].PhoneNumberID = c.Numbers[idx].PhoneNumberID
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	sim, err := simulate.Start(c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "simulate: Graph API on %s/v23.0/{phone_number_id}/messages; numbers:", sim.URL())
	for _, n := range c.Numbers {
		fmt.Fprintf(stderr, " %s(%d mps)", n.PhoneNumberID, n.Tier)
	}
	fmt.Fprintln(stderr)
	<-ctx.Done()
	st := sim.Stats()
	err = sim.Close()
	if statsPath != "" {
		b, _ := json.MarshalIndent(st, "", "  ")
		if werr := os.WriteFile(statsPath, b, 0o644); werr != nil {
			return werr
		}
	}
	return err
}

// parseSimulateFlags reads the --config file's flags first, then args.
func parseSimulateFlags(f *flags, args []string) error {
	// --config must be known before the rest: find it in args.
	var file string
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				file = args[i+1]
			}
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			file = a[strings.Index(a, "=")+1:]
		}
	}
	var fromFile []string
	if file != "" {
		fh, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("%w: --config: %v", errUsage, err)
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, val, ok := strings.Cut(line, "=")
			if !ok {
				name, val, _ = strings.Cut(line, " ")
			}
			name = strings.TrimLeft(strings.TrimSpace(name), "-")
			fromFile = append(fromFile, "--"+name+"="+strings.TrimSpace(val))
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%w: --config: %v", errUsage, err)
		}
	}
	return parseFlags(f, append(fromFile, args...))
}

// parseFailures reads "131049=1%,131026=0.5%" (or shares as fractions).
func parseFailures(v string) (map[int32]float64, error) {
	out := map[int32]float64{}
	if strings.TrimSpace(v) == "none" {
		return out, nil
	}
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		code, err := strconv.ParseInt(k, 10, 32)
		if !ok || err != nil {
			return nil, errors.New("want CODE=SHARE,... e.g. 131049=1%")
		}
		pct := strings.HasSuffix(val, "%")
		s, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a share", val)
		}
		if pct {
			s /= 100
		}
		out[int32(code)] = s
	}
	return out, nil
}

func parseSimDelays(v string, d *simulate.Delays) error {
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		dur, err := time.ParseDuration(strings.TrimSpace(val))
		if !ok || err != nil {
			return errors.New("want NAME=DURATION,...")
		}
		switch k {
		case "sent":
			d.Sent = dur
		case "delivered":
			d.Delivered = dur
		case "read":
			d.Read = dur
		case "reply":
			d.Reply = dur
		case "failed":
			d.Failed = dur
		default:
			return fmt.Errorf("unknown delay %q (sent, delivered, read, reply, failed)", k)
		}
	}
	return nil
}

// parseWindow reads INDEX@START+DURATION; the index stays in PhoneNumberID
// until the numbers are made.
func parseWindow(v string) (simulate.Window, error) {
	idx, rest, ok := strings.Cut(v, "@")
	start, dur, ok2 := strings.Cut(rest, "+")
	s, err1 := time.ParseDuration(start)
	d, err2 := time.ParseDuration(dur)
	if _, err := strconv.Atoi(idx); !ok || !ok2 || err != nil || err1 != nil || err2 != nil {
		return simulate.Window{}, errors.New("want NUMBER_INDEX@START+DURATION, e.g. 0@30s+1m")
	}
	return simulate.Window{PhoneNumberID: idx, Start: s, Duration: d}, nil
}
