package ingest

import "time"

// SetDedupeClock makes the duplicate index of s read time from now; call it
// before s serves.
func SetDedupeClock(s *Server, now func() time.Time) { s.dups.setClock(now) }

// ShuttingDown reports whether Shutdown has begun on s: /readyz fails from
// then on.
func ShuttingDown(s *Server) bool { return s.shuttingDown.Load() }

// Inflight is the number of webhook requests s is serving.
func Inflight(s *Server) int64 { return s.metrics.inflight.Load() }

// BatchOpen reports whether p has a batch that a new message would join.
func BatchOpen(p *BatchPublisher) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil
}

// AnsweredBodies is the number of messages p's batches hold whose request
// has its answer, and the bytes of body they reference.
func AnsweredBodies(p *BatchPublisher) (msgs, bytes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		for _, pd := range b.waiting {
			if pd != nil && pd.b == b && pd.resolved {
				msgs++
				bytes += len(pd.msg.Data)
			}
		}
	}
	return msgs, bytes
}

// DedupeGenerations is the number of generations of the duplicate index.
const DedupeGenerations = dupGenerations
