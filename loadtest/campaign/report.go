package campaign

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/wahook/wahook/loadtest/simulate"
	"github.com/wahook/wahook/pacer"
)

// Report is a campaign's outcome.
type Report struct {
	RunID        uint32         `json:"run_id"`
	Seed         uint64         `json:"seed"`
	Messages     int            `json:"messages"` // per sender
	Numbers      int            `json:"numbers"`  // per sender
	TierMPS      int            `json:"tier_mps"`
	Upgradable   int            `json:"upgradable"`
	RepeatShare  float64        `json:"repeat_share"`
	RepeatCount  int            `json:"repeat_count"`
	Workers      int            `json:"workers_per_number"`
	NaiveMPS     float64        `json:"naive_mps"`
	IdealS       float64        `json:"ideal_s"`
	SimulatorURL string         `json:"simulator_url"`
	Senders      []SenderReport `json:"senders"`
	Pacer        *pacer.Stats   `json:"pacer,omitempty"`
	Webhooks     WebhookFigures `json:"webhooks"`
}

// WebhookFigures are the simulator's webhooks to wahook.
type WebhookFigures struct {
	Posts    int64         `json:"posts"`
	Items    int64         `json:"items"`
	Retries  int64         `json:"retries"`
	GivenUp  int64         `json:"given_up"`
	BadCodes map[int]int64 `json:"bad_codes,omitempty"`
}

// SenderReport is one sender's figures.
type SenderReport struct {
	Name         string          `json:"name"`
	Messages     int             `json:"messages"`
	Sends        int64           `json:"sends"` // requests to the send API, retries included
	Accepted     int64           `json:"accepted"`
	Errors130429 int64           `json:"errors_130429"`
	Errors131056 int64           `json:"errors_131056"`
	Errors131057 int64           `json:"errors_131057"`
	Errors131048 int64           `json:"errors_131048"`
	Share130429  float64         `json:"share_130429"` // of sends
	Share131056  float64         `json:"share_131056"`
	CompletionS  float64         `json:"completion_s"`
	IdealS       float64         `json:"ideal_s"`
	Ratio        float64         `json:"completion_over_ideal"`
	GivenUp      int64           `json:"given_up"` // messages the sender gave up on (rate-limit retries exhausted, stopped numbers)
	Dropped      int64           `json:"dropped"`  // messages refused for themselves, not retried
	SentTwice    int64           `json:"sent_twice"`
	Numbers      []NumberFigures `json:"numbers"`
	Timeline     []second        `json:"timeline"`
}

// NumberFigures are one number's figures in a sender.
type NumberFigures struct {
	PhoneNumberID string          `json:"phone_number_id"`
	Accepted      int64           `json:"accepted"`
	ActiveS       float64         `json:"active_s"`     // from its first accepted send to its last
	LastS         float64         `json:"last_s"`       // its last accepted send, seconds after the start
	IdealS        float64         `json:"ideal_s"`      // the ideal of its queue
	AchievedMPS   float64         `json:"achieved_mps"` // accepted / active_s
	SteadyMPS     float64         `json:"steady_mps"`   // accepted per second until its last fresh message was taken (before retries and deferred messages trail)
	TierMPS       float64         `json:"tier_mps"`     // its tier, averaged over the time it was sending
	Use           float64         `json:"use"`          // steady / tier
	Inbound       int64           `json:"inbound"`      // replies the simulator sent (they count against the tier)
	Upgraded      bool            `json:"upgraded"`
	Flagged       bool            `json:"flagged"`
	SyncErrors    map[int32]int64 `json:"sync_errors,omitempty"`
}

func (s *sender) report(ideal float64, laneIdeal []float64, st simulate.Stats) SenderReport {
	r := SenderReport{Name: s.name, Sends: s.sends.Load(), Accepted: s.accepted.Load(),
		Errors130429: s.codeCount(130429), Errors131056: s.codeCount(131056), Errors131057: s.codeCount(131057),
		Errors131048: s.codeCount(131048), GivenUp: s.givenUp.Load(), Dropped: s.dropped.Load(), IdealS: ideal}
	if r.Sends > 0 {
		r.Share130429 = float64(r.Errors130429) / float64(r.Sends)
		r.Share131056 = float64(r.Errors131056) / float64(r.Sends)
	}
	byID := map[string]simulate.NumberStats{}
	for _, n := range st.Numbers {
		byID[n.PhoneNumberID] = n
	}
	for _, l := range s.lanes {
		r.Messages += len(l.queue)
		l.mu.Lock()
		nf := NumberFigures{PhoneNumberID: l.id, Accepted: l.accepted, IdealS: laneIdeal[l.index]}
		if !l.lastAccept.IsZero() {
			nf.LastS = l.lastAccept.Sub(s.start).Seconds()
		}
		if !l.firstAccept.IsZero() {
			nf.ActiveS = l.lastAccept.Sub(l.firstAccept).Seconds()
			if !l.queueDone.IsZero() && l.queueDone.After(l.firstAccept) {
				nf.SteadyMPS = float64(l.acceptedAtDone) / l.queueDone.Sub(l.firstAccept).Seconds()
			}
		}
		if l.tierN > 0 {
			nf.TierMPS = l.tierSum / float64(l.tierN)
		}
		l.mu.Unlock()
		if nf.ActiveS > 0 {
			nf.AchievedMPS = float64(nf.Accepted) / nf.ActiveS
		}
		if nf.TierMPS > 0 {
			nf.Use = nf.SteadyMPS / nf.TierMPS
		}
		if ns, ok := byID[l.id]; ok {
			nf.Inbound, nf.Upgraded, nf.Flagged, nf.SyncErrors = ns.Inbound, ns.UpgradedAt != nil, ns.Flagged, ns.SyncErrors
			r.SentTwice += ns.SentTwice
		}
		r.Numbers = append(r.Numbers, nf)
	}
	s.mu.Lock()
	r.CompletionS = s.end.Sub(s.start).Seconds()
	r.Timeline = append([]second(nil), s.seconds...)
	s.mu.Unlock()
	if ideal > 0 {
		r.Ratio = r.CompletionS / ideal
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// SummaryLine is one sender's line.
func (s *SenderReport) SummaryLine() string {
	return fmt.Sprintf("%-6s %d messages in %.1fs (ideal %.1fs, x%.2f): %d sends, 130429 %d (%.3f%%), 131056 %d (%.3f%%), 131057 %d, given up %d, dropped %d, sent twice %d",
		s.Name, s.Messages, s.CompletionS, s.IdealS, s.Ratio, s.Sends, s.Errors130429, 100*s.Share130429,
		s.Errors131056, 100*s.Share131056, s.Errors131057, s.GivenUp, s.Dropped, s.SentTwice)
}

// WriteText writes the report as text: the run, a line per number and a
// summary line per sender, last.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "campaign run %d: %d messages per sender over %d numbers at %d mps (%d upgradable), %.0f%% of recipients messaged %d times, %d workers per number; ideal %.1fs\n",
		r.RunID, r.Messages, r.Numbers, r.TierMPS, r.Upgradable, 100*r.RepeatShare, r.RepeatCount, r.Workers, r.IdealS)
	for _, s := range r.Senders {
		fmt.Fprintf(w, "\n%s: per number (steady mps: until its last fresh message was taken; against its tier)\n", s.Name)
		for _, n := range s.Numbers {
			var flags []string
			if n.Upgraded {
				flags = append(flags, "upgraded")
			}
			if n.Flagged {
				flags = append(flags, "flagged")
			}
			codes := make([]string, 0, len(n.SyncErrors))
			for c, k := range n.SyncErrors {
				codes = append(codes, fmt.Sprintf("%d=%d", c, k))
			}
			sort.Strings(codes)
			fmt.Fprintf(w, "  %s  %6d accepted  %7.1f mps of %6.1f (%3.0f%%)  last at %5.1fs (ideal %5.1fs)  inbound %5d  errors %s %s\n",
				n.PhoneNumberID, n.Accepted, n.SteadyMPS, n.TierMPS, 100*n.Use, n.LastS, n.IdealS, n.Inbound, strings.Join(codes, ","), strings.Join(flags, ","))
		}
	}
	if r.Pacer != nil {
		p := r.Pacer
		fmt.Fprintf(w, "\npacer: %d signals, %d cool-downs, fallback entered %d times, %d results reported (%d dropped)\n",
			p.Signals, p.Cooldowns, p.FallbackEntered, p.Reported, p.ReportDropped)
	}
	fmt.Fprintf(w, "webhooks to wahook: %d posts, %d items, %d retries, %d given up\n\n", r.Webhooks.Posts, r.Webhooks.Items, r.Webhooks.Retries, r.Webhooks.GivenUp)
	for i := range r.Senders {
		fmt.Fprintln(w, r.Senders[i].SummaryLine())
	}
}

// WriteChart draws each sender's accepted rate per second against the sum
// of its numbers' tiers, with its 130429 and 131056 per second.
func (r *Report) WriteChart(w io.Writer) error {
	const width, panelH, left, top = 900, 260, 60, 30
	secs := 1
	peak := 1.0
	for _, s := range r.Senders {
		secs = max(secs, len(s.Timeline))
		for _, t := range s.Timeline {
			peak = math.Max(peak, math.Max(t.TierMPS, float64(t.Accepted)))
			peak = math.Max(peak, float64(t.E130429+t.E131056))
		}
	}
	peak *= 1.1
	height := top + len(r.Senders)*(panelH+40)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">wahook loadtest campaign %d: %d messages per sender over %d numbers; ideal %.0f s</text>`, left, r.RunID, r.Messages, r.Numbers, r.IdealS)
	plotW := float64(width - left - 20)
	for i, s := range r.Senders {
		y0 := float64(top + i*(panelH+40) + 10)
		x := func(sec int) float64 { return float64(left) + plotW*float64(sec)/float64(secs) }
		y := func(v float64) float64 { return y0 + panelH - panelH*v/peak }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s: %.1f s (x%.2f of ideal), 130429 %d, 131056 %d, given up %d</text>`, left, y0-2, s.Name, s.CompletionS, s.Ratio, s.Errors130429, s.Errors131056, s.GivenUp)
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#999"/>`, left, y0, plotW, panelH)
		fmt.Fprintf(&b, `<text x="4" y="%.0f">%.0f mps</text><text x="4" y="%.0f">0</text>`, y0+10, peak, y0+panelH)
		var acc, tier strings.Builder
		for k, t := range s.Timeline {
			fmt.Fprintf(&acc, "%.1f,%.1f ", x(k), y(float64(t.Accepted)))
			fmt.Fprintf(&tier, "%.1f,%.1f ", x(k), y(t.TierMPS))
			if e := t.E130429 + t.E131056; e > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d33" opacity="0.7"/>`, x(k), y(float64(e)), math.Max(1, plotW/float64(secs)-1), y0+panelH-y(float64(e)))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#888" stroke-dasharray="4,3"/>`, tier.String())
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#26c" stroke-width="1.5"/>`, acc.String())
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#26c">accepted/s</text><text x="%.0f" y="%.0f" fill="#888">tier (sum)</text><text x="%.0f" y="%.0f" fill="#d33">130429+131056/s</text>`,
			float64(left)+plotW-250, y0+12, float64(left)+plotW-170, y0+12, float64(left)+plotW-100, y0+12)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%d s</text>`, float64(left)+plotW-20, y0+panelH+14, secs)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
