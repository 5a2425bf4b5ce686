package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestReplayCommand: wahook replay stores again the bodies RAW holds since
// --since, and its summary counts rows apart from dead letters; with a
// phone hash key other than the database's it refuses (it stored every
// status again under other hashes), unless --phone-hash-key-change. A --since to
// come is refused (it replayed nothing, exit 0), one before RAW's first
// body says where RAW starts (it claimed a year), and the consumer's and
// the funnel's flags, which a replay does not use, are refused as unknown
// (they were taken and ignored).
func TestReplayCommand(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	if code, out, errOut := runCmd(t, "migrate", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--log-level", "error"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	received := time.Now().Add(-time.Hour)
	for i := 0; i < 3; i++ {
		body := []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",`+
			`"metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.R%d","status":"sent","timestamp":"%d","recipient_id":"15551234567"}]}}]}]}`,
			i, received.Unix()))
		if i == 2 {
			body = []byte(`{"object":"whatsapp_business_account","entry":"not a list"}`)
		}
		m := &nats.Msg{Subject: schema.RawSubject(schema.DefaultApp), Data: body, Header: nats.Header{
			schema.HeaderMsgID: []string{schema.RawMsgID(body)}, schema.HeaderReceivedAt: []string{schema.FormatReceivedAt(received)},
			schema.HeaderApp: []string{schema.DefaultApp},
		}}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	replay := func(args ...string) (int, string, string) {
		return runCmd(t, append([]string{"replay", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--phone-hash-key", "replay-test-phone-key", "--log-level", "warn"}, args...)...)
	}
	code, out, errOut := replay("--since", "8760h")
	if code != 0 || !strings.Contains(out, "replayed 3 bodies") || !strings.Contains(out, ": 2 rows, 1 dead letters") {
		t.Fatalf("replay: %d %q %s", code, out, errOut)
	}
	if !strings.Contains(out, "(RAW holds bodies since ") {
		t.Errorf("a --since a year back does not say where RAW starts: %q", out)
	}
	var n uint64
	if err := ch.Conn.QueryRow(context.Background(), "SELECT uniqExact(message_id) FROM "+ch.Database+".status_events").Scan(&n); err != nil || n != 2 {
		t.Errorf("statuses replayed: %d, %v; want 2", n, err)
	}

	// Another key would store the statuses again under other recipient
	// hashes: refused, unless the change is meant.
	code, out, errOut = runCmd(t, "replay", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--phone-hash-key", "another-phone-hash-key", "--since", "8760h", "--log-level", "warn")
	if code != 2 || !strings.Contains(errOut, "the phone hash key is not the one the end users' hashes in this database were made with (the key given by --phone-hash-key or WAHOOK_PHONE_HASH_KEY;") {
		t.Errorf("replay with another key: %d %q %q; want 2, refused", code, out, errOut)
	}
	if err := ch.Conn.QueryRow(context.Background(), "SELECT uniqExact(event_id) FROM "+ch.Database+".status_events").Scan(&n); err != nil || n != 2 {
		t.Errorf("status events after the refused replay: %d, %v; want 2", n, err)
	}
	if code, out, errOut := runCmd(t, "replay", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--phone-hash-key", "another-phone-hash-key", "--phone-hash-key-change",
		"--since", "8760h", "--log-level", "warn"); code != 0 {
		t.Errorf("replay with another key and --phone-hash-key-change: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := replay("--since", "1h"); code != 2 || !strings.Contains(errOut, "--phone-hash-key-change") {
		t.Errorf("the first key after the change: %d %q; want 2, refused, naming the way to change it", code, errOut)
	}

	future := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	if code, out, errOut := replay("--since", future); code != 2 || !strings.Contains(errOut, "is in the future") {
		t.Errorf("--since %s: %d %q %q; want 2, refused", future, code, out, errOut)
	}
	for _, flag := range []string{"--flush-interval", "--stall-after", "--funnel-interval", "--funnel-max-wait"} {
		if code, _, errOut := runCmd(t, "replay", "--check", "--since", "1h", flag, "1h"); code != 2 || !strings.Contains(errOut, flag[2:]) {
			t.Errorf("replay %s: %d %q; want 2, not a flag of replay", flag, code, errOut)
		}
	}
	if code, out, errOut := runCmd(t, "replay", "--check", "--since", "1h", "--max-deliver", "3"); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("replay --max-deliver: %d %q %q", code, out, errOut)
	}
}

// TestHashKeyRecordedOnce: two processes that start at once on a database
// with no key recorded, with different keys (--migrate=false: nothing else
// staggers them): one records its key and runs, the other is refused. The
// check runs under the migrations lease; without it both recorded theirs in
// turn and ran, in 2 of 6 runs here.
func TestHashKeyRecordedOnce(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	if code, out, errOut := runCmd(t, "migrate", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--log-level", "error"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	codes := make(chan int, 2)
	for _, key := range []string{"first-phone-hash-key", "second-phone-hash-key"} {
		go func() {
			code, _, _ := runCmd(t, "replay", "--nats-url", js.URL(), "--clickhouse-dsn", ch.DSN, "--phone-hash-key", key, "--migrate=false", "--since", "1h", "--log-level", "error")
			codes <- code
		}()
	}
	a, b := <-codes, <-codes
	if a+b != 2 || a*b != 0 {
		t.Errorf("exit codes %d and %d; want one 0 (recorded its key) and one 2 (refused)", a, b)
	}
}

// TestReplayEndsOnClickHouseRefusal: a replay whose ClickHouse refuses it
// (here an unknown user; a wrong password, a failed migration alike) waited
// for the server to be put right, without end: a Job or cron run hung,
// logging "clickhouse not ready". It ends with the server's answer; a
// ClickHouse that is away is still waited for.
func TestReplayEndsOnClickHouseRefusal(t *testing.T) {
	js := schematest.StartJetStream(t)
	ch := schematest.ClickHouse(t)
	dsn := strings.Replace(ch.DSN, "clickhouse://", "clickhouse://no_such_user:x@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	start := time.Now()
	code := run(ctx, []string{"replay", "--nats-url", js.URL(), "--clickhouse-dsn", dsn, "--phone-hash-key", "replay-test-phone-key", "--since", "1h", "--log-level", "warn"}, &out, &errOut)
	if code == 0 || ctx.Err() != nil || !strings.Contains(errOut.String(), "no_such_user") {
		t.Fatalf("replay refused by ClickHouse: exit %d after %v (%v)\n%s\n%s; want the refusal at once", code, time.Since(start).Round(time.Millisecond), ctx.Err(), out.String(), errOut.String())
	}
	if strings.Contains(errOut.String(), ":x@") {
		t.Errorf("the DSN's password is in the output: %s", errOut.String())
	}
}

// TestTLSFlagsTogether: --nats-tls-cert without --nats-tls-key is a usage
// error (exit 2) in every command that connects to NATS; replay and
// migrate took it and failed at the connection, exit 1, on a file named "".
func TestTLSFlagsTogether(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--app-secret", "s"},
		{"process"},
		{"ingest", "--app-secret", "s"},
		{"replay", "--since", "1h"},
		{"migrate"},
	} {
		code, _, errOut := runCmd(t, append(args, "--nats-url", "nats://127.0.0.1:1", "--nats-tls-cert", "c.pem")...)
		if code != 2 || !strings.Contains(errOut, "--nats-tls-cert and --nats-tls-key go together") {
			t.Errorf("%s with --nats-tls-cert alone: exit %d %q; want 2, the flags named", args[0], code, errOut)
		}
	}
}

// TestReplayStoppedSaysWhere: a replay that stops says where, and the
// --since that goes on from there, which parseSince takes back.
func TestReplayStoppedSaysWhere(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 11, 12, 900_000_000, time.FixedZone("x", 3600))
	err := replayStopped(context.Canceled, processor.ReplayResult{Bodies: 700, LastSeq: 700, WrittenSeq: 600, WrittenAt: at})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "up to RAW sequence 600 are written") ||
		!strings.Contains(err.Error(), "--since 2026-12-07T09:11:12Z") {
		t.Fatalf("replay stopped after writing up to 600: %v", err)
	}
	if since, perr := parseSince("2026-12-07T09:11:12Z", time.Now()); perr != nil || since.After(at) {
		t.Errorf("the --since given: %v, %v; want a time at or before the last body written", since, perr)
	}
	if err := replayStopped(context.Canceled, processor.ReplayResult{}); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was written") {
		t.Errorf("replay stopped before its first write: %v", err)
	}
}
