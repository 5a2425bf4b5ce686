package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/ingest"
	"github.com/wahook/wahook/schema"
)

// ingestOptions are the flags of the webhook endpoint and the RAW stream.
type ingestOptions struct {
	cfg        ingest.Config
	stream     ingest.StreamConfig
	appSecrets stringList
	provision  bool
	conns      connFlags
	// metricsListen moves /metrics off the webhook listener.
	metricsListen string
	// provisioned is the RAW stream when the caller provisioned it already
	// (serve, before stage 1).
	provisioned *jetstream.StreamInfo
}

func (o *ingestOptions) register(f *flags) {
	o.cfg = ingest.DefaultConfig()
	f.Section("webhook endpoint", func() {
		f.StringVar(&o.cfg.Listen, "listen", o.cfg.Listen, "address of /webhook, /healthz, /readyz and /metrics")
		f.StringVar(&o.cfg.VerifyToken, "verify-token", "", "token Meta's verification handshake must present (secret)")
		f.Secret("verify-token")
		f.ListVar(&o.appSecrets, "app-secret", "Meta app secret: SECRET for /webhook, NAME=SECRET for /webhook/NAME; repeat for several apps or to rotate (secret)")
		f.Secret("app-secret")
		f.IntVar(&o.cfg.BodyLimit, "body-limit", o.cfg.BodyLimit, "largest webhook body accepted, in bytes (413 above)")
		f.Int64Var(&o.cfg.BodyMemory, "body-memory", o.cfg.BodyMemory, "most bytes of webhook bodies longer than 8 KiB read at once (one of unknown length counts as --body-limit); a body that finds no room within --ack-timeout is answered 503 unread, and Meta retries")
		o.conns.register(f, "", "the webhook listener")
		f.StringVar(&o.metricsListen, "metrics-listen", "", "serve /metrics on this address instead of on --listen, which faces Meta and the internet (empty: on --listen)")
		f.DurationVar(&o.cfg.ShutdownDelay, "shutdown-delay", o.cfg.ShutdownDelay, "how long /readyz fails before the listener closes on shutdown")
	})
	f.Section("storing bodies", func() {
		f.DurationVar(&o.cfg.AckTimeout, "ack-timeout", o.cfg.AckTimeout, "longest wait for JetStream's ack before answering 503")
		f.IntVar(&o.cfg.MaxInflight, "max-inflight", o.cfg.MaxInflight, "most publishes awaiting an ack at once")
		f.DurationVar(&o.cfg.QueueWait, "queue-wait", o.cfg.QueueWait, "longest a request waits for an in-flight slot; past it, or when the acks of the moment would come after --ack-timeout, it is answered 503 with nothing published (0: wait until --ack-timeout)")
		f.DurationVar(&o.cfg.DedupeWindow, "dedupe-window", o.cfg.DedupeWindow,
			"how long this endpoint remembers a stored body's id, answering Meta's retry of it 200 without a publish (0: off)")
		f.IntVar(&o.cfg.DedupeMaxEntries, "dedupe-max-entries", o.cfg.DedupeMaxEntries,
			"most body ids the endpoint remembers (~27 B each); beyond it the oldest are forgotten early")
		o.registerPublisher(f)
	})
	o.registerStream(f, false)
	f.Section("RAW stream", func() {
		f.BoolVar(&o.provision, "provision", true, "create the streams that are missing at start-up (existing ones are changed by wahook migrate)")
	})
}

// registerStream defines the flags of the RAW stream; withAckTimeout also
// --ack-timeout, which its duplicate window must cover (for migrate, which
// has no endpoint).
func (o *ingestOptions) registerStream(f *flags, withAckTimeout bool) {
	o.stream = ingest.DefaultStreamConfig()
	if withAckTimeout {
		o.cfg = ingest.DefaultConfig()
	}
	f.Section("RAW stream", func() {
		f.IntVar(&o.stream.Replicas, "raw-replicas", o.stream.Replicas, "replicas of the RAW stream (1 on one machine, 3 on a cluster)")
		f.DurationVar(&o.stream.MaxAge, "raw-max-age", o.stream.MaxAge, "how long the RAW stream keeps bodies")
		f.Int64Var(&o.stream.MaxBytes, "raw-max-bytes", o.stream.MaxBytes, "size cap of the RAW stream in bytes (-1: none); when it is full the oldest bodies go, read by stage 1 or not: size it for the longest ClickHouse outage to ride out")
		f.DurationVar(&o.stream.DuplicateWindow, "raw-duplicate-window", o.stream.DuplicateWindow,
			"how long the RAW stream remembers a body's id (copies published at once, resends after a lost ack; at least --ack-timeout; each id costs nats-server ~300 B)")
		if withAckTimeout {
			f.DurationVar(&o.cfg.AckTimeout, "ack-timeout", o.cfg.AckTimeout, "the endpoints' longest wait for JetStream's ack: the duplicate window must be at least this")
		}
	})
}

// build turns the flags into validated configuration.
func (o *ingestOptions) build() error {
	apps, err := parseAppSecrets(o.appSecrets)
	if err != nil {
		return err
	}
	o.cfg.Apps = apps
	if err := o.cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := o.stream.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := o.stream.CheckAckTimeout(o.cfg.AckTimeout); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// parseAppSecrets reads --app-secret values: "SECRET" is a secret of the
// default app (/webhook), "NAME=SECRET" one of app NAME (/webhook/NAME).
//
// An error names a value by its place among them, never by its text: what
// precedes its "=" may be most of a secret (one in base64 ends in "=").
func parseAppSecrets(values []string) (map[string][][]byte, error) {
	apps := map[string][][]byte{}
	for i, v := range values {
		app, secret := schema.DefaultApp, v
		if name, s, ok := strings.Cut(v, "="); ok && schema.ValidAppName(name) {
			app, secret = name, s
		}
		if secret == "" {
			return nil, fmt.Errorf("%w: --app-secret value %d of %d has an empty secret (NAME= with nothing after it, or nothing at all); the value is not shown, as it may hold a secret", errUsage, i+1, len(values))
		}
		apps[app] = append(apps[app], []byte(secret))
	}
	if len(apps) == 0 {
		return nil, fmt.Errorf("%w: no app secret: set --app-secret or %s", errUsage, EnvName("app-secret"))
	}
	return apps, nil
}

// natsOptions are the flags of a connection to external NATS.
type natsOptions struct {
	urls, creds, tlsCA, tlsCert, tlsKey string
}

func (o *natsOptions) register(f *flags, urlUsage string) {
	f.Section("NATS", func() {
		f.StringVar(&o.urls, "nats-url", "", urlUsage+" (secret: may hold credentials)")
		f.Secret("nats-url")
		f.StringVar(&o.creds, "nats-creds", "", "NATS credentials file")
		f.StringVar(&o.tlsCA, "nats-tls-ca", "", "CA certificate file to verify the NATS servers")
		f.StringVar(&o.tlsCert, "nats-tls-cert", "", "client certificate file for NATS (mutual TLS)")
		f.StringVar(&o.tlsKey, "nats-tls-key", "", "client key file for NATS (mutual TLS)")
	})
}

func (o *natsOptions) validate() error {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return fmt.Errorf("%w: --nats-tls-cert and --nats-tls-key go together", errUsage)
	}
	return nil
}

// logOptions are the logging flags.
type logOptions struct{ level, format string }

func (o *logOptions) register(f *flags) {
	f.Section("logging", func() {
		f.StringVar(&o.level, "log-level", "info", "debug, info, warn or error")
		f.StringVar(&o.format, "log-format", "json", "json or console")
	})
}

// durationOrAlways parses "always" or a duration, for --jetstream-sync.
func durationOrAlways(s string) (d time.Duration, always bool, err error) {
	switch s {
	case "", "default":
		return 0, false, nil
	case "always":
		return 0, true, nil
	}
	d, err = time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, false, fmt.Errorf("%w: --jetstream-sync %q: use always, default or a positive duration", errUsage, s)
	}
	return d, false, nil
}

// kvReplicas is --kv-replicas: the replicas of the KV buckets (the numbers
// map, the pacing signals and cool-downs, the funnel's lease).
type kvReplicas struct{ n int }

func (k *kvReplicas) register(f *flags, fallback string) {
	f.Section("NATS", func() {
		f.IntVar(&k.n, "kv-replicas", 0, "replicas of the KV buckets (wahook_numbers, wahook_numbers_pending, wahook_pacing, wahook_pair_cooldown, wahook_accounts, wahook_leases) when they are made; wahook migrate applies a changed count to existing ones (0: "+fallback+")")
	})
}

// or is the count, or def when none was given.
func (k kvReplicas) or(def int) int {
	if k.n > 0 {
		return k.n
	}
	return def
}
