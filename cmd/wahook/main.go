// Command wahook receives Meta's WhatsApp Cloud API webhooks, stores them
// durably in NATS JetStream and turns them into analytics and a pacing
// signal. Run "wahook help" for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// main stops in order on the first SIGTERM or SIGINT (requests in flight
// finish with their acks); a second one ends the process at once, as the
// signal does by default: nothing answered 200 is lost by it (JetStream
// holds it), and an operator who sends it means it. Both are queued as
// they come: a second signal sent before the first was acted on is not
// lost.
func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		second := (<-sigs).(syscall.Signal) // both are: SIGINT, SIGTERM
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		_ = syscall.Kill(os.Getpid(), second) // its default action: the process ends
		time.Sleep(time.Second)               // while the signal is delivered
		os.Exit(1)
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
