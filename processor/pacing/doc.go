// Package pacing is the state of stage 2: per business number, its
// traffic by Meta's timestamps in per-second windows (1, 10 and 60 s,
// inbound and outbound together), its tier (80, 1,000 after
// THROUGHPUT_UPGRADE, 20 for coexistence numbers, or configured), quality
// and messaging limit, recent errors by class, maintenance windows, and the
// advice a sending service should follow (schema.PacingSignal); and the
// per-recipient pair-rate cool-downs after 131056.
//
// It is pure: events in, signals out, no I/O. A number's state is a few
// fixed-size windows (about 1.5 KiB), never a record per message, so that
// 100,000 active numbers fit in well under 400 MiB.
package pacing
