package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of a cluster that forms or recovers are tried again; a refused
// configuration and JetStream switched off are not.
func TestTransientJetStream(t *testing.T) {
	api := func(code, errCode int) error {
		return fmt.Errorf("provision stream WAHOOK_EVENTS: %w", &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: "x"})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{api(400, 10005), true}, // no suitable peers for placement
		{api(503, 10008), true}, // JetStream system temporarily unavailable
		{api(503, 10076), false},
		{api(503, 10039), false},
		{api(400, 10052), false}, // a refused configuration
		{api(500, 10049), false},
		{fmt.Errorf("kv: %w", context.DeadlineExceeded), true},
		{jetstream.ErrNoStreamResponse, true},
		{fmt.Errorf("x: %w", nats.ErrNoResponders), true},
		{errors.New("subjects overlap"), false},
	} {
		if got := transientJetStream(c.err); got != c.want {
			t.Errorf("%v: transient %v, want %v", c.err, got, c.want)
		}
	}
}
