package kvbucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/schema/schematest"
)

// TestStopWatchLeavesNothing: a watch stopped after one value of a bucket
// of 1,000 left nats.go's delivery goroutine blocked on the full channel
// for good (one per stopped watch: a client leaving the live page while it
// loaded, a reconnect during a pacer's load); StopWatch ends it.
func TestStopWatchLeavesNothing(t *testing.T) {
	srv := schematest.StartJetStream(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := kvbucket.Ensure(ctx, js, jetstream.KeyValueConfig{Bucket: "stopwatch"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	before := goleak.IgnoreCurrent()
	for range 3 {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-w.Updates()
		time.Sleep(100 * time.Millisecond) // the channel fills
		kvbucket.StopWatch(w)
	}
	goleak.VerifyNone(t, before)
}
