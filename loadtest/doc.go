// Package loadtest generates signed webhook traffic against a wahook
// endpoint on this machine and measures what Meta would see: latency from
// each request's intended send time (so a slow server cannot hide its
// queueing), answers by status, and the verdict against Meta's bar (median
// under 250 ms, under 1% over 1 s).
//
// Three ways to send: closed loop (as fast as the connections allow), open
// loop at a fixed rate of plain status bodies, and a traffic Model shaped
// like Meta's (numbers and tiers, 3x statuses per outbound message with
// delays, inbound replies, failures by error code, echoes of coexistence
// numbers, quality and THROUGHPUT_UPGRADE events, batched POSTs, Meta's
// retries and repeats). A model run keeps a Ledger of every event whose
// body got a 200; Check compares ClickHouse with it once the service has
// drained (loss, duplicates, failure distribution). WriteChart draws the
// latency over time as SVG; Size turns a sending volume and a measured
// Capacity into rates, storage and instances.
//
// It treats the service as a black box: HTTP, /metrics and ClickHouse
// through its driver. It imports only schema.
package loadtest
