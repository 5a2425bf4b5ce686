package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestParseTierOverrides(t *testing.T) {
	got, err := parseTierOverrides([]string{"106540352242922=200", "107655290331184=1000"})
	if err != nil || fmt.Sprint(got) != "map[106540352242922:200 107655290331184:1000]" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range [][]string{{"106540352242922"}, {"=200"}, {"1065=0"}, {"1065=x"}, {"10.65=200"}, {"1065=200", "1065=300"}} {
		if _, err := parseTierOverrides(bad); !errors.Is(err, errUsage) {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
}

// serve and process take the stage 2 flags; a bad override stops them
// before anything starts.
func TestPacingFlags(t *testing.T) {
	for _, args := range [][]string{{"serve", "--app-secret", "s"}, {"process"}} {
		cmd := args[0]
		code, _, errOut := runCmd(t, append(args, "--nats-url", "nats://127.0.0.1:1", "--tier-override", "1065=fast")...)
		if code != 2 || !strings.Contains(errOut, "--tier-override") {
			t.Errorf("%s: code %d, %s", cmd, code, errOut)
		}
	}
}

// The partition flags reach stage 2's configuration, and its rules apply.
func TestPartitionFlags(t *testing.T) {
	build := func(args ...string) (*pacingOptions, error) {
		var o pacingOptions
		f := newFlags("process", io.Discard)
		o.register(f)
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		return &o, o.build()
	}
	o, err := build("--stage2-partitions", "16", "--stage2-member", "p1", "--stage2-members", "p1,p2")
	if err != nil || o.cfg.Partitions != 16 || o.cfg.Member != "p1" || fmt.Sprint(o.cfg.Members) != "[p1 p2]" {
		t.Fatalf("got %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"--stage2-partitions", "16"}, // no member name
		{"--stage2-member", "p1"},     // a member without partitions
		{"--stage2-partitions", "16", "--stage2-member", "p3", "--stage2-members", "p1,p2"}, // not a member
	} {
		if _, err := build(bad...); !errors.Is(err, errUsage) {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
}

// One flag gives a number its tier in the pacing signal and in the reports
// alike; --tier-override is its old spelling.
func TestNumberTierOneFlag(t *testing.T) {
	ao, pco := serveTiers(t, true, "--number-tier", "1065=1000", "--tier-override", "2001=20")
	tiers, err := ao.tierOverrides()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"1065": 1000, "2001": 20}
	if fmt.Sprint(pco.cfg.Tiers.Overrides) != fmt.Sprint(want) || fmt.Sprint(tiers.Overrides) != fmt.Sprint(want) {
		t.Fatalf("pacing %v, reports %v, want both %v", pco.cfg.Tiers.Overrides, tiers.Overrides, want)
	}
}

// TestTierLevelsShared: --tier-default, --tier-upgraded and
// --tier-coexistence reach the pacing signal and serve's reports alike
// (the API took Meta's tiers while the signal took the flags), in either
// order of registration, from the flags or their variables; wahook api and
// report take them too.
func TestTierLevelsShared(t *testing.T) {
	t.Setenv("WAHOOK_TIER_COEXISTENCE", "15")
	for _, apiFirst := range []bool{true, false} {
		ao, pco := serveTiers(t, apiFirst, "--tier-default", "250", "--tier-upgraded", "2000")
		tiers, err := ao.tierOverrides()
		if err != nil {
			t.Fatal(err)
		}
		p := pco.cfg.Tiers
		if p.Default != 250 || p.Upgraded != 2000 || p.Coexistence != 15 || tiers.Default != 250 || tiers.Upgraded != 2000 || tiers.Coexistence != 15 {
			t.Errorf("API first %v: pacing %+v, reports %+v; want 250, 2000 and 15 in both", apiFirst, p, tiers)
		}
	}
	if code, _, errOut := runCmd(t, "api", "--check", "--api-token", "a-long-enough-token", "--tier-default", "fast"); code != 2 || !strings.Contains(errOut, "tier-default") {
		t.Errorf("api --tier-default fast: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCmd(t, "report", "numbers", "--check", "--tier-default", "250"); code != 0 {
		t.Errorf("report --tier-default 250: exit %d: %s %s", code, out, errOut)
	}
}

// TestNumberTierFlagWinsOverTheOldVariable: --number-tier on the command
// line wins over WAHOOK_TIER_OVERRIDE, the variable of its old spelling, as
// a flag wins over its variable (its items were added to the flag's, or
// refused as given twice).
func TestNumberTierFlagWinsOverTheOldVariable(t *testing.T) {
	t.Setenv("WAHOOK_TIER_OVERRIDE", "2001=20,1065=30")
	_, pco := serveTiers(t, true, "--number-tier", "1065=1000")
	if got := fmt.Sprint(pco.cfg.Tiers.Overrides); got != fmt.Sprint(map[string]int{"1065": 1000}) {
		t.Errorf("overrides %s, want only the flag's 1065=1000", got)
	}
	// Without the flag, the variable applies.
	_, pco = serveTiers(t, true)
	if got := fmt.Sprint(pco.cfg.Tiers.Overrides); got != fmt.Sprint(map[string]int{"2001": 20, "1065": 30}) {
		t.Errorf("overrides %s from the variable alone", got)
	}
}

// serveTiers parses args (and an API token) with serve's API and pacing
// options, registered in that order when apiFirst, and builds the pacing
// configuration.
func serveTiers(t *testing.T, apiFirst bool, args ...string) (*apiOptions, *pacingOptions) {
	t.Helper()
	f := newFlags("serve", io.Discard)
	ao, pco := &apiOptions{}, &pacingOptions{}
	if apiFirst {
		ao.register(f)
		pco.register(f)
	} else {
		pco.register(f)
		ao.register(f)
	}
	if err := f.Parse(append(args, "--api-token", "a-long-enough-token")); err != nil {
		t.Fatal(err)
	}
	if err := pco.build(); err != nil {
		t.Fatal(err)
	}
	return ao, pco
}
