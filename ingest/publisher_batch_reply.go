package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The answers of the stream to a BatchPublisher's messages, and what they
// mean for the requests waiting on them.

// batchReply is any answer on a batch's reply subjects: a flow ack or notice
// ("type"), or a PubAck (seq is then a stream sequence).
type batchReply struct {
	Type      string `json:"type"`
	Seq       uint64 `json:"seq"`
	Count     uint64 `json:"count"`
	Duplicate bool   `json:"duplicate"`
	Error     *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// refused is the error of a message the stream refused: JetStream's own
// (a *jetstream.APIError), so that its code is read as a PubAck's is.
func (r *batchReply) refused() error {
	return fmt.Errorf("stream refused the message: %w",
		&jetstream.APIError{Code: r.Error.Code, ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description})
}

// handleReply handles an answer of the stream on a batch's reply subjects.
func (p *BatchPublisher) handleReply(m *nats.Msg) {
	id, seq, op, ok := p.parseReplySubject(m.Subject)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.batches[id]
	if b == nil {
		return
	}
	if len(m.Data) == 0 {
		// A status, such as 503 when no stream took the message.
		p.refuseLocked(b, seq, op, fmt.Errorf("nats status %s %s", m.Header.Get("Status"), m.Header.Get("Description")))
		return
	}
	var r batchReply
	// Flow acks are the common case; their shape is fixed.
	if bytes.HasPrefix(m.Data, []byte(`{"type":"ack","seq":`)) {
		v := m.Data[len(`{"type":"ack","seq":`):]
		i := bytes.IndexByte(v, ',')
		n, err := strconv.ParseUint(string(v[:max(i, 0)]), 10, 64)
		if i < 0 || err != nil {
			return
		}
		if !b.single { // its PubAck, which follows, tells a duplicate
			p.ackLocked(b, n, false)
		}
		return
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return
	}
	switch {
	case r.Type == "ack":
		if !b.single {
			p.ackLocked(b, r.Seq, false)
		}
	case r.Type == "gap" || r.Type == "err":
		// In gap mode "fail" the stream ends the batch after this and
		// its PubAck tells what it stored.
		b.ending = true
		if p.cur == b {
			p.cur = nil
		}
		if r.Type == "err" && r.Error != nil {
			if pd := b.at(r.Seq); pd != nil {
				pd.refused = r.refused()
			}
		}
	case r.Error != nil:
		err := r.refused()
		if r.Error.ErrCode == errCodeBatchUnknown {
			err = nil
		}
		p.refuseLocked(b, seq, op, err)
	default:
		// The batch's PubAck: the messages 1..count are stored. Its seq is
		// the stream sequence of the batch's last stored message, 0 when
		// the stream held every message already: all were duplicates. A
		// batch of one says so as a single publish does.
		b.ending = true
		if p.cur == b {
			p.cur = nil
		}
		p.finishLocked(b, r.Count, r.Seq == 0 || r.Duplicate)
	}
}

// at returns the pending of batch sequence seq, if it still waits in b.
func (b *batch) at(seq uint64) *pending {
	if seq < b.first || seq >= b.first+uint64(len(b.waiting)) {
		return nil
	}
	pd := b.waiting[seq-b.first]
	if pd == nil || pd.b != b || pd.seq != seq {
		return nil
	}
	return pd
}

// ackLocked resolves the messages 1..n of b as stored, or as stored before
// (dup), except those the stream refused for themselves: a refusal is final
// for that copy, though the range covers it. The stream's store-time errors
// (nats-server's processJetStreamMsgWithBatch: limits, an invalid TTL, a
// failed store) answer the message with an error but leave it counted in
// the batch, so a later flow ack or the commit's PubAck covers its
// sequence although nothing was stored.
func (p *BatchPublisher) ackLocked(b *batch, n uint64, dup bool) {
	if n <= b.acked {
		return
	}
	b.acked = n
	i := 0
	for ; i < len(b.waiting) && b.first+uint64(i) <= n; i++ {
		if pd := b.waiting[i]; pd != nil && pd.b == b {
			if pd.refused != nil {
				pd.resolve(false, pd.refused)
			} else {
				pd.resolve(dup, nil)
			}
		}
		b.waiting[i] = nil
	}
	b.waiting = b.waiting[i:]
	b.first += uint64(i)
	if b.ending && len(b.waiting) == 0 {
		delete(p.batches, b.id)
	}
}

// finishLocked resolves b as ended with the messages 1..stored stored (dup:
// all stored before): the rest are published again in another batch.
func (p *BatchPublisher) finishLocked(b *batch, stored uint64, dup bool) {
	p.ackLocked(b, stored, dup)
	rest := b.waiting
	b.waiting = nil
	b.first += uint64(len(rest))
	delete(p.batches, b.id)
	for _, pd := range rest {
		if pd != nil && pd.b == b {
			p.resendLocked(pd, nil)
		}
	}
}

// refuseLocked handles the stream's refusal of message seq of b (op) or of
// its commit. err nil means the stream has no batch b: it ended (after a gap
// or an error), timed out, or was lost in a restart, and the message was not
// stored. Then every message of b that no ack covered is in doubt and is
// published again in a new batch. Otherwise the stream refused the message
// itself, which fails with err; the stream ends the batch before it, and the
// commit brings the PubAck that tells what it stored.
func (p *BatchPublisher) refuseLocked(b *batch, seq uint64, op string, err error) {
	if err != nil && op != fastBatchOpEOB {
		if pd := b.at(seq); pd != nil {
			pd.refused = err
		}
	}
	// An error for the first message means the batch never started.
	if err == nil || op == fastBatchOpEOB || seq == 1 {
		b.ending = true
		if p.cur == b {
			p.cur = nil
		}
		p.finishLocked(b, b.acked, false)
		return
	}
	p.endLocked(b)
}

// oldestWait is how long ago b's oldest message awaiting an ack was sent.
func (b *batch) oldestWait() time.Duration {
	for _, pd := range b.waiting {
		if pd != nil && pd.b == b {
			return time.Since(pd.sentAt)
		}
	}
	return 0
}

func (b *batch) allNil() bool {
	for _, pd := range b.waiting {
		if pd != nil {
			return false
		}
	}
	return true
}

// resendLocked publishes pd again in the current batch, or fails it with
// err (when not nil), when its deadline has passed, or when it was sent too
// often.
func (p *BatchPublisher) resendLocked(pd *pending, err error) {
	pd.b = nil
	if pd.resolved {
		return // its request has its answer
	}
	if err == nil && pd.refused != nil {
		err = pd.refused
	}
	if err == nil && pd.resends >= p.opts.MaxResends {
		err = errors.New("stream refused the message's batch too often")
	}
	if err == nil && !time.Now().Before(pd.deadline) {
		err = ErrAckTimeout
	}
	if err == nil {
		pd.resends++
		err = p.sendLocked(pd, time.Now())
	}
	if err != nil {
		pd.resolve(false, err)
	}
}

// resolve gives the waiter of pd its result, unless it has one already.
// A message answered with an error is never published again (resendLocked
// skips a resolved one), so it lets go of its body at once: the request
// gives back its body memory (Config.BodyMemory) when it is answered, and
// a batch may hold pd until it is swept, 2*ackTimeout after its last
// message (a timeout, ErrAckTimeout). BatchPublisher.mu is held.
func (pd *pending) resolve(dup bool, err error) {
	if !pd.resolved {
		pd.resolved = true
		pd.dup, pd.err = dup, err
		if err != nil {
			pd.msg.Data = nil
		}
		pd.done <- struct{}{}
	}
}

// parseReplySubject returns the batch id, sequence and operation of a reply
// subject <inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI.
func (p *BatchPublisher) parseReplySubject(s string) (id string, seq uint64, op string, ok bool) {
	if len(s) <= len(p.inbox)+1 || s[:len(p.inbox)] != p.inbox || s[len(p.inbox)] != '.' {
		return "", 0, "", false
	}
	var tok [6]string
	rest := s[len(p.inbox)+1:]
	for i := range tok {
		j := 0
		for j < len(rest) && rest[j] != '.' {
			j++
		}
		tok[i] = rest[:j]
		if j < len(rest) {
			rest = rest[j+1:]
		} else {
			rest = ""
		}
	}
	if tok[5] != "$FI" {
		return "", 0, "", false
	}
	n, err := strconv.ParseUint(tok[3], 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	return tok[0], n, tok[4], true
}
