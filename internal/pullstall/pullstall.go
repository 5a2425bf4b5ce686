// Package pullstall tells, from a pull consumer's state, that its reader's
// pull request was lost (with the consumer's leader, say). The readers
// (internal/pullreader) notice a lost request themselves, by the server's
// heartbeats it no longer gets; this is the second line: both stages read
// their consumer again when Held says so for a while.
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
