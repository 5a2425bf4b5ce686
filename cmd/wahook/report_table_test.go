package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/api"
)

// TestReportTables: the tables of `wahook report` say what the JSON says.
// The numbers table left out the pending display numbers (their events
// waiting for a phone number id), and the throughput header called the
// highest bucket's utilization the peak rate's share of the tier of --to.
func TestReportTables(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	if err := writeTable(&b, &api.Numbers{Numbers: []api.NumberState{}, Pending: []api.PendingNumber{
		{DisplayPhoneNumber: "15557810009", WabaID: "104281907735512", Events: 2, FirstChange: at, LastChange: at.Add(time.Minute)},
	}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PENDING DISPLAY NUMBER") || !strings.Contains(b.String(), "15557810009") {
		t.Errorf("numbers table without its pending display number:\n%s", b.String())
	}
	b.Reset()
	if err := writeTable(&b, &api.Throughput{PhoneNumberID: "1", TierMPS: 1000, TierSource: "upgraded", PeakMPS: 200, PeakUtilization: 0.75}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "peak 200.00 mps, highest utilization 75% (of the tier of its time)") {
		t.Errorf("throughput header:\n%s", b.String())
	}
}
