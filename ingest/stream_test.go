package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema/schematest"
)

// TestEnsureRawStreamKeepsOperatorsConfig: a service starting with default
// flags leaves an existing stream as the operator configured it; only an
// explicit update (wahook migrate) changes it.
func TestEnsureRawStreamKeepsOperatorsConfig(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	custom := ingest.DefaultStreamConfig()
	custom.MaxAge = 48 * time.Hour
	custom.DuplicateWindow = 2 * time.Minute
	if _, err := ingest.EnsureRawStream(ctx, js, custom, true); err != nil {
		t.Fatal(err)
	}
	info, err := ingest.EnsureRawStream(ctx, js, ingest.DefaultStreamConfig(), false)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 48*time.Hour || info.Config.Duplicates != 2*time.Minute {
		t.Fatalf("a start-up with defaults changed max age to %s and the duplicate window to %s, want 48h and 2m kept",
			info.Config.MaxAge, info.Config.Duplicates)
	}
	info, err = ingest.EnsureRawStream(ctx, js, ingest.DefaultStreamConfig(), true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 7*24*time.Hour || info.Config.Duplicates != ingest.DefaultDuplicateWindow {
		t.Fatalf("an explicit update left max age at %s and the duplicate window at %s, want 168h and %s",
			info.Config.MaxAge, info.Config.Duplicates, ingest.DefaultDuplicateWindow)
	}
}

// TestStreamConfigDuplicateWindow: the default window covers the resends of
// an endpoint with the default ack timeout, a longer ack timeout needs a
// longer window (for a stream being configured and for an existing one),
// and nats-server's bounds are checked before it is asked.
func TestStreamConfigDuplicateWindow(t *testing.T) {
	sc := ingest.DefaultStreamConfig()
	if err := sc.CheckAckTimeout(ingest.DefaultConfig().AckTimeout); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := sc.CheckAckTimeout(sc.DuplicateWindow + time.Millisecond); err == nil {
		t.Error("an ack timeout longer than the window: got no error")
	}
	existing := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Duplicates: time.Second}}
	if err := ingest.CheckRawStream(existing, 2*time.Second); err == nil {
		t.Error("an existing stream's window shorter than the ack timeout: got no error")
	}
	if err := ingest.CheckRawStream(existing, time.Second); err != nil {
		t.Errorf("an existing stream's window equal to the ack timeout: %v", err)
	}
	for _, tt := range []struct {
		window time.Duration
		ok     bool
	}{
		{0, false},
		{99 * time.Millisecond, false},
		{100 * time.Millisecond, true},
		{ingest.DefaultDuplicateWindow, true},
		{sc.MaxAge, true},
		{sc.MaxAge + time.Second, false},
	} {
		c := sc
		c.DuplicateWindow = tt.window
		if err := c.Validate(); (err == nil) != tt.ok {
			t.Errorf("window %s: got %v, want ok %v", tt.window, err, tt.ok)
		}
	}
}

// TestConfigDedupe: the index's window is 0 (off) or 1s to 24h, with a cap
// of at least 10000 ids.
func TestConfigDedupe(t *testing.T) {
	for _, tt := range []struct {
		window time.Duration
		max    int
		ok     bool
	}{
		{2 * time.Minute, 4_000_000, true},
		{0, 0, true},
		{time.Second, 10_000, true},
		{24 * time.Hour, 10_000, true},
		{999 * time.Millisecond, 10_000, false},
		{24*time.Hour + time.Second, 10_000, false},
		{time.Minute, 9_999, false},
		{-time.Second, 10_000, false},
	} {
		cfg := defaultTestConfig()
		cfg.DedupeWindow, cfg.DedupeMaxEntries = tt.window, tt.max
		if err := cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("window %s, max %d: got %v, want ok %v", tt.window, tt.max, err, tt.ok)
		}
	}
}

// TestEnsureRawStreamAllowsBatches: a service starting with default flags
// switches fast batches on for a stream created without them (by an older
// version), and changes nothing else of it.
func TestEnsureRawStreamAllowsBatches(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	old := ingest.DefaultStreamConfig()
	old.AllowBatch = false
	old.MaxAge = 48 * time.Hour
	if info, err := ingest.EnsureRawStream(ctx, js, old, true); err != nil || info.Config.AllowBatchPublish {
		t.Fatalf("create without batches: %v (allow_batched %v)", err, info != nil && info.Config.AllowBatchPublish)
	}
	info, err := ingest.EnsureRawStream(ctx, js, ingest.DefaultStreamConfig(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.AllowBatchPublish {
		t.Fatal("a start-up with defaults left fast batches off")
	}
	if info.Config.MaxAge != 48*time.Hour {
		t.Fatalf("switching batches on changed max age to %s, want 48h kept", info.Config.MaxAge)
	}
}
