// Package simulate is a Meta Cloud API simulator for tests and load runs on
// loopback: a Graph-API-shaped POST /{version}/{phone_number_id}/messages
// that answers as Meta does, with the synchronous errors in Meta's JSON
// shape (130429 above the number's tier, inbound and outbound together;
// 131056 above the pair rule; 131057 during a maintenance window; 131048
// once the number is flagged), and signed webhooks to a wahook endpoint for
// what happened next: sent, delivered, read, async failures, inbound
// replies, THROUGHPUT_UPGRADE (and the 1,000 mps tier after it) once a
// number sustains high use, and quality FLAGGED when its failures say so.
// Random choices are drawn per message from the seed, so the same sends
// get the same fates.
//
// It imports only schema.
package simulate

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"
)

// Meta's limits (WhatsApp Cloud API throughput and pair rate).
const (
	DefaultTier     = 80
	UpgradedTier    = 1000
	CoexistenceTier = 20
	PairInterval    = 6 * time.Second
	PairBurst       = 45
)

// Number is one simulated business number.
type Number struct {
	PhoneNumberID string
	Display       string // digits
	WABAID        string
	Tier          int  // messages per second, inbound and outbound together (80)
	Upgradable    bool // earns THROUGHPUT_UPGRADE once it sustains high use
}

// Window is a maintenance window of a number: sends answer 131057 from
// Start (after the simulator started) for Duration.
type Window struct {
	PhoneNumberID string
	Start         time.Duration
	Duration      time.Duration
}

// Delays are the medians of the delays after an accepted send (each drawn
// from an exponential distribution around them, capped at 4x): to sent, sent
// to delivered, delivered to read, read to a reply, sent to failed.
type Delays struct {
	Sent, Delivered, Read, Reply, Failed time.Duration
}

// Config configures a Simulator.
type Config struct {
	// Listen is the loopback address of the Graph API (127.0.0.1:0: any port).
	Listen string
	// WebhookURL is wahook's endpoint the webhooks go to, signed with
	// AppSecret; empty: no webhooks.
	WebhookURL string
	AppSecret  []byte
	// Seed of the per-message random choices.
	Seed uint64

	Numbers     []Number
	Maintenance []Window

	DeliveredShare float64           // accepted messages that are delivered (0.98)
	ReadShare      float64           // delivered messages read (0.7)
	ReplyShare     float64           // read messages answered with an inbound message (0.05)
	Failures       map[int32]float64 // async failures by code: a status sent then failed (131049 1%, 131026 0.5%)
	Delays         Delays

	// UpgradeAfter of use at UpgradeUse of the tier or more, on average over
	// its whole seconds, earns an Upgradable number its THROUGHPUT_UPGRADE
	// (10 s, 0.7);
	// the upgrade takes UpgradeMaintenance (131057 meanwhile; Meta: up to a
	// minute; 30 s), then the number has UpgradedTier.
	UpgradeAfter       time.Duration
	UpgradeUse         float64
	UpgradeMaintenance time.Duration

	// FlagShare of async failures among a number's last FlagWindow accepted
	// messages flags it: a FLAGGED quality webhook, then 131048 on every
	// send (0.2 of 200; 0: never).
	FlagShare  float64
	FlagWindow int

	// PairInterval and PairBurst: Meta's pair rule (6 s, 45).
	PairInterval time.Duration
	PairBurst    int

	// Webhook posting: most items in one POST (10), how long an item waits
	// for the rest of its POST (100 ms), connections (8), posts of one body
	// before giving it up (5; Meta retries for days).
	ItemsPerPost int
	Linger       time.Duration
	Connections  int
	Attempts     int
}

// DefaultConfig returns the defaults, without numbers.
func DefaultConfig() Config {
	return Config{
		Listen:             "127.0.0.1:0",
		DeliveredShare:     0.98,
		ReadShare:          0.7,
		ReplyShare:         0.05,
		Failures:           map[int32]float64{131049: 0.01, 131026: 0.005},
		Delays:             Delays{Sent: 200 * time.Millisecond, Delivered: time.Second, Read: 3 * time.Second, Reply: 2 * time.Second, Failed: time.Second},
		UpgradeAfter:       10 * time.Second,
		UpgradeUse:         0.7,
		UpgradeMaintenance: 30 * time.Second,
		FlagShare:          0.2,
		FlagWindow:         200,
		PairInterval:       PairInterval,
		PairBurst:          PairBurst,
		ItemsPerPost:       10,
		Linger:             100 * time.Millisecond,
		Connections:        8,
		Attempts:           5,
	}
}

// Validate reports the first problem of c.
func (c *Config) Validate() error {
	if err := loopback(c.Listen, false); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if c.WebhookURL != "" {
		if err := loopback(c.WebhookURL, true); err != nil {
			return fmt.Errorf("webhook url: %w", err)
		}
		if len(c.AppSecret) == 0 {
			return errors.New("webhooks need the app secret")
		}
	}
	if len(c.Numbers) == 0 {
		return errors.New("no numbers")
	}
	seen := map[string]bool{}
	for _, n := range c.Numbers {
		switch {
		case n.PhoneNumberID == "" || n.Display == "":
			return errors.New("a number needs its phone number id and display number")
		case seen[n.PhoneNumberID]:
			return fmt.Errorf("number %s twice", n.PhoneNumberID)
		case n.Tier < 1:
			return fmt.Errorf("number %s: tier must be positive", n.PhoneNumberID)
		}
		seen[n.PhoneNumberID] = true
	}
	sum := 0.0
	for code, s := range c.Failures {
		if s < 0 || code <= 0 {
			return fmt.Errorf("failure %d=%v: want a code and a share", code, s)
		}
		sum += s
	}
	for _, s := range []float64{c.DeliveredShare, c.ReadShare, c.ReplyShare, c.UpgradeUse, c.FlagShare, sum} {
		if s < 0 || s > 1 {
			return errors.New("shares must be between 0 and 1 (failures together too)")
		}
	}
	switch {
	case c.PairInterval <= 0 || c.PairBurst < 1:
		return errors.New("pair rule: interval and burst must be positive")
	case c.ItemsPerPost < 1 || c.Connections < 1 || c.Attempts < 1 || c.FlagWindow < 1:
		return errors.New("items per post, connections, attempts and flag window must be positive")
	}
	return nil
}

// CheckLoopbackURL reports an error unless u is an http URL on this machine.
func CheckLoopbackURL(u string) error { return loopback(u, true) }

// loopback checks that addr (host:port, or a URL) is on this machine.
func loopback(addr string, isURL bool) error {
	host := addr
	if isURL {
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("%q is not an http URL", addr)
		}
		host = u.Host
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return nil
	}
	ip := net.ParseIP(h)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address: the simulator is for this machine only", addr)
	}
	return nil
}

// Fleet makes n numbers for a run: phone number ids 7RRRRRRRRNNNNNN and
// WABA ids 6RRRRRRRRWWWWWW carrying the run id (up to 8 digits), display
// numbers 1RRRRRRRRNNN (fictional), one WABA per four numbers, the first
// upgradable of them Upgradable, every one at tier.
func Fleet(run uint32, first, n, upgradable, tier int) []Number {
	out := make([]Number, n)
	for i := range out {
		k := first + i
		out[i] = Number{
			PhoneNumberID: fmt.Sprintf("7%08d%06d", run, k),
			Display:       fmt.Sprintf("1%08d%03d", run, k%1000),
			WABAID:        fmt.Sprintf("6%08d%06d", run, k/4),
			Tier:          tier,
			Upgradable:    i < upgradable,
		}
	}
	return out
}
