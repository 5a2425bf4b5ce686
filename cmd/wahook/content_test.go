package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// TestStoreContentFlag: --store-content is off by default on every command
// that runs stage 1, WAHOOK_STORE_CONTENT switches it on, and the flag wins
// over the environment.
func TestStoreContentFlag(t *testing.T) {
	t.Setenv("WAHOOK_STORE_CONTENT", "") // restored at the end
	os.Unsetenv("WAHOOK_STORE_CONTENT")
	for _, cmd := range []string{"serve", "process", "replay"} {
		if _, out, _ := runCmd(t, cmd, "--config-dump"); !strings.Contains(out, "store-content=false\n") {
			t.Errorf("%s: default is not off:\n%s", cmd, out)
		}
	}
	t.Setenv("WAHOOK_STORE_CONTENT", "true")
	for _, cmd := range []string{"serve", "process", "replay"} {
		if _, out, _ := runCmd(t, cmd, "--config-dump"); !strings.Contains(out, "store-content=true\n") {
			t.Errorf("%s: WAHOOK_STORE_CONTENT=true not taken:\n%s", cmd, out)
		}
	}
	if _, out, _ := runCmd(t, "serve", "--config-dump", "--store-content=false"); !strings.Contains(out, "store-content=false\n") {
		t.Errorf("the flag did not win over WAHOOK_STORE_CONTENT:\n%s", out)
	}
}

// TestStoreContentWiring: the normalizer that setupStage1 builds (the one
// serve, process and replay run) keeps an inbound message's text only with
// the switch on, under the same event id either way.
func TestStoreContentWiring(t *testing.T) {
	ch := schematest.ClickHouse(t)
	js := schematest.StartJetStream(t)
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	body, err := os.ReadFile(filepath.Join("..", "..", "testdata", "webhooks", "inbound_text_reply.json"))
	if err != nil {
		t.Fatalf("test bodies (testdata/webhooks): %v", err)
	}
	const text = "Yes please, book me for 3pm on Thursday."
	var ids []string
	for _, on := range []bool{false, true} {
		f := newFlags("process", os.Stderr)
		var o processOptions
		o.register(f, false)
		if err := f.Parse([]string{"--clickhouse-dsn", ch.DSN, "--phone-hash-key", "wahook-test-phone-key", "--store-content=" + strconv.FormatBool(on)}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		deps, err := setupStage1(ctx, zaptest.NewLogger(t), nc, &o, t.TempDir(), 1, false)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		deps.conn.Close()
		var rows schema.Rows
		deps.norm.Normalize(body, schema.Source{App: "default", ReceivedAt: time.Now()}, "", &rows)
		if len(rows.Inbound) != 1 {
			t.Fatalf("store-content=%v: %d inbound rows, want 1", on, len(rows.Inbound))
		}
		want := ""
		if on {
			want = text
		}
		if got := rows.Inbound[0].Content; got != want {
			t.Errorf("store-content=%v: content %q, want %q", on, got, want)
		}
		ids = append(ids, rows.Inbound[0].EventID)
	}
	if ids[0] != ids[1] {
		t.Errorf("event id depends on the switch: %s off, %s on", ids[0], ids[1])
	}
}
