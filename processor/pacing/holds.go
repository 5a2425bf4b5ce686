package pacing

import (
	"math"
	"time"
)

// MaxPairWait is the longest cool-down a pair can get: 4^(maxPairStrikes-1)
// seconds. A store without per-key expiry keeps entries at least this long.
var MaxPairWait = time.Duration(math.Pow(4, maxPairStrikes-1)) * time.Second

// Holds reports whether events at second at are still within the
// deduper's window. Seen reports an event older than the window as seen;
// a caller that must still act on such an event (an error whose advice
// outlives the windows, such as a stop) tells the two apart with Holds.
func (d *Deduper) Holds(at int64) bool { return d.head == 0 || at > d.head-slots }
