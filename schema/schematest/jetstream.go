package schematest

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// JetStream is an embedded nats-server with JetStream, started by a test. It
// can be stopped and started again on the same port and store, to test what
// clients do during an outage.
type JetStream struct {
	t    testing.TB
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
}

// StartJetStream starts a nats-server with JetStream on a free loopback port,
// storing under a temporary directory, and stops it when the test ends.
func StartJetStream(t testing.TB) *JetStream {
	t.Helper()
	port := FreePort(t)
	js := &JetStream{t: t, opts: server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  filepath.Join(t.TempDir(), "jetstream"),
	}}
	js.Start()
	t.Cleanup(js.Shutdown)
	return js
}

// URL is the client URL of the server; it stays the same across restarts.
func (j *JetStream) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", j.opts.Port) }

// Server returns the running server, or nil while it is stopped.
func (j *JetStream) Server() *server.Server {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.srv
}

// Start starts the server if it is stopped and waits until it accepts clients.
func (j *JetStream) Start() {
	j.t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.srv != nil {
		return
	}
	opts := j.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		j.t.Fatalf("nats-server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		j.t.Fatalf("nats-server on port %d not ready within 10s", j.opts.Port)
	}
	j.srv = srv
}

// Shutdown stops the server; Start starts it again with the same store.
func (j *JetStream) Shutdown() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.srv == nil {
		return
	}
	j.srv.Shutdown()
	j.srv.WaitForShutdown()
	j.srv = nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, below
// the kernel's ephemeral range (see lowestTestPort), and not handed out
// before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
