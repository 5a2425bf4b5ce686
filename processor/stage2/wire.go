package stage2

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/wahook/wahook/schema"
	"github.com/wahook/wahook/schema/jsonscan"
)

// unmarshalWire reads an EVENTS message into w as json.Unmarshal does. The
// messages stage 1 writes take a fast path (readWire) that reads the few
// fields stage 2 uses and checks the rest is JSON without decoding it;
// anything it is not sure to read exactly as encoding/json would (an
// escape or a non-ASCII byte in a string, a null, a key that differs from a
// field's name only in case, a number that is not a plain integer) goes to
// json.Unmarshal instead, which also gives the error of a bad message.
// FuzzReadWire holds the fast path to encoding/json's result.
func unmarshalWire(data []byte, w *wireEvent) error {
	if readWire(data, w) {
		return nil
	}
	*w = wireEvent{}
	return json.Unmarshal(data, w)
}

// readWire is the fast path: false when it cannot tell (w is then
// partly written).
func readWire(data []byte, w *wireEvent) bool {
	s := wireScanner{b: data}
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "kind":
			v, ok := s.str()
			w.Kind = schema.Kind(v)
			return ok
		case "v":
			n, ok := s.integer(math.MinInt, math.MaxInt)
			w.V = int(n)
			return ok
		case "row":
			return s.object(func(key []byte) bool { return s.rowField(key, w) })
		}
		return s.other(key)
	})
	if !ok {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// rowField reads the row's field key.
func (s *wireScanner) rowField(key []byte, w *wireEvent) bool {
	r := &w.Row
	var dst *string
	switch string(key) {
	case "event_id":
		dst = &r.EventID
	case "phone_number_id":
		dst = &r.PhoneNumberID
	case "waba_id":
		dst = &r.WabaID
	case "message_id":
		dst = &r.MessageID
	case "status":
		dst = &r.Status
	case "recipient_hash":
		dst = &r.RecipientHash
	case "field":
		dst = &r.Field
	case "event":
		dst = &r.Event
	case "new_value":
		dst = &r.NewValue
	case "event_time":
		start := s.i
		if _, ok := s.str(); !ok {
			return false
		}
		return r.EventTime.UnmarshalJSON(s.b[start:s.i]) == nil
	case "code":
		n, ok := s.integer(-1<<31, 1<<31-1)
		r.Code = int32(n)
		return ok
	case "index":
		n, ok := s.integer(0, 1<<16-1)
		r.Index = uint16(n)
		return ok
	case "error_codes":
		codes := []int32{}
		ok := s.array(func() bool {
			n, ok := s.integer(-1<<31, 1<<31-1)
			codes = append(codes, int32(n))
			return ok
		})
		r.ErrorCodes = codes
		return ok
	default:
		return s.other(key)
	}
	v, ok := s.str()
	*dst = v
	return ok
}

// wireScanner reads JSON from b[i:], giving up (false) on what the fast
// path leaves to encoding/json.
type wireScanner struct {
	b []byte
	i int
}

func (s *wireScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next is the next byte after white space, 0 at the end.
func (s *wireScanner) next() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object reads an object, calling field for each key with the scanner on
// its value (which field must read).
func (s *wireScanner) object(field func(key []byte) bool) bool {
	if s.next() != '{' {
		return false
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return true
	}
	for {
		if s.next() != '"' {
			return false
		}
		key, ok := s.rawStr()
		if !ok || s.next() != ':' {
			return false
		}
		s.i++
		if s.next() == 'n' || !field(key) { // a null leaves a field as it is: encoding/json's
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem with the scanner on each element.
func (s *wireScanner) array(elem func() bool) bool {
	if s.next() != '[' {
		return false
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// rawStr reads a string of bytes 0x20-0x7F without escapes, the scanner on
// its opening quote, and returns its bytes.
func (s *wireScanner) rawStr() ([]byte, bool) {
	start := s.i + 1
	j := start + jsonscan.Plain(s.b[start:])
	if j == len(s.b) || s.b[j] != '"' {
		return nil, false // an escape, a control character, a byte outside ASCII or the end
	}
	s.i = j + 1
	return s.b[start:j], true
}

func (s *wireScanner) str() (string, bool) {
	if s.next() != '"' {
		return "", false
	}
	b, ok := s.rawStr()
	return string(b), ok
}

// integer reads an integer in [lo, hi] written as JSON writes one: no
// fraction, no exponent.
func (s *wireScanner) integer(lo, hi int64) (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		if lo >= 0 {
			return 0, false // encoding/json refuses even -0 for an unsigned field
		}
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.b[digits] == '0' && s.i-digits > 1) {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil && n >= lo && n <= hi
}

// other skips the value of a key that is not one of the fields. The
// fields' names are lower case: encoding/json would match a key with an
// upper-case letter to one of them regardless of case, so such a key goes
// to it.
func (s *wireScanner) other(key []byte) bool {
	for _, c := range key {
		if c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return s.skip(0)
}

// skip checks and skips a value of any type (depth: how deep in objects
// and arrays it is; deeper than encoding/json goes is left to it).
func (s *wireScanner) skip(depth int) bool {
	if depth > 100 {
		return false
	}
	switch c := s.next(); {
	case c == '{':
		return s.object(func(key []byte) bool { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case c == '"':
		_, ok := s.rawStr()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return false
}

func (s *wireScanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *wireScanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		start := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i - start
	}
	start := s.i
	n := digits()
	if n == 0 || (s.b[start] == '0' && n > 1) {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
