// Package meta decodes the webhook bodies that Meta's WhatsApp Cloud API
// POSTs to wahook: bytes in, Go values out, with no I/O and nothing but the
// standard library.
//
// It owns the Meta payload types (the envelope, every field documented in
// docs/meta-webhooks.md, and a raw view of every field it does not know),
// the decoding rules of docs/meta-webhooks.md section 11, and helpers that walk a
// decoded payload with its envelope context (WABA id, field, phone number id).
// It does not own normalized event rows, event ids, bus names or storage:
// those live in package schema and in the processor.
//
// # Decoding
//
// Decode takes one POST body and returns a *Payload. It follows the rules of
// docs/meta-webhooks.md 11.2:
//
//   - Nothing is dropped. Each change keeps its value verbatim (Change.Value),
//     each status, message and other list item keeps its own bytes (Raw), and
//     every key the decoder does not know is kept as raw JSON: on the struct
//     it belongs to (Extra), on the enclosing item with a relative path
//     (Unknown, e.g. "pricing.pricing_tier" on a Status, ready for an extra
//     column) and in one list for the whole body (Payload.Unknown). An
//     unknown field is kept raw; an unknown message type, status value or
//     event is kept as the string it was. Only a body with more than
//     MaxUnknown unknown keys loses some: the keys past that many are left
//     in the bytes of their item and counted in Payload.UnknownDropped.
//   - Ids stay strings. A JSON number where a string is expected is kept as
//     the literal digits, never round-tripped through a float. Integers
//     (timestamps, error codes, limits) are accepted as JSON numbers or as
//     strings of digits (FlexInt64), and so are the disputed scalars of
//     docs/meta-webhooks.md 11.1 (FlexString, FlexFloat64).
//   - statuses[] is routed by field: under "messages" it holds message
//     statuses (Status), under "calls" call statuses (CallStatus), which are
//     never message statuses (docs/meta-webhooks.md 9.16).
//   - One bad item never costs the others. A key with a value of the wrong
//     JSON type makes the smallest enclosing item bad (an entry, a change, or
//     one element of a list such as statuses[2]); that item is left out of
//     the typed view and reported in Payload.Problems with its path, its
//     bytes and the reason, and everything else is decoded.
//   - Only a body that is not JSON, whose top level is not an object, or
//     whose "entry" is missing or not an array fails as a whole: Decode then
//     returns an error that wraps ErrMalformed.
//
// Every error carries a stable reason code (Reason: "not_json",
// "wrong_type", ...) for dead-letter rows and metric labels, and a message
// that says where and what.
//
// Keys are matched exactly (Meta sends lower-case snake_case keys); unlike
// encoding/json, a key that differs only in case is an unknown key. As in
// encoding/json, a known key given twice takes its last value in the typed
// view, and the problems and unknown keys found in the earlier value are not
// reported, since that value is not in the view. Unlike encoding/json, an
// object given twice is replaced, not merged with the earlier copy. An
// unknown key given twice is kept twice.
//
// # Walking a payload
//
// Statuses, InboundMessages, Errors, CallStatuses, Calls, Echoes,
// HistoryMessages, UserPreferences, AutomaticEvents and Changes yield each
// item with its Envelope (WABA id, field, phone number id, display number),
// routed by field: Statuses never yields call statuses, InboundMessages
// never yields history or echoes.
//
// # Buffer ownership
//
// Every json.RawMessage in a Payload (Change.Value, the Raw of items, Extra
// values, Problems[].Raw) is a sub-slice of the body passed to Decode, not a
// copy. The body must not be modified while the payload is in use; copy a
// RawMessage that has to outlive the body's buffer.
//
// # Speed
//
// The decoder is a hand-written, strict scanner over the body with one small
// typed decode method per struct (no reflection); every byte is validated
// once. Because Meta sends a change's "value" before its "field", the value
// is first bracket-matched to find its end and then decoded by field. Strings
// in the typed view are copies; raw values alias the body. The benchmarks in
// meta_timing_test.go measure it against encoding/json on the same structs.
package meta
