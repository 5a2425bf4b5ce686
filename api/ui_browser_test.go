package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/internal/testutil/browser"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

// chromium is a Chromium for the test (browser.Path: skipped without
// one, unless CI is set or required), its context ending after timeout
// or with the test.
func chromium(t *testing.T, timeout time.Duration, required bool) context.Context {
	t.Helper()
	path := browser.Path(t, required)
	// The browser's profile: removed once its processes have let go of it
	// (t.TempDir's cleanup fails the test when one still writes there).
	profile, err := os.MkdirTemp("", "wahook-ui-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.Poll(5*time.Second, func() bool { return os.RemoveAll(profile) == nil }) })
	actx, acancel := chromedp.NewExecAllocator(context.Background(), browser.Options(path, profile)...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	bctx, tcancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(tcancel)
	return bctx
}

// dashboard is chromium signed in with token to the dashboard at base,
// showing hash once signed in; it ends with the test.
func dashboard(t *testing.T, base, token, hash string) context.Context {
	t.Helper()
	bctx := chromium(t, 2*time.Minute, false)
	view := strings.SplitN(strings.SplitN(strings.TrimPrefix(hash, "#"), "?", 2)[0], "/", 2)[0]
	if err := chromedp.Run(bctx, chromedp.Navigate(base+"/"+hash), chromedp.WaitVisible("#login-form", chromedp.ByQuery),
		chromedp.SetValue("#login-token", token, chromedp.ByQuery), chromedp.Click("#login-form button", chromedp.ByQuery),
		chromedp.Poll(fmt.Sprintf(`document.body.dataset.loaded === %q || document.body.dataset.loaded === %q`, view, view+":error"), nil,
			chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := chromedp.Run(bctx, chromedp.Evaluate(`document.body.dataset.loaded + " " + (document.getElementById("view-error") || {}).textContent`, &state)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(state, view+" ") {
		t.Fatalf("%s: %s", hash, state)
	}
	return bctx
}

// TestDashboardNumberErrorsTruncated: a number's page summed its errors by
// class from the rows of its chart's query (by class per step, limit
// 10,000); over a long range those rows stop at the limit (truncated), and
// the totals left out every bucket past it. Here 12 classes a day over
// 1,000 days make 12,000 rows at the page's step (1d): the table must
// count every error of each class, and the page say the chart is cut.
func TestDashboardNumberErrorsTruncated(t *testing.T) {
	ctx := context.Background()
	ch := schematest.ClickHouse(t)
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	// One code of each of the first 12 classes of the catalogue.
	var codes []string
	var classes []schema.ErrorClass
	seen := map[schema.ErrorClass]bool{}
	for _, e := range schema.ErrorCodes() {
		if !seen[e.Class] && len(codes) < 12 {
			seen[e.Class] = true
			codes = append(codes, strconv.Itoa(int(e.Code)))
			classes = append(classes, e.Class)
		}
	}
	if len(codes) != 12 {
		t.Fatalf("the catalogue has %d classes", len(codes))
	}
	const days, number = 1000, "106540352299999"
	to := time.Now().UTC().Truncate(24 * time.Hour)
	from := to.AddDate(0, 0, -days)
	// Day d holds 1 + (7d + k) % 3 errors of class k, at noon and the
	// seconds after it.
	want := map[schema.ErrorClass]uint64{}
	for d := range days {
		for k, c := range classes {
			want[c] += uint64(1 + (7*d+k)%3)
		}
	}
	q := fmt.Sprintf(`INSERT INTO %[1]s.errors (event_id, error_index, origin, event_time, waba_id, phone_number_id, message_id,
    recipient_hash, code, title, campaign, template, received_at)
SELECT concat('e-', toString(n)), 0, 'status', toDateTime(%[2]d) + d * 86400 + 43200 + j, 'waba-t', '%[3]s',
    concat('wamid.T', toString(n)), '', arrayElement([%[4]s], k + 1), 'generated', '', '', now()
FROM (SELECT number AS n, intDiv(number, 36) AS d, intDiv(number, 3) %% 12 AS k, number %% 3 AS j FROM system.numbers LIMIT %[5]d)
WHERE j < 1 + (7 * d + k) %% 3`, ch.Database, from.Unix(), number, strings.Join(codes, ", "), days*36)
	if err := ch.Conn.Exec(ctx, q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}

	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1}
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	// The chart's query, as the page asks it, is cut at its limit, and its
	// rows' sums fall short: the data set makes the case.
	var cut api.Failures
	query(t, s.App(), fmt.Sprintf("/api/v1/failures?phone_number_id=%s&from=%d&to=%d&group_by=class&step=1d&limit=10000", number, from.Unix(), to.Unix()), &cut)
	sums := map[schema.ErrorClass]uint64{}
	for _, r := range cut.Rows {
		sums[r.Class] += r.Failures
	}
	if !cut.Truncated || len(cut.Rows) != 10000 || sums[classes[0]] >= want[classes[0]] {
		t.Fatalf("the chart's answer: truncated %v, %d rows, %s summed %d of %d: the data set does not make the case",
			cut.Truncated, len(cut.Rows), classes[0], sums[classes[0]], want[classes[0]])
	}

	base := "http://" + serveAPI(t, s)
	hash := fmt.Sprintf("#number/%s?from=%d&to=%d", number, from.Unix(), to.Unix())
	bctx := dashboard(t, base, token1, hash)
	var reqs []string
	var rows [][]string
	var note bool
	if err := chromedp.Run(bctx,
		chromedp.Evaluate(`window.wahookRequests`, &reqs),
		chromedp.Evaluate(`[...document.querySelectorAll("#number-errors-table tbody tr")].map((tr) => [...tr.cells].map((td) => td.textContent))`, &rows),
		chromedp.Evaluate(`!!document.getElementById("number-errors-truncated")`, &note)); err != nil {
		t.Fatal(err)
	}
	asked := false
	for _, r := range reqs {
		asked = asked || strings.Contains(r, "group_by=class&step=1d&limit=10000")
	}
	if !asked {
		t.Errorf("the page did not ask the chart's query the test makes truncated: %v", reqs)
	}
	got := map[schema.ErrorClass]uint64{}
	for _, r := range rows {
		if len(r) != 3 {
			t.Fatalf("row %q", r)
		}
		n, err := strconv.ParseUint(strings.ReplaceAll(r[2], ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("row %q: %v", r, err)
		}
		got[schema.ErrorClass(r[0])] = n
	}
	if len(got) != len(want) {
		t.Errorf("%d classes shown, want %d: %v", len(got), len(want), got)
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("class %s: the page shows %d failures, want %d (the chart's rows sum %d)", c, got[c], n, sums[c])
		}
	}
	if !note {
		t.Error("the page does not say its chart is truncated (#number-errors-truncated)")
	}
}

// sse reads the server-sent events of a live stream; next answers the next
// one as {event, data}, failing the test when none comes within 5 s, and
// none reports that no event comes within d.
type sse struct {
	t      *testing.T
	events chan [2]string
}

// putSignal writes an ok signal of the number id to the pacing bucket.
func putSignal(ctx context.Context, t *testing.T, kv jetstream.KeyValue, id string) {
	t.Helper()
	b, _ := json.Marshal(schema.PacingSignal{Version: schema.PacingVersion, PhoneNumberID: id, UpdatedAt: time.Now().UTC(), TierMPS: 80, Advice: schema.AdviceOK, RecommendedMPS: 40})
	if _, err := kv.Put(ctx, schema.PacingKey(id), b); err != nil {
		t.Fatal(err)
	}
}

func readEvents(t *testing.T, resp *http.Response) *sse {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	s := &sse{t: t, events: make(chan [2]string, 64)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				ev = e
			} else if data, ok := strings.CutPrefix(line, "data: "); ok {
				s.events <- [2]string{ev, data}
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

func (s *sse) next(what string) [2]string {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatalf("stream ended waiting for %s", what)
		}
		return e
	case <-time.After(5 * time.Second):
		s.t.Fatalf("no %s within 5 s", what)
	}
	return [2]string{}
}

func (s *sse) none(d time.Duration) (string, bool) {
	select {
	case e := <-s.events:
		return e[0] + " " + e[1], false
	case <-time.After(d):
		return "", true
	}
}

// TestLiveSignalDeleted: a pacing key deleted or purged (nats kv del, nats
// kv purge) stayed on the live page until it was loaded again: the stream
// skipped every operation but a put. It now sends a delete event for a
// number it sent, and only for one it sent: never for another tenant's
// number, nor for the marker of a key deleted before it opened. The
// snapshot (/api/v1/pacing) leaves the numbers out.
func TestLiveSignalDeleted(t *testing.T) {
	d := generate(60)
	ch := load(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv := pacingBucket(t)
	put := func(id string) { putSignal(ctx, t, kv, id) }
	n1, n2, n3 := numbers[0].id, numbers[1].id, numbers[2].id // n1, n2 tenant A's, n3 tenant B's
	put(n1)
	put(n2)
	put(n3)
	if err := kv.Delete(ctx, schema.PacingKey(n2)); err != nil {
		t.Fatal(err)
	}
	cfg := tenantConfig()
	cfg.Pacing = kv
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveAPI(t, s)
	all, b := readEvents(t, openStream(ctx, t, addr, token1)), readEvents(t, openStream(ctx, t, addr, tokenB))
	for _, st := range []struct {
		s    *sse
		want []string
	}{{all, []string{n1, n3}}, {b, []string{n3}}} {
		if e := st.s.next("hello"); e[0] != "hello" {
			t.Fatalf("first event %v", e)
		}
		for _, id := range st.want {
			if e := st.s.next(id + "'s signal"); e[0] != "signal" || !strings.Contains(e[1], id) {
				t.Fatalf("want %s's signal, got %v", id, e)
			}
		}
		if e := st.s.next("ready"); e[0] != "ready" {
			t.Fatalf("want ready, got %v (a deleted key's marker?)", e)
		}
	}

	if err := kv.Delete(ctx, schema.PacingKey(n1)); err != nil {
		t.Fatal(err)
	}
	if e := all.next("n1's delete"); e[0] != "delete" || e[1] != `{"phone_number_id":"`+n1+`"}` {
		t.Fatalf("want n1's delete, got %v", e)
	}
	if err := kv.Purge(ctx, schema.PacingKey(n3)); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*sse{"unscoped": all, "tenant B": b} {
		// B's first event after ready is n3's purge: A's n1, deleted
		// before it, was not sent.
		if e := st.next("n3's purge"); e[0] != "delete" || e[1] != `{"phone_number_id":"`+n3+`"}` {
			t.Fatalf("%s: want n3's delete, got %v", name, e)
		}
	}
	var sigs api.Signals
	if code, body := getAs(t, s, "/api/v1/pacing", token1, &sigs); code != http.StatusOK || len(sigs.Signals) != 0 {
		t.Errorf("snapshot after the deletes: %d %s", code, body)
	}
	// A number written again comes back.
	put(n3)
	for name, st := range map[string]*sse{"unscoped": all, "tenant B": b} {
		if e := st.next("n3 again"); e[0] != "signal" || !strings.Contains(e[1], n3) {
			t.Fatalf("%s: want n3's signal, got %v", name, e)
		}
	}
	if e, ok := b.none(500 * time.Millisecond); !ok {
		t.Errorf("tenant B's stream sent %s", e)
	}
}

// TestLiveSignalDeletedInBrowser: the live page drops a number whose key is
// deleted, on the stream it has open (no reload, no new stream), and keeps
// the others.
func TestLiveSignalDeletedInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv := pacingBucket(t)
	put := func(id string) { putSignal(ctx, t, kv, id) }
	kept, gone := numbers[0].id, numbers[1].id
	put(kept)
	put(gone)
	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1}
	cfg.Pacing = kv
	s, err := api.New(cfg, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + serveAPI(t, s)
	bctx := dashboard(t, base, token1, "#live")
	row := func(id string) string { return fmt.Sprintf(`#live-table tr[data-number="%s"]`, id) }
	if err := chromedp.Run(bctx, chromedp.Poll(`document.body.dataset.live === "ready"`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.WaitVisible(row(kept), chromedp.ByQuery), chromedp.WaitVisible(row(gone), chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, schema.PacingKey(gone)); err != nil {
		t.Fatal(err)
	}
	// Within 5 s: a new stream (whose ready drops the numbers it did not
	// send) comes only after the old one ends, 45 s of silence at least.
	if err := chromedp.Run(bctx, chromedp.Poll(fmt.Sprintf(`!document.querySelector('%s')`, row(gone)), nil, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the deleted number's row is still there: %v", err)
	}
	var streams int
	var keptShown bool
	if err := chromedp.Run(bctx, chromedp.Evaluate(`window.wahookRequests.filter((r) => r === "/api/v1/pacing/stream").length`, &streams),
		chromedp.Evaluate(fmt.Sprintf(`!!document.querySelector('%s')`, row(kept)), &keptShown)); err != nil {
		t.Fatal(err)
	}
	if streams != 1 {
		t.Errorf("the page opened %d streams, want the one", streams)
	}
	if !keptShown {
		t.Error("the number not deleted left the table")
	}
}
