// Package pacer is the sending side of wahook's pacing signal: a rate
// limiter, a retry policy and a send-result reporter for services that send
// WhatsApp messages through Meta's Cloud API.
//
// New watches the KV buckets wahook_pacing, wahook_pair_cooldown and
// wahook_accounts that wahook's stage 2 writes. Wait blocks until a send is
// allowed: a token bucket per business number at the signal's
// recommended_mps (changed live as the signal changes), the signal's pause
// and stop, a ban or restriction of the number's WABA, the pair cool-downs
// wahook writes after 131056, and Meta's pair rule (1 message per 6 s to one
// recipient, bursts up to 45) kept locally so that 131056 rarely comes back
// at all. Outcome reports each send's result to wahook (batched, on
// wahook.raw._send_results with acks, or POST /api/v1/send-results) and
// returns what to do next by wahook's error catalogue (schema.LookupError).
//
// Without a signal, or with one older than Config.MaxSignalAge (wahook
// down), a number is sent at Config.FallbackShare (80%) of its last known
// tier, else of 80 mps; Wait never blocks forever on a missing signal.
//
// The signal is a number's rate for all its senders together: processes
// that send from the same numbers each take their part (Config.Share).
//
// Close ends the pacer: the Waits blocked then (for a token, a pause or a
// cool-down) and every later one return ErrClosed.
//
// The package imports only schema, nats.go and golang.org/x/time/rate.
// docs/pacer.md describes it with the simulator and the campaign that
// measure it.
package pacer
