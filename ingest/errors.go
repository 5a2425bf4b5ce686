package ingest

import "errors"

// Sentinel errors of the signature check and the publish; each is counted.
var (
	// ErrSignatureMissing: the request has no X-Hub-Signature-256 header.
	ErrSignatureMissing = errors.New("signature missing")
	// ErrSignatureMalformed: the header is not "sha256=" and 64 hex digits.
	ErrSignatureMalformed = errors.New("signature malformed")
	// ErrBadSignature: no secret of the app produces the given digest.
	ErrBadSignature = errors.New("signature mismatch")
	// ErrAckTimeout: JetStream did not acknowledge the publish in time.
	ErrAckTimeout = errors.New("publish ack timeout")
	// ErrOverloaded: the body was not published: no in-flight slot came
	// within the queue wait, or its ack could not come before its
	// deadline (admission). Nothing was stored.
	ErrOverloaded = errors.New("overloaded: not published")
	// ErrClosed: the publisher is shutting down and takes no new bodies.
	ErrClosed = errors.New("publisher closed")
)
