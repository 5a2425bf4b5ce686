package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// Taking the migrations lease tries a stream not found again too: the
// bucket is made when missing, so it is one whose replicas are changing.
func TestLeaseTransient(t *testing.T) {
	notFound := fmt.Errorf("kv wahook_leases: %w", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"})
	if !transientOrMoving(notFound) || transientJetStream(notFound) {
		t.Errorf("%v: lease transient %v, transient %v; want true, false", notFound, transientOrMoving(notFound), transientJetStream(notFound))
	}
	// So does migrate's provisioning of the streams and buckets: a bucket
	// just made answered its status with stream not found while a node
	// rejoined.
	status := fmt.Errorf("provision bucket wahook_pair_cooldown: %w", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"})
	if !transientOrMoving(status) {
		t.Errorf("%v: migrate's provisioning does not try it again", status)
	}
	if refused := fmt.Errorf("provision stream WAHOOK_EVENTS: %w", &jetstream.APIError{Code: 400, ErrorCode: 10052}); transientOrMoving(refused) {
		t.Errorf("%v: migrate's provisioning tries it again", refused)
	}
	for _, err := range []error{
		fmt.Errorf("kv: %w", context.DeadlineExceeded),
		&jetstream.APIError{Code: 503, ErrorCode: 10008},
	} {
		if !transientOrMoving(err) {
			t.Errorf("%v: not tried again", err)
		}
	}
	if refused := (&jetstream.APIError{Code: 400, ErrorCode: 10052}); transientOrMoving(refused) {
		t.Errorf("%v: tried again", refused)
	}
}

// TestMigrateEmptyDSNVariable: an empty WAHOOK_CLICKHOUSE_DSN (compose's
// ${X:-}, a Secret's empty key) is refused: it skipped the schema and
// exited 0. Skipping ClickHouse is asked for on the command line.
func TestMigrateEmptyDSNVariable(t *testing.T) {
	t.Setenv("WAHOOK_CLICKHOUSE_DSN", "")
	if code, _, errOut := runCmd(t, "migrate", "--check"); code != 2 || !strings.Contains(errOut, "WAHOOK_CLICKHOUSE_DSN is set but empty") {
		t.Errorf("migrate with an empty variable: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCmd(t, "migrate", "--check", "--clickhouse-dsn", ""); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("migrate --clickhouse-dsn '': exit %d: %s %s", code, out, errOut)
	}
}
