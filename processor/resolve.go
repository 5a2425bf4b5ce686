package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/wahook/wahook/schema"
)

// This file is stage 1's part of "Numbers learned late"
// (docs/architecture.md): number-level events name their number by display
// number only, and only a message webhook pairs a display number with its
// phone number id.
//
//   - As a body is added, stage 1 learns the pairs its metadata gave, and
//     resolves the display numbers of its number-level events. An event whose
//     number is not known yet is stored (ClickHouse, EVENTS) without an id.
//   - Once its batch is stored, such an event is held in the pending bucket
//     (NumberMap.Hold), and the map asked once more.
//   - Whoever learns the number (the instance that learns it, as it learns
//     it; the holder, when the map knew it by then; the sweep, for what
//     those missed) adds the held events to a batch with the id: ClickHouse
//     stores them again under the same event id, after the copy without
//     the id (the management table keeps the last copy of an event), and
//     EVENTS gets them on the number's subject, so stage 2 applies them.
//     Their keys are released once that batch is stored. A batch that is
//     not stored (an outage, or a bad body it is split around) gives them
//     back to the next batch (requeueHeld): its bodies, read again, do not
//     learn the number again, and the sweep would apply them only up to 30 s
//     later.

// pendingSweep is how often stage 1 looks for held events whose number is
// known by now.
const pendingSweep = 30 * time.Second

// errNumbers marks a failure of the number buckets: like an outage of a
// store, it delays the batch (its bodies are nak'ed and come back) and
// never makes a dead letter, and no event is stored without its number
// for it.
var errNumbers = errors.New("number buckets")

// numberWork is what a batch does about display numbers once it is stored.
type numberWork struct {
	hold    []int       // indexes in rows.Management of events to hold
	applied []HeldEvent // held events the batch applies, released once stored
}

func (w *numberWork) reset() { clear(w.applied); w.hold, w.applied = w.hold[:0], w.applied[:0] }

// resolve learns the pairs of rows.Numbers[p0:] and resolves the display
// numbers of rows.Management[m0:]; it adds the events held for a number
// it learns to rows. An error is the map's: the batch is tried again.
func (s *Stage1) resolve(ctx context.Context, rows *schema.Rows, m0, p0 int, w *numberWork) error {
	end := len(rows.Management)
	for _, p := range rows.Numbers[p0:] {
		learned, err := s.numbers.Learn(ctx, p.Display, p.PhoneNumberID)
		if err != nil {
			// Not the body's failure: the next message webhook of the
			// number tries again, and its events wait meanwhile.
			s.log.Warn("display number not learned", zap.Error(err))
			continue
		}
		if !learned {
			continue
		}
		s.metrics.numbersLearned.Inc()
		held, err := s.numbers.Held(ctx, NumberKey(p.Display), p.PhoneNumberID)
		if err != nil {
			s.log.Warn("events held for a number just learned not read: the sweep applies them", zap.Error(err))
			continue
		}
		s.addHeld(rows, w, held)
	}
	for i := m0; i < end; i++ {
		r := &rows.Management[i]
		if r.PhoneNumberID != "" || r.DisplayPhoneNumber == "" {
			continue
		}
		id, how, err := s.numbers.Resolve(ctx, r.DisplayPhoneNumber)
		s.metrics.numberLookups.WithLabelValues(how).Inc()
		if err != nil {
			return fmt.Errorf("%w: %w", errNumbers, err)
		}
		if id == "" {
			w.hold = append(w.hold, i)
			continue
		}
		// Under an id of its own on EVENTS (ManagementMsgID): this body
		// may have been through a batch that failed before the number was
		// known, and its event sent then on no number's subject under the
		// event id; EVENTS would take this copy for that one.
		r.PhoneNumberID, r.Late = id, true
	}
	return nil
}

// addHeld adds held events, with their ids, to rows, to be released once
// stored. An event the batch applies already (given back by a failed
// batch, and found by the sweep too) is not added twice.
func (s *Stage1) addHeld(rows *schema.Rows, w *numberWork, held []HeldEvent) {
next:
	for _, h := range held {
		for _, a := range w.applied {
			if a.Key == h.Key {
				continue next
			}
		}
		rows.Management = append(rows.Management, h.Row)
		w.applied = append(w.applied, h)
	}
}

// requeueHeld gives the held events a batch that was not stored had
// applied to the next batch.
func (s *Stage1) requeueHeld(w *numberWork) {
	if len(w.applied) == 0 {
		return
	}
	s.applyMu.Lock()
	s.applyQ = append(s.applyQ, w.applied...)
	s.applyMu.Unlock()
}

// settleNumbers runs once the rows are stored: it holds the events whose
// number is not known (queueing those learned meanwhile for the next
// batch) and releases the held events the rows applied.
func (s *Stage1) settleNumbers(ctx context.Context, rows *schema.Rows, w *numberWork) error {
	if s.numbers == nil {
		return nil
	}
	for _, i := range w.hold {
		r := &rows.Management[i]
		key, id, cut, err := s.numbers.Hold(ctx, r)
		if err != nil {
			return fmt.Errorf("%w: %w", errNumbers, err)
		}
		s.metrics.numbersHeld.Inc()
		if cut {
			s.log.Warn("an event held for its number is larger than NATS carries: held without its raw value, which the copy applied later will not have (RAW keeps the body)",
				zap.String("event_id", r.EventID), zap.String("field", r.Field), zap.Int("raw_bytes", len(r.Raw)), zap.Uint64("raw_seq", r.RawSeq))
		}
		if id != "" {
			h := HeldEvent{Key: key, Row: *r}
			h.Row.PhoneNumberID, h.Row.Late = id, true
			s.applyMu.Lock()
			s.applyQ = append(s.applyQ, h)
			s.applyMu.Unlock()
		}
	}
	if len(w.applied) == 0 {
		return nil
	}
	keys := make([]string, len(w.applied))
	for i, h := range w.applied {
		keys[i] = h.Key
	}
	if err := s.numbers.Release(ctx, keys); err != nil {
		// They are applied again by a sweep: stored again under the same
		// ids, harmlessly, and counted then.
		s.log.Warn("applied events not released", zap.Error(err))
		return nil
	}
	s.metrics.numbersApplied.Add(float64(len(keys)))
	return nil
}

// applyHeld adds to b the held events the writer found learned, and, when
// due, those the sweep finds.
func (s *Stage1) applyHeld(ctx context.Context, b *batch, nextSweep *time.Time) {
	var held []HeldEvent
	s.applyMu.Lock()
	held, s.applyQ = s.applyQ, nil
	s.applyMu.Unlock()
	if now := time.Now(); !now.Before(*nextSweep) {
		*nextSweep = now.Add(pendingSweep)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		swept, waiting, err := s.numbers.Sweep(sctx)
		cancel()
		if err != nil {
			s.log.Warn("held events not swept", zap.Error(err))
		} else {
			s.metrics.numbersPending.Set(float64(waiting))
			held = append(held, swept...)
		}
	}
	if len(held) == 0 {
		return
	}
	if b.empty() {
		b.first = time.Now()
	}
	s.addHeld(&b.rows, &b.numbers, held)
	if s.events != nil && b.eventsErr == nil {
		b.eventsErr = s.events.send(ctx, &b.rows, &b.sent)
	}
}
