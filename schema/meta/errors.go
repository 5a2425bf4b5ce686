package meta

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Sentinel errors. Check them with errors.Is; the errors that wrap them
// carry the specific reason, which is what a dead-letter row should store.
var (
	// ErrMalformed means the body as a whole cannot be decoded: it is not
	// JSON, its top level is not an object, or its "entry" is missing or not
	// an array. Decode returns it (wrapped) and no payload.
	ErrMalformed = errors.New("malformed webhook body")

	// ErrBadItem is matched by every ItemError: one item of an otherwise
	// decodable body was left out of the typed view.
	ErrBadItem = errors.New("bad webhook item")

	// ErrWrongType means a key of an item holds a value of the wrong JSON type
	// (an object where a string belongs, a bool given as a string, a number
	// that is not an integer or out of range), or a key that an item needs to
	// be routed (a change's field and value) is missing.
	ErrWrongType = errors.New("wrong type")
)

// Reasons are stable, short codes for what went wrong, for a dead-letter
// row's reason column and a metric's reason label; Reason returns the one of
// an error.
const (
	ReasonEmptyBody  = "empty_body"  // the body is empty or only whitespace
	ReasonNotJSON    = "not_json"    // the body is not valid JSON
	ReasonTooDeep    = "too_deep"    // objects and arrays nest deeper than 10000 levels
	ReasonNotObject  = "not_object"  // the top level is valid JSON but not an object
	ReasonNoEntry    = "no_entry"    // "entry" is missing or not an array
	ReasonWrongType  = "wrong_type"  // an item has a key of the wrong type
	ReasonMissingKey = "missing_key" // a change lacks its field or its value
)

// Reason returns the stable reason code of an error from this package: the
// Reason of a SyntaxError, ReasonWrongType or ReasonMissingKey for an item,
// "" for nil and "other" for any other error.
func Reason(err error) string {
	var se *SyntaxError
	var te *TypeError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return se.Reason
	case errors.As(err, &te) && te.Got == "missing":
		return ReasonMissingKey
	case errors.As(err, &te):
		return ReasonWrongType
	}
	return "other"
}

// SyntaxError reports a body that is not valid JSON, or valid JSON of the
// wrong overall shape. It wraps ErrMalformed.
type SyntaxError struct {
	// Reason is one of the Reason constants for a whole body.
	Reason string
	// Offset is the byte offset in the body where the problem was found.
	Offset int
	// Path locates the problem in the document, such as
	// "entry[0].changes[1].value"; it is empty at the top level.
	Path string
	// Msg says what is wrong.
	Msg string
}

func (e *SyntaxError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("meta: %s at offset %d: %v", e.Msg, e.Offset, ErrMalformed)
	}
	return fmt.Sprintf("meta: %s at offset %d (%s): %v", e.Msg, e.Offset, e.Path, ErrMalformed)
}

// Unwrap returns ErrMalformed.
func (e *SyntaxError) Unwrap() error { return ErrMalformed }

// TypeError reports a key whose value has the wrong JSON type, or a missing
// key that an item needs. It wraps ErrWrongType.
type TypeError struct {
	// Path is the key's location relative to the bad item, such as
	// "pricing.billable" inside a status; it is empty when the item itself
	// has the wrong type.
	Path string
	// Got describes what was found ("string", "number out of range",
	// "missing").
	Got string
	// Want describes what was expected ("bool", "integer", "object").
	Want string
}

func (e *TypeError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("got %s, want %s: %v", e.Got, e.Want, ErrWrongType)
	}
	return fmt.Sprintf("%s: got %s, want %s: %v", e.Path, e.Got, e.Want, ErrWrongType)
}

// Unwrap returns ErrWrongType.
func (e *TypeError) Unwrap() error { return ErrWrongType }

// ItemError reports one item that was left out of the typed view because one
// of its keys has the wrong type. The rest of the body was decoded. It
// matches ErrBadItem and unwraps to its cause (a *TypeError).
type ItemError struct {
	// Path locates the item, such as "entry[0].changes[1].value.statuses[2]".
	Path string
	// EntryID is the id of the enclosing entry (the WABA id), when known.
	EntryID string
	// Field is the field of the enclosing change, when known.
	Field string
	// PhoneNumberID is metadata.phone_number_id of the enclosing value, when
	// known.
	PhoneNumberID string
	// Raw is the item's bytes, verbatim (a sub-slice of the body).
	Raw json.RawMessage
	// Err is the cause.
	Err error
}

func (e ItemError) Error() string { return "meta: " + e.Path + ": " + e.Err.Error() }

// Unwrap returns ErrBadItem and the cause.
func (e ItemError) Unwrap() []error { return []error{ErrBadItem, e.Err} }
