package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wahook/wahook/schema"
)

// Accounts is the answer of /api/v1/accounts: the WABAs' states that Meta's
// account_update events set (the wahook_accounts bucket), those that
// cannot send first.
type Accounts struct {
	Accounts []Account `json:"accounts"`
}

// Account is one WABA's state, with what its numbers may send now.
type Account struct {
	schema.AccountState
	// BusinessInitiated and Replies say whether the WABA's numbers may send
	// business-initiated messages (templates, campaigns) and replies to
	// customers who wrote first, by the pacer's rule
	// (schema.AccountState.Blocks).
	BusinessInitiated SendState `json:"business_initiated"`
	Replies           SendState `json:"replies"`
}

// SendState is whether a kind of message may be sent now, and if not, why
// and until when (absent: until Meta says otherwise).
type SendState struct {
	Allowed bool       `json:"allowed"`
	Reason  string     `json:"reason,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
}

func sendState(st *schema.AccountState, now time.Time, replies bool) SendState {
	until, reason, blocked := st.Blocks(now, replies)
	s := SendState{Allowed: !blocked, Reason: reason}
	if blocked && !until.IsZero() {
		u := until.UTC()
		s.Until = &u
	}
	return s
}

// errNoAccounts answers /api/v1/accounts on an API without NATS.
var errNoAccounts = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
	Message: "the WABA states are not available: this API runs without NATS (--nats-url)"}

// accountParams are /api/v1/accounts' parameters.
var accountParams = []param{stringsParam("waba_id", "the WABAs to list (default: every one the token sees)", func(q *Query) *[]string { return &q.WabaIDs })}

// accounts answers /api/v1/accounts[?waba_id=]: every WABA's state the
// token may see (a scoped token, its WABAs'), those whose business-initiated
// messages or replies are blocked first, then by WABA id.
func (s *Server) accounts(c *fiber.Ctx) error {
	if s.cfg.Accounts == nil {
		return s.writeError(c, errNoAccounts)
	}
	values := url.Values{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { values.Add(string(k), string(v)) })
	q, err := parseQuery(accountParams, values, s.now())
	if err != nil {
		return s.writeError(c, err)
	}
	t := tenantOf(c)
	for _, w := range q.WabaIDs {
		if !t.ownsWaba(w) {
			return s.writeError(c, notFound("waba_id"))
		}
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.QueryTimeout)
	defer cancel()
	out := Accounts{Accounts: []Account{}}
	now := time.Now()
	err = s.currentValues(ctx, s.cfg.Accounts, "accounts", func(e jetstream.KeyValueEntry) error {
		var st schema.AccountState
		if json.Unmarshal(e.Value(), &st) != nil || st.WabaID == "" {
			return nil
		}
		if !t.ownsWaba(st.WabaID) || (len(q.WabaIDs) > 0 && !slices.Contains(q.WabaIDs, st.WabaID)) {
			return nil
		}
		out.Accounts = append(out.Accounts, Account{AccountState: st,
			BusinessInitiated: sendState(&st, now, false), Replies: sendState(&st, now, true)})
		return nil
	})
	if err != nil {
		return s.writeError(c, err)
	}
	blocked := func(a Account) bool { return !a.BusinessInitiated.Allowed || !a.Replies.Allowed }
	sort.Slice(out.Accounts, func(i, j int) bool {
		a, b := out.Accounts[i], out.Accounts[j]
		if blocked(a) != blocked(b) {
			return blocked(a)
		}
		return a.WabaID < b.WabaID
	})
	return s.sendJSON(c, out)
}
