package pacer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/processor/stage2"
	"github.com/wahook/wahook/schema"
)

// account publishes an account_update event of the WABA on EVENTS, as
// stage 1 makes it: stage 2 writes the WABA's state to wahook_accounts.
func (e *env) account(waba string, at time.Time, raw string) {
	e.t.Helper()
	event := raw[strings.Index(raw, `"event":"`)+len(`"event":"`):]
	event = event[:strings.IndexByte(event, '"')]
	e.publish(schema.KindAccount, "", schema.ManagementRow{
		EventID: fmt.Sprintf("acct-%d", e.seq.Add(1)), Kind: schema.KindAccount, Field: "account_update", EventTime: at,
		WabaID: waba, PhoneNumberID: schema.NoNumber, Event: event, Raw: raw,
	})
}

// stopped reports whether Wait answers a StopError for the number, and
// the error.
func stopped(p *pacer.Pacer, id string) (*pacer.StopError, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.Wait(ctx, id, "")
	var se *pacer.StopError
	if errors.As(err, &se) {
		return se, err
	}
	return nil, err
}

// TestWABABanAndRestrictions: Meta's ban of a WABA stops every number of
// it that the pacer knows, for senders of both kinds, until Meta
// reinstates it; a restriction of business-initiated messages stops them
// for a sender of such messages until it expires, and not for one that
// sends only replies. A Wait held by a pause when the ban comes is
// answered the stop at once.
func TestWABABanAndRestrictions(t *testing.T) {
	const a, b, c, d = "100000000000201", "100000000000202", "100000000000203", "100000000000204"
	e := newEnv(t, nil)
	p := e.pacer(func(c *pacer.Config) { c.NoReport = true })
	replies := e.pacer(func(c *pacer.Config) { c.NoReport = true; c.Replies = true })
	for _, q := range []*pacer.Pacer{p, replies} {
		for id, waba := range map[string]string{a: "waba-1", b: "waba-1", c: "waba-2"} {
			q.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: id, WabaID: waba, MessageID: "wamid.1"}})
		}
	}
	for _, id := range []string{a, b, c} {
		if se, err := stopped(p, id); se != nil || err != nil {
			t.Fatalf("%s before any account event: %v", id, err)
		}
	}
	// b is held by a pause when the ban comes.
	if err := e.putSignal(schema.PacingSignal{PhoneNumberID: b, UpdatedAt: time.Now().UTC(), TierMPS: 80, Advice: schema.AdvicePause,
		MaintenanceUntil: new(time.Now().Add(time.Minute).UTC()), Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	e.eventually("b paused", func() (bool, string) {
		s, ok := p.Signal(b)
		return ok && s.Advice == schema.AdvicePause, fmt.Sprint(s.Advice)
	})
	held := make(chan error, 1)
	go func() { held <- p.Wait(context.Background(), b, "") }()
	e.eventually("b's Wait held", func() (bool, string) { return pacer.Blocked(p) == 1, fmt.Sprint(pacer.Blocked(p)) })

	now := time.Now().UTC().Truncate(time.Second)
	e.account("waba-1", now, `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE","waba_ban_date":"December 7, 2026"}}`)
	select {
	case err := <-held:
		var se *pacer.StopError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, "disabled") {
			t.Errorf("the Wait held by a pause when the ban came: %v, want a stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the Wait held by a pause was not answered when the ban came")
	}
	for _, q := range []*pacer.Pacer{p, replies} {
		e.eventually("a stopped by the ban", func() (bool, string) { se, err := stopped(q, a); return se != nil, fmt.Sprint(err) })
		se, _ := stopped(q, a)
		if !strings.Contains(se.Reason, "waba-1 disabled") || se.Until.Before(time.Now().Add(14*time.Minute)) {
			t.Errorf("ban's stop: until %v, %q", se.Until, se.Reason)
		}
		if se, err := stopped(q, c); se != nil || err != nil {
			t.Errorf("a number of another WABA: %v", err)
		}
	}

	// A number no send result named, whose signal names waba-1.
	const f = "100000000000205"
	if err := e.putSignal(schema.PacingSignal{PhoneNumberID: f, WabaID: "waba-1", UpdatedAt: time.Now().UTC(), TierMPS: 80,
		Advice: schema.AdviceOK, RecommendedMPS: 72}); err != nil {
		t.Fatal(err)
	}
	e.eventually("f stopped by its signal's WABA's ban", func() (bool, string) { se, err := stopped(p, f); return se != nil, fmt.Sprint(err) })
	// A result that names another WABA (a sender's stale configuration)
	// does not replace Meta's.
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: f, WabaID: "waba-3", MessageID: "wamid.3"}})
	if se, _ := stopped(p, f); se == nil {
		t.Error("a send result naming another WABA replaced the signal's")
	}

	// waba-2 restricted from business-initiated messages for an hour.
	until := now.Add(time.Hour)
	e.account("waba-2", now, `{"event":"ACCOUNT_RESTRICTION","restriction_info":[{"restriction_type":"RESTRICTED_BIZ_INITIATED_MESSAGING","expiration":`+fmt.Sprint(until.Unix())+`}]}`)
	e.eventually("c stopped by the restriction", func() (bool, string) { se, err := stopped(p, c); return se != nil, fmt.Sprint(err) })
	if se, _ := stopped(p, c); !se.Until.Equal(until) || !strings.Contains(se.Reason, schema.RestrictBusinessInitiated) {
		t.Errorf("restriction's stop: until %v (want %v), %q", se.Until, until, se.Reason)
	}
	if se, err := stopped(replies, c); se != nil || err != nil {
		t.Errorf("a sender of replies only, under a restriction of business-initiated messages: %v", err)
	}
	// A number whose WABA the pacer learns after the state came.
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: d, WabaID: "waba-2", MessageID: "wamid.2"}})
	if se, _ := stopped(p, d); se == nil {
		t.Error("a number learned to be of a restricted WABA is not stopped")
	}

	// Reinstated: a and b send again; an older event that comes late
	// changes nothing.
	e.account("waba-1", now.Add(2*time.Second), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"REINSTATE"}}`)
	e.account("waba-1", now.Add(-time.Minute), `{"event":"DISABLED_UPDATE","ban_info":{"waba_ban_state":"DISABLE"}}`)
	e.eventually("a reinstated", func() (bool, string) { se, err := stopped(p, a); return se == nil && err == nil, fmt.Sprint(err) })
	e.eventually("stage 2 has taken every account event", func() (bool, string) {
		info, err := e.js.Consumer(context.Background(), schema.StreamEvents, stage2.DefaultConfig().Durable+"_accounts")
		if err != nil {
			return false, err.Error()
		}
		i, err := info.Info(context.Background())
		return err == nil && i.NumPending == 0 && i.NumAckPending == 0 && i.Delivered.Consumer >= 4, fmt.Sprint(i, err)
	})
	if se, err := stopped(replies, a); se != nil || err != nil {
		t.Errorf("after the reinstatement and a late older ban: %v", err)
	}
	if s := p.Stats(); s.Stops < 3 {
		t.Errorf("stops counted: %d", s.Stops)
	}
}

// A pacer whose wahook_accounts is deleted forgets its states, and one
// made again is watched anew: a watch of the old bucket saw nothing of it,
// and a ban held for good.
func TestAccountsBucketRemade(t *testing.T) {
	const a = "100000000000211"
	pacer.SetBucketCheck(t, 200*time.Millisecond)
	e := newEnv(t, nil)
	p := e.pacer(func(c *pacer.Config) { c.NoReport = true })
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: a, WabaID: "waba-9", MessageID: "wamid.1"}})
	ctx := context.Background()
	put := func() {
		t.Helper()
		kv, err := e.js.KeyValue(ctx, schema.BucketAccounts)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(schema.AccountState{Version: schema.AccountVersion, WabaID: "waba-9", BanState: schema.BanDisable})
		if _, err := kv.Put(ctx, schema.AccountKey("waba-9"), b); err != nil {
			t.Fatal(err)
		}
	}
	put()
	e.eventually("a stopped", func() (bool, string) { se, err := stopped(p, a); return se != nil, fmt.Sprint(err) })
	if err := e.js.DeleteKeyValue(ctx, schema.BucketAccounts); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	e.eventually("a sends once the bucket is gone", func() (bool, string) { se, err := stopped(p, a); return se == nil && err == nil, fmt.Sprint(err) })
	// Not at the first answers that say so: a server restarting, or a
	// stream's leader moving, says so for a moment (three tries in a row
	// were 0.8 s).
	if d := time.Since(deleted); d < 2*time.Second {
		t.Errorf("the ban forgotten %v after the bucket was deleted; want 2 s or more", d)
	}
	if _, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: schema.BucketAccounts}); err != nil {
		t.Fatal(err)
	}
	put()
	e.eventually("a stopped by the bucket made again", func() (bool, string) { se, err := stopped(p, a); return se != nil, fmt.Sprint(err) })
}

// A send result's WABA id that none of Meta's can be (thousands of
// characters) is not kept as the number's WABA: the pacer held it, in
// three maps, for as long as it ran.
func TestResultImpossibleWABA(t *testing.T) {
	e := newEnv(t, nil)
	p := e.pacer(func(c *pacer.Config) { c.NoReport = true })
	const id, waba = "100000000000301", "209374655180223"
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: id, WabaID: strings.Repeat("2", 5000), MessageID: "wamid.1"}})
	if w := pacer.WABAOf(p, id); w != "" {
		t.Errorf("the number's WABA after an impossible one: %d bytes, want none", len(w))
	}
	p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: id, WabaID: waba, MessageID: "wamid.2"}})
	if w := pacer.WABAOf(p, id); w != waba {
		t.Errorf("the number's WABA: %q, want %s", w, waba)
	}
}
