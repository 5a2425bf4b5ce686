// Package loadtest generates signed webhook traffic against a wahook
// endpoint, open-loop at a fixed arrival rate or as fast as a fixed number of
// connections allow, and measures what Meta would see: latency from each
// request's intended send time (so a slow server cannot hide its queueing),
// answers by status, and the verdict against Meta's bar (median under
// 250 ms, under 1% over 1 s). It treats the service as a black box and
// imports only schema.
package loadtest
