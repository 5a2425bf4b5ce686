package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// TestIngestBodyLimitOverMaxPayload: a --body-limit that NATS's
// max_payload (nats-server's default, 1 MB, here) cannot carry. With NATS
// answering at start, ingest refuses to start and says why. With
// --provision=false and NATS away at start, ingest started and never said
// it (every body over 1 MB got 503, with "maximum payload exceeded" in a
// throttled warning); now it says so as an error once NATS answers, and
// checks the stream then too.
func TestIngestBodyLimitOverMaxPayload(t *testing.T) {
	js := schematest.StartJetStream(t)
	const tooLarge = "does not fit the NATS max_payload of 1048576 bytes"

	var logs syncBuffer
	cmd := startWahook(t, &logs, "ingest", "--nats-url", js.URL(), "--listen", freeAddr(t), "--app-secret", abuseSecret,
		"--body-limit", "4000000", "--log-format", "console")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(logs.String(), tooLarge) {
			t.Errorf("ingest with NATS answering: exit %v, want a failure saying %q:\n%s", err, tooLarge, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("ingest with a --body-limit over max_payload still runs after 30 s:\n%s", logs.String())
	}

	// The stream exists, with a duplicate window shorter than the ack
	// timeout; then NATS goes away and ingest starts without provisioning.
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := ingest.DefaultStreamConfig().RawStreamConfig()
	cfg.Duplicates = time.Second // ingest's ack timeout is 2 s
	if _, err := jsc.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	js.Shutdown()

	var logs2 syncBuffer
	startWahook(t, &logs2, "ingest", "--nats-url", js.URL(), "--provision=false", "--listen", freeAddr(t), "--app-secret", abuseSecret,
		"--body-limit", "4000000", "--log-format", "console")
	testutil.Eventually(t, 30*time.Second, "ingest started with NATS away", func() (bool, string) {
		return strings.Contains(logs2.String(), "could not be read at start"), logs2.String()
	})
	if strings.Contains(logs2.String(), tooLarge) {
		t.Fatalf("the max_payload check made before NATS answered:\n%s", logs2.String())
	}
	js.Start()
	testutil.Eventually(t, 30*time.Second, "the checks made once NATS answers", func() (bool, string) {
		l := logs2.String()
		return strings.Contains(l, tooLarge) && strings.Contains(l, "duplicate window is too short") && strings.Contains(l, "allows fast batches"), l
	})
}
