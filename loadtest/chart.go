package loadtest

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH           = 960, 440
	chartLeft, chartRight    = 80, 24
	chartTop, chartBottom    = 56, 56
	chartMinMs               = 0.1
	chartColorP50, chartP99  = "#1f77b4", "#ff7f0e"
	chartColorMax, chartMeta = "#7f7f7f", "#d62728"
)

// WriteChart writes the latency over time of a run as an SVG image: p50,
// p99 and max per second of intended send time on a logarithmic axis, with
// Meta's 250 ms median line and its 1 s line, and a red mark under each
// second that had answers other than 200 or no answer.
func WriteChart(w io.Writer, title string, seconds []Second) error {
	maxMs := 2000.0 // Meta's 1 s line below the top
	for _, s := range seconds {
		maxMs = max(maxMs, s.MaxMs)
	}
	top := math.Pow(10, math.Ceil(math.Log10(maxMs)))
	plotW := float64(chartW - chartLeft - chartRight)
	plotH := float64(chartH - chartTop - chartBottom)
	n := max(len(seconds), 1)
	x := func(sec float64) float64 { return chartLeft + plotW*sec/float64(n) }
	y := func(ms float64) float64 {
		ms = max(ms, chartMinMs)
		return chartTop + plotH*(1-(math.Log10(ms)-math.Log10(chartMinMs))/(math.Log10(top)-math.Log10(chartMinMs)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", chartLeft, html.EscapeString(title))
	// Decades on the y axis.
	for e := math.Log10(chartMinMs); e <= math.Log10(top)+1e-9; e++ {
		v := math.Pow(10, e)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", chartLeft, chartW-chartRight, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", chartLeft-6, y(v), msLabel(v))
	}
	// Seconds on the x axis, at most about ten ticks.
	step := niceStep(float64(n) / 10)
	for s := 0.0; s <= float64(n)+1e-9; s += step {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`+"\n", x(s), x(s), chartH-chartBottom, chartH-chartBottom+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(s), chartH-chartBottom+18, strconv.FormatFloat(s, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", chartLeft, chartTop, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">seconds since the start (intended send time)</text>`+"\n",
		chartLeft+plotW/2, chartH-12)
	fmt.Fprintf(&b, `<text transform="translate(18 %.0f) rotate(-90)" text-anchor="middle">latency, ms (log scale)</text>`+"\n",
		chartTop+plotH/2)
	// Meta's bar.
	for _, l := range []struct {
		ms    float64
		dash  string
		label string
	}{{250, "8 4", "Meta: median under 250 ms"}, {1000, "2 4", "Meta: under 1% over 1 s"}} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n",
			chartLeft, chartW-chartRight, y(l.ms), y(l.ms), chartMeta, l.dash)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", chartW-chartRight-4, y(l.ms)-4, chartMeta, l.label)
	}
	// One line per statistic, broken over seconds without requests.
	for _, series := range []struct {
		color, name string
		v           func(Second) float64
	}{
		{chartColorMax, "max", func(s Second) float64 { return s.MaxMs }},
		{chartP99, "p99", func(s Second) float64 { return s.P99Ms }},
		{chartColorP50, "p50", func(s Second) float64 { return s.P50Ms }},
	} {
		var d strings.Builder
		pen := false
		for _, s := range seconds {
			if s.Requests == 0 {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, x(float64(s.Second)+0.5), y(series.v(s)))
			pen = true
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", strings.TrimSpace(d.String()), series.color)
		}
	}
	// Seconds with answers other than 200, or none.
	for _, s := range seconds {
		if s.Non200+s.Errors > 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="6" fill="%s"><title>second %d: %d non-200, %d without answer</title></rect>`+"\n",
				x(float64(s.Second)), chartH-chartBottom-6, max(x(1)-x(0), 1), chartMeta, s.Second, s.Non200, s.Errors)
		}
	}
	// Legend.
	lx := float64(chartLeft)
	for _, l := range []struct{ color, name string }{{chartColorP50, "p50"}, {chartP99, "p99"}, {chartColorMax, "max"},
		{chartMeta, "non-200 or no answer (marks at the bottom)"}} {
		fmt.Fprintf(&b, `<rect x="%.0f" y="34" width="14" height="4" fill="%s"/><text x="%.0f" y="40">%s</text>`+"\n", lx, l.color, lx+18, l.name)
		lx += 18 + 8*float64(len(l.name)) + 16
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// msLabel writes a decade of milliseconds: 0.1 ms, 1 ms, 1 s.
func msLabel(ms float64) string {
	if ms >= 1000 {
		return strconv.FormatFloat(ms/1000, 'g', 4, 64) + " s"
	}
	return strconv.FormatFloat(ms, 'g', 4, 64) + " ms"
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten (at least 1).
func niceStep(raw float64) float64 {
	if raw <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
