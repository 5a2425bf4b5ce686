package main

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// TestConnLoggingClientErrors: an error the NATS client meets on its own (a
// subscription too slow for its messages, which drops them) is logged with
// its subject and the count dropped, not printed to stderr.
func TestConnLoggingClientErrors(t *testing.T) {
	srv := schematest.StartJetStream(t)
	core, logs := observer.New(zap.WarnLevel)
	nc, err := nats.Connect(srv.URL(), connLogging(zap.New(core), "test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	release := make(chan struct{})
	defer close(release)
	sub, err := nc.Subscribe("slow.subject", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := nc.Publish("slow.subject", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the slow consumer logged", func() (bool, string) {
		for _, e := range logs.FilterMessage("nats client error").All() {
			m := e.ContextMap()
			if m["subject"] == "slow.subject" && m["connection"] == "test" {
				if d, _ := m["dropped"].(int64); d > 0 {
					return true, ""
				}
			}
		}
		return false, "no line with the subject and a count dropped"
	})
}
