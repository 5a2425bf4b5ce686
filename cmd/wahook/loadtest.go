package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/wahook/wahook/loadtest"
)

// runLoadtest sends signed webhook traffic to an endpoint on this machine and
// reports rate, latency and Meta's verdict; with --baseline-listen it instead
// serves the bare Fiber handler that figures are quoted against.
func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("loadtest", stderr)
	c := loadtest.DefaultConfig()
	var secret, baseline string
	var asJSON bool
	f.StringVar(&c.URL, "url", "http://127.0.0.1:8080/webhook", "webhook endpoint (loopback only)")
	f.StringVar(&secret, "app-secret", "", "app secret to sign the bodies with (secret)")
	f.Secret("app-secret")
	f.Float64Var(&c.Rate, "rate", 0, "arrival rate in requests/s, open loop (0: closed loop, as fast as the connections allow)")
	f.DurationVar(&c.Duration, "duration", c.Duration, "how long to send")
	f.IntVar(&c.Connections, "connections", c.Connections, "most requests in flight")
	f.DurationVar(&c.Timeout, "timeout", c.Timeout, "client timeout of one request")
	f.IntVar(&c.BodyBytes, "body-bytes", c.BodyBytes, "approximate size of each status webhook")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&baseline, "baseline-listen", "", "serve a bare Fiber handler (200 to every POST /webhook) on this address until interrupted")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.Dump {
		f.WriteDump(stdout)
		return nil
	}
	if baseline != "" {
		ln, err := net.Listen("tcp", baseline)
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); ln.Close() }()
		fmt.Fprintf(stderr, "baseline: bare Fiber handler on %s\n", ln.Addr())
		_ = loadtest.ServeBaseline(ln)
		return nil
	}
	c.Secret = []byte(secret)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.Check {
		fmt.Fprintln(stdout, "configuration ok")
		return nil
	}
	res, err := loadtest.Run(ctx, c)
	if err != nil {
		return err
	}
	s := res.Summary()
	if asJSON {
		return s.WriteJSON(stdout)
	}
	s.WriteText(stdout)
	return nil
}
