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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
