package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

const fixturesDir = "../../../shared/meta/fixtures"

// fixtureFacts are the facts of expected.json this test adds up.
type fixtureFacts struct {
	StatusEvents      uint64            `json:"status_events"`
	Statuses          map[string]uint64 `json:"statuses"`
	StatusErrorCodes  map[string]uint64 `json:"status_error_codes"`
	ValueErrorCodes   map[string]uint64 `json:"value_error_codes"`
	InboundMessages   uint64            `json:"inbound_messages"`
	InboundTypes      map[string]uint64 `json:"inbound_types"`
	InboundErrorCodes map[string]uint64 `json:"inbound_error_codes"`
	PricingCategories map[string]uint64 `json:"pricing_categories"`
	GroupStatuses     uint64            `json:"group_statuses"`
	PhoneNumberIDs    []string          `json:"phone_number_ids"`
	WABAIDs           []string          `json:"waba_ids"`
	Sig               string            `json:"x_hub_signature_256"`
}

// TestServeFixturesEndToEnd posts every shared fixture to "wahook serve" over
// HTTP with Meta's signature, and finds every fact of expected.json in
// ClickHouse exactly: HTTP -> RAW -> stage 1 -> ClickHouse. Each fixture is
// posted twice (a Meta retry), and counts stay exact.
func TestServeFixturesEndToEnd(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixturesDir, "expected.json"))
	if err != nil {
		t.Fatalf("shared fixtures (../shared beside the repo): %v", err)
	}
	var all map[string]fixtureFacts
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	ch := schematest.ClickHouse(t)
	listen := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", listen, "--nats-listen", "", "--data-dir", t.TempDir(),
			"--app-secret", "wahook-fixture-app-secret", "--clickhouse-dsn", ch.DSN, "--flush-interval", "100ms", "--log-level", "warn"},
			io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	}()
	base := "http://" + listen
	waitReady(t, base, &stderr)

	var (
		statuses, inbound, groups uint64
		statusValues              = map[string]uint64{}
		statusCodes               = map[string]uint64{}
		valueCodes                = map[string]uint64{}
		inboundCodes              = map[string]uint64{}
		inboundTypes              = map[string]uint64{}
		categories                = map[string]uint64{}
		numbers                   = map[string]bool{}
		wabas                     = map[string]bool{}
		names                     []string
	)
	add := func(dst, src map[string]uint64) {
		for k, v := range src {
			dst[k] += v
		}
	}
	for name, f := range all {
		if f.Sig == "" {
			continue
		}
		names = append(names, name)
		statuses += f.StatusEvents
		inbound += f.InboundMessages
		groups += f.GroupStatuses
		add(statusValues, f.Statuses)
		add(statusCodes, f.StatusErrorCodes)
		add(valueCodes, f.ValueErrorCodes)
		add(inboundCodes, f.InboundErrorCodes)
		add(inboundTypes, f.InboundTypes)
		add(categories, f.PricingCategories)
		if f.StatusEvents+f.InboundMessages > 0 {
			for _, n := range f.PhoneNumberIDs {
				numbers[n] = true
			}
		}
		for _, w := range f.WABAIDs {
			wabas[w] = true
		}
	}
	sort.Strings(names)
	if len(names) != 40 {
		t.Fatalf("%d fixtures, want the 40 of the shared set", len(names))
	}
	for round := 0; round < 2; round++ {
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(fixturesDir, name))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/webhook", bytes.NewReader(b))
			req.Header.Set(schema.SignatureHeader, all[name].Sig)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
		}
	}

	q := func(query string) map[string]uint64 {
		rows, err := ch.Conn.Query(ctx, strings.ReplaceAll(query, "{db}", ch.Database))
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		out := map[string]uint64{}
		for rows.Next() {
			var k string
			var n uint64
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			out[k] = n
		}
		return out
	}
	// Wait until stage 1 has written every row. Readiness does not wait for
	// ClickHouse (webhooks are taken while it is down), so the tables may
	// not exist yet at first.
	deadline := time.Now().Add(30 * time.Second)
	for count(t, ch, "SELECT uniqExact(event_id) FROM {db}.inbound_messages") != inbound ||
		count(t, ch, "SELECT uniqExact(event_id) FROM {db}.status_events") != statuses {
		if time.Now().After(deadline) {
			t.Fatalf("rows did not arrive within 30s:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the batch's later tables
	checks := []struct {
		what  string
		query string
		want  map[string]uint64
	}{
		{"status events", "SELECT 'n', uniqExact(event_id) FROM {db}.status_events", map[string]uint64{"n": statuses}},
		{"statuses", "SELECT status, uniqExact(event_id) FROM {db}.status_events GROUP BY status", statusValues},
		{"group statuses", "SELECT 'n', uniqExact(event_id) FROM {db}.status_events WHERE recipient_type = 'group'", map[string]uint64{"n": groups}},
		{"pricing categories", "SELECT pricing_category, uniqExact(event_id) FROM {db}.status_events WHERE pricing_category != '' GROUP BY pricing_category", categories},
		{"status error codes", "SELECT toString(code), toUInt64(uniqExactMerge(error_keys)) FROM {db}.failures_by_minute WHERE origin = 'status' GROUP BY code", statusCodes},
		{"value error codes", "SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin IN ('value', 'history') GROUP BY code", valueCodes},
		{"inbound error codes", "SELECT toString(code), uniqExact(event_id, error_index) FROM {db}.errors WHERE origin = 'inbound' GROUP BY code", inboundCodes},
		{"inbound types", "SELECT type, uniqExact(event_id) FROM {db}.inbound_messages GROUP BY type", inboundTypes},
		{"dead letters", "SELECT 'n', count() FROM {db}.dead_letters FINAL", map[string]uint64{"n": 0}},
	}
	for _, c := range checks {
		if got := q(c.query); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.what, got, c.want)
		}
	}
	gotNumbers := q("SELECT phone_number_id, toUInt64(1) FROM (SELECT phone_number_id FROM {db}.status_events UNION ALL SELECT phone_number_id FROM {db}.inbound_messages) GROUP BY phone_number_id")
	if len(gotNumbers) != len(numbers) {
		t.Errorf("phone number ids: got %v, want %v", gotNumbers, numbers)
	}
	for n := range numbers {
		if _, ok := gotNumbers[n]; !ok {
			t.Errorf("phone number id %s missing", n)
		}
	}
	gotWABAs := q("SELECT waba_id, toUInt64(1) FROM (SELECT waba_id FROM {db}.status_events UNION ALL SELECT waba_id FROM {db}.inbound_messages UNION ALL SELECT waba_id FROM {db}.management_events UNION ALL SELECT waba_id FROM {db}.errors) GROUP BY waba_id")
	for w := range wabas {
		if _, ok := gotWABAs[w]; !ok {
			t.Errorf("WABA %s missing", w)
		}
	}
}

func waitReady(t *testing.T, base string, logs *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in 30s: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
