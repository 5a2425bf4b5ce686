package schema

// The delivery funnel's table, funnel_messages: processor/funnel writes it
// and the query API reads it, so its format is a contract.
//
// Each row has a kind. A message row (FunnelKindMessage) is a message and
// recipient with its stage and times; the sum rows are the message rows'
// counts by the hour of their first status (FunnelSumSeconds) and their
// dimensions, so that a funnel over whole hours reads the sums alone.
const (
	FunnelKindMessage   = 0 // a message and recipient
	FunnelKindCounts    = 1 // the n_* sums by hour of first and dimensions
	FunnelKindToDeliver = 2 // n messages took to_deliver seconds, by hour and dimensions
	FunnelKindToRead    = 3 // n messages took to_read seconds, by hour and dimensions
)

// FunnelSumSeconds is the span of the sums of kinds 1 to 3: the UTC hour
// of first. A funnel reads them for the whole spans of its range.
const FunnelSumSeconds = 3600

// FunnelResolverTable holds the resolver's watermarks: a time up to which a
// pass had read everything, by the server's clock; the latest counts.
const FunnelResolverTable = "funnel_resolver"

// FunnelNever stands for a time that never came (a status not received) in
// the funnel's arithmetic: the largest UInt32, so that least() skips it and
// a comparison with it says "later than anything".
const FunnelNever = 4294967295
