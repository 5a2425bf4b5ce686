package campaign

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/wahook/wahook/loadtest/simulate"
)

// The senders.
const (
	SenderNaive = "naive"
	SenderPaced = "paced"
)

// Config configures a campaign.
type Config struct {
	// Messages each sender sends, over Numbers numbers of its own at Tier,
	// the first Upgradable of which earn THROUGHPUT_UPGRADE once they
	// sustain high use.
	Messages   int
	Numbers    int
	Tier       int
	Upgradable int
	// RepeatShare of the recipients of each number get RepeatCount messages
	// each, the others one. Each message of a number's queue is placed by
	// a random key between 0 and 1: a repeated recipient's keys fall in a
	// window RepeatWindow wide that starts below 0.6 - RepeatWindow. Since
	// those messages are most of the queue, 10% of the keys is about a
	// sixth of the queue's positions, in its first 85%.
	RepeatShare  float64
	RepeatCount  int
	RepeatWindow float64
	// Workers per number, both senders.
	Workers int
	// NaiveMPS is the naive sender's fixed rate per number; NaiveAttempts
	// its most sends of one message (each rate-limit error is retried at
	// once).
	NaiveMPS      float64
	NaiveAttempts int
	// PacedMaxAttempts bounds the paced sender's sends of one message.
	PacedMaxAttempts int
	// Senders to run: naive, paced or both.
	Senders []string

	// WebhookURL and AppSecret: the running wahook where the simulator posts
	// its webhooks. NATSURL: where the paced sender's pacer reads the signal
	// and reports send results. PhoneHashKey: wahook's, so that the pacer
	// finds wahook's pair cool-downs.
	WebhookURL   string
	AppSecret    []byte
	NATSURL      string
	PhoneHashKey []byte

	// Sim is the simulator's configuration (numbers are made by the run).
	Sim simulate.Config
	// RunID (up to 8 digits) is carried by the numbers' ids; Seed drives the
	// plan and the simulator.
	RunID uint32
	Seed  uint64
	// Timeout bounds the whole run.
	Timeout time.Duration
	Logger  *slog.Logger
}

// DefaultConfig is the bar's campaign: 50,000 messages over 10 numbers at
// 80 mps, one of which earns its upgrade to 1,000 mps, a tenth of the
// recipients messaged 48 times within a tenth of the campaign.
func DefaultConfig() Config {
	sc := simulate.DefaultConfig()
	sc.UpgradeMaintenance = time.Minute
	return Config{
		Messages:         50_000,
		Numbers:          10,
		Tier:             simulate.DefaultTier,
		Upgradable:       1,
		RepeatShare:      0.1,
		RepeatCount:      48,
		RepeatWindow:     0.1,
		Workers:          4,
		NaiveMPS:         simulate.DefaultTier,
		NaiveAttempts:    10,
		PacedMaxAttempts: 50,
		Senders:          []string{SenderNaive, SenderPaced},
		Sim:              sc,
		Timeout:          15 * time.Minute,
	}
}

// Validate reports the first problem of c.
func (c *Config) Validate() error {
	switch {
	case c.Messages < 1 || c.Numbers < 1 || c.Messages < c.Numbers:
		return errors.New("want at least one message per number")
	case c.Tier < 1 || c.Upgradable < 0 || c.Upgradable > c.Numbers:
		return errors.New("tier must be positive and upgradable at most the numbers")
	case c.RepeatShare < 0 || c.RepeatShare > 1 || c.RepeatWindow <= 0 || c.RepeatWindow > 0.6 || c.RepeatCount < 1:
		return errors.New("repeat share in [0, 1], window in (0, 0.6], count positive")
	case c.Workers < 1 || c.NaiveMPS <= 0 || c.NaiveAttempts < 1 || c.PacedMaxAttempts < 1:
		return errors.New("workers, naive rate and attempts must be positive")
	case c.RunID > 99_999_999:
		return errors.New("run id: up to 8 digits")
	case len(c.Senders) == 0:
		return errors.New("no senders")
	}
	for _, s := range c.Senders {
		switch s {
		case SenderNaive:
		case SenderPaced:
			if c.NATSURL == "" {
				return errors.New("the paced sender needs --nats-url, where wahook's signal is")
			}
			if c.WebhookURL == "" {
				return errors.New("the paced sender needs --url: wahook must get the simulator's webhooks to write a signal")
			}
		default:
			return fmt.Errorf("unknown sender %q (naive, paced)", s)
		}
	}
	if c.WebhookURL != "" {
		if err := simulate.CheckLoopbackURL(c.WebhookURL); err != nil {
			return fmt.Errorf("url: %w", err)
		}
		if len(c.AppSecret) == 0 {
			return errors.New("--url needs --app-secret")
		}
	}
	return nil
}
