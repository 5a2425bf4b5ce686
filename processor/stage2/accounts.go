package stage2

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/wahook/wahook/internal/kvbucket"
	"github.com/wahook/wahook/internal/throttle"
	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/meta"
)

// This file keeps wahook_accounts: each WABA's last ban state and
// restrictions, from the account_update events on EVENTS. Account events
// carry no number, so they are not the numbers' consumer's: a durable
// consumer of their own subject reads them in every stage 2 instance
// (Config.Durable and "_accounts": the instances of one durable name share
// it, each event going to one of them), and each write is a compare-and-set
// of the WABA's key, so that two instances never undo each other's.

// The account events' subject, and what stage 2 reads of one.
var accountsSubject = schema.EventsSubject("", schema.KindAccount)

const (
	// accountsBatch is how many account events one fetch takes; they are
	// few.
	accountsBatch = 64
	// accountsFetchWait is how long a fetch waits for events.
	accountsFetchWait = 5 * time.Second
	// accountsRetry is the delay of an event whose state could not be
	// written.
	accountsRetry = time.Second
	// accountsCAS is how many times a write lost to another instance's is
	// tried again before the event is nak'ed.
	accountsCAS = 5
)

// Meta's account_update events that set a WABA's state.
const (
	eventDisabledUpdate     = "DISABLED_UPDATE"
	eventAccountRestriction = "ACCOUNT_RESTRICTION"
)

// The results of an account event (wahook_stage2_account_events_total).
const (
	accountApplied   = "applied"   // the WABA's state changed
	accountUnchanged = "unchanged" // older than its state, or the same again
	accountIgnored   = "ignored"   // an account event that sets no state (partners, pricing, ...)
	accountBad       = "bad"       // not an account event it can decode
	accountFailed    = "failed"    // its state could not be written: nak'ed, tried again
)

// accountsConfig is the configuration of wahook_accounts.
func accountsConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      schema.BucketAccounts,
		Description: "wahook: each WABA's last ban state and restrictions from Meta (schema.AccountState)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

// accountEvent is what stage 2 reads of an account event.
type accountEvent struct {
	Kind schema.Kind `json:"kind"`
	V    int         `json:"v"`
	Row  struct {
		EventID   string    `json:"event_id"`
		EventTime time.Time `json:"event_time"`
		WabaID    string    `json:"waba_id"`
		Event     string    `json:"event"`
		Raw       string    `json:"raw"`
	} `json:"row"`
}

// runAccounts keeps wahook_accounts from the account events until ctx
// ends. A failure (NATS away, the consumer deleted) is logged and tried
// again: it only delays the states.
func (s *Stage2) runAccounts(ctx context.Context) {
	log := s.log.Named("accounts")
	durable := s.cfg.Durable + "_accounts"
	wait := restartMin
	var kv jetstream.KeyValue
	var cons jetstream.Consumer
	failures := throttle.Throttle{Every: 10 * time.Second}
	for ctx.Err() == nil {
		var err error
		if kv == nil {
			kv, err = kvbucket.Ensure(ctx, s.js, accountsConfig(s.cfg.Replicas))
		}
		if err == nil && cons == nil {
			cons, err = s.js.CreateOrUpdateConsumer(ctx, schema.StreamEvents, jetstream.ConsumerConfig{
				Durable:       durable,
				Description:   "wahook stage 2: account events, for " + schema.BucketAccounts,
				FilterSubject: accountsSubject,
				DeliverPolicy: jetstream.DeliverAllPolicy,
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       s.cfg.AckWait,
				MaxAckPending: 1000,
			})
		}
		if err == nil {
			err = s.fetchAccounts(ctx, cons, kv, log)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			wait = restartMin
			continue
		}
		// Made again, idempotently: a write fails without saying that its
		// bucket is gone, nor a fetch that its consumer is (a pull to a
		// deleted consumer ends with "consumer deleted" or no responders).
		kv = nil
		if errors.Is(err, errAccountsNotWritten) {
			// Its event comes back in a second: so does the loop, the
			// bucket opened (or made) again; the events behind it are not
			// held up longer.
			if n, due := failures.Note(); due {
				log.Warn("account events: a WABA state not written, retrying", zap.Error(err), zap.Int64("failures_since_last_line", n))
			}
			sleepCtx(ctx, accountsRetry)
			continue
		}
		cons = nil
		if n, due := failures.Note(); due {
			log.Warn("account events: retrying", zap.Error(err), zap.Duration("in", wait), zap.Int64("failures_since_last_line", n))
		}
		sleepCtx(ctx, wait)
		wait = min(2*wait, restartMax)
	}
}

// errAccountsNotWritten is fetchAccounts' error when a state could not be
// written (its event nak'ed): the bucket is opened again, made again if it
// is gone.
var errAccountsNotWritten = errors.New("a WABA state could not be written to " + schema.BucketAccounts)

// fetchAccounts applies one batch of account events. It fails when the
// batch could not be read, or a state not written.
func (s *Stage2) fetchAccounts(ctx context.Context, cons jetstream.Consumer, kv jetstream.KeyValue, log *zap.Logger) error {
	fctx, cancel := context.WithTimeout(ctx, accountsFetchWait)
	defer cancel()
	batch, err := cons.Fetch(accountsBatch, jetstream.FetchContext(fctx))
	if err != nil {
		return err
	}
	failed := false
	for msg := range batch.Messages() {
		res := s.applyAccount(ctx, kv, msg.Data(), log)
		s.m.accountEvents.WithLabelValues(res).Inc()
		if res == accountFailed {
			failed = true
			if err := msg.NakWithDelay(accountsRetry); err != nil && ctx.Err() == nil {
				log.Debug("nak", zap.Error(err))
			}
			continue
		}
		if err := msg.Ack(); err != nil && ctx.Err() == nil {
			log.Debug("ack", zap.Error(err))
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	if failed {
		return errAccountsNotWritten
	}
	return nil
}

// applyAccount folds one account event into its WABA's state in kv, and
// reports the result.
func (s *Stage2) applyAccount(ctx context.Context, kv jetstream.KeyValue, data []byte, log *zap.Logger) string {
	var ev accountEvent
	if err := json.Unmarshal(data, &ev); err != nil || ev.V != 1 || ev.Kind != schema.KindAccount {
		log.Warn("an account event that is not one", zap.Error(err))
		return accountBad
	}
	r := &ev.Row
	event := strings.ToUpper(r.Event)
	if event != eventDisabledUpdate && event != eventAccountRestriction {
		return accountIgnored
	}
	if r.WabaID == "" || r.EventTime.IsZero() {
		log.Warn("an account event without its WABA or time", zap.String("event_id", r.EventID), zap.String("event", event))
		return accountBad
	}
	if !meta.ValidWabaID(r.WabaID) {
		// Published before the decoder refused such ids: its key would
		// close the connection (nats-server's control line), or name
		// another WABA's.
		log.Warn("an account event whose WABA id is impossible", zap.String("event_id", r.EventID), zap.Int("waba_id_bytes", len(r.WabaID)))
		return accountBad
	}
	var u meta.AccountUpdate
	if err := json.Unmarshal([]byte(r.Raw), &u); err != nil {
		log.Warn("an account event whose value is not JSON", zap.String("event_id", r.EventID), zap.Error(err))
		return accountBad
	}
	key := schema.AccountKey(r.WabaID)
	for try := 0; try < accountsCAS; try++ {
		st := schema.AccountState{Version: schema.AccountVersion, WabaID: r.WabaID}
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &st); err != nil || st.WabaID != r.WabaID {
				// Not a state of this WABA: written over.
				st = schema.AccountState{Version: schema.AccountVersion, WabaID: r.WabaID}
			}
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		default:
			s.m.writeFails.WithLabelValues(schema.BucketAccounts).Inc()
			return accountFailed
		}
		if !mergeAccount(&st, r.EventID, r.EventTime, &u) {
			return accountUnchanged
		}
		st.Version, st.UpdatedAt = schema.AccountVersion, s.cfg.Now().UTC()
		value, err := json.Marshal(st)
		if err != nil {
			log.Warn("an account event whose state cannot be written", zap.String("event_id", r.EventID), zap.Error(err))
			return accountBad
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, value)
		} else {
			_, err = kv.Update(ctx, key, value, rev)
		}
		if err == nil {
			log.Info("WABA state", zap.String("waba_id", r.WabaID), zap.String("event", event),
				zap.String("ban_state", st.BanState), zap.Int("restrictions", len(st.Restrictions)))
			return accountApplied
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			s.m.writeFails.WithLabelValues(schema.BucketAccounts).Inc()
			return accountFailed
		}
		// Another instance wrote the WABA meanwhile: read it again.
	}
	return accountFailed
}

// isWrongSequence reports the answer to an Update whose revision is no
// longer the key's last.
func isWrongSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// mergeAccount folds the event id of Meta's time at into st, and reports
// whether st changed. Each part (the ban, the restrictions) takes the
// newest event by Meta's time; of two in one second (Meta's times are
// seconds) the one with the greater id, so that any order of delivery,
// a redelivery or a replay among them, gives the same state.
func mergeAccount(st *schema.AccountState, id string, at time.Time, u *meta.AccountUpdate) bool {
	at = at.UTC()
	newer := func(cur *time.Time, curID string) bool {
		return cur == nil || at.After(*cur) || (at.Equal(*cur) && id > curID)
	}
	switch strings.ToUpper(u.Event) {
	case eventDisabledUpdate:
		if u.BanInfo == nil || !newer(st.BanAt, st.BanEvent) {
			return false
		}
		st.BanState, st.BanDate = schema.CutAccountText(strings.ToUpper(u.BanInfo.WABABanState)), schema.CutAccountText(u.BanInfo.WABABanDate)
		st.BanAt, st.BanEvent = &at, id
		return true
	case eventAccountRestriction:
		if !newer(st.RestrictionsAt, st.RestrictEvent) {
			return false
		}
		rs := make([]schema.AccountRestriction, 0, len(u.RestrictionInfo))
		for _, r := range u.RestrictionInfo {
			rs = append(rs, schema.AccountRestriction{Type: schema.CutAccountText(strings.ToUpper(r.RestrictionType)), Expires: expiration(r.Expiration)})
		}
		slices.SortFunc(rs, func(a, b schema.AccountRestriction) int { return strings.Compare(a.Type, b.Type) })
		if len(rs) > schema.MaxRestrictions {
			// The restrictions that stop sending are kept before any
			// other.
			others := schema.MaxRestrictions
			for _, r := range rs {
				if schema.BlockingRestriction(r.Type) {
					others--
				}
			}
			kept := rs[:0]
			for _, r := range rs {
				switch {
				case len(kept) == schema.MaxRestrictions:
				case schema.BlockingRestriction(r.Type):
					kept = append(kept, r)
				case others > 0:
					kept, others = append(kept, r), others-1
				}
			}
			rs = kept
		}
		st.Restrictions, st.RestrictionsAt, st.RestrictEvent = rs, &at, id
		return true
	}
	return false
}

// expiration reads a restriction's expiration: Unix seconds (a number or a
// string of one; past 10^11, the year 5138, milliseconds) or an RFC 3339
// time. One it cannot read, or none, or one outside the years 1970 to 9999,
// is nil: the restriction holds until Meta's next event.
func expiration(v meta.FlexString) *time.Time {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return nil
	}
	in := func(t time.Time) *time.Time {
		if t = t.UTC(); t.Year() < 1970 || t.Year() > 9999 {
			return nil
		}
		return &t
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
		if n > 1e11 {
			return in(time.UnixMilli(n))
		}
		return in(time.Unix(n, 0))
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05-0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return in(t)
		}
	}
	return nil
}

// The states of WABAs counted in wahook_stage2_wabas.
const (
	wabaDisabled           = "disabled"
	wabaScheduled          = "schedule_for_disable"
	wabaRestrictedBusiness = "restricted_business_initiated"
	wabaRestrictedReplies  = "restricted_customer_initiated"
)

// accountsCount is how often the WABA gauge is counted again without a
// change: restrictions expire by the clock. A variable for the tests.
var accountsCount = 30 * time.Second

// countAccounts keeps wahook_stage2_wabas from wahook_accounts until ctx
// ends: a watch of the bucket, counted at each change and every
// accountsCount. Every instance counts the whole bucket, so that any one
// scraped says it; a rule takes the max. A watch that fails is made
// again.
func (s *Stage2) countAccounts(ctx context.Context) {
	wait := restartMin
	for ctx.Err() == nil {
		started := time.Now()
		err := s.countAccountsOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > restartMax {
			wait = restartMin
		}
		s.log.Debug("WABA states: watching again", zap.Error(err), zap.Duration("in", wait))
		sleepCtx(ctx, wait)
		wait = min(2*wait, restartMax)
	}
}

func (s *Stage2) countAccountsOnce(ctx context.Context) error {
	kv, err := s.js.KeyValue(ctx, schema.BucketAccounts)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		s.setWABAGauge(nil) // gone: no WABA is in a state
	}
	if err != nil {
		return err
	}
	created, err := kvbucket.Created(ctx, kv)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer kvbucket.StopWatch(w)
	states := map[string]*schema.AccountState{}
	loaded := false
	tick := time.NewTicker(accountsCount)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			// A bucket deleted (and made again) ends nothing of this
			// watch, which would count its old states for good.
			if kvbucket.Recreated(ctx, kv, created) {
				return errors.New("the bucket " + schema.BucketAccounts + " was deleted or made again")
			}
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch of " + schema.BucketAccounts + " ended")
			}
			if e == nil {
				loaded = true
				break
			}
			st := new(schema.AccountState)
			if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), st) != nil {
				delete(states, e.Key())
			} else {
				states[e.Key()] = st
			}
		}
		if loaded {
			s.setWABAGauge(states)
		}
	}
}

// setWABAGauge counts the WABAs by state at now. One both disabled and
// restricted counts in each.
func (s *Stage2) setWABAGauge(states map[string]*schema.AccountState) {
	now := s.cfg.Now()
	counts := map[string]int{}
	for _, st := range states {
		switch strings.ToUpper(st.BanState) {
		case schema.BanDisable:
			counts[wabaDisabled]++
		case schema.BanScheduleToDisable:
			counts[wabaScheduled]++
		}
		if _, _, ok := st.Restricted(now, false); ok {
			counts[wabaRestrictedBusiness]++
		}
		if _, _, ok := st.Restricted(now, true); ok {
			counts[wabaRestrictedReplies]++
		}
	}
	for _, state := range []string{wabaDisabled, wabaScheduled, wabaRestrictedBusiness, wabaRestrictedReplies} {
		s.m.wabas.WithLabelValues(state).Set(float64(counts[state]))
	}
}
