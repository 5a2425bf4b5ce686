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
// Each number must have exactly one owner at a time. By default one
// instance owns every number: it consumes wahook.events.> with the durable
// consumer Config.Durable on WAHOOK_EVENTS.
//
// With Config.Partitions, several instances share the numbers (docs/architecture.md,
// "stage 2" and "Scaling past one machine") through an elastic partitioned
// consumer group of github.com/synadia-io/orbit.go/pcgroups named
// Config.Durable (group.go). The EVENTS subjects do not change: pcgroups
// makes a work-queue stream, WAHOOK_EVENTS-<group>, that sources
// WAHOOK_EVENTS and puts in front of each subject the partition of its
// phone number id (a hash modulo Partitions), and keeps the group's
// configuration in the KV bucket elastic-consumer-groups, key
// WAHOOK_EVENTS.<group>. The partitions are shared among the members in
// the order of their sorted names; each member consumes its own through a
// consumer named after it. Config.Members sets the membership at start
// (SetMembers does it from anywhere). pcgroups delivers messages to a
// callback, which hands them to Run's loop over a bounded channel: the
// state stays on one goroutine, unlocked. A group made on a stream that
// holds events sources them all, so its first members replay up to
// EVENTS' max age.
//
// When the membership changes, pcgroups recreates each member's consumer
// with its new partitions; a member takes partitions still held by
// another's consumer once that consumer is gone (at most about twice
// AckWait, for a member that stopped). Run watches the same configuration
// (ownership.go): it forgets the numbers of the partitions it loses, after
// writing their pending changes, and naks an event of a number it no
// longer owns that the old consumer still delivers, leaving it in the work
// queue for the new owner. The new owner seeds each number from its last
// signal, as after a restart, and its traffic windows fill within a
// minute; an event acked by the old owner after the change reaches the
// new one too and counts there once. Two instances with one member name
// are one member: the consumer is pinned to one of them, and the other
// stands by until the pin expires (AckWait) or is released; one that
// stalls past AckWait and comes back still writes the numbers it held,
// so give each instance a name of its own.
//
// The state is soft: it lives in memory and is rebuilt from the events. A
// restarted instance resumes its consumer from the last ack and seeds each
// number it sees again from the number's last signal in the KV (tier,
// quality, limit, maintenance, stop: pacing.Number.Restore); its traffic
// windows fill again within a minute. A member that stops unpins its
// consumer, so that its next instance gets messages at once; after a crash
// the pin expires after AckWait.
package stage2
