package ingest

import "time"

// SetDedupeClock makes the duplicate index of s read time from now; call it
// before s serves.
func SetDedupeClock(s *Server, now func() time.Time) { s.dups.setClock(now) }

// DedupeGenerations is the number of generations of the duplicate index.
const DedupeGenerations = dupGenerations
