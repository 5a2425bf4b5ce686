// Package stage2 is stage 2 of the processor: it consumes the normalized
// events of WAHOOK_EVENTS, keeps the state of each business number in
// processor/pacing (traffic windows, tier, quality, errors, maintenance),
// and publishes each number's pacing signal to the KV bucket wahook_pacing
// and to wahook.pacing.<phone_number_id>, and each pair-rate cool-down
// (131056) to wahook_pair_cooldown (schema/README.md, "Pacing signal").
//
// It owns the I/O around the pure state: the durable consumer, decoding,
// de-duplication by event id, coalescing of writes, refreshes while a
// number's rates decay, and its metrics. It does not own the rule that
// turns state into advice (processor/pacing) nor the JSON (schema).
//
// Each number must have exactly one owner at a time. An instance consumes
// the subjects of Config.FilterSubjects; on one machine that is every
// number (wahook.events.>). Partitioning numbers across instances
// (DESIGN.md, "stage 2") gives each instance its own filter subjects and
// durable name.
//
// The state is soft: it lives in memory and is rebuilt from the events. A
// restarted instance resumes its durable consumer from the last ack and
// seeds each number it sees again from the number's last signal in the KV
// (tier, quality, limit, maintenance, stop: pacing.Number.Restore); its traffic
// windows fill again within a minute.
package stage2
