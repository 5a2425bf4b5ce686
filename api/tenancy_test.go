package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/processor"
	"github.com/wahook/wahook/processor/chwriter"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

const (
	tokenA = "tenant-a-token-0123456789" // waba-1: numbers 1 and 2
	tokenB = "tenant-b-token-0123456789" // waba-2: number 3
)

// keepPublisher keeps the send-result documents it is given.
type keepPublisher struct {
	mu   sync.Mutex
	docs [][]byte
}

func (p *keepPublisher) PublishRaw(_ context.Context, _ string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.docs = append(p.docs, body)
	return nil
}

func tenantConfig() api.Config {
	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1, "acme:" + tokenA + ":waba=waba-1", "beta:" + tokenB + ":waba=waba-2"}
	return cfg
}

// getAs answers path for token, decoding a 200 into v; it returns the
// status and body.
func getAs(t *testing.T, s *api.Server, path, token string, v any) (int, []byte) {
	t.Helper()
	code, _, b := get(t, s.App(), path, token)
	if code == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return code, b
}

// No report answers a scoped token anything of another tenant: its rows
// equal those of an unscoped token filtered to the tenant's WABA, its
// answers never name another tenant's numbers or WABAs, and asking for
// them is not_found, exactly as for a number that does not exist.
func TestTenantsSeeOnlyTheirWABAs(t *testing.T) {
	d := generate(300)
	ch := load(t, d)
	// Dead letters of tenant B's WABA, beside the dataset's bodies that
	// are not JSON (which name no WABA: no tenant sees them): dl-b without
	// the entry's time, dl-c with it between the id and the changes, as
	// Meta sends it (it was every tenant's), and dl-d of an entry of A's
	// and one of B's whose keys come in another order (no tenant's).
	for _, dl := range [][2]string{
		{"dl-b", `{"object":"whatsapp_business_account","entry":[{"id":"waba-2","changes":[{"field":"messages","value":7}]}]}`},
		{"dl-c", `{"object":"whatsapp_business_account","entry":[{"id":"waba-2","time":1781514312,"changes":[{"field":"account_update","value":7}]}]}`},
		{"dl-d", `{"object":"whatsapp_business_account","entry":[{"id":"waba-1","time":1781514312,"changes":[{"field":"messages","value":7}]},{"time":1781514312,"id":"waba-2","changes":[{"field":"messages","value":7}]}]}`},
	} {
		if err := ch.Conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s.dead_letters (received_at, app, raw_seq, raw_msg_id, item, reason, error, body)
SELECT toDateTime(?), 'default', toUInt64(99), ?, 'entry[0].changes[0]', 'bad_item', 'test', ?`, ch.Database),
			t0.Add(10*time.Minute).Unix(), dl[0], dl[1]); err != nil {
			t.Fatal(err)
		}
	}
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	pub := &keepPublisher{}
	cfg := tenantConfig()
	cfg.Intake = pub
	s, err := api.New(cfg, store, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n1, n2, n3 := numbers[0].id, numbers[1].id, numbers[2].id
	foreign := map[string][]string{tokenA: {n3, "waba-2", "dl-b", "dl-c", "dl-d"}, tokenB: {n1, n2, "waba-1", "dl-d"}}
	own := map[string]string{tokenA: "waba-1", tokenB: "waba-2"}

	reports := []string{
		"/api/v1/failures?" + rangeParams("group_by=number,waba"),
		"/api/v1/failures?" + rangeParams("group_by=code,number&step=1m"),
		"/api/v1/funnel?" + rangeParams("by=number"),
		"/api/v1/funnel?" + rangeParams("by=waba"),
		"/api/v1/funnel?" + rangeParams("by=total"),
		"/api/v1/numbers?" + rangeParams(""),
		"/api/v1/dead-letters?" + rangeParams(""),
	}
	for _, tok := range []string{tokenA, tokenB} {
		for _, path := range reports {
			code, b := getAs(t, s, path, tok, nil)
			if code != http.StatusOK {
				t.Fatalf("%s as %s: %d %s", path, own[tok], code, b)
			}
			for _, f := range foreign[tok] {
				if bytes.Contains(b, []byte(f)) {
					t.Errorf("%s as tenant of %s names %s: %s", path, own[tok], f, b)
				}
			}
		}
	}

	// The tenant's answer is the unscoped answer for its WABA.
	for _, tok := range []string{tokenA, tokenB} {
		for _, path := range []string{
			"/api/v1/failures?" + rangeParams("group_by=code,number"),
			"/api/v1/funnel?" + rangeParams("by=number"),
			"/api/v1/numbers?" + rangeParams(""),
		} {
			var all, mine map[string]any
			getAs(t, s, path+"&waba_id="+own[tok], token1, &all)
			getAs(t, s, path, tok, &mine)
			delete(all, "as_of")
			delete(mine, "as_of")
			if fmt.Sprint(all) != fmt.Sprint(mine) {
				t.Errorf("%s as tenant of %s:\n%v\nwant the unscoped answer for its WABA:\n%v", path, own[tok], mine, all)
			}
			if rows, _ := mine["rows"].([]any); strings.Contains(path, "failures") && len(rows) == 0 {
				t.Errorf("%s as tenant of %s: no rows; the test proves nothing", path, own[tok])
			}
		}
	}
	var fa, fb, fall api.Failures
	getAs(t, s, "/api/v1/failures?"+rangeParams(""), tokenA, &fa)
	getAs(t, s, "/api/v1/failures?"+rangeParams(""), tokenB, &fb)
	getAs(t, s, "/api/v1/failures?"+rangeParams(""), token1, &fall)
	if fa.Total == 0 || fb.Total == 0 || fa.Total+fb.Total != fall.Total {
		t.Errorf("failures: tenant A %d + tenant B %d, want both > 0 and together the whole %d", fa.Total, fb.Total, fall.Total)
	}

	// Dead letters: B sees its WABA's two; A none; the unscoped token all
	// (dl-d too).
	var da, db, dall api.DeadLetters
	getAs(t, s, "/api/v1/dead-letters?"+rangeParams(""), tokenA, &da)
	getAs(t, s, "/api/v1/dead-letters?"+rangeParams(""), tokenB, &db)
	getAs(t, s, "/api/v1/dead-letters?"+rangeParams(""), token1, &dall)
	var bIDs []string
	for _, r := range db.Recent {
		bIDs = append(bIDs, r.RawMsgID)
	}
	slices.Sort(bIDs)
	if da.Count != 0 || db.Count != 2 || fmt.Sprint(bIDs) != "[dl-b dl-c]" || dall.Count != 3+uint64(len(d.badBodies)) {
		t.Errorf("dead letters: A %d, B %d %v, all %d", da.Count, db.Count, bIDs, dall.Count)
	}

	// Anything of another tenant is not_found, with the very answer of a
	// number or WABA that exists nowhere.
	_, missing := getAs(t, s, "/api/v1/throughput?phone_number_id=999999&"+rangeParams(""), tokenB, nil)
	for _, c := range []struct{ path, param string }{
		{"/api/v1/throughput?phone_number_id=" + n1 + "&" + rangeParams(""), "phone_number_id"},
		{"/api/v1/failures?phone_number_id=" + n2 + "&" + rangeParams(""), "phone_number_id"},
		{"/api/v1/funnel?waba_id=waba-1&" + rangeParams(""), "waba_id"},
		{"/api/v1/numbers?phone_number_id=" + n1 + "&" + rangeParams(""), "phone_number_id"},
		{"/api/v1/failures?waba_id=waba-2,waba-1&" + rangeParams(""), "waba_id"},
	} {
		code, b := getAs(t, s, c.path, tokenB, nil)
		if code != http.StatusNotFound || !bytes.Contains(b, []byte(`"code":"not_found"`)) || !bytes.Contains(b, []byte(`"parameter":"`+c.param+`"`)) {
			t.Errorf("%s as tenant B: %d %s, want 404 not_found on %s", c.path, code, b, c.param)
		}
		if c.param == "phone_number_id" && !bytes.Equal(b, missing) {
			t.Errorf("%s as tenant B: %s differs from a number that exists nowhere: %s", c.path, b, missing)
		}
	}
	// Its own number's throughput answers.
	var tp api.Throughput
	if code, b := getAs(t, s, "/api/v1/throughput?phone_number_id="+n3+"&"+rangeParams(""), tokenB, &tp); code != 200 || tp.Outbound == 0 {
		t.Errorf("own throughput: %d %s", code, b)
	}

	// wahook report --tenant-waba answers what the tenant's token gets.
	for _, c := range []struct{ name, path, query string }{
		{"errors", "/api/v1/failures", "group_by=code,number"},
		{"funnel", "/api/v1/funnel", "by=number"},
		{"numbers", "/api/v1/numbers", ""},
		{"dead-letters", "/api/v1/dead-letters", ""},
	} {
		values, _ := url.ParseQuery(rangeParams(c.query))
		res, err := api.RunScoped(context.Background(), store, c.name, values, time.Now(), []string{"waba-2"})
		if err != nil {
			t.Fatal(err)
		}
		cli, _ := api.Encode(res)
		_, b := getAs(t, s, c.path+"?"+rangeParams(c.query), tokenB, nil)
		if string(withoutAsOfField(cli)) != string(withoutAsOfField(b)) {
			t.Errorf("report %s --tenant-waba waba-2:\n%s\nthe tenant's API answer:\n%s", c.name, cli, b)
		}
	}
	values, _ := url.ParseQuery("phone_number_id=" + n1 + "&" + rangeParams(""))
	if _, err := api.RunScoped(context.Background(), store, "throughput", values, time.Now(), []string{"waba-2"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("report throughput of another tenant's number: %v, want not found", err)
	}

	// Send results: a tenant reports for its own numbers only.
	doc := func(id string) string {
		return `{"results":[{"phone_number_id":"` + id + `","status":"failed","error_code":130429,"recipient":"15551230002","timestamp":1773500000}]}`
	}
	postAs := func(body, token string) (int, []byte) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/send-results", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := s.App().Test(req, 30_000)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := postAs(doc(n1), tokenB); code != http.StatusNotFound || !bytes.Contains(b, []byte(`results[0].phone_number_id`)) {
		t.Errorf("tenant B reporting for tenant A's number: %d %s", code, b)
	}
	if code, b := postAs(doc(n3), tokenB); code != http.StatusAccepted {
		t.Errorf("tenant B reporting for its number: %d %s", code, b)
	}
	// Its number, another tenant's WABA: the result would land in that
	// tenant's failures, with B's number.
	forged := `{"results":[{"phone_number_id":"` + n3 + `","waba_id":"waba-1","status":"failed","error_code":131048,"timestamp":1773500000}]}`
	if code, b := postAs(forged, tokenB); code != http.StatusNotFound || !bytes.Contains(b, []byte(`results[0].waba_id`)) {
		t.Errorf("tenant B reporting under tenant A's WABA: %d %s", code, b)
	}
	underOwn := `{"results":[{"phone_number_id":"` + n3 + `","waba_id":"waba-2","status":"failed","error_code":131048,"timestamp":1773500000}]}`
	if code, b := postAs(underOwn, tokenB); code != http.StatusAccepted {
		t.Errorf("tenant B reporting under its WABA: %d %s", code, b)
	}
	if code, b := postAs(doc(n1), token1); code != http.StatusAccepted {
		t.Errorf("unscoped token reporting: %d %s", code, b)
	}
	if len(pub.docs) != 3 {
		t.Errorf("%d documents stored, want 3", len(pub.docs))
	}
}

// A tokens file is read again when it changes: a token added works, a
// token removed is refused, and a scope changed applies.
func TestTokensFileReloads(t *testing.T) {
	d := generate(60)
	ch := load(t, d)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# tenants\nbeta:" + tokenB + ":waba=waba-2\n")
	cfg := api.DefaultConfig()
	cfg.TokensFile = file
	core, logs := observer.New(zap.WarnLevel)
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())))
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/numbers?" + rangeParams("")
	var ns api.Numbers
	if code, b := getAs(t, s, path, tokenB, &ns); code != 200 || len(ns.Numbers) != 1 || ns.Numbers[0].PhoneNumberID != numbers[2].id {
		t.Fatalf("tenant B from the file: %d %s", code, b)
	}
	if code, _ := getAs(t, s, path, tokenA, nil); code != http.StatusUnauthorized {
		t.Fatalf("token not in the file: %d", code)
	}
	write("acme:" + tokenA + ":waba=waba-1,waba-2\n")
	testutil.Eventually(t, 5*time.Second, "the changed file's tokens", func() (bool, string) {
		ns = api.Numbers{}
		codeA, _ := getAs(t, s, path, tokenA, &ns)
		codeB, _ := getAs(t, s, path, tokenB, nil)
		return codeA == 200 && codeB == http.StatusUnauthorized && len(ns.Numbers) == 3,
			fmt.Sprintf("A %d with %d numbers, B %d", codeA, len(ns.Numbers), codeB)
	})
	// A file that became unreadable keeps the tokens read before: asked
	// again once the server has read it (and said so).
	write("not a token\n")
	testutil.Eventually(t, 5*time.Second, "the bad file read", func() (bool, string) {
		code, _ := getAs(t, s, path, tokenA, nil)
		n := logs.FilterMessage("tokens file not read; the tokens read before stay").Len()
		return n > 0, fmt.Sprintf("%d, %d warnings", code, n)
	})
	if code, _ := getAs(t, s, path, tokenA, nil); code != 200 {
		t.Errorf("after a bad file: %d, want the tokens read before", code)
	}
}

// The live signals, as a snapshot and as a stream, show a tenant its own
// numbers only, and a change within a second.
func TestPacingSignalsPerTenant(t *testing.T) {
	d := generate(60)
	ch := load(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := pacingBucket(t)
	put := func(id string, advice schema.Advice) {
		b, _ := json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: id, UpdatedAt: time.Now().UTC(), TierMPS: 80, Advice: advice, RecommendedMPS: 40})
		if _, err := kv.Put(ctx, schema.PacingKey(id), b); err != nil {
			t.Fatal(err)
		}
	}
	n1, n3 := numbers[0].id, numbers[2].id
	put(n1, schema.AdviceOK)
	put(n3, schema.AdviceOK)
	cfg := tenantConfig()
	cfg.Pacing = kv
	// The server's write timeout is the query timeout and 10 s: the
	// stream must outlive it (it ended there once).
	cfg.QueryTimeout = time.Second
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var sigs api.Signals
	if code, b := getAs(t, s, "/api/v1/pacing", tokenB, &sigs); code != 200 || len(sigs.Signals) != 1 || sigs.Signals[0].PhoneNumberID != n3 {
		t.Fatalf("tenant B's snapshot: %d %s", code, b)
	}
	if code, b := getAs(t, s, "/api/v1/pacing", token1, &sigs); code != 200 || len(sigs.Signals) != 2 {
		t.Fatalf("unscoped snapshot: %d %s", code, b)
	}

	addr := serveAPI(t, s)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/pacing/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tokenB)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	next := readEvents(t, resp).next
	if e := next("hello"); e[0] != "hello" {
		t.Fatalf("first event %v", e)
	}
	if e := next("n3's signal"); e[0] != "signal" || !strings.Contains(e[1], n3) {
		t.Fatalf("initial signal %v", e)
	}
	if e := next("ready"); e[0] != "ready" {
		t.Fatalf("want ready, got %v (another tenant's signal?)", e)
	}
	put(n1, schema.AdviceStop) // tenant A's: never on B's stream
	start := time.Now()
	put(n3, schema.AdviceStop)
	e := next("the change")
	if e[0] != "signal" || !strings.Contains(e[1], n3) || !strings.Contains(e[1], `"advice":"stop"`) {
		t.Fatalf("change: %v", e)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the change came after %v", d)
	}
	// Past the server's write timeout (11 s here), the stream still
	// carries the changes.
	time.Sleep(12 * time.Second)
	put(n3, schema.AdviceOK)
	if e := next("a change 12 s later"); e[0] != "signal" || !strings.Contains(e[1], `"advice":"ok"`) {
		t.Fatalf("change after the write timeout: %v", e)
	}
}

// withoutAsOfField drops a funnel's as_of, which moves between two reads.
func withoutAsOfField(b []byte) []byte {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	delete(m, "as_of")
	out, _ := json.Marshal(m)
	return out
}

// embeddedJetStream is a JetStream client of an embedded server, and the
// server.
func embeddedJetStream(t *testing.T) (jetstream.JetStream, *schematest.JetStream) {
	t.Helper()
	js := schematest.StartJetStream(t)
	nc, err := nats.Connect(js.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return jsc, js
}

// pacingBucket is the KV bucket wahook_pacing on an embedded JetStream.
func pacingBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	jsc, _ := embeddedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := jsc.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketPacing})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// serveAPI serves s on a loopback port until the test ends (a shutdown
// with its live streams open must succeed) and returns the address.
func serveAPI(t *testing.T, s *api.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := s.Shutdown(sctx); err != nil {
			t.Errorf("shutdown with live streams open: %v", err)
		}
		<-served
	})
	return ln.Addr().String()
}

// openStream opens the live stream of the API at addr with token.
func openStream(ctx context.Context, t *testing.T, addr, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/pacing/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// One token cannot hold every live stream: past its limit its next stream
// is refused (429), while another token's opens.
func TestLiveStreamsPerToken(t *testing.T) {
	api.SetMaxStreamsPerToken(t, 2)
	cfg := tenantConfig()
	cfg.Pacing = pacingBucket(t)
	s, err := api.New(cfg, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveAPI(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(token string) *http.Response {
		t.Helper()
		resp := openStream(ctx, t, addr, token)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range 2 {
		if resp := open(tokenA); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of the token: %d", i, resp.StatusCode)
		}
	}
	resp := open(tokenA)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a third stream of the token: %d %s (Retry-After %q), want 429 with Retry-After", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	if resp := open(tokenB); resp.StatusCode != http.StatusOK {
		t.Errorf("another token's stream: %d", resp.StatusCode)
	}
}

// TestLiveStreamEndsWithItsToken: a token removed from the tokens file, or
// given another scope, kept its open live streams, with the scope they
// were opened with, for as long as they lasted (the heartbeat kept them
// open). A stream now ends at its next heartbeat, with an end event; the
// stream of a token whose scope did not change goes on.
func TestLiveStreamEndsWithItsToken(t *testing.T) {
	api.SetLiveHeartbeat(t, 200*time.Millisecond)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("acme:" + tokenA + ":waba=waba-1\nbeta:" + tokenB + ":waba=waba-2\nbeta2:" + token1 + ":waba=waba-2\n")
	cfg := api.DefaultConfig()
	cfg.TokensFile = file
	cfg.Pacing = pacingBucket(t)
	s, err := api.New(cfg, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveAPI(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// open reads the token's stream until it ends, onto the channel.
	open := func(token string) <-chan string {
		t.Helper()
		resp := openStream(ctx, t, addr, token)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		ended := make(chan string, 1)
		go func() {
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			ended <- string(b)
		}()
		return ended
	}
	kept, removed, rescoped := open(tokenA), open(tokenB), open(token1)
	time.Sleep(500 * time.Millisecond) // a few heartbeats with the tokens as they were
	write("acme:" + tokenA + ":waba=waba-1\nbeta2:" + token1 + ":waba=waba-1,waba-2\n")
	for name, ch := range map[string]<-chan string{"removed": removed, "re-scoped": rescoped} {
		select {
		case b := <-ch:
			if !strings.Contains(b, "event: end") {
				t.Errorf("the %s token's stream ended without an end event:\n%s", name, b)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the %s token's stream still open 10 s after the tokens file changed", name)
		}
	}
	select {
	case b := <-kept:
		t.Errorf("the stream of a token the change left alone ended:\n%s", b)
	case <-time.After(time.Second):
	}
}

// isNumbersRead tells the query of WabaNumbers, a read of a tenant's
// numbers, from the reports'.
func isNumbersRead(query string) bool { return strings.Contains(query, "HAVING max(at) = maxIf(at, ") }

// countingConn counts the reads of a tenant's numbers (WabaNumbers).
type countingConn struct {
	driver.Conn
	numberReads atomic.Int64
}

func (c *countingConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if isNumbersRead(query) {
		c.numberReads.Add(1)
	}
	return c.Conn.Query(ctx, query, args...)
}

// failingConn answers every read of a tenant's numbers with an error while
// fail is set: ClickHouse away.
type failingConn struct {
	driver.Conn
	fail atomic.Bool
}

func (c *failingConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if c.fail.Load() && isNumbersRead(query) {
		return nil, errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return c.Conn.Query(ctx, query, args...)
}

// TestTenantNumbersWhileClickHouseIsAway: a scoped token's pacing signals
// need NATS alone, but the tenant's numbers come from ClickHouse. With
// ClickHouse away once the list was 30 s old, GET /api/v1/pacing answered
// 200 with no signal at all (and the stream dropped every signal, the
// send-result intake answered 503). The last list read serves meanwhile;
// with none read yet, the snapshot answers 503 rather than an empty list.
func TestTenantNumbersWhileClickHouseIsAway(t *testing.T) {
	api.SetNumbersTTL(t, 200*time.Millisecond)
	d := generate(60)
	ch := load(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := pacingBucket(t)
	n1, n3 := numbers[0].id, numbers[2].id // tenant A's, tenant B's
	for _, id := range []string{n1, n3} {
		b, _ := json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: id, UpdatedAt: time.Now().UTC(), TierMPS: 80, Advice: schema.AdviceOK, RecommendedMPS: 40})
		if _, err := kv.Put(ctx, schema.PacingKey(id), b); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tenantConfig()
	cfg.Pacing = kv
	conn := &failingConn{Conn: ch.Conn}
	s, err := api.New(cfg, api.NewStore(conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var sigs api.Signals
	if code, b := getAs(t, s, "/api/v1/pacing", tokenB, &sigs); code != 200 || len(sigs.Signals) != 1 {
		t.Fatalf("tenant B's snapshot: %d %s", code, b)
	}
	conn.fail.Store(true)
	time.Sleep(300 * time.Millisecond) // the list older than its TTL
	if code, b := getAs(t, s, "/api/v1/pacing", tokenB, &sigs); code != 200 || len(sigs.Signals) != 1 || sigs.Signals[0].PhoneNumberID != n3 {
		t.Errorf("tenant B's snapshot with ClickHouse away: %d %s, want its signal from the last list read", code, b)
	}
	// A number not in the last list (it may be new) is not the tenant's
	// for now: 503, not 404.
	if code, b := getAs(t, s, "/api/v1/throughput?phone_number_id="+n1+"&"+rangeParams(""), tokenB, nil); code != http.StatusServiceUnavailable {
		t.Errorf("a number not in the tenant's last list, ClickHouse away: %d %s, want 503", code, b)
	}
	// A server that never read the list: no answer rather than an empty one.
	s2, err := api.New(cfg, api.NewStore(conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if code, b := getAs(t, s2, "/api/v1/pacing", tokenB, nil); code != http.StatusServiceUnavailable {
		t.Errorf("tenant B's snapshot, its numbers never read, ClickHouse away: %d %s, want 503", code, b)
	}
	conn.fail.Store(false)
	if code, b := getAs(t, s2, "/api/v1/pacing", tokenB, &sigs); code != 200 || len(sigs.Signals) != 1 {
		t.Errorf("tenant B's snapshot once ClickHouse is back: %d %s", code, b)
	}
}

// TestTenantNumbersReadOnceAtATime: every request of a scoped token for a
// number not its own read the tenant's numbers again (three tables
// scanned) once the list was 2 s old, each request its own read: many at
// once cost ClickHouse as many scans. They share one read now.
func TestTenantNumbersReadOnceAtATime(t *testing.T) {
	d := generate(60)
	ch := load(t, d)
	conn := &countingConn{Conn: ch.Conn}
	s, err := api.New(tenantConfig(), api.NewStore(conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/throughput?phone_number_id=999999999999999&" + rangeParams("")
	var wg sync.WaitGroup
	codes := make([]int, 24)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = getAs(t, s, path, tokenB, nil)
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusNotFound {
			t.Fatalf("request %d for a number not the tenant's: %d, want 404", i, code)
		}
	}
	// One read, or a few should the requests not overlap at all; never
	// one a request.
	if n := conn.numberReads.Load(); n < 1 || n > 4 {
		t.Errorf("%d reads of the tenant's numbers for %d requests at once, want 1 (a few at most)", n, len(codes))
	}
}

// TestNumberMovedToAnotherWABA: a number that Meta's phone number
// migration moves to another tenant's WABA is the new tenant's from its
// first webhook there. Before, it stayed the old tenant's as well for as
// long as its old rows were kept (90 days), and the old tenant saw its
// live signal, the new owner's. A number whose latest webhooks under both
// WABAs fall in the same minute is both tenants' until a later one comes
// (a status counts by its minute, an inbound message by its second: they
// are compared by the minute).
func TestNumberMovedToAnotherWABA(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	moved := number{"106540352240011", "15550000011", "waba-1"}
	stays := number{"106540352240012", "15550000012", "waba-1"}
	tied := number{"106540352240013", "15550000013", "waba-1"}
	at := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC) // on a minute: a status's minute equals it
	under := func(n number, waba string) number { n.waba = waba; return n }
	status := func(n number, id string, when time.Time) []byte {
		return messagesBody(n, fmt.Sprintf(`"statuses":[{"id":%q,"status":"sent","timestamp":"%d","recipient_id":"15551230000"}]`, id, when.Unix()))
	}
	inbound := func(n number, id string, when time.Time) []byte {
		return messagesBody(n, fmt.Sprintf(`"contacts":[{"wa_id":"15551230001"}],"messages":[{"from":"15551230001","id":%q,"timestamp":"%d","type":"text","text":{"body":"hi"}}]`, id, when.Unix()))
	}
	bodies := [][]byte{
		status(moved, "wamid.m1", at),
		inbound(under(moved, "waba-2"), "wamid.m2", at.Add(time.Hour)),
		status(stays, "wamid.s1", at.Add(2*time.Hour)),
		inbound(tied, "wamid.t1", at.Add(5*time.Second)),
		status(under(tied, "waba-2"), "wamid.t2", at.Add(20*time.Second)),
	}
	// A tenant of many numbers: the query's size must not grow with them
	// (ClickHouse refuses one past 256 KiB, about 4,500 numbers inlined
	// three times).
	const many = 6000
	for i := range many {
		n := number{fmt.Sprintf("1065403530%05d", i), fmt.Sprintf("1555100%05d", i), "waba-big"}
		bodies = append(bodies, status(n, fmt.Sprintf("wamid.big%d", i), at))
	}
	norm := processor.NewNormalizer(schema.NewHasher([]byte("test-key-0123456789")))
	var rows schema.Rows
	for i, b := range bodies {
		norm.Normalize(b, schema.Source{App: "default", ReceivedAt: at.Add(3 * time.Hour), RawSeq: uint64(i + 1)}, schema.RawMsgID(b), &rows)
	}
	if len(rows.DeadLetters) > 0 {
		t.Fatalf("dead letters: %+v", rows.DeadLetters)
	}
	if err := chwriter.New(ch.Conn, ch.Database).Write(ctx, &rows); err != nil {
		t.Fatal(err)
	}
	store := api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())
	for waba, want := range map[string][]string{
		"waba-1": {stays.id, tied.id},
		"waba-2": {moved.id, tied.id},
	} {
		got, err := store.WabaNumbers(ctx, []string{waba})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s's numbers: %v, %v; want %v", waba, got, err, want)
		}
	}
	if got, err := store.WabaNumbers(ctx, []string{"waba-1", "waba-2"}); err != nil || len(got) != 3 {
		t.Errorf("both WABAs' numbers: %v, %v; want all three", got, err)
	}
	if got, err := store.WabaNumbers(ctx, []string{"waba-big"}); err != nil || len(got) != many {
		t.Errorf("the numbers of a WABA of %d: %d, %v", many, len(got), err)
	}

	// Through the API: the moved number's signal is the new tenant's only.
	kv := pacingBucket(t)
	for _, n := range []number{moved, stays} {
		b, _ := json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: n.id, UpdatedAt: time.Now().UTC(), TierMPS: 80, Advice: schema.AdviceOK, RecommendedMPS: 80})
		if _, err := kv.Put(ctx, schema.PacingKey(n.id), b); err != nil {
			t.Fatal(err)
		}
	}
	cfg := tenantConfig()
	cfg.Pacing = kv
	s, err := api.New(cfg, store, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{tokenA: stays.id, tokenB: moved.id} {
		var sigs api.Signals
		if code, b := getAs(t, s, "/api/v1/pacing", token, &sigs); code != 200 || len(sigs.Signals) != 1 || sigs.Signals[0].PhoneNumberID != want {
			t.Errorf("signals of the tenant that should see %s: %d %s", want, code, b)
		}
	}
	if code, b := getAs(t, s, "/api/v1/throughput?phone_number_id="+moved.id+"&"+rangeParams(""), tokenA, nil); code != http.StatusNotFound {
		t.Errorf("the old tenant asked for the moved number: %d %s", code, b)
	}
	if code, b := getAs(t, s, "/api/v1/throughput?phone_number_id="+moved.id+"&"+rangeParams(""), tokenB, nil); code != http.StatusOK {
		t.Errorf("the new tenant asked for the moved number: %d %s", code, b)
	}
}
