package loadtest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// Throughput tiers of a business number, in messages per second (inbound
// and outbound together), as Meta sets them (docs/meta-webhooks.md 9.1).
const (
	TierStandard    = schema.TierDefaultMPS  // the default
	TierUpgraded    = schema.TierUpgradedMPS // after THROUGHPUT_UPGRADE
	TierCoexistence = 20                     // a number also used with the WhatsApp Business app
)

// MaxNumbers is the most business numbers a model has: their display
// numbers come from a fictional range with room for this many.
const MaxNumbers = 10000

// Model is traffic shaped like Meta's webhooks for a business that sends at
// volume: Numbers business numbers send OutboundMPS messages per second each,
// and each message turns into sent, delivered and read statuses (Meta's
// "3x"), or into sent and failed with an error code from Failures; users send
// inbound messages at InboundMPS (Meta's "1x"); quality and
// THROUGHPUT_UPGRADE events come on a schedule. Meta's delivery habits are
// part of it: several items in one POST (PerPost), bodies posted again after
// a 200 (RetryShare), and statuses repeated inside other POSTs (RepeatShare).
//
// The run starts in steady state: messages sent before it (up to
// Delays.Max) have their later statuses due during it, so that the rates hold
// from the first second.
type Model struct {
	// Numbers is the number of business numbers. The first Coexistence of
	// them are coexistence numbers (20 mps, some outbound sent from the
	// Business app, which Meta reports as smb_message_echoes), the next
	// Upgraded already have the 1,000 mps tier, the others 80 mps.
	Numbers, Coexistence, Upgraded int
	// WABAs is the number of WhatsApp Business Accounts the numbers belong
	// to (round robin); 0 gives one per four numbers.
	WABAs int
	// OutboundMPS is what each number sends, in messages per second. A
	// number never sends more than its tier leaves beside its inbound
	// traffic (Meta answers 130429 to the send, and no webhook follows).
	OutboundMPS float64
	// InboundMPS is the inbound messages per second over all numbers,
	// spread evenly; 0 takes ReplyRate of each number's outbound instead.
	InboundMPS float64
	ReplyRate  float64
	// ReadShare is the share of delivered messages that are read (users
	// with read receipts); Meta's 3x rule assumes 1.
	ReadShare float64
	// Failures is the share of sent messages that fail, by error code:
	// they get sent and then failed with that code, instead of delivered
	// and read.
	Failures FailureMix
	// EchoShare is the share of a coexistence number's outbound that is
	// typed in the Business app: an smb_message_echoes item, no statuses.
	EchoShare float64
	// PerPost is the most items (statuses, messages, events) one POST
	// carries: each POST takes between 1 and PerPost of the items due, from
	// any numbers and accounts (entries and changes as Meta nests them).
	PerPost int
	// RetryShare is the share of POSTs that Meta posts again, byte for
	// byte, a little later, although the first got a 200 (at-least-once).
	RetryShare float64
	// RepeatShare is the share of statuses that come again inside a later,
	// different POST (a duplicate that only the event id catches).
	RepeatShare float64
	// QualityEvery sends one phone_number_quality_update (FLAGGED,
	// UNFLAGGED, DOWNGRADE, UPGRADE, numbers in turn) per period; 0 none.
	QualityEvery time.Duration
	// UpgradeEvery upgrades one standard number per period with a
	// THROUGHPUT_UPGRADE event; from then on it may send up to 1,000 mps.
	UpgradeEvery time.Duration
	// Delays between the send and its statuses.
	Delays Delays
	// RunID tells this run's ids apart from other runs' in a shared
	// database (phone number ids, WABA ids and message ids carry it); 0
	// picks one. Seed seeds the random choices; 0 derives it from RunID.
	RunID uint32
	Seed  uint64
}

// Delays are medians of log-normal delays (spread by a factor of about two),
// each capped at Max. Max also sets how much history the run starts with.
type Delays struct {
	Sent      time.Duration // from the send API call to the sent status
	Delivered time.Duration // from sent to delivered
	Read      time.Duration // from delivered to read
	Failed    time.Duration // from sent to failed
	Max       time.Duration
}

// DefaultModel is 4 numbers (one of them coexistence) at 20 mps each with
// a 30% reply rate, 1% of messages failing with 131049 and 0.5% with 131026,
// Meta's batching and duplicates, and quality and upgrade events every 5 s.
func DefaultModel() Model {
	return Model{
		Numbers: 4, Coexistence: 1, OutboundMPS: 20, ReplyRate: 0.3, ReadShare: 1,
		Failures:  FailureMix{{Code: 131026, Share: 0.005}, {Code: 131049, Share: 0.01}},
		EchoShare: 0.2, PerPost: 3, RetryShare: 0.01, RepeatShare: 0.005,
		QualityEvery: 5 * time.Second, UpgradeEvery: 5 * time.Second,
		Delays: DefaultDelays(),
	}
}

// DefaultDelays are the delays of DefaultModel: sent after 300 ms,
// delivered 1.5 s later, read 10 s after that, failures 1 s after sent, none
// longer than 60 s.
func DefaultDelays() Delays {
	return Delays{Sent: 300 * time.Millisecond, Delivered: 1500 * time.Millisecond,
		Read: 10 * time.Second, Failed: time.Second, Max: time.Minute}
}

// Validate reports the first problem of m.
func (m Model) Validate() error {
	share := func(name string, v float64) error {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return fmt.Errorf("%s %v: want a share between 0 and 1", name, v)
		}
		return nil
	}
	switch {
	case m.Numbers < 1 || m.Numbers > MaxNumbers:
		return fmt.Errorf("numbers %d: want 1 to %d", m.Numbers, MaxNumbers)
	case m.Coexistence < 0 || m.Upgraded < 0 || m.Coexistence+m.Upgraded > m.Numbers:
		return fmt.Errorf("coexistence %d + upgraded %d numbers: more than the %d numbers", m.Coexistence, m.Upgraded, m.Numbers)
	case m.WABAs < 0 || m.WABAs > m.Numbers:
		return fmt.Errorf("wabas %d: want 0 to the number of numbers", m.WABAs)
	case m.OutboundMPS < 0 || m.OutboundMPS > TierUpgraded:
		return fmt.Errorf("outbound mps %v per number: want 0 to %d (the highest tier)", m.OutboundMPS, TierUpgraded)
	case m.InboundMPS < 0:
		return errors.New("inbound mps must not be negative")
	case m.OutboundMPS == 0 && m.InboundMPS == 0:
		return errors.New("no traffic: set outbound or inbound mps")
	case m.PerPost < 1 || m.PerPost > 1000:
		return fmt.Errorf("items per post %d: want 1 to 1000 (Meta's most)", m.PerPost)
	case m.QualityEvery < 0 || m.QualityEvery > 0 && m.QualityEvery < 10*time.Millisecond:
		return errors.New("quality events: a period of at least 10ms, or 0 for none")
	case m.UpgradeEvery < 0 || m.UpgradeEvery > 0 && m.UpgradeEvery < 10*time.Millisecond:
		return errors.New("upgrade events: a period of at least 10ms, or 0 for none")
	case m.Delays.Max <= 0 || m.Delays.Max > time.Hour:
		return errors.New("the longest delay must be between 0 and 1h")
	case m.Delays.Sent < 0 || m.Delays.Delivered < 0 || m.Delays.Read < 0 || m.Delays.Failed < 0:
		return errors.New("delays must not be negative")
	}
	for _, s := range []struct {
		name string
		v    float64
	}{{"reply rate", m.ReplyRate}, {"read share", m.ReadShare}, {"echo share", m.EchoShare},
		{"retry share", m.RetryShare}, {"repeat share", m.RepeatShare}} {
		if err := share(s.name, s.v); err != nil {
			return err
		}
	}
	return m.Failures.Validate()
}

// tier is the throughput tier a number starts with.
func (m Model) tier(n int) int {
	switch {
	case n < m.Coexistence:
		return TierCoexistence
	case n < m.Coexistence+m.Upgraded:
		return TierUpgraded
	}
	return TierStandard
}

// wabas is the number of accounts.
func (m Model) wabas() int {
	if m.WABAs > 0 {
		return m.WABAs
	}
	return (m.Numbers + 3) / 4
}

// rates returns a number's outbound and inbound rates at the given tier:
// the outbound is cut so that both together stay within the tier.
func (m Model) rates(tier int) (out, in float64) {
	if m.InboundMPS > 0 {
		in = m.InboundMPS / float64(m.Numbers)
		return max(0, min(m.OutboundMPS, float64(tier)-in)), in
	}
	out = min(m.OutboundMPS, float64(tier)/(1+m.ReplyRate))
	return out, out * m.ReplyRate
}

// Rates is what the model sends per second at its start, over all numbers:
// messages out, messages in, and the webhook events they give in steady
// state (statuses, inbound messages, echoes), before retries and repeats.
type Rates struct {
	Outbound float64 `json:"outbound_mps"`
	Inbound  float64 `json:"inbound_mps"`
	Statuses float64 `json:"status_events_per_s"`
	Echoes   float64 `json:"echoes_per_s"`
	Events   float64 `json:"events_per_s"`
	// Clamped is the number of numbers whose outbound the tier cut.
	Clamped int `json:"numbers_clamped_to_tier"`
}

// Rates returns the steady-state rates of m at its start.
func (m Model) Rates() Rates {
	var r Rates
	fail := m.Failures.Total()
	// A message that fails gives sent and failed; one that does not gives
	// sent, delivered, and read with ReadShare.
	perMessage := fail*2 + (1-fail)*(2+m.ReadShare)
	for n := 0; n < m.Numbers; n++ {
		out, in := m.rates(m.tier(n))
		if out < m.OutboundMPS {
			r.Clamped++
		}
		echo := 0.0
		if n < m.Coexistence {
			echo = m.EchoShare
		}
		r.Outbound += out
		r.Inbound += in
		r.Echoes += out * echo
		r.Statuses += out * (1 - echo) * perMessage
	}
	r.Events = r.Statuses + r.Inbound + r.Echoes
	return r
}

// FailureMix is the share of sent messages that fail, by error code.
type FailureMix []FailureShare

// FailureShare is one code's share.
type FailureShare struct {
	Code  int32   `json:"code"`
	Share float64 `json:"share"`
}

// ParseFailureMix reads "131049=2%,130429=0.5%" (or shares as fractions,
// "131049=0.02"); "" and "none" are no failures.
func ParseFailureMix(s string) (FailureMix, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var m FailureMix
	for _, part := range strings.Split(s, ",") {
		code, share, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("failure mix %q: want CODE=SHARE, e.g. 131049=2%%", part)
		}
		c, err := strconv.ParseInt(strings.TrimSpace(code), 10, 32)
		if err != nil || c <= 0 {
			return nil, fmt.Errorf("failure mix %q: %q is not an error code", part, code)
		}
		share = strings.TrimSpace(share)
		scale := 1.0
		if v, pct := strings.CutSuffix(share, "%"); pct {
			share, scale = v, 0.01
		}
		v, err := strconv.ParseFloat(share, 64)
		if err != nil {
			return nil, fmt.Errorf("failure mix %q: %q is not a share", part, share)
		}
		m = append(m, FailureShare{Code: int32(c), Share: v * scale})
	}
	slices.SortFunc(m, func(a, b FailureShare) int { return int(a.Code) - int(b.Code) })
	return m, m.Validate()
}

// Validate checks the shares: each between 0 and 1, each code once, and
// together at most 1.
func (m FailureMix) Validate() error {
	seen := map[int32]bool{}
	for _, f := range m {
		if f.Share < 0 || f.Share > 1 || math.IsNaN(f.Share) {
			return fmt.Errorf("failure share of %d: %v is not between 0 and 1", f.Code, f.Share)
		}
		if seen[f.Code] {
			return fmt.Errorf("failure mix names %d twice", f.Code)
		}
		seen[f.Code] = true
	}
	if t := m.Total(); t > 1+1e-9 {
		return fmt.Errorf("failure shares add up to %.4g, more than all messages", t)
	}
	return nil
}

// Total is the share of messages that fail.
func (m FailureMix) Total() float64 {
	var t float64
	for _, f := range m {
		t += f.Share
	}
	return t
}

// String writes m as ParseFailureMix reads it.
func (m FailureMix) String() string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, len(m))
	for i, f := range m {
		parts[i] = fmt.Sprintf("%d=%s%%", f.Code, strconv.FormatFloat(100*f.Share, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// errorText is the title and details of the failed statuses of a code, as
// Meta words them (docs/meta-webhooks.md 10); other codes get a generic text.
func errorText(code int32) (title, details string) {
	switch code {
	case 130429:
		return "Rate limit hit", "Cloud API message throughput has been reached."
	case 130472:
		return "User's number is part of an experiment", "Failed to send message because this user's phone number is part of an experiment."
	case 131000:
		return "Something went wrong", "Message failed to send because of an unknown error."
	case 131026:
		return "Message undeliverable", "The message could not be delivered to this recipient."
	case 131047:
		return "Re-engagement message", "More than 24 hours have passed since the recipient last replied to the sender number."
	case 131048:
		return "Spam rate limit hit", "Message failed to send because there are restrictions on how many messages can be sent from this phone number."
	case 131049:
		return "This message was not delivered to maintain healthy ecosystem engagement.", "Delivery was withheld to keep engagement healthy; the recipient may have reached their marketing message limit."
	case 131050:
		return "Unable to deliver the message. This recipient has chosen to stop receiving marketing messages on WhatsApp from your business.", "The user stopped marketing messages from this business."
	case 131053:
		return "Media upload error", "Unable to upload the media used in the message."
	case 131056:
		return "(Business Account, Consumer Account) pair rate limit hit", "Too many messages sent from the sender phone number to the same recipient phone number in a short period of time."
	case 131057:
		return "Account in maintenance mode", "Business Account is in maintenance mode."
	}
	return "Message failed to send", "Error " + strconv.Itoa(int(code)) + "."
}
