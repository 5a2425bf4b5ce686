package meta

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/wahook/wahook/schema/jsonscan"
)

// This file holds the byte-level JSON scanner: whitespace, strings, numbers,
// literals and skipping whole values. It is strict (RFC 8259, as
// encoding/json.Valid) so that a body it accepts is valid JSON; the fuzz
// tests compare it with encoding/json.

// maxDepth bounds the nesting of objects and arrays, as encoding/json does,
// so that a hostile body cannot exhaust the stack.
const maxDepth = 10000

// ws skips whitespace.
func (d *decoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\n', '\r', '\t':
			d.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte without consuming it, or 0
// at the end of the input.
func (d *decoder) peek() byte {
	d.ws()
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// syntax returns a SyntaxError for invalid JSON at the current position.
func (d *decoder) syntax(msg string) error { return d.fail(ReasonNotJSON, msg) }

// fail returns a SyntaxError with the given reason at the current position.
func (d *decoder) fail(reason, msg string) error {
	return &SyntaxError{Reason: reason, Offset: d.pos, Path: d.pathString(len(d.path)), Msg: msg}
}

// unexpected returns a SyntaxError for the byte at the current position.
func (d *decoder) unexpected(looking string) error {
	if d.pos >= len(d.data) {
		return d.syntax("unexpected end of input looking for " + looking)
	}
	return d.syntax(fmt.Sprintf("invalid character %q looking for %s", d.data[d.pos], looking))
}

// enter counts one more level of nesting.
func (d *decoder) enter() error {
	d.depth++
	if d.depth > maxDepth {
		return d.fail(ReasonTooDeep, "nesting deeper than 10000 levels")
	}
	return nil
}

// scanString consumes the string at d.pos, which must start with '"'. It
// returns the bytes between the quotes and whether they can be used as they
// are (no escapes, no bytes outside ASCII).
func (d *decoder) scanString() (raw []byte, plain bool, err error) {
	data := d.data
	start := d.pos + 1
	i := start
	plain = true
	for {
		// Past the bytes that stand for themselves: 0x20-0x7F except '"'
		// and '\\'.
		i += jsonscan.Plain(data[i:])
		if i >= len(data) {
			d.pos = i
			return nil, false, d.syntax("unexpected end of input in string")
		}
		switch c := data[i]; {
		case c == '"':
			d.pos = i + 1
			return data[start:i], plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(data) {
				d.pos = i + 1
				return nil, false, d.syntax("unexpected end of input in string escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) || hex4(data[i+2:i+6]) < 0 {
					d.pos = i
					return nil, false, d.syntax(`invalid \u escape in string`)
				}
				i += 6
			default:
				d.pos = i
				return nil, false, d.syntax(fmt.Sprintf("invalid escape %q in string", data[i+1]))
			}
		case c < 0x20:
			d.pos = i
			return nil, false, d.syntax(fmt.Sprintf("invalid control character %q in string", c))
		default: // c >= 0x80: checked (and repaired) by unquote.
			plain = false
			i++
			for i < len(data) && data[i] >= 0x80 {
				i++
			}
		}
	}
}

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unquote turns the validated contents of a JSON string into UTF-8 the way
// encoding/json does: escapes are decoded, a surrogate pair becomes one rune,
// and a lone surrogate or an invalid UTF-8 byte becomes U+FFFD.
func unquote(raw []byte) []byte {
	buf := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch raw[i+1] {
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != utf8.RuneError {
							buf = utf8.AppendRune(buf, pair)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				buf = utf8.AppendRune(buf, r)
				continue
			default: // '"', '\\', '/'
				buf = append(buf, raw[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			buf = utf8.AppendRune(buf, r)
			i += size
		}
	}
	return buf
}

// cleanString returns the Go string for validated string contents.
func cleanString(raw []byte, plain bool) string {
	if plain || (!hasBackslash(raw) && utf8.Valid(raw)) {
		return string(raw)
	}
	return string(unquote(raw))
}

func hasBackslash(b []byte) bool {
	for _, c := range b {
		if c == '\\' {
			return true
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber consumes the number at d.pos and returns its literal.
func (d *decoder) scanNumber() ([]byte, error) {
	data := d.data
	start := d.pos
	i := start
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		d.pos = i
		return nil, d.unexpected("digit in number")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			d.pos = i
			return nil, d.unexpected("digit after decimal point")
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			d.pos = i
			return nil, d.unexpected("digit in exponent")
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	d.pos = i
	return data[start:i], nil
}

// literal consumes the literal lit (true, false or null).
func (d *decoder) literal(lit string) error {
	end := d.pos + len(lit)
	if end > len(d.data) || string(d.data[d.pos:end]) != lit {
		for i := 0; i < len(lit) && d.pos < len(d.data) && d.data[d.pos] == lit[i]; i++ {
			d.pos++
		}
		return d.unexpected("literal " + lit)
	}
	d.pos = end
	return nil
}

// skipValue consumes one value of any type, validating it.
func (d *decoder) skipValue() error {
	switch c := d.peek(); c {
	case '{':
		d.pos++
		if err := d.enter(); err != nil {
			return err
		}
		if d.peek() == '}' {
			d.pos++
			d.depth--
			return nil
		}
		for {
			if d.peek() != '"' {
				return d.unexpected("object key")
			}
			if _, _, err := d.scanString(); err != nil {
				return err
			}
			if d.peek() != ':' {
				return d.unexpected("':' after object key")
			}
			d.pos++
			if err := d.skipValue(); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.pos++
			case '}':
				d.pos++
				d.depth--
				return nil
			default:
				return d.unexpected("',' or '}' after object value")
			}
		}
	case '[':
		d.pos++
		if err := d.enter(); err != nil {
			return err
		}
		if d.peek() == ']' {
			d.pos++
			d.depth--
			return nil
		}
		for {
			if err := d.skipValue(); err != nil {
				return err
			}
			switch d.peek() {
			case ',':
				d.pos++
			case ']':
				d.pos++
				d.depth--
				return nil
			default:
				return d.unexpected("',' or ']' after array element")
			}
		}
	case '"':
		_, _, err := d.scanString()
		return err
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		if c == '-' || isDigit(c) {
			_, err := d.scanNumber()
			return err
		}
		return d.unexpected("value")
	}
}

// skipFast moves past the object or array at d.pos by matching brackets and
// strings, without validating. It is used to find the end of a change's value
// before its field is known; the bytes it passes over are validated later by
// the typed decode or by skipValue, which must end exactly where skipFast did
// (see decodeValueAt). It never reads past the end of the input.
func (d *decoder) skipFast() {
	data := d.data
	depth := 0
	for i := d.pos; i < len(data); i++ {
		switch data[i] {
		case '"':
			// To the closing quote, past escaped characters.
			for i++; i < len(data); i += 2 {
				i += jsonscan.QuoteOrBackslash(data[i:])
				if i >= len(data) || data[i] == '"' {
					break
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				d.pos = i + 1
				return
			}
		}
	}
	d.pos = len(data)
}
