// Package schema holds wahook's contracts: the names on the bus (streams,
// subjects, headers, KV buckets, consumers), normalized event rows and their
// deterministic ids, and the pacing-signal JSON. It is pure and deterministic:
// it imports nothing of wahook's and does no I/O.
//
// Sub-packages: schema/meta decodes Meta's webhook payloads; schema/migrations
// holds the ClickHouse migrations and their runner; schema/schematest starts
// real servers for tests; schema/jsonscan finds the bytes that matter in JSON
// strings a word at a time, for the decoders and the event encoder.
//
// The names here are part of the product's interface (docs/architecture.md, "Names that
// users and other services depend on"): change one only with a reason, in the
// README and in docs/architecture.md.
package schema
