package api

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/wahook/wahook/schema"
)

// Tiers are the throughput tiers, in messages per second (inbound and
// outbound together), and the per-number overrides of the configuration.
type Tiers struct {
	Default     int            `json:"default"`     // 80
	Upgraded    int            `json:"upgraded"`    // 1,000 after THROUGHPUT_UPGRADE
	Coexistence int            `json:"coexistence"` // 20 for numbers also on the Business app
	Overrides   map[string]int `json:"overrides,omitempty"`
}

// DefaultTiers are Meta's tiers (docs/meta-webhooks.md 9.1).
func DefaultTiers() Tiers {
	return Tiers{Default: schema.TierDefaultMPS, Upgraded: schema.TierUpgradedMPS, Coexistence: schema.TierCoexistenceMPS}
}

// Tier sources.
const (
	TierDefault           = schema.TierSourceDefault
	TierThroughputUpgrade = schema.TierSourceThroughputUpgrade
	TierCoexistence       = schema.TierSourceCoexistence
	TierOverride          = schema.TierSourceOverride
)

// maintenanceWindow is how long sends may return 131057 after a
// THROUGHPUT_UPGRADE (Meta: up to a minute).
const maintenanceWindow = schema.MaintenanceWindow

// Change is one management event of a number or of its account.
type Change struct {
	Time     time.Time `json:"time"`
	Field    string    `json:"field"`
	Event    string    `json:"event"`
	OldValue string    `json:"old_value,omitempty"`
	NewValue string    `json:"new_value,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// NumberState is what the webhooks say of a business number.
type NumberState struct {
	PhoneNumberID          string     `json:"phone_number_id"`
	DisplayPhoneNumber     string     `json:"display_phone_number,omitempty"`
	WabaID                 string     `json:"waba_id,omitempty"`
	TierMPS                int        `json:"tier_mps"`
	TierSource             string     `json:"tier_source"`
	Quality                string     `json:"quality"` // flagged, unflagged (after a FLAGGED), or unknown
	MessagingLimit         string     `json:"messaging_limit,omitempty"`
	PreviousMessagingLimit string     `json:"previous_messaging_limit,omitempty"`
	LastThroughputUpgrade  *time.Time `json:"last_throughput_upgrade,omitempty"`
	MaintenanceFrom        *time.Time `json:"maintenance_from,omitempty"`
	MaintenanceUntil       *time.Time `json:"maintenance_until,omitempty"`
	LastChange             *time.Time `json:"last_change,omitempty"`
	RecentChanges          []Change   `json:"recent_changes"`

	upgradedAt time.Time
}

// Numbers lists business numbers and their state.
type Numbers struct {
	Numbers []NumberState `json:"numbers"`
	// Pending are the display numbers whose number-level events (quality,
	// limits, throughput upgrades, names) came before any message webhook
	// paired them with a phone number id. Their events are stored, and
	// apply to the number (tier, quality, limit, pacing) as soon as it is
	// learned. Listed only when the query names no number.
	Pending []PendingNumber `json:"pending"`
}

// PendingNumber is a display number whose number-level events wait for its
// phone number id.
type PendingNumber struct {
	DisplayPhoneNumber string    `json:"display_phone_number"`
	WabaID             string    `json:"waba_id,omitempty"`
	Events             int       `json:"events"`
	FirstChange        time.Time `json:"first_change"`
	LastChange         time.Time `json:"last_change"`
	RecentChanges      []Change  `json:"recent_changes"` // newest first
}

// tierAt is the number's tier at t, and its source.
func (s *Store) tierAt(n *NumberState, coexistence bool, t time.Time) (int, string) {
	if v, ok := s.tiers.Overrides[n.PhoneNumberID]; ok {
		return v, TierOverride
	}
	if coexistence {
		return s.tiers.Coexistence, TierCoexistence
	}
	if !n.upgradedAt.IsZero() && !t.Before(n.upgradedAt) {
		return s.tiers.Upgraded, TierThroughputUpgrade
	}
	return s.tiers.Default, TierDefault
}

// Numbers gives the state of the numbers in q.PhoneNumberIDs, or of every
// number that has statuses or number events in the range, as of its end
// (q.To): the events after it are not applied, nor listed. recent is how
// many changes each lists, newest first.
func (s *Store) Numbers(ctx context.Context, q Query, recent int) (*Numbers, error) {
	if q.scoped && len(q.WabaIDs) == 0 {
		q.WabaIDs = q.scopeWabas // a tenant sees its WABAs' numbers only
	}
	states := map[string]*NumberState{}
	get := func(id string) *NumberState {
		n := states[id]
		if n == nil {
			n = &NumberState{PhoneNumberID: id, Quality: "unknown", RecentChanges: []Change{}}
			states[id] = n
		}
		return n
	}
	// The numbers answered: those asked for, and those with statuses or
	// number events in the range (the events before it only make their
	// state).
	listed := map[string]bool{}
	for _, id := range q.PhoneNumberIDs {
		get(id)
		listed[id] = true
	}

	// Numbers with traffic in the range.
	var w where
	w.add("minute >= toDateTime(?) AND minute < toDateTime(?)", unix(q.From.Truncate(time.Minute)), unix(q.To))
	w.in("phone_number_id", q.PhoneNumberIDs)
	w.in("waba_id", q.WabaIDs)
	rows, err := s.conn.Query(ctx, fmt.Sprintf("SELECT DISTINCT phone_number_id, waba_id FROM %s WHERE %s",
		s.table("status_counts_by_minute"), w.sql()), w.args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	for rows.Next() {
		var id, waba string
		if err := rows.Scan(&id, &waba); err != nil {
			rows.Close()
			return nil, queryError(ctx, err)
		}
		if id != "" {
			get(id).WabaID = waba
			listed[id] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, queryError(ctx, err)
	}

	// Number events (quality, limits, throughput upgrades, names), each once.
	var mw where
	mw.add("kind = 'number' AND phone_number_id != '' AND event_time < toDateTime(?)", unix(q.To))
	mw.in("phone_number_id", q.PhoneNumberIDs)
	mw.in("waba_id", q.WabaIDs)
	rows, err = s.conn.Query(ctx, fmt.Sprintf(`SELECT phone_number_id, display_phone_number, waba_id, field, event,
       old_value, new_value, reason, event_time
FROM %s WHERE %s
ORDER BY phone_number_id, event_time, event_id
LIMIT 1 BY event_id`, s.table("management_events"), mw.sql()), mw.args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	for rows.Next() {
		var id, display, waba string
		var c Change
		if err := rows.Scan(&id, &display, &waba, &c.Field, &c.Event, &c.OldValue, &c.NewValue, &c.Reason, &c.Time); err != nil {
			rows.Close()
			return nil, queryError(ctx, err)
		}
		c.Time = c.Time.UTC()
		n := get(id)
		if !c.Time.Before(q.From) {
			listed[id] = true
		}
		if display != "" {
			n.DisplayPhoneNumber = display
		}
		if waba != "" {
			n.WabaID = waba
		}
		n.apply(c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, queryError(ctx, err)
	}

	// Coexistence: the number is also on the Business app when its echoes,
	// history or contact-book syncs come in.
	coexist := map[string]bool{}
	var cw where
	cw.add("field IN ('smb_message_echoes', 'history', 'smb_app_state_sync') AND phone_number_id != '' AND event_time < toDateTime(?)", unix(q.To))
	cw.in("phone_number_id", q.PhoneNumberIDs)
	ids, err := s.stringColumn(ctx, fmt.Sprintf("SELECT DISTINCT phone_number_id FROM %s WHERE %s", s.table("management_events"), cw.sql()), cw.args...)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		coexist[id] = true
	}

	out := &Numbers{Numbers: []NumberState{}, Pending: []PendingNumber{}}
	if len(q.PhoneNumberIDs) == 0 {
		if out.Pending, err = s.pendingNumbers(ctx, q.WabaIDs, recent); err != nil {
			return nil, err
		}
	}
	for _, n := range states {
		if !listed[n.PhoneNumberID] {
			continue
		}
		if len(q.WabaIDs) > 0 && !contains(q.WabaIDs, n.WabaID) {
			continue
		}
		coexist := coexist[n.PhoneNumberID]
		n.TierMPS, n.TierSource = s.tierAt(n, coexist, q.To)
		// Newest first, at most recent.
		sort.SliceStable(n.RecentChanges, func(i, j int) bool { return n.RecentChanges[i].Time.After(n.RecentChanges[j].Time) })
		if len(n.RecentChanges) > recent {
			n.RecentChanges = n.RecentChanges[:recent]
		}
		out.Numbers = append(out.Numbers, *n)
	}
	sort.Slice(out.Numbers, func(i, j int) bool { return out.Numbers[i].PhoneNumberID < out.Numbers[j].PhoneNumberID })
	return out, nil
}

// pendingNumbers lists the display numbers (of wabas, if any) whose number
// events have no copy with a phone number id yet, with at most recent
// changes each.
func (s *Store) pendingNumbers(ctx context.Context, wabas []string, recent int) ([]PendingNumber, error) {
	var w where
	w.add("kind = 'number' AND phone_number_id = '' AND display_phone_number != ''")
	w.in("waba_id", wabas)
	// The events applied since have a copy with the id (stage 1 stores it
	// again under the same event id).
	w.add(fmt.Sprintf("event_id NOT IN (SELECT event_id FROM %s WHERE kind = 'number' AND phone_number_id != '')", s.table("management_events")))
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`SELECT display_phone_number, waba_id, field, event, old_value, new_value, reason, event_time
FROM %s WHERE %s
ORDER BY display_phone_number, event_time, event_id
LIMIT 1 BY event_id`, s.table("management_events"), w.sql()), w.args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	out := []PendingNumber{}
	for rows.Next() {
		var display, waba string
		var c Change
		if err := rows.Scan(&display, &waba, &c.Field, &c.Event, &c.OldValue, &c.NewValue, &c.Reason, &c.Time); err != nil {
			return nil, queryError(ctx, err)
		}
		c.Time = c.Time.UTC()
		if len(out) == 0 || out[len(out)-1].DisplayPhoneNumber != display {
			out = append(out, PendingNumber{DisplayPhoneNumber: display, FirstChange: c.Time})
		}
		p := &out[len(out)-1]
		if waba != "" {
			p.WabaID = waba
		}
		p.Events++
		p.LastChange = c.Time
		p.RecentChanges = append(p.RecentChanges, c)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(ctx, err)
	}
	for i := range out {
		c := out[i].RecentChanges
		slices.Reverse(c)
		out[i].RecentChanges = c[:min(len(c), recent)]
	}
	return out, nil
}

// apply folds one change, in the order of event time, into the state.
func (n *NumberState) apply(c Change) {
	t := c.Time
	n.LastChange = &t
	n.RecentChanges = append(n.RecentChanges, c)
	if c.Field != "phone_number_quality_update" {
		return
	}
	switch strings.ToUpper(c.Event) {
	case "FLAGGED":
		n.Quality = "flagged"
	case "UNFLAGGED":
		n.Quality = "unflagged"
	case "THROUGHPUT_UPGRADE":
		n.LastThroughputUpgrade = &t
		if n.upgradedAt.IsZero() {
			n.upgradedAt = t
		}
		end := t.Add(maintenanceWindow)
		n.MaintenanceFrom, n.MaintenanceUntil = &t, &end
	}
	if c.NewValue != "" {
		n.PreviousMessagingLimit, n.MessagingLimit = n.MessagingLimit, c.NewValue
		if c.OldValue != "" {
			n.PreviousMessagingLimit = c.OldValue
		}
	}
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// WabaNumbers lists the phone number ids that the webhooks place under
// the WABAs wabas (by their statuses, inbound messages and number events)
// and not under another WABA since: a number moved to another WABA (Meta's
// phone number migration) is the new WABA's from its first webhook there,
// and no longer the old one's, whose tenant would otherwise see its
// signal and send results for as long as its old rows are kept. Times are
// compared by the minute (statuses are counted by the minute): a number
// whose latest webhooks under two WABAs fall in the same minute is both
// WABAs' until a later one says which.
func (s *Store) WabaNumbers(ctx context.Context, wabas []string) ([]string, error) {
	if len(wabas) == 0 {
		return nil, nil
	}
	var mine where
	mine.in("waba_id", wabas)
	tables := []struct{ table, at string }{
		{"status_counts_by_minute", "minute"},
		{"inbound_messages", "toStartOfMinute(event_time)"},
		{"management_events", "toStartOfMinute(event_time)"},
	}
	// The numbers seen under wabas: in the query as a subquery, so that
	// its size grows with the WABAs, not with their numbers.
	var seen []string
	var seenArgs []any
	for _, t := range tables {
		seen = append(seen, fmt.Sprintf("SELECT phone_number_id FROM %s WHERE %s AND phone_number_id != ''", s.table(t.table), mine.sql()))
		seenArgs = append(seenArgs, mine.args...)
	}
	// Of those, the numbers whose latest webhook under any WABA is one
	// under wabas.
	var parts []string
	var args []any
	for _, t := range tables {
		parts = append(parts, fmt.Sprintf("SELECT phone_number_id, waba_id, max(%s) AS at FROM %s WHERE phone_number_id IN (%s) AND waba_id != '' GROUP BY phone_number_id, waba_id",
			t.at, s.table(t.table), strings.Join(seen, " UNION ALL ")))
		args = append(args, seenArgs...)
	}
	args = append(args, mine.args...)
	out, err := s.stringColumn(ctx, "SELECT phone_number_id FROM ("+strings.Join(parts, " UNION ALL ")+
		") GROUP BY phone_number_id HAVING max(at) = maxIf(at, "+mine.sql()+")", args...)
	sort.Strings(out)
	return out, err
}

// stringColumn answers a query of one string column.
func (s *Store) stringColumn(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, queryError(ctx, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, queryError(ctx, err)
		}
		out = append(out, v)
	}
	return out, queryError(ctx, rows.Err())
}
