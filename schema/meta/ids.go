package meta

import "strconv"

// Meta's ids are digits. Those that wahook turns into a subject token or a
// KV key (a phone number id, a display number, a WABA id) are checked by shape and
// length as they are decoded: an impossible one fails its item, which
// becomes a dead letter with its path, instead of an id that no subject or
// key can carry (nats-server closes a connection whose control line is
// longer than 4 KiB).
const (
	// MaxNumberIDLen is the most digits of a phone number id; Meta's have
	// 15 to 17.
	MaxNumberIDLen = 32
	// MaxDisplayNumberDigits is the most digits of a display number (E.164
	// has at most 15).
	MaxDisplayNumberDigits = 20
	// maxDisplayNumberLen bounds a display number with its formatting.
	maxDisplayNumberLen = 40
	// MaxWabaIDLen is the most characters of a WABA id (an entry's id);
	// Meta's are 15 to 17 digits.
	MaxWabaIDLen = 64
)

// Descriptions of the shapes, for errors.
const (
	wantNumberID      = "phone number id (1 to 32 digits)"
	wantDisplayNumber = "display phone number (1 to 20 digits, with '+', spaces, '-', '.' or parentheses)"
	wantWabaID        = "WABA id (1 to 64 letters, digits, '-' or '_')"
)

// ValidNumberID reports whether s can be a phone number id: 1 to
// MaxNumberIDLen ASCII digits.
func ValidNumberID(s string) bool {
	if s == "" || len(s) > MaxNumberIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// ValidDisplayNumber reports whether s can be a display phone number: at
// most 40 characters of digits and the formatting Meta writes ('+', ' ',
// '-', '.', '(', ')'), holding 1 to MaxDisplayNumberDigits digits.
func ValidDisplayNumber(s string) bool {
	if len(s) > maxDisplayNumberLen {
		return false
	}
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c):
			digits++
		case c == '+' || c == ' ' || c == '-' || c == '.' || c == '(' || c == ')':
		default:
			return false
		}
	}
	return digits > 0 && digits <= MaxDisplayNumberDigits
}

// ValidWabaID reports whether s can be a WABA id: 1 to MaxWabaIDLen ASCII
// letters, digits, '-' or '_'. Meta's are digits; the letters are for ids
// of the project's own making (tests, tools), which name no real account.
func ValidWabaID(s string) bool {
	if s == "" || len(s) > MaxWabaIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c), c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// id reads a string key that must have the shape valid checks; an empty
// string stands for an absent id and is kept. A value of another shape is a
// TypeError that names its length, never its content.
func (d *decoder) id(dst *string, valid func(string) bool, want string) error {
	if err := d.str(dst); err != nil {
		return err
	}
	if *dst == "" || valid(*dst) {
		return nil
	}
	got := "string of " + strconv.Itoa(len(*dst)) + " bytes"
	*dst = ""
	return d.typeError(got, want)
}

func (d *decoder) numberID(dst *string) error { return d.id(dst, ValidNumberID, wantNumberID) }

func (d *decoder) wabaID(dst *string) error { return d.id(dst, ValidWabaID, wantWabaID) }

func (d *decoder) displayNumber(dst *string) error {
	return d.id(dst, ValidDisplayNumber, wantDisplayNumber)
}
