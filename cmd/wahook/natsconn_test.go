package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
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
// the count dropped, not printed to stderr; a subscription that stays slow
// is logged once, not once per drop.
func TestConnLoggingClientErrors(t *testing.T) {
	srv := schematest.StartJetStream(t)
	core, logs := observer.New(zap.WarnLevel)
	nc, err := nats.Connect(srv.URL(), connLogging(zap.New(core), "test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The handler holds each message until released; the subscription
	// keeps one more pending. Each round, one message waits and the next
	// is dropped: the client reports a drop anew after it has queued one.
	picked, release := make(chan struct{}), make(chan struct{})
	sub, err := nc.Subscribe("slow.subject", func(*nats.Msg) {
		picked <- struct{}{}
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(2, -1); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		t.Helper()
		for range n {
			if err := nc.Publish("slow.subject", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	publish(1)
	<-picked
	for round := range 20 {
		publish(2) // one pending, one dropped
		if round == 0 {
			testutil.Eventually(t, 10*time.Second, "the slow consumer logged", func() (bool, string) {
				for _, e := range logs.FilterMessage("nats client error").All() {
					m := e.ContextMap()
					if d, _ := m["dropped"].(int64); d > 0 && m["connection"] == "test" {
						return true, ""
					}
				}
				return false, "no line with a count dropped"
			})
		}
		release <- struct{}{}
		<-picked
	}
	close(release)
	if n := logs.FilterMessage("nats client error").Len(); n != 1 {
		t.Fatalf("%d lines for one slow subscription within 10 s, want 1", n)
	}
	if d, _ := sub.Dropped(); d != 20 {
		t.Fatalf("%d messages dropped, want 20 (the test's rounds went otherwise)", d)
	}
}

// TestConnLoggingDisconnects: a connection drained at shutdown is not
// logged as NATS lost (the client calls its disconnect handler on a close
// too, and every serve logged "nats disconnected, reconnecting" as it
// stopped); a server that goes away is.
func TestConnLoggingDisconnects(t *testing.T) {
	srv := schematest.StartJetStream(t)
	core, logs := observer.New(zap.WarnLevel)
	nc, err := nats.Connect(srv.URL(), connLogging(zap.New(core), "test")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := drainNATS(nc); err != nil {
		t.Fatal(err)
	}
	// The client's handlers run on a goroutine of their own: one more
	// connection's lost server, logged after the first's close would
	// have been, shows the close was seen.
	nc2, err := nats.Connect(srv.URL(), append(connLogging(zap.New(core), "test2"), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	srv.Shutdown()
	testutil.Eventually(t, 10*time.Second, "the lost server logged", func() (bool, string) {
		return logs.FilterMessage("nats disconnected, reconnecting").FilterField(zap.String("connection", "test2")).Len() == 1, ""
	})
	if n := logs.FilterMessage("nats disconnected, reconnecting").FilterField(zap.String("connection", "test")).Len(); n != 0 {
		t.Errorf("the drained connection logged as lost %d times", n)
	}

	// A server lost, and the connection closed before the client's handler
	// goroutine ran the disconnect handler (the client gives a test no way
	// to hold that order, so the handler is called as the client would,
	// with the closed connection): still logged, since it comes with the
	// error that lost the server.
	var o nats.Options
	for _, opt := range connLogging(zap.New(core), "test3") {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if !nc.IsClosed() {
		t.Fatal("the drained connection is not closed")
	}
	o.DisconnectedErrCB(nc, io.EOF)
	if n := logs.FilterMessage("nats disconnected, reconnecting").FilterField(zap.String("connection", "test3")).Len(); n != 1 {
		t.Errorf("a lost server seen after the close logged %d times, want 1", n)
	}
	o.DisconnectedErrCB(nc, nil)
	if n := logs.FilterMessage("nats disconnected, reconnecting").FilterField(zap.String("connection", "test3")).Len(); n != 1 {
		t.Errorf("after a close without an error: %d lines, want still 1 (a close is no lost server)", n)
	}
}

// TestNATSURLCredentialsNotShown: a --nats-url the NATS client cannot parse
// is reported without its credentials. Before, its *url.Error was printed
// whole: connect to nats: parse "nats://user:S3CRETPW@host:badport": ...
func TestNATSURLCredentialsNotShown(t *testing.T) {
	for _, url := range []string{
		"nats://user:S3CRETPW@host:badport",
		"nats://127.0.0.1:4222,nats://S3CRETPW@host:badport", // a token, the second of two
		`nats://user:S3CRET"PW@host:badport`,                 // %q escapes the quote
		"nats://user:S3CRET/PW@host:4222",                    // the host ends at '/': "invalid port \":S3CRET\""
		"nats://user:S3CRET,PW@host:4222",                    // the list splits at ',': "nats://user:S3CRET" has no '@'
		`nats://user:S3"C/RET@host:4222`,                     // the cut part quoted, escaped
		"nats://user:S3CRET%zzPW@host:4222",                  // a bad escape: "invalid URL escape \"%zz\""
	} {
		code, _, errOut := runCmd(t, "ingest", "--nats-url", url, "--app-secret", "x", "--listen", freeAddr(t), "--log-level", "error")
		if code != 1 || !strings.Contains(errOut, "cannot be parsed") {
			t.Fatalf("%s: code %d, %q; want 1 saying the URL cannot be parsed", url, code, errOut)
		}
		if strings.Contains(errOut, "S3") || strings.Contains(errOut, "PW") || strings.Contains(errOut, "%zz") {
			t.Fatalf("%s: the error shows the password: %q", url, errOut)
		}
	}
}

// TestEmbeddedNATSStartErrors: serve reports at once, naming the cause, an
// embedded nats-server that cannot start: a --nats-listen address in use, a
// JetStream store that is not a directory (an error the server calls fatal).
// Before, the server only logged either, and serve waited 30 s to say "not
// ready within 30s", deaf to SIGTERM meanwhile.
func TestEmbeddedNATSStartErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	notDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(notDir, "jetstream"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		natsListen, dataDir, want string
	}{
		{ln.Addr().String(), t.TempDir(), ln.Addr().String() + ": bind: address already in use"},
		{"127.0.0.1:0", notDir, "storage directory is not a directory"},
	} {
		start := time.Now()
		code, _, errOut := runCmd(t, "serve", "--nats-listen", c.natsListen, "--data-dir", c.dataDir, "--listen", freeAddr(t),
			"--app-secret", "x", "--log-level", "error")
		if took := time.Since(start); code != 1 || !strings.Contains(errOut, c.want) || took > 10*time.Second { // it waited 30 s
			t.Errorf("--nats-listen %s: code %d after %v, %q; want 1 at once naming %q", c.natsListen, code, took.Round(time.Millisecond), errOut, c.want)
		}
	}
	if code, _, errOut := runCmd(t, "serve", "--nats-listen", "127.0.0.1:99999", "--data-dir", t.TempDir(), "--app-secret", "x"); code != 2 || !strings.Contains(errOut, "bad port") {
		t.Errorf("--nats-listen 127.0.0.1:99999: code %d, %q; want 2, bad port", code, errOut)
	}
}

// TestCampaignNATSURLNotShown: wahook loadtest campaign does not quote a
// NATS URL it cannot parse (its password) in its error.
func TestCampaignNATSURLNotShown(t *testing.T) {
	code, _, errOut := runCmd(t, "loadtest", "campaign", "--nats-url", "nats://user:p%zzSECRET@127.0.0.1:1",
		"--url", "http://127.0.0.1:1/webhook", "--app-secret", "x")
	if code != 1 || strings.Contains(errOut, "SECRET") || !strings.Contains(errOut, "cannot be parsed") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
