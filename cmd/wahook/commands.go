package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// command is one subcommand of the binary.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":    {"run everything in one process on an embedded NATS JetStream", runServe},
		"ingest":   {"run only the webhook endpoint, against external NATS", runIngest},
		"process":  {"run the processors against external NATS, without the webhook endpoint: stage 1 (RAW bodies to ClickHouse rows and EVENTS), the funnel resolver and stage 2 (the pacing signal)", runProcess},
		"replay":   {"feed RAW history through stage 1 again (--since); counts come out as if never replayed", runReplay},
		"migrate":  {"create or update the JetStream streams and the ClickHouse schema, then exit", runMigrate},
		"version":  {"print the version", runVersion},
		"loadtest": {"send signed webhook traffic to an endpoint on this machine and report latency and Meta's verdict", runLoadtest},
		"sizing":   {"webhook rates, JetStream and ClickHouse storage, and instances for a sending volume", runSizing},
		"api":      {"run the query API alone against ClickHouse", runAPI},
		"report":   {"answer a report (errors, funnel, throughput, numbers, dead-letters, error-codes) from ClickHouse, as the API does", runReport},
		"pace":     {"serve the pacer over HTTP (wait before a send, outcome after it) for sending services in any language, against the NATS of a running wahook", runPace},
		"simulate": {"serve a Meta Cloud API simulator on loopback that answers sends as Meta does and posts signed webhooks (a test harness)", runSimulate},
	}
}

// errUsage marks an error that the user fixes by reading the usage.
var errUsage = errors.New("usage")

// run executes the subcommand named by args[0] and returns the exit code:
// 0 success, 1 failure, 2 bad usage or configuration.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "wahook: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "wahook %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "wahook %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Usage: wahook <command> [flags]   (flags fall back to WAHOOK_* environment variables)")
	fmt.Fprintln(w)
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'wahook <command> -h' for its flags.")
}
