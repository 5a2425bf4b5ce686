package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/loadtest"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/schematest"
)

// The fault and abuse suite: inputs and loads that once took wahook down,
// each kept as a test (loopback only, bounded in time).

const abuseSecret = "wahook-abuse-app-secret"

// startLimited runs "wahook args..." as a child process with at most
// nofile open descriptors (prlimit, from util-linux).
func startLimited(t *testing.T, logs *syncBuffer, nofile int, args ...string) *exec.Cmd {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux): %v", err)
	}
	lim := "--nofile=" + strconv.Itoa(nofile) + ":" + strconv.Itoa(nofile)
	cmd := exec.Command(prlimit, lim, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WAHOOK_TEST_MAIN_ARGS="+strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// alive reports whether cmd runs: it exists and is not a zombie (exited,
// not waited for yet).
func alive(cmd *exec.Cmd) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// metric reads a counter from a /metrics page, summed over its labels.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// dialFrom opens n idle connections to addr from the loopback address
// from; it returns those the server took.
func dialFrom(t *testing.T, from, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// statusBodyOf is the i-th body of the abuse tests: one sent status.
func statusBodyOf(i int) string {
	return fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"104281907735512","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15557810001","phone_number_id":"107655290331184"},"statuses":[{"id":"wamid.abuse-%d","status":"sent","timestamp":"%d","recipient_id":"4915155500734"}]}}]}]}`, i, 1781514312+i)
}

// postStatus posts the i-th body, signed, from the loopback address from
// and returns the answer's status code, or 0 when the request failed.
func postStatus(base, from string, i int) int {
	body := statusBodyOf(i)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
		DisableKeepAlives: true,
	}}
	resp, err := client.Do(signedRequest(base+"/webhook", abuseSecret, body))
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestIdleConnectionFloodUnderLowFileLimit: 400 idle connections under
// "ulimit -n 200" used up the descriptors; fasthttp's accept loop returned
// on EMFILE and serve exited. Now the listener waits the error out: serve
// stays up, and once the flood ends webhooks are stored again.
func TestIdleConnectionFloodUnderLowFileLimit(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	cmd := startLimited(t, &logs, 200, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen,
		"--data-dir", t.TempDir(), "--app-secret", abuseSecret, "--log-format", "console", "--log-level", "warn")
	base := "http://" + listen
	waitReady(t, base, &logs)
	if code := postStatus(base, "127.0.0.1", 0); code != 200 {
		t.Fatalf("before the flood: %d\n%s", code, logs.String())
	}
	flood := dialFrom(t, "127.0.0.3", listen, 400)
	// The server accepts what it can and meets EMFILE. (Its /metrics needs
	// a descriptor it lacks until the flood ends: the log says it.)
	testutil.Eventually(t, 15*time.Second, "an accept error to be waited out", func() (bool, string) {
		if !alive(cmd) {
			t.Fatalf("serve exited under the flood:\n%s", logs.String())
		}
		return strings.Contains(logs.String(), "accept failed, trying again"), logs.String()
	})
	if !alive(cmd) {
		t.Fatalf("serve exited under the flood:\n%s", logs.String())
	}
	for _, c := range flood {
		c.Close()
	}
	testutil.Eventually(t, 15*time.Second, "a webhook stored after the flood", func() (bool, string) {
		if !alive(cmd) {
			t.Fatalf("no webhook stored after the flood (serve exited):\n%s", logs.String())
		}
		code := postStatus(base, "127.0.0.1", 1)
		return code == 200, fmt.Sprintf("status %d\n%s", code, logs.String())
	})
	if got := metric(t, base, "wahook_ingest_accept_errors_total"); got == 0 {
		t.Errorf("no accept error was waited out: the test did not run out of descriptors")
	}
	if !strings.Contains(logs.String(), "accept failed, trying again") {
		t.Errorf("the accept errors were not logged")
	}
}

// TestConnectionsPerIPBound: connections past --max-conns-per-ip from one
// address are closed at once; another address (Meta's next sender) is
// still served.
func TestConnectionsPerIPBound(t *testing.T) {
	withoutGCEnv(t)
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen,
		"--data-dir", t.TempDir(), "--app-secret", abuseSecret, "--max-conns-per-ip", "50", "--log-format", "console", "--log-level", "warn")
	base := "http://" + listen
	waitReady(t, base, &logs)
	// serve runs the embedded NATS server: --gc-percent auto gives its
	// collector embeddedGCPercent (the process's own GOGC, as /metrics
	// reports it; the child runs without GOGC and WAHOOK_GC_PERCENT).
	if got := metric(t, base, "go_gc_gogc_percent"); got != embeddedGCPercent {
		t.Errorf("serve with the embedded NATS server: GOGC %v, want %d", got, embeddedGCPercent)
	}
	dialFrom(t, "127.0.0.4", listen, 120)
	testutil.Eventually(t, 10*time.Second, "70 connections refused per IP", func() (bool, string) {
		n := metric(t, base, `wahook_ingest_connections_refused_total{reason="per_ip"}`)
		return n >= 70, fmt.Sprintf("refused per IP: %v, want 70", n)
	})
	if code := postStatus(base, "127.0.0.5", 2); code != 200 {
		t.Fatalf("from another address while one is at its bound: %d", code)
	}
	if code := postStatus(base, "127.0.0.4", 3); code == 200 {
		t.Fatalf("a connection past the bound was served")
	}
}

// TestOverloadShedsBeforePublishing: past capacity, requests waited for an
// in-flight slot up to --ack-timeout, got one late, and most were answered
// 503 after JetStream had stored them (108,661 of 140,086 in a burst):
// Meta's retries stored them again. Now a request is shed before it is
// published: under a burst of 256 concurrent senders against 16 slots,
// every body answered 503 is absent from RAW, every body answered 200 is
// in it, and some of each happen. The shedding is logged, one line per 10 s
// at most.
func TestOverloadShedsBeforePublishing(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen,
		"--data-dir", t.TempDir(), "--app-secret", abuseSecret, "--max-inflight", "16", "--queue-wait", "1ms",
		"--dedupe-window", "0", "--log-format", "console", "--log-level", "warn")
	base := "http://" + listen
	waitReady(t, base, &logs)

	burst := time.Now()
	const senders, each = 256, 40
	codes := make([]int, senders*each)
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for k := 0; k < each; k++ {
				i := s*each + k
				codes[i] = postStatus(base, "127.0.0.1", 1000+i)
			}
		}(s)
	}
	wg.Wait()
	stored := rawMessageIDs(t, natsListen)
	var ok, shed, other, shedStored, okMissing int
	for i, code := range codes {
		id := schema.RawMsgID([]byte(statusBodyOf(1000 + i)))
		switch code {
		case 200:
			ok++
			if !stored[id] {
				okMissing++
			}
		case 503:
			shed++
			if stored[id] {
				shedStored++
			}
		default:
			other++
		}
	}
	t.Logf("200: %d, 503: %d, other: %d; stored %d", ok, shed, other, len(stored))
	if okMissing > 0 {
		t.Errorf("%d bodies answered 200 are not in RAW", okMissing)
	}
	if shedStored > 0 {
		t.Errorf("%d bodies answered 503 were stored anyway (the store's work wasted, and Meta's retry stores them again)", shedStored)
	}
	if ok == 0 || shed == 0 {
		t.Errorf("the burst did not both store and shed (200: %d, 503: %d): it did not test an overload", ok, shed)
	}
	if got := metric(t, base, `wahook_ingest_requests_total{app="default",result="shed"}`); int(got) != shed {
		t.Errorf("shed counted %v, answered %d", got, shed)
	}
	lines := strings.Count(logs.String(), "past capacity, answering 503 with nothing published")
	if most := 1 + int(time.Since(burst)/(10*time.Second)); shed > 0 && (lines == 0 || lines > most) {
		t.Errorf("%d requests shed, logged in %d lines; want 1 to %d\n%s", shed, lines, most, logs.String())
	}
}

// rawMessageIDs returns the Nats-Msg-Id of every message in WAHOOK_RAW.
func rawMessageIDs(t *testing.T, natsAddr string) map[string]bool {
	t.Helper()
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, schema.StreamRaw, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for pending := info.NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			ids[m.Headers().Get(schema.HeaderMsgID)] = true
			pending--
		}
		if batch.Error() != nil {
			t.Fatal(batch.Error())
		}
	}
	return ids
}

// TestMetricsListenAndNATSLogs: with --metrics-listen, /metrics leaves the
// public webhook port (it showed process_max_fds to anyone); and ingest
// logs the loss and the return of its NATS connection.
func TestMetricsListenAndNATSLogs(t *testing.T) {
	withoutGCEnv(t)
	js := schematest.StartJetStream(t)
	listen, metricsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "ingest", "--nats-url", js.URL(), "--listen", listen, "--metrics-listen", metricsListen,
		"--app-secret", abuseSecret, "--body-limit", "1000000", "--log-format", "console")
	base := "http://" + listen
	waitReady(t, base, &logs)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("/metrics on the webhook port: %d, want 404", resp.StatusCode)
	}
	if got := metric(t, "http://"+metricsListen, "wahook_ingest_requests_total"); got != 0 {
		t.Errorf("requests before any: %v", got)
	}
	// ingest on external NATS keeps Go's collector as it is.
	if got := metric(t, "http://"+metricsListen, "go_gc_gogc_percent"); got != 100 {
		t.Errorf("ingest on external NATS: GOGC %v, want Go's 100", got)
	}
	if code := postStatus(base, "127.0.0.1", 5); code != 200 {
		t.Fatalf("post: %d", code)
	}
	if got := metric(t, "http://"+metricsListen, `wahook_ingest_requests_total{app="default",result="ok"}`); got != 1 {
		t.Errorf("stored requests on --metrics-listen: %v, want 1", got)
	}
	js.Shutdown()
	js.Start()
	testutil.Eventually(t, 15*time.Second, "the reconnect logged", func() (bool, string) {
		return strings.Contains(logs.String(), "nats reconnected"), logs.String()
	})
	if !strings.Contains(logs.String(), "nats disconnected") {
		t.Errorf("the disconnect was not logged:\n%s", logs.String())
	}
}

// TestServeKilledUnderLoad: "wahook serve" (webhooks, stage 1, stage 2, on
// its embedded JetStream) is killed with SIGKILL while Meta-shaped traffic
// flows, and started again on the same data directory; the load test
// retries what got no answer, as Meta does. Every event whose body got a
// 200 is in ClickHouse exactly once (the ledger check, waiting for stage
// 1's backlog).
func TestServeKilledUnderLoad(t *testing.T) {
	ch := schematest.ClickHouse(t)
	listen, natsListen, dataDir := freeAddr(t), freeAddr(t), t.TempDir()
	args := []string{"serve", "--listen", listen, "--nats-listen", natsListen, "--data-dir", dataDir,
		"--app-secret", abuseSecret, "--clickhouse-dsn", ch.DSN, "--flush-interval", "100ms", "--ack-wait", "4s",
		"--funnel-interval", "0", "--log-format", "console", "--log-level", "warn"}
	var logs syncBuffer
	first := startWahook(t, &logs, args...)
	base := "http://" + listen
	waitReady(t, base, &logs)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"loadtest", "--url", base + "/webhook", "--app-secret", abuseSecret,
			"--numbers", "6", "--coexistence", "1", "--upgraded", "2", "--outbound-mps", "80", "--reply-rate", "0.3",
			"--failure-mix", "131049=2%,130429=0.5%", "--retry-share", "0.02", "--statuses-per-post", "3",
			"--duration", "8s", "--connections", "16", "--attempts", "10", "--retry-backoff", "500ms", "--timeout", "3s",
			"--check-clickhouse-dsn", ch.DSN, "--check-nats-url", "nats://" + natsListen, "--check-timeout", "90s",
			"--check-quiet", "5s", "--json"}, &out, &errOut)
	}()
	// Kill it under load: once the load's webhooks are stored and stage 1
	// writes them.
	testutil.Eventually(t, 30*time.Second, "the load's webhooks stored and written", func() (bool, string) {
		stored, rows := metric(t, base, `wahook_ingest_requests_total{app="default",result="ok"}`), count(t, ch, "SELECT count() FROM {db}.status_events")
		return stored >= 50 && rows > 0, fmt.Sprintf("%v webhooks stored, %d status rows", stored, rows)
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	// Down for a second under load: the outage is the subject (the load
	// test's retries of what got no answer), not an event to wait for.
	time.Sleep(time.Second)
	startWahook(t, &logs, args...)
	waitReady(t, base, &logs)

	code := <-done
	var s loadtest.Summary
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil || s.Check == nil {
		t.Fatalf("loadtest exited %d: %v\n%s\n%s\nserve:\n%s", code, err, out.String(), errOut.String(), logs.String())
	}
	c := s.Check
	t.Logf("%d requests, %d answered 200, %d events acked; ClickHouse found %d, lost %d, duplicates %d, drained in %.1fs",
		s.Sent, s.OK, c.Expected, c.Found, c.Lost, c.Duplicates, c.WaitS)
	if c.Lost != 0 || c.Duplicates != 0 || c.Found != c.Expected || c.Expected == 0 {
		t.Fatalf("after kill -9 of serve: %+v", c)
	}
	if s.Errors == 0 && s.Retried == 0 {
		t.Errorf("no request failed or was retried: the kill did not happen under load")
	}
}

// TestHTTPEdges: a client that sends its headers a byte at a time
// (slowloris) is cut off after the read timeout while others are served;
// 64 KiB of headers answer 431 and the endpoint goes on; a signed body sent
// chunked is verified over its bytes as received and stored.
func TestHTTPEdges(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen,
		"--data-dir", t.TempDir(), "--app-secret", abuseSecret, "--log-format", "console", "--log-level", "warn")
	base := "http://" + listen
	waitReady(t, base, &logs)

	// Slowloris, beside a normal client.
	slow, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	cut := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if _, err := slow.Write([]byte("POST /webhook HTTP/1.1\r\nHost: wahook\r\n")); err != nil {
			cut <- time.Since(start)
			return
		}
		for i := 0; ; i++ {
			if _, err := slow.Write([]byte("X")); err != nil {
				cut <- time.Since(start)
				return
			}
			if i > 60 {
				cut <- -1
				return
			}
			time.Sleep(250 * time.Millisecond) // the slow client's pace is the subject
		}
	}()
	if code := postStatus(base, "127.0.0.1", 11); code != 200 {
		t.Fatalf("a client beside the slow one: %d", code)
	}

	// 64 KiB of headers.
	req := signedRequest(base+"/webhook", abuseSecret, statusBodyOf(12))
	req.Header.Set("X-Padding", strings.Repeat("p", 64<<10))
	// The server answers 431 and closes; a client still writing its
	// headers may see the reset before the answer: refused either way.
	resp, err := http.DefaultClient.Do(req)
	switch {
	case err != nil && !strings.Contains(err.Error(), "reset by peer") && !strings.Contains(err.Error(), "broken pipe"):
		t.Fatal(err)
	case err == nil:
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("64 KiB of headers: %d, want 431", resp.StatusCode)
		}
	}

	// A chunked body, written by hand in two chunks.
	body := statusBodyOf(13)
	sig := signedRequest(base+"/webhook", abuseSecret, body).Header.Get(schema.SignatureHeader)
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	half := len(body) / 2
	fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: wahook\r\nContent-Type: application/json\r\n%s: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n",
		schema.SignatureHeader, sig, half, body[:half], len(body)-half, body[half:])
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("chunked body: %d, want 200", resp.StatusCode)
	}
	if ids := rawMessageIDs(t, natsListen); !ids[schema.RawMsgID([]byte(body))] {
		t.Errorf("the chunked body is not in RAW as sent")
	}

	select {
	case d := <-cut:
		// The 10 s read timeout, and a margin for a loaded machine.
		if d < 0 || d > 16*time.Second {
			t.Errorf("slowloris connection cut after %v, want within the 10 s read timeout", d)
		}
	case <-time.After(25 * time.Second):
		t.Errorf("slowloris connection not cut")
	}
	if code := postStatus(base, "127.0.0.1", 14); code != 200 {
		t.Fatalf("after the edges: %d", code)
	}
}

// TestReadyWhileStorageFull: while JetStream refuses bodies for want of
// storage, /readyz fails, saying so, and passes again once the refusals
// stop. It answered ready while every large body got 503.
func TestReadyWhileStorageFull(t *testing.T) {
	listen, natsListen := freeAddr(t), freeAddr(t)
	var logs syncBuffer
	startWahook(t, &logs, "serve", "--no-process", "--listen", listen, "--nats-listen", natsListen, "--data-dir", t.TempDir(),
		"--app-secret", abuseSecret, "--jetstream-max-store", "3000000", "--log-format", "console", "--log-level", "error")
	base := "http://" + listen
	waitReady(t, base, &logs)
	codes := map[int]int{}
	pad := strings.Repeat("x", 200<<10)
	for i := range 30 {
		resp, err := http.DefaultClient.Do(signedRequest(base+"/webhook", abuseSecret, fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, pad)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("no body refused by a 3 MB store: %v", codes)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "storage") {
		t.Fatalf("/readyz while bodies are refused for storage (%v): %d %q, want 503 naming storage", codes, resp.StatusCode, b)
	}
	waitReady(t, base, &logs) // the refusals stopped
}
