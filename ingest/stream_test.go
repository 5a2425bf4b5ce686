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
	if _, err := ingest.EnsureRawStream(ctx, js, custom, true); err != nil {
		t.Fatal(err)
	}
	info, err := ingest.EnsureRawStream(ctx, js, ingest.DefaultStreamConfig(), false)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 48*time.Hour {
		t.Fatalf("a start-up with defaults changed max age to %s, want 48h kept", info.Config.MaxAge)
	}
	info, err = ingest.EnsureRawStream(ctx, js, ingest.DefaultStreamConfig(), true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 7*24*time.Hour {
		t.Fatalf("an explicit update left max age at %s, want 168h", info.Config.MaxAge)
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
