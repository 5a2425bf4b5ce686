package pacer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/wahook/wahook/pacer"
	"github.com/wahook/wahook/schema"
)

// A sending service's loop: Wait before each send, Outcome after it, and do
// what the decision says. In production pass a jetstream.JetStream of the
// NATS where wahook runs (pacer.New(ctx, js, cfg)) and wahook's phone hash
// key; this example runs without wahook, on the fallback rate, and keeps
// the results to itself (NoReport).
func Example() {
	ctx := context.Background()
	cfg := pacer.DefaultConfig()
	cfg.NoReport = true
	cfg.CooldownNoWait = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := pacer.New(ctx, nil, cfg)
	if err != nil {
		panic(err)
	}
	defer func() {
		// Close reports what is still queued within its context: a fresh
		// one with a limit, since the service's own has ended at shutdown.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	}()

	const number, recipient = "106540352242922", "15551234567"
	if err := p.Wait(ctx, number, recipient); err != nil {
		panic(err)
	}
	mps, fallback := p.Rate(number)
	fmt.Printf("sending at %.0f mps (fallback %v)\n", mps, fallback)

	// Meta answered 131056 (pair rate limit): wait for that recipient only.
	d := p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: number, Recipient: recipient,
		Status: schema.SendFailed, ErrorCode: 131056, Timestamp: schema.Timestamp{Time: time.Now()}}, Attempt: 1})
	fmt.Println(d.Action, d.After.Round(time.Second), d.Verdict)
	var cool *pacer.CooldownError
	fmt.Println(errors.As(p.Wait(ctx, number, recipient), &cool), p.Wait(ctx, number, "15551234568"))

	// 131048 (spam rate limit): stop the number; Wait says so until the stop ends.
	d = p.Outcome(pacer.Result{SendResult: schema.SendResult{PhoneNumberID: number, Status: schema.SendFailed, ErrorCode: 131048}})
	fmt.Println(d.Action, d.Retry, errors.Is(p.Wait(ctx, number, "15551234569"), pacer.ErrStopped))
	// Output:
	// sending at 64 mps (fallback true)
	// retry 6s wait_recipient
	// true <nil>
	// stop_number false true
}
