package api

import (
	"fmt"
	"net/http"
	"sync"
)

// DefaultMaxNumbersPerToken is the default of Config.MaxNumbersPerToken.
const DefaultMaxNumbersPerToken = 1000

// tokenNumbers bounds the distinct phone number ids each token may bring
// in through send results: every number is state in stage 2, and a token
// is no proof that a number is the business's. A document that would take
// its token past the bound is refused whole. The sets live in this
// process: a restart forgets them, and each API instance counts its own.
type tokenNumbers struct {
	max  int
	mu   sync.Mutex
	seen map[string]map[string]struct{} // token id -> phone number ids
}

func newTokenNumbers(max int) *tokenNumbers {
	return &tokenNumbers{max: max, seen: map[string]map[string]struct{}{}}
}

// admit records the numbers of a document sent with token, or, when they
// would take it past the bound, records none and returns the error to
// answer.
func (g *tokenNumbers) admit(token string, ids []string) ([]string, *Error) {
	if g.max <= 0 {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	known := g.seen[token]
	var fresh []string
	for _, id := range ids {
		if _, ok := known[id]; ok {
			continue
		}
		dup := false
		for _, f := range fresh {
			if f == id {
				dup = true
				break
			}
		}
		if !dup {
			fresh = append(fresh, id)
		}
	}
	if len(known)+len(fresh) > g.max {
		return nil, &Error{Status: http.StatusForbidden, Code: CodeTooManyNumbers, Parameter: "results",
			Message: fmt.Sprintf("this token has reported %d phone number ids and may report at most %d (--api-max-numbers-per-token); nothing was stored", len(known), g.max)}
	}
	if known == nil && len(fresh) > 0 {
		known = make(map[string]struct{}, len(fresh))
		g.seen[token] = known
	}
	for _, id := range fresh {
		known[id] = struct{}{}
	}
	return fresh, nil
}

// forget takes back the numbers admit counted for a document that was not
// stored after all: they do not use up the token's bound.
func (g *tokenNumbers) forget(token string, fresh []string) {
	if len(fresh) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range fresh {
		delete(g.seen[token], id)
	}
}
