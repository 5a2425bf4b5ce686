package meta

import (
	"encoding/json"
	"strconv"
	"strings"
)

// decoder walks one body. Typed values are decoded by a decode method per
// struct that calls d.object and the readers below; unknown keys go through
// d.extra.
type decoder struct {
	data  []byte
	pos   int
	depth int
	// path is the current location: one segment per object key or array
	// index entered. It is rendered to a string only for errors and unknown
	// keys.
	path     []seg
	problems []ItemError
	// dropped counts the problems past MaxProblems, which are not kept.
	dropped int
	unknown []UnknownKey
	// unknownDropped counts the unknown keys past MaxUnknown, which are
	// validated but not kept.
	unknownDropped int
	// spans are the records (problems and unknown keys) of the known keys
	// read so far in each object being decoded, for the keys that left
	// any; those of the innermost object start at scope. A key given again
	// replaces its value, so the records of its earlier value go (forget).
	spans []span
	scope int
	// keep is set by extra: the key's value is added to the struct's Extra
	// rather than replacing anything, so an earlier copy stays recorded.
	keep bool
	// inEdit is set while the message inside an edit is decoded.
	inEdit bool
}

// span is what the value of one key added to the records: problems
// [p0, p1), unknown keys [u0, u1), and counts of each past their limit.
type span struct {
	key                    []byte
	p0, p1, u0, u1, pd, ud int
}

// mark returns the records' lengths and counts now, to start a span.
func (d *decoder) mark(key []byte) span {
	return span{key: key, p0: len(d.problems), u0: len(d.unknown), pd: d.dropped, ud: d.unknownDropped}
}

// since closes a span started by mark, and reports whether it holds any
// record.
func (d *decoder) since(s *span) bool {
	s.p1, s.u1, s.pd, s.ud = len(d.problems), len(d.unknown), d.dropped-s.pd, d.unknownDropped-s.ud
	return s.p1 > s.p0 || s.u1 > s.u0 || s.pd > 0 || s.ud > 0
}

// cut removes the records of a span: the problems and unknown keys found in
// a value that a later copy of its key replaced.
func (d *decoder) cut(s span) {
	d.problems = append(d.problems[:s.p0], d.problems[s.p1:]...)
	d.unknown = append(d.unknown[:s.u0], d.unknown[s.u1:]...)
	d.dropped -= s.pd
	d.unknownDropped -= s.ud
}

// forget cuts the records of an earlier copy of key in the current object,
// and shifts the spans recorded after it.
func (d *decoder) forget(key []byte) {
	for i := d.scope; i < len(d.spans); i++ {
		s := d.spans[i]
		if string(s.key) != string(key) {
			continue
		}
		d.cut(s)
		np, nu := s.p1-s.p0, s.u1-s.u0
		for j := i + 1; j < len(d.spans); j++ {
			d.spans[j].p0 -= np
			d.spans[j].p1 -= np
			d.spans[j].u0 -= nu
			d.spans[j].u1 -= nu
		}
		d.spans = append(d.spans[:i], d.spans[i+1:]...)
		return
	}
}

// seg is one step of a path: an object key, or an array index when idx >= 0.
type seg struct {
	key []byte
	idx int
}

func (d *decoder) push(key []byte) { d.path = append(d.path, seg{key: key, idx: -1}) }
func (d *decoder) pop()            { d.path = d.path[:len(d.path)-1] }

// pathString renders the first n segments of the path, for example
// "entry[0].changes[1].value.statuses[2]".
func (d *decoder) pathString(n int) string {
	var b strings.Builder
	for _, s := range d.path[:n] {
		if s.idx >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.idx))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(s.key)
	}
	return b.String()
}

// wrongType returns a *TypeError for the value at d.pos, or a SyntaxError if
// that is not the start of any JSON value.
func (d *decoder) wrongType(want string) error {
	var got string
	switch c := d.peek(); {
	case c == '{':
		got = "object"
	case c == '[':
		got = "array"
	case c == '"':
		got = "string"
	case c == 't' || c == 'f':
		got = "bool"
	case c == 'n':
		got = "null"
	case c == '-' || isDigit(c):
		got = "number"
	default:
		return d.unexpected("value")
	}
	return d.typeError(got, want)
}

// typeError returns a *TypeError at the current path. Its Path is made
// relative to the bad item by the item boundary (decodeItems).
func (d *decoder) typeError(got, want string) error {
	return &TypeError{Path: d.pathString(len(d.path)), Got: got, Want: want}
}

// null consumes a null.
func (d *decoder) null() error { return d.literal("null") }

// object decodes the object at d.pos, calling fn for each key with d.pos at
// the key's value; fn must consume exactly that value. A null is an empty
// object.
//
// A known key given twice takes its last value, as in encoding/json; the
// problems and unknown keys found in the earlier value are no longer
// reported, since that value is not in the typed view (see forget). An
// unknown key given twice is kept twice, on Extra and in Payload.Unknown.
func (d *decoder) object(fn func(key []byte) error) error {
	switch d.peek() {
	case '{':
		d.pos++
	case 'n':
		return d.null()
	default:
		return d.wrongType("object")
	}
	if err := d.enter(); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.pos++
		d.depth--
		return nil
	}
	outer := d.scope
	d.scope = len(d.spans)
	for {
		if d.peek() != '"' {
			return d.unexpected("object key")
		}
		raw, plain, err := d.scanString()
		if err != nil {
			return err
		}
		key := raw
		if !plain {
			key = unquote(raw)
		}
		if d.peek() != ':' {
			return d.unexpected("':' after object key")
		}
		d.pos++
		d.push(key)
		if len(d.spans) > d.scope {
			d.forget(key)
		}
		// The records' lengths and counts before the value, kept as plain
		// ints: a span is made only for a value that added records, rare.
		p0, u0, pd, ud := len(d.problems), len(d.unknown), d.dropped, d.unknownDropped
		d.keep = false
		if err := fn(key); err != nil {
			return err
		}
		if !d.keep && (len(d.problems) != p0 || len(d.unknown) != u0 || d.dropped != pd || d.unknownDropped != ud) {
			d.spans = append(d.spans, span{key: key, p0: p0, p1: len(d.problems), u0: u0, u1: len(d.unknown),
				pd: d.dropped - pd, ud: d.unknownDropped - ud})
		}
		d.keep = false // an inner object's last unknown key is not this key's
		d.pop()
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			d.depth--
			d.spans, d.scope = d.spans[:d.scope], outer
			return nil
		default:
			return d.unexpected("',' or '}' after object value")
		}
	}
}

// array decodes the array at d.pos, calling fn for each element with d.pos at
// the element; fn must consume exactly the element. A null is an empty array.
func (d *decoder) array(fn func() error) error {
	switch d.peek() {
	case '[':
		d.pos++
	case 'n':
		return d.null()
	default:
		return d.wrongType("array")
	}
	if err := d.enter(); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.pos++
		d.depth--
		return nil
	}
	for i := 0; ; i++ {
		d.path = append(d.path, seg{idx: i})
		if err := fn(); err != nil {
			return err
		}
		d.pop()
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
}

// MaxUnknown is the most unknown keys a Payload keeps; the others are
// validated and counted (Payload.UnknownDropped) but kept nowhere, neither
// in Payload.Unknown nor on the Extra and Unknown of their struct and item.
// Each kept key costs a path, a copy of its name and a field on its struct
// and on each enclosing item, far more than the few bytes a key like "1":0
// takes in the body; the limit keeps a body of a million such keys from
// costing hundreds of times its size. The item's Raw still holds them.
const MaxUnknown = 1000

// extra keeps the value of an unknown key, both on the struct (dst) and in
// the body's list of unknown keys; past MaxUnknown it only counts it.
func (d *decoder) extra(dst *Extras, key []byte) error {
	start := d.wsPos()
	if err := d.skipValue(); err != nil {
		return err
	}
	d.keep = true
	if len(d.unknown) >= MaxUnknown {
		d.unknownDropped++
		return nil
	}
	raw := json.RawMessage(d.data[start:d.pos])
	*dst = append(*dst, RawField{Key: string(key), Value: raw})
	d.unknown = append(d.unknown, UnknownKey{Path: d.pathString(len(d.path)), Value: raw})
	return nil
}

// wsPos skips whitespace and returns the position of the next value.
func (d *decoder) wsPos() int {
	d.ws()
	return d.pos
}

// raw keeps the value at d.pos verbatim, after validating it.
func (d *decoder) raw(dst *json.RawMessage) error {
	start := d.wsPos()
	if err := d.skipValue(); err != nil {
		return err
	}
	*dst = d.data[start:d.pos]
	return nil
}

// scalar reads a string, or a number as its literal text (docs/meta-webhooks.md 11.2
// rule 4: ids stay strings even if one arrives as a number). A null reads as
// "".
func (d *decoder) scalar(want string) (text []byte, plain bool, isNum bool, err error) {
	switch c := d.peek(); {
	case c == '"':
		raw, plain, err := d.scanString()
		return raw, plain, false, err
	case c == 'n':
		return nil, true, false, d.null()
	case c == '-' || isDigit(c):
		lit, err := d.scanNumber()
		return lit, true, true, err
	default:
		return nil, false, false, d.wrongType(want)
	}
}

// str reads a string field.
func (d *decoder) str(dst *string) error {
	raw, plain, _, err := d.scalar("string")
	if err != nil {
		return err
	}
	*dst = cleanString(raw, plain)
	return nil
}

// enum reads a string field whose values come from a small known set, such
// as a status or a pricing category, without allocating for known values.
func (d *decoder) enum(dst *string) error {
	raw, plain, _, err := d.scalar("string")
	if err != nil {
		return err
	}
	if plain {
		if s, ok := interned[string(raw)]; ok {
			*dst = s
			return nil
		}
	}
	*dst = cleanString(raw, plain)
	return nil
}

// flexString reads a FlexString: a string, or a number kept as its literal.
func (d *decoder) flexString(dst *FlexString) error {
	raw, plain, _, err := d.scalar("string or number")
	if err != nil {
		return err
	}
	*dst = FlexString(cleanString(raw, plain))
	return nil
}

// int reads a FlexInt64: a JSON number or a string holding one.
func (d *decoder) int(dst *FlexInt64) error {
	raw, plain, isNum, err := d.scalar("integer")
	if err != nil {
		return err
	}
	if !plain {
		raw = unquote(raw)
	}
	n, why := parseInt(raw)
	if why != "" {
		if !isNum {
			why = "string holding " + why
		}
		return d.typeError(why, "integer")
	}
	*dst = FlexInt64(n)
	return nil
}

// float reads a FlexFloat64: a JSON number or a string holding one.
func (d *decoder) float(dst *FlexFloat64) error {
	raw, plain, isNum, err := d.scalar("number")
	if err != nil {
		return err
	}
	if !plain {
		raw = unquote(raw)
	}
	f, why := parseFloat(raw)
	if why != "" {
		if !isNum {
			why = "string holding " + why
		}
		return d.typeError(why, "number")
	}
	*dst = FlexFloat64(f)
	return nil
}

// bool reads a bool; null reads as false. Strings are not accepted: only
// numbers have two spellings (docs/meta-webhooks.md 11.2 rule 4).
func (d *decoder) bool(dst *bool) error {
	switch d.peek() {
	case 't':
		*dst = true
		return d.literal("true")
	case 'f':
		*dst = false
		return d.literal("false")
	case 'n':
		*dst = false
		return d.null()
	default:
		return d.wrongType("bool")
	}
}

// optBool reads a bool that may be absent; null leaves it absent.
func (d *decoder) optBool(dst **bool) error {
	if d.peek() == 'n' {
		*dst = nil
		return d.null()
	}
	v := new(bool)
	if err := d.bool(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

// unknownSince returns the unknown keys recorded since the n-th, keyed by
// their path relative to the item whose path has pathLen segments. It costs
// nothing for the usual item, which has none.
func (d *decoder) unknownSince(n, pathLen int) Extras {
	if len(d.unknown) == n {
		return nil
	}
	prefix := d.pathString(pathLen)
	out := make(Extras, 0, len(d.unknown)-n)
	for _, u := range d.unknown[n:] {
		out = append(out, RawField{Key: strings.TrimPrefix(strings.TrimPrefix(u.Path, prefix), "."), Value: u.Value})
	}
	return out
}

// decodable is a struct type with a decode method.
type decodable[T any] interface {
	*T
	decode(d *decoder) error
}

// item is a list element that keeps its own bytes and its unknown keys.
type item[T any] interface {
	decodable[T]
	setItem(raw json.RawMessage, unknown Extras)
}

// problemFiller is implemented by items that can add their own context to
// the ItemError that reports them (an entry its id, a change its field).
type problemFiller interface {
	fillProblem(p *ItemError)
}

// positioned is implemented by items that remember their index in the body
// (entries and changes), for paths that stay true after a bad item.
type positioned interface {
	setPos(i int)
}

// decodePtr decodes an optional object; null leaves it nil. A copy of the
// same key given again replaces the object; encoding/json would merge the
// two into the one it allocated, a view that matches neither copy.
func decodePtr[T any, PT decodable[T]](d *decoder, dst **T) error {
	if d.peek() == 'n' {
		*dst = nil
		return d.null()
	}
	v := new(T)
	if err := PT(v).decode(d); err != nil {
		return err
	}
	*dst = v
	return nil
}

// decodeIn decodes an object held by value, replacing whatever an earlier
// copy of the same key left in it, as decodePtr does; a null makes it
// empty.
func decodeIn[T any, PT decodable[T]](d *decoder, dst *T) error {
	var zero T
	*dst = zero
	return PT(dst).decode(d)
}

// decodeArray decodes an array of objects that belong to their parent item:
// an error in one element is an error of the parent.
func decodeArray[T any, PT decodable[T]](d *decoder, dst *[]T) error {
	*dst = nil
	return d.array(func() error {
		var zero T
		*dst = append(*dst, zero)
		return PT(&(*dst)[len(*dst)-1]).decode(d)
	})
}

// decodeStrings decodes an array of strings.
func decodeStrings(d *decoder, dst *[]string) error {
	*dst = nil
	return d.array(func() error {
		var s string
		err := d.str(&s)
		*dst = append(*dst, s)
		return err
	})
}

// decodeItems decodes an array whose elements are items of their own
// (docs/architecture.md: one bad item never costs the other items of the same POST). An
// element with a wrong-typed key is left out of dst and reported in
// d.problems with its path and bytes; a syntax error still fails the body.
func decodeItems[T any, PT item[T]](d *decoder, dst *[]T) error {
	*dst = nil
	return d.array(func() error {
		start := d.wsPos()
		pathLen, probLen, unkLen, depth, dropped, unkDropped := len(d.path), len(d.problems), len(d.unknown), d.depth, d.dropped, d.unknownDropped
		spans, scope := len(d.spans), d.scope
		var zero T
		*dst = append(*dst, zero)
		v := PT(&(*dst)[len(*dst)-1])
		var err error
		if d.peek() == '{' {
			err = v.decode(d)
		} else {
			err = d.wrongType("object") // Every item is an object; a null item is bad.
		}
		if err == nil {
			v.setItem(d.data[start:d.pos], d.unknownSince(unkLen, pathLen))
			if p, ok := any(v).(positioned); ok {
				p.setPos(d.path[pathLen-1].idx)
			}
			return nil
		}
		te, ok := err.(*TypeError)
		if !ok {
			return err
		}
		p := ItemError{Path: d.pathString(pathLen), Err: te}
		te.Path = strings.TrimPrefix(strings.TrimPrefix(te.Path, p.Path), ".")
		if f, ok := any(v).(problemFiller); ok {
			f.fillProblem(&p)
		}
		(*dst)[len(*dst)-1] = zero
		*dst = (*dst)[:len(*dst)-1]
		d.path, d.problems, d.unknown, d.depth, d.dropped = d.path[:pathLen], d.problems[:probLen], d.unknown[:unkLen], depth, dropped
		d.unknownDropped, d.spans, d.scope, d.keep = unkDropped, d.spans[:spans], scope, false
		d.pos = start
		if err := d.skipValue(); err != nil {
			return err
		}
		p.Raw = d.data[start:d.pos]
		d.problem(p)
		return nil
	})
}

// MaxProblems is the most bad items a Payload lists; the others are only
// counted (Payload.ProblemsDropped), so that a body of a million bad items
// costs no more memory than its bytes.
const MaxProblems = 100

// problem records a bad item.
func (d *decoder) problem(p ItemError) {
	if len(d.problems) >= MaxProblems {
		d.dropped++
		return
	}
	d.problems = append(d.problems, p)
}
