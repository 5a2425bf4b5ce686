package api_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gofiber/fiber/v2"
	"go.uber.org/zap/zaptest"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/processor/funnel"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/migrations"
	"github.com/wahook/wahook/schema/schematest"
)

const (
	token1 = "token-one-0123456789"
	token2 = "token-two-0123456789" // the rotated-in token
)

func newAPI(t *testing.T, store *api.Store) *api.Server {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1, token2}
	s, err := api.New(cfg, store, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// get requests path with the token (none when empty) and returns the status,
// the headers and the body.
func get(t *testing.T, app *fiber.App, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := app.Test(req, 30_000)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// query gets path and decodes the 200 answer into v.
func query(t *testing.T, app *fiber.App, path string, v any) {
	t.Helper()
	code, _, b := get(t, app, path, token1)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

func rangeParams(extra string) string {
	v := "from=" + url.QueryEscape(t0.Add(-time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(t0.Add(time.Hour).Format(time.RFC3339))
	if extra != "" {
		v += "&" + extra
	}
	return v
}

// Every report's numbers equal the counts computed from the generated
// traffic, which was written twice, partly retried by Meta in another body,
// and replayed.
func TestReportsMatchTruth(t *testing.T) {
	d := generate(300)
	ch := load(t, d)
	conn := &keyRowsConn{Conn: ch.Conn}
	app := newAPI(t, api.NewStore(conn, ch.Database, api.DefaultTiers())).App()

	t.Run("failures by code", func(t *testing.T) {
		var f api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=code"), &f)
		want := d.failuresByCode()
		var total uint64
		for _, n := range want {
			total += n
		}
		if f.Total != total || len(f.Rows) != len(want) {
			t.Fatalf("total %d over %d rows, want %d over %d: %+v", f.Total, len(f.Rows), total, len(want), f.Rows)
		}
		for _, r := range f.Rows {
			e, _ := schema.LookupError(*r.Code)
			if r.Failures != want[*r.Code] || r.Title != e.Title || r.Class != e.Class || r.Verdict != e.Verdict || *r.Retryable != e.Retryable {
				t.Errorf("code %d: %+v, want %d failures and %+v", *r.Code, r, want[*r.Code], e)
			}
			if math.Abs(r.Share-float64(r.Failures)/float64(total)) > 1e-9 {
				t.Errorf("code %d: share %v", *r.Code, r.Share)
			}
		}
	})

	t.Run("failures by class and number, filtered", func(t *testing.T) {
		var f api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=class,number&class=throughput,quality"), &f)
		want := map[string]uint64{}
		for _, m := range d.messages {
			for _, s := range m.statuses {
				if e, _ := schema.LookupError(s.code); s.name == "failed" && (e.Class == schema.ClassThroughput || e.Class == schema.ClassQuality) {
					want[string(e.Class)+"/"+m.num.id]++
				}
			}
		}
		want["throughput/"+numbers[1].id]++ // the value-level 130429
		got := map[string]uint64{}
		for _, r := range f.Rows {
			got[string(r.Class)+"/"+*r.PhoneNumberID] = r.Failures
			if r.Verdict != schema.ClassVerdict(r.Class) {
				t.Errorf("class %s verdict %s", r.Class, r.Verdict)
			}
		}
		if !equalMaps(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})

	// Every origin stage 1 writes can be asked for (history, call and echo
	// were refused as unknown values).
	t.Run("failures by any origin", func(t *testing.T) {
		var f api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=origin&origin=status,value,inbound,history,call,echo,send_result"), &f)
		var all api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=origin"), &all)
		if f.Total != all.Total || f.Total == 0 {
			t.Errorf("every origin listed: %d failures; without the filter: %d", f.Total, all.Total)
		}
	})

	t.Run("a campaign with commas, in quotes", func(t *testing.T) {
		const json = `{"campaign":"camp-2","wave":2}`
		quoted := `"` + strings.ReplaceAll(json, `"`, `""`) + `"`
		var f api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=campaign&campaign="+url.QueryEscape(quoted+",camp-0")), &f)
		want := map[string]uint64{}
		for _, m := range d.messages {
			for _, s := range m.statuses {
				if s.name == "failed" && (m.campaign == json || m.campaign == "camp-0") {
					want[m.campaign]++
				}
			}
		}
		got := map[string]uint64{}
		for _, r := range f.Rows {
			got[*r.Campaign] = r.Failures
		}
		if !equalMaps(got, want) || want[json] == 0 {
			t.Errorf("got %v, want %v", got, want)
		}
		// Meta's longest: 512 characters of three bytes, in quotes,
		// ~4.6 KB percent-encoded in the request line (a 431 with fasthttp's
		// 4 KiB read buffer). No message has it: no rows, and no error.
		long := `"` + strings.Repeat("界", 511) + `,"`
		var none api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=campaign&campaign="+url.QueryEscape(long)), &none)
		if none.Total != 0 || len(none.Rows) != 0 {
			t.Errorf("a campaign no message has: %+v", none)
		}
	})

	t.Run("failures over time", func(t *testing.T) {
		var f api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=code&step=1m&campaign=camp-0&origin=status"), &f)
		want := map[string]uint64{}
		for _, m := range d.messages {
			for _, s := range m.statuses {
				if s.name == "failed" && m.campaign == "camp-0" {
					want[s.at.Truncate(time.Minute).Format(time.RFC3339)+"/"+itoa(s.code)]++
				}
			}
		}
		got := map[string]uint64{}
		bucket := map[time.Time]float64{}
		for _, r := range f.Rows {
			got[r.Time.Format(time.RFC3339)+"/"+itoa(*r.Code)] = r.Failures
			bucket[*r.Time] += r.Share
		}
		if !equalMaps(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		for at, share := range bucket {
			if math.Abs(share-1) > 1e-9 {
				t.Errorf("shares of %s add up to %v", at, share)
			}
		}
		// A limit keeps the first rows, and the total and shares of all.
		var lim api.Failures
		query(t, app, "/api/v1/failures?"+rangeParams("group_by=code&step=1m&campaign=camp-0&origin=status&limit=2"), &lim)
		if len(f.Rows) <= 2 {
			t.Fatalf("%d rows: the test needs more than the limit", len(f.Rows))
		}
		if len(lim.Rows) != 2 || !lim.Truncated || lim.Total != f.Total || f.Truncated {
			t.Errorf("limit 2: %d rows, truncated %v, total %d; want 2, true and %d (unlimited: truncated %v)", len(lim.Rows), lim.Truncated, lim.Total, f.Total, f.Truncated)
		}
		for i, r := range lim.Rows {
			if r.Failures != f.Rows[i].Failures || r.Share != f.Rows[i].Share || !r.Time.Equal(*f.Rows[i].Time) {
				t.Errorf("limited row %d: %+v, want %+v", i, r, f.Rows[i])
			}
		}
	})

	// The funnel before the resolver's first pass (resolved at query time),
	// then from what it resolved.
	resolver := funnel.New(funnel.DefaultConfig(), ch.Conn, ch.Database, nil, zaptest.NewLogger(t))
	for _, resolved := range []bool{false, true} {
		if resolved {
			if _, err := resolver.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
		name := map[bool]string{false: "at query time", true: "resolved"}[resolved]
		t.Run("funnel by campaign, "+name, func(t *testing.T) {
			var f api.Funnel
			query(t, app, "/api/v1/funnel?"+rangeParams("by=campaign"), &f)
			if (f.AsOf != nil) != resolved {
				t.Errorf("as_of %v", f.AsOf)
			}
			checkFunnel(t, f, d.funnelBy(func(m message) string { return m.campaign }))
			if f.Truncated {
				t.Error("truncated with every row in the answer")
			}
			// A limit below the rows: the largest kept, the cut said.
			var cut api.Funnel
			conn.rows.Store(0)
			query(t, app, "/api/v1/funnel?"+rangeParams("by=campaign&limit=1"), &cut)
			if len(f.Rows) < 2 || len(cut.Rows) != 1 || !cut.Truncated || cut.Rows[0].Key != f.Rows[0].Key || cut.Rows[0].Messages != f.Rows[0].Messages {
				t.Errorf("limit=1 of %d rows: %d rows, truncated %v, first %+v (want %+v)", len(f.Rows), len(cut.Rows), cut.Truncated, cut.Rows, f.Rows[0])
			}
			// ClickHouse sends the rows of the answer and one more, not
			// every campaign's for the API to hold.
			if n := conn.rows.Load(); n != 2 {
				t.Errorf("limit=1 of %d rows: %d rows read from ClickHouse, want 2", len(f.Rows), n)
			}
		})

		// Ranges whose ends are parts of hours: message rows count there,
		// the hourly sums in whole hours. Only messages whose first status
		// is in the range count.
		for _, r := range []struct {
			name     string
			from, to time.Time
		}{
			{"from part of an hour", t0.Add(61 * time.Second), t0.Add(2 * time.Hour)},
			{"to part of an hour", t0.Add(-time.Hour), t0.Add(100 * time.Second)},
			{"within an hour", t0.Add(37 * time.Second), t0.Add(150 * time.Second)},
		} {
			t.Run("funnel by campaign, "+r.name+", "+name, func(t *testing.T) {
				want := d.funnelWhere(func(m message) string { return m.campaign }, func(m message) bool {
					at := m.firstStatus()
					return !at.Before(r.from) && at.Before(r.to)
				})
				if len(want) == 0 {
					t.Fatal("no message's first status in the range")
				}
				var f api.Funnel
				query(t, app, "/api/v1/funnel?by=campaign&from="+url.QueryEscape(r.from.Format(time.RFC3339))+"&to="+url.QueryEscape(r.to.Format(time.RFC3339)), &f)
				checkFunnel(t, f, want)
			})
		}

		t.Run("funnel by number for one WABA, "+name, func(t *testing.T) {
			var f api.Funnel
			query(t, app, "/api/v1/funnel?"+rangeParams("by=number&waba_id=waba-1"), &f)
			want := d.funnelBy(func(m message) string { return m.num.id })
			delete(want, numbers[2].id)
			checkFunnel(t, f, want)
		})
	}

	t.Run("throughput of an upgraded number", func(t *testing.T) {
		var tp api.Throughput
		query(t, app, "/api/v1/throughput?"+rangeParams("phone_number_id="+numbers[0].id+"&step=1m"), &tp)
		checkThroughput(t, tp, d, numbers[0].id, func(at time.Time) int {
			if at.Before(d.upgradeAt) {
				return 80
			}
			return 1000
		})
		if tp.TierMPS != 1000 || tp.TierSource != api.TierThroughputUpgrade {
			t.Errorf("tier %d from %s", tp.TierMPS, tp.TierSource)
		}
		// Over a day: the outbound messages found by resolving every
		// message of the months, not among the statuses of the range.
		var day api.Throughput
		query(t, app, "/api/v1/throughput?phone_number_id="+numbers[0].id+"&step=1m&from="+t0.Add(-12*time.Hour).Format(time.RFC3339)+"&to="+t0.Add(12*time.Hour).Format(time.RFC3339), &day)
		checkThroughput(t, day, d, numbers[0].id, func(at time.Time) int {
			if at.Before(d.upgradeAt) {
				return 80
			}
			return 1000
		})
		if day.Outbound != tp.Outbound || day.Inbound != tp.Inbound || len(day.Points) != len(tp.Points) {
			t.Errorf("over a day %d out %d in in %d points, over two hours %d, %d in %d", day.Outbound, day.Inbound, len(day.Points), tp.Outbound, tp.Inbound, len(tp.Points))
		}
	})

	// A range whose end cuts its last minute (to=now: the minute under
	// way): that bucket's rate is over the seconds before to, not over 60,
	// and it is marked partial and left out of the peak.
	t.Run("throughput's last bucket cut by the range's end", func(t *testing.T) {
		id := numbers[0].id
		var times []time.Time
		for _, m := range d.messages {
			if m.num.id == id {
				times = append(times, m.statuses[0].at)
			}
		}
		times = append(times, d.echoes[id]...)
		for _, x := range d.inbound {
			if x.num.id == id {
				times = append(times, x.at)
			}
		}
		perMinute := map[time.Time][]time.Time{}
		var busiest time.Time
		for _, at := range times {
			m := at.Truncate(time.Minute)
			perMinute[m] = append(perMinute[m], at)
			if len(perMinute[m]) > len(perMinute[busiest]) {
				busiest = m
			}
		}
		in := perMinute[busiest]
		slices.SortFunc(in, time.Time.Compare)
		to := in[len(in)/2].Truncate(time.Second).Add(time.Second)
		if limit := busiest.Add(59 * time.Second); to.After(limit) {
			to = limit
		}
		var want uint64
		for _, at := range in {
			if at.Before(to) {
				want++
			}
		}
		var tp api.Throughput
		query(t, app, "/api/v1/throughput?phone_number_id="+id+"&step=1m&from="+busiest.Add(-2*time.Minute).Format(time.RFC3339)+"&to="+to.Format(time.RFC3339), &tp)
		if len(tp.Points) == 0 {
			t.Fatal("no points")
		}
		last := tp.Points[len(tp.Points)-1]
		secs := to.Sub(busiest).Seconds()
		if !last.Time.Equal(busiest) || last.Inbound+last.Outbound != want || !last.Partial || last.MPS != float64(want)/secs {
			t.Errorf("last bucket %+v; want %s, %d messages over %v s (%v mps), partial", last, busiest, want, secs, float64(want)/secs)
		}
		for _, p := range tp.Points[:len(tp.Points)-1] {
			if p.Partial || p.MPS != float64(p.Inbound+p.Outbound)/60 {
				t.Errorf("a whole bucket %+v", p)
			}
		}
		if tp.PeakTime != nil && tp.PeakTime.Equal(busiest) {
			t.Errorf("the peak is the partial bucket: %v at %v", tp.PeakMPS, tp.PeakTime)
		}
	})

	t.Run("throughput of a coexistence number per second", func(t *testing.T) {
		var tp api.Throughput
		query(t, app, "/api/v1/throughput?phone_number_id="+numbers[2].id+"&step=1s&from="+t0.Format(time.RFC3339)+"&to="+t0.Add(10*time.Minute).Format(time.RFC3339), &tp)
		if tp.TierMPS != 20 || tp.TierSource != api.TierCoexistence {
			t.Errorf("tier %d from %s", tp.TierMPS, tp.TierSource)
		}
		var out uint64
		for _, p := range tp.Points {
			out += p.Outbound
			if p.Utilization != p.MPS/20 {
				t.Errorf("utilization %v at %v mps", p.Utilization, p.MPS)
			}
		}
		wantOut, _ := d.perMinute(numbers[2].id)
		var want uint64
		for _, n := range wantOut {
			want += n
		}
		if out != want || tp.Outbound != want || tp.PeakMPS < 1 {
			t.Errorf("outbound %d (%d), want %d; peak %v", out, tp.Outbound, want, tp.PeakMPS)
		}
	})

	t.Run("numbers", func(t *testing.T) {
		var ns api.Numbers
		query(t, app, "/api/v1/numbers?"+rangeParams(""), &ns)
		if len(ns.Numbers) != 3 {
			t.Fatalf("%d numbers: %+v", len(ns.Numbers), ns)
		}
		by := map[string]api.NumberState{}
		for _, n := range ns.Numbers {
			by[n.PhoneNumberID] = n
		}
		up := by[numbers[0].id]
		if up.TierMPS != 1000 || up.TierSource != api.TierThroughputUpgrade || up.MessagingLimit != "TIER_UNLIMITED" ||
			up.LastThroughputUpgrade == nil || !up.LastThroughputUpgrade.Equal(d.upgradeAt) ||
			up.MaintenanceUntil == nil || !up.MaintenanceUntil.Equal(d.upgradeAt.Add(time.Minute)) ||
			len(up.RecentChanges) != 1 || up.RecentChanges[0].Event != "THROUGHPUT_UPGRADE" || up.WabaID != "waba-1" {
			t.Errorf("upgraded number: %+v", up)
		}
		fl := by[numbers[1].id]
		if fl.TierMPS != 80 || fl.TierSource != api.TierDefault || fl.Quality != "flagged" || fl.MessagingLimit != "TIER_250" || fl.PreviousMessagingLimit != "TIER_2K" {
			t.Errorf("flagged number: %+v", fl)
		}
		co := by[numbers[2].id]
		if co.TierMPS != 20 || co.TierSource != api.TierCoexistence || co.Quality != "unknown" {
			t.Errorf("coexistence number: %+v", co)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		var dl api.DeadLetters
		query(t, app, "/api/v1/dead-letters?from="+t0.Format(time.RFC3339)+"&to="+t0.Add(2*time.Hour).Format(time.RFC3339), &dl)
		if dl.Count != 2 || dl.Bodies != 2 || len(dl.Recent) != 2 || len(dl.ByReason) == 0 {
			t.Fatalf("%+v", dl)
		}
		var n uint64
		for _, r := range dl.ByReason {
			n += r.Count
		}
		if n != 2 {
			t.Errorf("reasons add up to %d", n)
		}
		if strings.Contains(string(mustJSON(t, dl)), "not json") {
			t.Error("a dead letter's body is in the answer")
		}
	})
}

func checkFunnel(t *testing.T, f api.Funnel, want map[string]*funnelTruth) {
	t.Helper()
	if len(f.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(f.Rows), len(want), f.Rows)
	}
	for _, r := range f.Rows {
		w := want[r.Key]
		if w == nil {
			t.Errorf("unexpected key %q", r.Key)
			continue
		}
		if r.Messages != w.messages || r.Sent != w.sent || r.Delivered != w.delivered || r.Read != w.read || r.Failed != w.failed {
			t.Errorf("%s: %d/%d/%d/%d/%d, want %d/%d/%d/%d/%d", r.Key, r.Messages, r.Sent, r.Delivered, r.Read, r.Failed,
				w.messages, w.sent, w.delivered, w.read, w.failed)
		}
		for _, c := range []struct {
			name string
			got  api.Durations
			want []float64
		}{{"delivered", r.ToDeliver, w.toDeliver}, {"read", r.ToRead, w.toRead}} {
			if len(c.want) == 0 {
				if c.got.Samples != 0 || c.got.P50 != nil || c.got.P95 != nil {
					t.Errorf("%s: sent to %s %+v, want no samples", r.Key, c.name, c.got)
				}
				continue
			}
			if c.got.Samples != uint64(len(c.want)) || c.got.P50 == nil || c.got.P95 == nil ||
				*c.got.P50 != nearestRank(c.want, 0.5) || *c.got.P95 != nearestRank(c.want, 0.95) {
				t.Errorf("%s: sent to %s %+v, want %d samples, p50 %v, p95 %v", r.Key, c.name, c.got, len(c.want),
					nearestRank(c.want, 0.5), nearestRank(c.want, 0.95))
			}
		}
	}
}

func checkThroughput(t *testing.T, tp api.Throughput, d *dataset, id string, tier func(time.Time) int) {
	t.Helper()
	wantOut, wantIn := d.perMinute(id)
	got := 0
	var peak float64
	for _, p := range tp.Points {
		got++
		if p.Outbound != wantOut[p.Time] || p.Inbound != wantIn[p.Time] {
			t.Errorf("%s: %d out %d in, want %d and %d", p.Time, p.Outbound, p.Inbound, wantOut[p.Time], wantIn[p.Time])
		}
		if mps := float64(p.Outbound+p.Inbound) / 60; p.MPS != mps || p.TierMPS != tier(p.Time) || p.Utilization != mps/float64(tier(p.Time)) {
			t.Errorf("%s: %v mps of tier %d (%v), want %v of %d", p.Time, p.MPS, p.TierMPS, p.Utilization, mps, tier(p.Time))
		}
		peak = max(peak, p.MPS)
	}
	minutes := map[time.Time]bool{}
	for at := range wantOut {
		minutes[at] = true
	}
	for at := range wantIn {
		minutes[at] = true
	}
	if got != len(minutes) || tp.PeakMPS != peak || peak == 0 {
		t.Errorf("%d points, want %d; peak %v, want %v", got, len(minutes), tp.PeakMPS, peak)
	}
}

// The API's errors are JSON with a stable code, and a bad parameter names
// itself; tokens rotate.
func TestAuthAndErrors(t *testing.T) {
	ch := load(t, generate(10))
	app := newAPI(t, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())).App()
	for _, tc := range []struct {
		name, path, token string
		status            int
		code, param       string
	}{
		{"no token", "/api/v1/failures", "", 401, api.CodeUnauthorized, ""},
		{"wrong token", "/api/v1/failures", "token-three-0123456789", 401, api.CodeUnauthorized, ""},
		{"token as a prefix", "/api/v1/failures", token1[:10], 401, api.CodeUnauthorized, ""},
		{"first token", "/api/v1/failures", token1, 200, "", ""},
		{"rotated token", "/api/v1/failures", token2, 200, "", ""},
		{"bad time", "/api/v1/failures?from=yesterday", token1, 400, api.CodeBadParameter, "from"},
		{"from after to", "/api/v1/failures?from=2026-03-15&to=2026-03-14", token1, 400, api.CodeBadParameter, "from"},
		{"unknown parameter", "/api/v1/failures?colour=red", token1, 400, api.CodeBadParameter, "colour"},
		{"parameter of another route", "/api/v1/funnel?code=131026", token1, 400, api.CodeBadParameter, "code"},
		{"bad group", "/api/v1/failures?group_by=code,planet", token1, 400, api.CodeBadParameter, "group_by"},
		{"bad code", "/api/v1/failures?code=abc", token1, 400, api.CodeBadParameter, "code"},
		{"bad class", "/api/v1/failures?class=weather", token1, 400, api.CodeBadParameter, "class"},
		{"step twice", "/api/v1/failures?step=1m&step=1h", token1, 400, api.CodeBadParameter, "step"},
		{"limit too large", "/api/v1/failures?limit=100000", token1, 400, api.CodeBadParameter, "limit"},
		{"too many minutes", "/api/v1/failures?step=1m&from=2026-01-01&to=2026-03-14", token1, 400, api.CodeBadParameter, "step"},
		{"number missing", "/api/v1/throughput", token1, 400, api.CodeBadParameter, "phone_number_id"},
		{"too many seconds", "/api/v1/throughput?phone_number_id=1&step=1s&from=2026-03-01&to=2026-03-14", token1, 400, api.CodeBadParameter, "step"},
		{"no such route", "/api/v1/nothing", token1, 404, api.CodeNotFound, ""},
		{"too many values", "/api/v1/failures?campaign=" + strings.Repeat("c,", 1001), token1, 400, api.CodeBadParameter, "campaign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, h, b := get(t, app, tc.path, tc.token)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
				t.Errorf("content type %q", h.Get("Content-Type"))
			}
			if tc.code == "" {
				return
			}
			var e struct{ Error api.Error }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Error.Code != tc.code || e.Error.Parameter != tc.param || e.Error.Message == "" {
				t.Errorf("error %+v, want code %s parameter %q", e.Error, tc.code, tc.param)
			}
			if tc.status == 401 && h.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

// ClickHouse down: the API answers 503 unavailable, not 500, and recovers.
func TestClickHouseDownIsUnavailable(t *testing.T) {
	srv := schematest.StartClickHouse(t)
	ch := srv.Database(t)
	app := newAPI(t, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())).App()
	srv.Stop()
	code, _, b := get(t, app, "/api/v1/dead-letters", token1)
	var e struct{ Error api.Error }
	_ = json.Unmarshal(b, &e)
	if code != http.StatusServiceUnavailable || e.Error.Code != api.CodeUnavailable {
		t.Fatalf("%d %s", code, b)
	}
	if code, _, _ := get(t, app, "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("readyz %d while ClickHouse is down", code)
	}
}

func equalMaps[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeadLettersReplayedUnderAnotherReason: a replay makes an item a dead
// letter again under another reason (a newer decoder's). Until ClickHouse
// merged the two rows, the item counted under both reasons (more than the
// answer's count in all), and the recent list showed either. The newer
// row is the one answered now.
func TestDeadLettersReplayedUnderAnotherReason(t *testing.T) {
	ch := schematest.ClickHouse(t)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, ch.Conn, ch.Database); err != nil {
		t.Fatal(err)
	}
	if err := ch.Conn.Exec(ctx, "SYSTEM STOP MERGES "+ch.Database+".dead_letters"); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	for _, reason := range []string{"bad_item", "not_object"} { // two inserts: two parts
		b, err := ch.Conn.PrepareBatch(ctx, "INSERT INTO "+ch.Database+".dead_letters (received_at, app, raw_seq, raw_msg_id, item, reason, error, body)")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append(at, "default", uint64(7), "raw-7", "entry[0]", reason, "why", "{}"); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	app := newAPI(t, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers())).App()
	var dl api.DeadLetters
	query(t, app, "/api/v1/dead-letters?from="+at.Add(-time.Minute).Format(time.RFC3339)+"&to="+at.Add(time.Minute).Format(time.RFC3339), &dl)
	if dl.Count != 1 || len(dl.ByReason) != 1 || dl.ByReason[0].Reason != "not_object" || dl.ByReason[0].Count != 1 {
		t.Errorf("count %d, by reason %+v: want the item once, under the replay's reason not_object", dl.Count, dl.ByReason)
	}
	if len(dl.Recent) != 1 || dl.Recent[0].Reason != "not_object" {
		t.Errorf("recent %+v: want the item under not_object", dl.Recent)
	}
}

// keyRowsConn counts the rows that reports grouped by key (the funnel's)
// read from ClickHouse.
type keyRowsConn struct {
	driver.Conn
	rows atomic.Int64
}

func (c *keyRowsConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.Conn.Query(ctx, query, args...)
	if err != nil || !strings.Contains(query, "GROUP BY key") {
		return rows, err
	}
	return &countedRows{Rows: rows, n: &c.rows}, nil
}

type countedRows struct {
	driver.Rows
	n *atomic.Int64
}

func (r *countedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n.Add(1)
	}
	return ok
}
