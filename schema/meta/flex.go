package meta

import (
	"math"
	"strconv"
)

// FlexInt64 is an integer that Meta sends as a JSON number in some payloads
// and as a string of digits in others (timestamps, error codes; docs/meta-webhooks.md
// 2 and 11.2 rule 4). Both decode to the same value; null and "" decode to
// 0. A number with a fraction, or out of the int64 range, is a type error.
type FlexInt64 int64

// FlexFloat64 is a number that may arrive as a JSON number or as a string
// holding one, such as a location's latitude (docs/meta-webhooks.md 11.1).
type FlexFloat64 float64

// FlexString is a scalar that may arrive as a JSON string or as a JSON
// number, such as max_daily_conversations_per_business ("TIER_2K" or 2000,
// docs/meta-webhooks.md 11.1). A number is kept as its literal text ("2000"), never
// through a float, so long ids survive; null decodes to "".
type FlexString string

// Int64 returns s as an integer if it holds one.
func (s FlexString) Int64() (int64, bool) {
	n, why := parseInt([]byte(s))
	return n, why == "" && s != ""
}

// UnmarshalJSON accepts a number or a string holding one, so that the type
// behaves the same under encoding/json as under Decode.
func (n *FlexInt64) UnmarshalJSON(b []byte) error {
	return unmarshalWith(b, func(d *decoder) error { return d.int(n) })
}

// UnmarshalJSON accepts a number or a string holding one.
func (f *FlexFloat64) UnmarshalJSON(b []byte) error {
	return unmarshalWith(b, func(d *decoder) error { return d.float(f) })
}

// UnmarshalJSON accepts a string or a number (kept as its literal).
func (s *FlexString) UnmarshalJSON(b []byte) error {
	return unmarshalWith(b, func(d *decoder) error { return d.flexString(s) })
}

// unmarshalWith runs one reader over a single JSON value.
func unmarshalWith(b []byte, read func(d *decoder) error) error {
	d := decoder{data: b}
	if err := read(&d); err != nil {
		return err
	}
	if d.peek() != 0 || d.pos < len(d.data) {
		return d.unexpected("end of value")
	}
	return nil
}

// isNumber reports whether b is exactly one JSON number.
func isNumber(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	d := decoder{data: b}
	_, err := d.scanNumber()
	return err == nil && d.pos == len(b)
}

// parseInt parses an integer given as a JSON number literal (or the contents
// of a string holding one). An empty input is 0. On failure it returns a
// short description of what was found, for a TypeError.
func parseInt(b []byte) (int64, string) {
	if len(b) == 0 {
		return 0, ""
	}
	if !isNumber(b) {
		return 0, "text that is not a number"
	}
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	var u uint64
	for _, c := range digits {
		if !isDigit(c) {
			// A fraction or an exponent: accept it only if the value is an
			// integer that fits (2000.0, 1e3).
			f, err := strconv.ParseFloat(string(b), 64)
			if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
				return 0, "number that is not an integer"
			}
			return int64(f), ""
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, "number out of range"
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u == 1<<63:
		return math.MinInt64, ""
	case neg && u < 1<<63:
		return -int64(u), ""
	case !neg && u <= math.MaxInt64:
		return int64(u), ""
	}
	return 0, "number out of range"
}

// parseFloat parses a number given as a JSON number literal (or the contents
// of a string holding one). An empty input is 0.
func parseFloat(b []byte) (float64, string) {
	if len(b) == 0 {
		return 0, ""
	}
	if !isNumber(b) {
		return 0, "text that is not a number"
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return 0, "number out of range"
	}
	return f, ""
}
