package pacer

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"
)

// Meta's limits that the pacer keeps locally.
const (
	// DefaultTierMPS is Meta's default throughput of a number, inbound and
	// outbound together: the base of the fallback rate when no tier is known.
	DefaultTierMPS = 80
	// PairInterval and PairBurst are Meta's pair rule: about one message per
	// 6 s to the same recipient, bursts of up to 45 (131056 beyond).
	PairInterval = 6 * time.Second
	PairBurst    = 45
	// accountRecheck is the Until of a stop by a WABA's ban or a
	// restriction without an end: when to ask again (Meta ends it with an
	// event, which the pacer applies as it comes).
	accountRecheck = 15 * time.Minute
	// stopHold is how long a number stays stopped after a stop verdict when
	// the signal does not say (stage 2's rule: 15 minutes after the error).
	stopHold = 15 * time.Minute
	// maintenanceHold is how long a number pauses after a 131057 when the
	// signal does not say (Meta: maintenance lasts up to a minute).
	maintenanceHold = time.Minute
)

// Config configures a Pacer. The zero value of every field but PhoneHashKey
// takes its default (DefaultConfig).
type Config struct {
	// PhoneHashKey is wahook's --phone-hash-key. wahook keys a recipient's
	// cool-down by the keyed hash of the recipient's number; without the key
	// the pacer cannot match them and keeps only its own pair rule and the
	// cool-downs of the 131056 it was told about through Outcome.
	PhoneHashKey []byte

	// StartWait is the longest New waits for the signals and cool-downs
	// already written (5 s).
	StartWait time.Duration
	// MaxSignalAge is the age (by the signal's updated_at) beyond which a
	// number's signal no longer counts and the fallback rate applies (30 s;
	// stage 2 rewrites a number's signal every second while it sends).
	MaxSignalAge time.Duration
	// FallbackShare of the last known tier (else of FallbackTierMPS) is the
	// rate without a signal (0.8).
	FallbackShare float64
	// FallbackTierMPS is the tier assumed before any signal (80).
	FallbackTierMPS float64
	// Share is the part of each number's rate this Pacer sends at (1).
	// wahook's signal is the rate of the number for all its senders
	// together: when n processes (replicas of a service, or several
	// services) send from the same numbers, each gives its Pacer 1/n, or
	// each number is sent from by one process only. Otherwise they send
	// at n times the rate and meet Meta's 130429.
	Share float64
	// BurstWindow is the depth of a number's bucket as time at its rate:
	// at 80 mps and 100 ms, 8 sends may go at once (at least 1).
	BurstWindow time.Duration
	// PairInterval and PairBurst are the local pair rule (6 s plus a margin
	// of 100 ms for the network, 45). PairBurst < 0 turns the rule off.
	PairInterval time.Duration
	PairBurst    int
	// CooldownNoWait makes Wait return a *CooldownError at once when the
	// recipient is in a cool-down (wahook's, or the local pair rule's), so
	// that the caller sends to other recipients meanwhile; otherwise Wait
	// waits for it.
	CooldownNoWait bool
	// Replies says the service sends only replies to customers who wrote
	// first (customer-initiated conversations). A WABA Meta disabled stops
	// every number of it either way; a restriction of business-initiated
	// messages stops them only without Replies, and one of
	// customer-initiated messages only with it. The pacer knows a number's
	// WABA from its signal's waba_id (Meta's word), else from the waba_id
	// of its send results (Outcome).
	Replies bool
	// MaintenanceMargin is added to a signal's maintenance_until before
	// sending again (2 s): Meta stamps the THROUGHPUT_UPGRADE that starts the
	// window in whole seconds, and a 131057 at its end would start another
	// minute's pause.
	MaintenanceMargin time.Duration
	// MaxAttempts is the most sends of one message that Outcome retries
	// after service errors and 132069, a flow throttled for the hour (5);
	// the other rate-limit errors are retried without a limit: they say
	// when.
	MaxAttempts int

	// ReportHTTPURL, when set, sends the results to this URL (wahook's
	// POST /api/v1/send-results) with APIToken instead of publishing them on
	// wahook.raw._send_results.
	ReportHTTPURL string
	APIToken      string
	// ReportInsecureHTTP lets ReportHTTPURL be plain http:// to a host
	// other than this machine's loopback: APIToken then crosses the
	// network in the clear. Set it only where the network itself is
	// private and protected (a service mesh with its own TLS). Without
	// it, New refuses such a URL.
	ReportInsecureHTTP bool
	// NoReport keeps the results to Outcome's decision and reports nothing.
	NoReport bool
	// ReportBatch is the most results in one report (500); ReportInterval
	// the longest a result waits for its batch (250 ms).
	ReportBatch    int
	ReportInterval time.Duration
	// ReportQueue is the most results waiting to be reported (100,000);
	// beyond it results are dropped and counted (Stats.ReportDropped), so
	// that a wahook outage never blocks the sending.
	ReportQueue int

	// Logger gets the pacer's log lines (fallback on and off, report
	// failures); nil: slog.Default(). Recipients are never logged.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		StartWait:         5 * time.Second,
		MaxSignalAge:      30 * time.Second,
		FallbackShare:     0.8,
		FallbackTierMPS:   DefaultTierMPS,
		Share:             1,
		BurstWindow:       100 * time.Millisecond,
		PairInterval:      PairInterval + 100*time.Millisecond,
		PairBurst:         PairBurst,
		MaintenanceMargin: 2 * time.Second,
		MaxAttempts:       5,
		ReportBatch:       500,
		ReportInterval:    250 * time.Millisecond,
		ReportQueue:       100_000,
	}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.StartWait == 0 {
		c.StartWait = d.StartWait
	}
	if c.MaxSignalAge == 0 {
		c.MaxSignalAge = d.MaxSignalAge
	}
	if c.FallbackShare == 0 {
		c.FallbackShare = d.FallbackShare
	}
	if c.FallbackTierMPS == 0 {
		c.FallbackTierMPS = d.FallbackTierMPS
	}
	if c.Share == 0 {
		c.Share = d.Share
	}
	if c.BurstWindow == 0 {
		c.BurstWindow = d.BurstWindow
	}
	if c.PairInterval == 0 {
		c.PairInterval = d.PairInterval
	}
	if c.PairBurst == 0 {
		c.PairBurst = d.PairBurst
	}
	if c.MaintenanceMargin == 0 {
		c.MaintenanceMargin = d.MaintenanceMargin
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.ReportBatch == 0 {
		c.ReportBatch = d.ReportBatch
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = d.ReportInterval
	}
	if c.ReportQueue == 0 {
		c.ReportQueue = d.ReportQueue
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.StartWait < 0 || c.MaxSignalAge < 0 || c.BurstWindow < 0 || c.PairInterval < 0 || c.ReportInterval < 0 || c.MaintenanceMargin < 0:
		return c, errors.New("pacer: durations must not be negative")
	case !(c.FallbackShare > 0 && c.FallbackShare <= 1): // NaN too
		return c, errors.New("pacer: fallback share must be in (0, 1]")
	case !(c.Share > 0 && c.Share <= 1):
		return c, errors.New("pacer: share must be in (0, 1]")
	case c.FallbackTierMPS < 1:
		return c, errors.New("pacer: fallback tier must be at least 1 mps")
	case c.ReportBatch < 1 || c.ReportBatch > 1000:
		return c, errors.New("pacer: report batch must be 1 to 1000 results (wahook's limit per document)")
	case c.MaxAttempts < 1 || c.ReportQueue < 1:
		return c, errors.New("pacer: max attempts and report queue must be positive")
	}
	if c.ReportHTTPURL != "" && !c.NoReport {
		if err := checkReportURL(c.ReportHTTPURL, c.ReportInsecureHTTP); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkReportURL reports what is wrong with the report URL u: not an
// absolute http(s) URL with a host, or plain http to a host other than
// loopback without insecure (the API token would cross the network in the
// clear). A wrong URL found here is one error at New, not a failed report
// every batch. Its errors show the URL's scheme and host at most: a token
// may be in the rest.
func checkReportURL(u string, insecure bool) error {
	p, err := url.Parse(u)
	if err != nil {
		// Not the parser's text: it quotes the URL, or a part of it (a
		// password with a slash in it reads as a port).
		return errors.New("pacer: report URL does not parse (percent-encode the reserved characters of its user information, if any)")
	}
	scheme := strings.ToLower(p.Scheme)
	switch {
	case scheme != "https" && scheme != "http":
		return fmt.Errorf("pacer: report URL: the scheme must be https (or http), not %q", scheme)
	case p.Hostname() == "":
		return fmt.Errorf("pacer: report URL (%s) has no host", scheme)
	case scheme == "http" && !insecure && !loopback(p.Hostname()):
		return fmt.Errorf("pacer: report URL http://%s is plain http to another host: the API token would cross the network in the clear; use https, or set ReportInsecureHTTP on a private network", p.Host)
	}
	return nil
}

// shownURL is u as errors and logs may show it: its scheme and host.
func shownURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(the report URL)"
	}
	return p.Scheme + "://" + p.Host
}

// loopback reports whether host is this machine's loopback: localhost or
// a loopback address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
