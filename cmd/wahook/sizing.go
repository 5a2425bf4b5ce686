package main

import (
	"context"
	"fmt"
	"io"

	"github.com/wahook/wahook/loadtest"
)

// runSizing turns a business's sending into what wahook needs: webhook
// requests and events per second (Meta's 3x outbound + 1x inbound) and at a
// burst, JetStream storage for the retention, ClickHouse rows and bytes per
// day, and instances from the per-core capacity a load run measured (the
// built-in figures, or a file from `wahook loadtest --capacity-out`).
func runSizing(_ context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("sizing", stderr)
	in := loadtest.DefaultSizingInput()
	m := &in.Model
	m.Numbers, m.Coexistence, m.OutboundMPS = 1, 0, 0
	var capacityFile string
	var asJSON bool
	modelFlags(f, m, "business numbers", false)
	f.Float64Var(&in.BurstFactor, "burst-factor", in.BurstFactor, "peak over mean: campaign blasts, Meta catching up after an outage")
	f.DurationVar(&in.RawRetention, "raw-max-age", in.RawRetention, "retention of WAHOOK_RAW (Meta retries for 7 days)")
	f.DurationVar(&in.EventsRetention, "events-max-age", in.EventsRetention, "retention of WAHOOK_EVENTS")
	f.IntVar(&in.RawReplicas, "raw-replicas", in.RawReplicas, "copies of the streams (1 on one machine, 3 on a cluster)")
	f.IntVar(&in.CoresPerInstance, "cores-per-instance", in.CoresPerInstance, "cores of one wahook instance")
	f.Float64Var(&in.TargetUtilization, "target-utilization", in.TargetUtilization, "share of its cores an instance may use at the peak")
	f.StringVar(&capacityFile, "capacity", "", "capacity file written by wahook loadtest --capacity-out on your hardware (default: the figures measured where wahook is developed)")
	f.BoolVar(&asJSON, "json", false, "print the sizing as JSON")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if m.OutboundMPS <= 0 && m.InboundMPS <= 0 {
		return fmt.Errorf("%w: --outbound-mps (per number) is required", errUsage)
	}
	if capacityFile != "" {
		c, err := loadtest.ReadCapacity(capacityFile)
		if err != nil {
			return fmt.Errorf("%w: --capacity: %v", errUsage, err)
		}
		in.Capacity = c
	}
	if err := validModel(m); err != nil {
		return err
	}
	s, err := loadtest.Size(in)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	if asJSON {
		return s.WriteJSON(stdout)
	}
	s.WriteText(stdout)
	return nil
}
