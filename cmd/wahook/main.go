// Command wahook receives Meta's WhatsApp Cloud API webhooks, stores them
// durably in NATS JetStream and turns them into analytics and a pacing
// signal. Run "wahook help" for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// main stops in order on the first SIGTERM or SIGINT (requests in flight
// finish with their acks); a second one ends the process at once, as the
// signal does by default: nothing answered 200 is lost by it (JetStream
// holds it), and an operator who sends it means it.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the next signal takes its default action
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
