package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wahook/wahook/api"
)

// reportFlags are the query parameters as flags: --phone-number-id is the
// API's phone_number_id. Each report accepts the ones its route does.
var reportFlags = []struct{ name, usage string }{
	{"from", "start of the range: RFC 3339, a date (UTC) or Unix seconds (default: 24 h before --to)"},
	{"to", "end of the range, exclusive (default: now)"},
	{"phone-number-id", "business phone number ids, comma-separated"},
	{"waba-id", "WABA ids, comma-separated"},
	{"template", "template names, comma-separated"},
	{"campaign", "campaigns (biz_opaque_callback_data), comma-separated; one with commas in double quotes, a quote in it doubled, as in CSV"},
	{"code", "error codes, comma-separated (errors)"},
	{"class", "error classes, comma-separated (errors)"},
	{"origin", "status, value, inbound, history, call, echo or send_result (errors)"},
	{"group-by", "errors: code, class, number, waba, template, campaign, origin (default code)"},
	{"step", "errors: 1m, 1h or 1d; throughput: 1s or 1m (default 1m)"},
	{"by", "funnel: campaign, template, number, waba or total (default campaign)"},
	{"limit", "most rows (errors, funnel) or recent items (numbers, dead-letters)"},
}

// runReport answers a report from ClickHouse, as the API would.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "Usage: wahook report <%s> [flags]\n", strings.Join(api.Reports(), "|"))
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: name a report: %s", errUsage, strings.Join(api.Reports(), ", "))
	}
	name := args[0]
	f := newFlags("report "+name, stderr)
	var (
		dsn    string
		asJSON bool
		ao     apiOptions
	)
	values := map[string]*string{}
	for _, rf := range reportFlags {
		values[rf.name] = f.String(rf.name, "", rf.usage)
	}
	f.StringVar(&dsn, "clickhouse-dsn", "clickhouse://127.0.0.1:9000/wahook", "ClickHouse, native protocol (secret)")
	f.Secret("clickhouse-dsn")
	f.BoolVar(&asJSON, "json", false, "print the API's JSON instead of a table")
	tenantWabas := f.String("tenant-waba", "", "answer as a token scoped to these WABA ids sees it (comma-separated): their numbers only, not_found for any other")
	registerNumberTier(f, &ao.tiers)
	registerTierLevels(f, &ao.levels)
	if err := f.Parse(args[1:]); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	q := url.Values{}
	for _, rf := range reportFlags {
		if v := *values[rf.name]; v != "" {
			q.Set(strings.ReplaceAll(rf.name, "-", "_"), v)
		}
	}
	tiers, err := ao.tierOverrides()
	if err != nil {
		return err
	}
	if f.Check {
		return nil
	}
	store, closeStore, err := openStore(ctx, dsn, tiers)
	if err != nil {
		return err
	}
	defer closeStore()
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var scope []string
	for _, w := range strings.Split(*tenantWabas, ",") {
		if w = strings.TrimSpace(w); w != "" {
			scope = append(scope, w)
		}
	}
	res, err := api.RunScoped(qctx, store, name, q, time.Now(), scope)
	if err != nil {
		var e *api.Error
		if errors.As(err, &e) && e.Parameter != "" {
			return fmt.Errorf("%w: --%s: %s", errUsage, strings.ReplaceAll(e.Parameter, "_", "-"), e.Message)
		}
		if errors.As(err, &e) && e.Code == api.CodeNotFound {
			return fmt.Errorf("%w: %s", errUsage, e.Message)
		}
		return err
	}
	if asJSON {
		b, err := api.Encode(res)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	return writeTable(stdout, res)
}

// writeTable prints an answer as a readable table.
func writeTable(w io.Writer, res any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = fmt.Sprint(c)
		}
		fmt.Fprintln(tw, strings.Join(s, "\t"))
	}
	switch r := res.(type) {
	case *api.Failures:
		fmt.Fprintf(w, "failures %s to %s: %d\n\n", r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.Total)
		var head []any
		if r.Step != "" {
			head = append(head, "TIME")
		}
		for _, g := range r.GroupBy {
			head = append(head, strings.ToUpper(g))
			if g == "code" {
				head = append(head, "TITLE", "CLASS", "VERDICT")
			}
		}
		row(append(head, "FAILURES", "SHARE")...)
		for _, x := range r.Rows {
			var cells []any
			if x.Time != nil {
				cells = append(cells, x.Time.Format("2006-01-02 15:04"))
			}
			for _, g := range r.GroupBy {
				switch g {
				case "code":
					cells = append(cells, *x.Code, orDash(x.Title), x.Class, x.Verdict)
				case "class":
					cells = append(cells, x.Class)
				case "number":
					cells = append(cells, orDash(*x.PhoneNumberID))
				case "waba":
					cells = append(cells, orDash(*x.WabaID))
				case "template":
					cells = append(cells, orDash(*x.Template))
				case "campaign":
					cells = append(cells, orDash(*x.Campaign))
				case "origin":
					cells = append(cells, x.Origin)
				}
			}
			row(append(cells, x.Failures, fmt.Sprintf("%.1f%%", 100*x.Share))...)
		}
		if r.Truncated {
			defer fmt.Fprintln(w, "(more rows: raise --limit)")
		}
	case *api.Funnel:
		asOf := "resolved at query time"
		if r.AsOf != nil {
			asOf = "as of " + r.AsOf.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "funnel by %s, messages first seen %s to %s (%s)\n\n", r.By, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), asOf)
		row(strings.ToUpper(r.By), "MESSAGES", "SENT", "DELIVERED", "READ", "FAILED", "DELIVER P50/P95 s", "READ P50/P95 s")
		for _, x := range r.Rows {
			row(orDash(x.Key), x.Messages, x.Sent, x.Delivered, x.Read, x.Failed, durations(x.ToDeliver), durations(x.ToRead))
		}
		if r.Truncated {
			defer fmt.Fprintln(w, "(more rows: raise --limit)")
		}
	case *api.Throughput:
		// The peak's share is the highest of the buckets', each against
		// its own tier: not the peak rate against the tier of --to (an
		// upgrade within the range changes the tier).
		fmt.Fprintf(w, "number %s, tier %d mps (%s): %d inbound, %d outbound, average %.2f mps, peak %.2f mps, highest utilization %.0f%% (of the tier of its time)\n\n",
			r.PhoneNumberID, r.TierMPS, r.TierSource, r.Inbound, r.Outbound, r.AverageMPS, r.PeakMPS, 100*r.PeakUtilization)
		row("TIME", "INBOUND", "OUTBOUND", "MPS", "TIER", "UTILIZATION")
		for _, p := range r.Points {
			at := p.Time.Format(time.RFC3339)
			if p.Partial {
				at += " (partial)"
			}
			row(at, p.Inbound, p.Outbound, strconv.FormatFloat(p.MPS, 'f', 2, 64), p.TierMPS, fmt.Sprintf("%.1f%%", 100*p.Utilization))
		}
	case *api.Numbers:
		row("NUMBER", "WABA", "TIER", "SOURCE", "QUALITY", "MESSAGING LIMIT", "LAST UPGRADE", "LAST CHANGE")
		for _, n := range r.Numbers {
			row(n.PhoneNumberID, orDash(n.WabaID), n.TierMPS, n.TierSource, n.Quality, orDash(n.MessagingLimit), timeOrDash(n.LastThroughputUpgrade), timeOrDash(n.LastChange))
		}
		if len(r.Pending) > 0 {
			// Number-level events of display numbers no message webhook
			// has paired with a phone number id yet: they apply once it is.
			row()
			row("PENDING DISPLAY NUMBER", "WABA", "EVENTS", "FIRST CHANGE", "LAST CHANGE")
			for _, p := range r.Pending {
				row(p.DisplayPhoneNumber, orDash(p.WabaID), p.Events, p.FirstChange.Format(time.RFC3339), p.LastChange.Format(time.RFC3339))
			}
		}
	case *api.DeadLetters:
		fmt.Fprintf(w, "dead letters %s to %s: %d in %d bodies\n\n", r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.Count, r.Bodies)
		row("REASON", "COUNT", "LAST SEEN")
		for _, x := range r.ByReason {
			row(x.Reason, x.Count, x.LastSeen.Format(time.RFC3339))
		}
		row()
		row("RECEIVED", "REASON", "ITEM", "BODY ID")
		for _, x := range r.Recent {
			row(x.ReceivedAt.Format(time.RFC3339), x.Reason, orDash(x.Item), x.RawMsgID)
		}
	default:
		b, err := api.Encode(res)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func durations(d api.Durations) string {
	if d.P50 == nil {
		return "-"
	}
	return fmt.Sprintf("%g/%g", *d.P50, *d.P95)
}
