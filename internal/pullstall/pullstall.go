// Package pullstall tells, from a pull consumer's state, that its reader's
// pull request was lost: nats.go's pull iterator watches for missed
// heartbeats only within one Next, and stage 1 and stage 2 wait in Nexts
// shorter than that watch, so a request lost with the consumer's leader is
// never noticed by the client. Both stages read their consumer again when
// Held says so for a while.
package pullstall

import "github.com/nats-io/nats.go/jetstream"

// Held is how many messages the consumer holds (undelivered, or unacked
// and due again) while no pull request waits for them and it is not
// paused, and 0 otherwise: a reader with nothing to read always keeps a
// pull request waiting, so none, with messages held, means it was lost.
func Held(info *jetstream.ConsumerInfo) uint64 {
	if info.NumWaiting > 0 || info.Paused {
		return 0
	}
	return info.NumPending + uint64(info.NumAckPending)
}
