package api_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/wahook/wahook/api"
	"github.com/wahook/wahook/internal/testutil/browser"
	"github.com/wahook/wahook/processor/funnel"
)

// TestDashboardLoadTimes times each page of the dashboard in chromium over
// one day of WAHOOK_UI_TIMING_STATUS_EVENTS generated status events (the
// data of BenchmarkReports; the bar is a day of 10,000,000): from
// the page's navigation to its charts drawn, each under a second. It runs
// only when the variable is set:
//
//	WAHOOK_UI_TIMING_STATUS_EVENTS=10000000 go test -run DashboardLoadTimes -v ./api
func TestDashboardLoadTimes(t *testing.T) {
	v := os.Getenv("WAHOOK_UI_TIMING_STATUS_EVENTS")
	if v == "" {
		t.Skip("set WAHOOK_UI_TIMING_STATUS_EVENTS (e.g. 10000000) to time the dashboard over a day of that many status events")
	}
	events, err := strconv.Atoi(v)
	if err != nil || events < 3 {
		t.Fatalf("WAHOOK_UI_TIMING_STATUS_EVENTS=%q", v)
	}
	// Asked for by name: without a browser it fails, before the day of
	// events is made (the browser starts once it is made).
	browser.Path(t, true)
	ctx := context.Background()
	ch, day := generatedDay(t, events)
	resolver := funnel.New(funnel.DefaultConfig(), ch.Conn, ch.Database, nil, zap.NewNop())
	for range 2 {
		if _, err := resolver.Pass(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Timed once ClickHouse has merged what was just written.
	settleMerges(t, ch)
	cfg := api.DefaultConfig()
	cfg.Tokens = []string{token1}
	s, err := api.New(cfg, api.NewStore(ch.Conn, ch.Database, api.DefaultTiers()), nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s.Shutdown(sctx)
		<-served
	}()
	base := "http://" + ln.Addr().String()
	bctx := chromium(t, 5*time.Minute, true)

	if err := chromedp.Run(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#login-form", chromedp.ByQuery),
		chromedp.SetValue("#login-token", token1, chromedp.ByQuery), chromedp.Click("#login-form button", chromedp.ByQuery),
		chromedp.Poll(`document.body.dataset.loaded === "failures"`, nil, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatal(err)
	}
	rng := fmt.Sprintf("from=%d&to=%d", day.Unix(), day.AddDate(0, 0, 1).Unix())
	for _, page := range []struct{ view, hash string }{
		{"failures", "#failures?" + rng},
		{"failures", "#failures?step=1m&" + rng},
		{"numbers", "#numbers?" + rng},
		{"number", "#number/106540352210007?" + rng},
		{"funnel", "#funnel?" + rng},
		{"dead-letters", "#dead-letters?" + rng},
	} {
		// A full load of the page: the HTML, the script, the API's answers,
		// the charts drawn; timed from the navigation's start to the
		// moment the page has drawn them (dataset.loadedAt).
		var ms float64
		var state string
		err := chromedp.Run(bctx, chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/"+page.hash))
		wait := chromedp.Tasks{
			chromedp.Poll(fmt.Sprintf(`document.body.dataset.loaded === %q || document.body.dataset.loaded === %q`, page.view, page.view+":error"), nil, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(5*time.Millisecond)),
			chromedp.Evaluate(`document.body.dataset.loaded`, &state),
			// The time the page set its view loaded, from the navigation's
			// start: not when the poll saw it, which adds the protocol's
			// round trips (tens of ms when the cores are busy).
			chromedp.Evaluate(`Number(document.body.dataset.loadedAt || performance.now())`, &ms),
		}
		// chromedp may still hold about:blank's execution context when
		// the poll starts ("Cannot find context with specified id"): poll
		// again in the page's. The time is the page's own, from its
		// navigation, so a second poll does not add to it.
		for try := 0; err == nil; try++ {
			if err = chromedp.Run(bctx, wait); err == nil || try == 4 || !strings.Contains(err.Error(), "Cannot find context") {
				break
			}
			err = nil
		}
		if err != nil {
			t.Fatalf("%s: %v", page.hash, err)
		}
		if state != page.view {
			t.Errorf("%s: %s", page.hash, state)
		}
		t.Logf("%-40s %4.0f ms from navigation to charts drawn", page.hash[:min(len(page.hash), 40)], ms)
		if ms >= 1000 {
			t.Errorf("%s took %.0f ms", page.hash, ms)
		}
		var res []string
		chromedp.Run(bctx, chromedp.Evaluate(`performance.getEntriesByType("resource").map(e => Math.round(e.responseEnd - e.startTime) + " ms " + e.name.replace(location.origin, "").slice(0, 90))`, &res))
		for _, r := range res {
			t.Logf("    %s", r)
		}
	}
}
