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
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestIngestBodyLimitOverMaxPayload: a --body-limit that NATS's
// max_payload (nats-server's default, 1 MB, here) cannot carry. With NATS
// answering at start, ingest refuses to start and says why. With
// --provision=false and NATS away at start, ingest started and never said
// it (every body over 1 MB got 503, with "maximum payload exceeded" in a
// throttled warning); now it says so as an error once NATS answers, says
// that RAW cannot be read while it is missing, and checks RAW once it can
// be read.
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

	// With --provision=false, NATS away at start, and no RAW stream when it
	// comes back (the first run above made one: it is deleted).
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := jsc.DeleteStream(ctx, schema.StreamRaw); err != nil {
		t.Fatal(err)
	}
	js.Shutdown()

	var logs2 syncBuffer
	startWahook(t, &logs2, "ingest", "--nats-url", js.URL(), "--provision=false", "--listen", freeAddr(t), "--app-secret", abuseSecret,
		"--body-limit", "4000000", "--log-format", "console")
	testutil.Eventually(t, 30*time.Second, "ingest started with NATS away", func() (bool, string) {
		return strings.Contains(logs2.String(), "could not be read at start (NATS away)"), logs2.String()
	})
	js.Start()
	// NATS answers: the max_payload check is made, and the missing stream
	// said.
	testutil.Eventually(t, 30*time.Second, "the max_payload check made once NATS answers", func() (bool, string) {
		l := logs2.String()
		return strings.Contains(l, tooLarge) && strings.Contains(l, "the raw stream cannot be read"), l
	})
	// The stream is made, with a duplicate window shorter than the ack
	// timeout: its checks follow.
	cfg := ingest.DefaultStreamConfig().RawStreamConfig()
	cfg.Duplicates = time.Second // ingest's ack timeout is 2 s
	if _, err := jsc.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the stream's checks made once it can be read", func() (bool, string) {
		l := logs2.String()
		return strings.Contains(l, "duplicate window is too short") && strings.Contains(l, "allows fast batches: this process publishes"), l
	})
	if n := strings.Count(logs2.String(), tooLarge); n != 1 {
		t.Errorf("the max_payload error logged %d times, want once:\n%s", n, logs2.String())
	}
}
