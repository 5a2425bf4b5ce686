package loadtest

import (
	"fmt"
	"strconv"
	"strings"
)

// Number is one business number of a run, with the ids Meta would give it.
// Ids carry the run's id, so that several runs share a database apart; the
// display numbers are fictional (North American 555-01XX numbers).
type Number struct {
	PhoneNumberID string `json:"phone_number_id"`
	Display       string `json:"display_phone_number"`
	WABAID        string `json:"waba_id"`
	Coexistence   bool   `json:"coexistence,omitempty"`
}

// fleet is the numbers and accounts of one run; read-only once made.
type fleet struct {
	run     uint32
	numbers []Number
	wabas   []string
	prefix  string // message ids of this run start with it
}

func newFleet(m Model) *fleet {
	run := m.RunID % 100_000_000
	f := &fleet{run: m.RunID, prefix: "wamid.HBgLWH" + strconv.FormatUint(uint64(m.RunID), 36) + "_"}
	for w := 0; w < m.wabas(); w++ {
		f.wabas = append(f.wabas, fmt.Sprintf("8%08d%06d", run, w))
	}
	for n := 0; n < m.Numbers; n++ {
		f.numbers = append(f.numbers, Number{
			PhoneNumberID: fmt.Sprintf("9%08d%06d", run, n),
			Display:       fakePhone(n, 200),
			WABAID:        f.wabas[n%len(f.wabas)],
			Coexistence:   n < m.Coexistence,
		})
	}
	return f
}

// fakePhone is the i-th fictional number of the area codes from area on:
// +1 AAA 555 01XX, a hundred per area code (555-0100 to 555-0199 are kept
// for fiction in every North American area code).
func fakePhone(i, area int) string {
	return fmt.Sprintf("1%03d55501%02d", area+i/100, i%100)
}

// recipientCount is how many fictional users there are: area codes 300 to
// 999, a hundred each.
const recipientCount = 70_000

// recipient is the user that message seq of number n goes to, or that
// inbound message seq comes from.
func recipient(n int32, seq uint32, inbound bool) string {
	h := uint64(n)*0x9e3779b97f4a7c15 ^ uint64(seq)*0xbf58476d1ce4e5b9
	if inbound {
		h ^= 0x94d049bb133111eb
	}
	h ^= h >> 31
	return fakePhone(int(h%recipientCount), 300)
}

// Kinds of message ids.
const (
	idOutbound = 'o'
	idInbound  = 'i'
	idEcho     = 'e'
)

// appendMessageID appends the wamid of a message: the run's prefix, the
// kind, the number and the sequence, in base 36.
func (f *fleet) appendMessageID(b []byte, kind byte, n int32, seq uint32) []byte {
	b = append(b, f.prefix...)
	b = append(b, kind)
	b = strconv.AppendUint(b, uint64(n), 36)
	b = append(b, '_')
	return strconv.AppendUint(b, uint64(seq), 36)
}

func (f *fleet) messageID(kind byte, n int32, seq uint32) string {
	return string(f.appendMessageID(nil, kind, n, seq))
}

// parseMessageID reverses appendMessageID for this run's ids.
func (f *fleet) parseMessageID(id string) (kind byte, n int32, seq uint32, ok bool) {
	rest, ok := strings.CutPrefix(id, f.prefix)
	if !ok || len(rest) < 3 {
		return 0, 0, 0, false
	}
	kind = rest[0]
	num, sq, ok := strings.Cut(rest[1:], "_")
	if !ok {
		return 0, 0, 0, false
	}
	nn, err1 := strconv.ParseUint(num, 36, 31)
	ss, err2 := strconv.ParseUint(sq, 36, 32)
	if err1 != nil || err2 != nil || int(nn) >= len(f.numbers) {
		return 0, 0, 0, false
	}
	return kind, int32(nn), uint32(ss), true
}

// numberIndex maps phone number ids to their index.
func (f *fleet) numberIndex() map[string]int32 {
	m := make(map[string]int32, len(f.numbers))
	for i, n := range f.numbers {
		m[n.PhoneNumberID] = int32(i)
	}
	return m
}

// sqlList is the numbers' or accounts' ids as an SQL list: ('1','2').
func sqlList(ids []string) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\'')
		b.WriteString(id) // digits only: made by newFleet
		b.WriteByte('\'')
	}
	b.WriteByte(')')
	return b.String()
}

func (f *fleet) phoneNumberIDs() []string {
	ids := make([]string, len(f.numbers))
	for i, n := range f.numbers {
		ids[i] = n.PhoneNumberID
	}
	return ids
}
