package pullstall

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestHeld(t *testing.T) {
	for _, c := range []struct {
		name string
		info jetstream.ConsumerInfo
		want uint64
	}{
		{"undelivered, no pull waiting", jetstream.ConsumerInfo{NumPending: 3}, 3},
		{"unacked and due again, no pull waiting", jetstream.ConsumerInfo{NumAckPending: 2}, 2},
		{"both", jetstream.ConsumerInfo{NumPending: 3, NumAckPending: 2}, 5},
		{"a pull waiting", jetstream.ConsumerInfo{NumPending: 3, NumWaiting: 1}, 0},
		{"paused", jetstream.ConsumerInfo{NumPending: 3, Paused: true}, 0},
		{"nothing held", jetstream.ConsumerInfo{}, 0},
	} {
		if got := Held(&c.info); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
