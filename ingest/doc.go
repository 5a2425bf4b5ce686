// Package ingest is the endpoint that Meta calls: the verification handshake,
// the signature check, the publish of the raw body to the RAW stream, and the
// answer, which is 200 only after JetStream has acknowledged the body. It also
// serves /healthz, /readyz and /metrics.
//
// ingest never parses a webhook body: all understanding of payloads belongs to
// the processor (docs/architecture.md). It does as little as possible on the hot path:
// read the body, check the signature, publish, wait for the ack, answer.
//
// Two publishers send bodies to the RAW stream (Config.Publisher):
// BatchPublisher, the default, uses JetStream's fast-ingest batches, so that
// one flow ack covers several concurrent bodies; JetStreamPublisher waits
// for a PubAck per body. Either answers a request only once an ack covering
// its body has come back.
//
// The same body posted again (a Meta retry) is stored once: an index of the
// ids of the bodies the stream acknowledged within Config.DedupeWindow
// answers a retry 200 without a publish (dedupe.go), and the stream's own,
// short duplicate window stores copies published at about the same time
// once (StreamConfig.DuplicateWindow).
//
// Answers to POST /webhook[/:app]:
//
//	200  the body is stored in the RAW stream (or was already, a Meta retry)
//	401  signature missing, malformed or wrong (counted by app and reason);
//	     missing or malformed before the body is read
//	404  no app of that name is configured
//	413  body over the configured limit
//	415  a Content-Encoding (Meta sends plain JSON; nothing is inflated)
//	503  JetStream did not acknowledge in time, or is unreachable; Meta retries
package ingest
