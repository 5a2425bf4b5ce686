package chwriter

import (
	"strings"
	"time"

	chcol "github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// column is one column of a table of rows T: its name in ClickHouse and how
// the values of a block of rows are appended to the batch's column.
type column[T any] struct {
	name string
	// add appends the values of rows to dst. perRow is set for a
	// LowCardinality column, which the driver builds row by row anyway.
	add func(dst driver.BatchColumn, perRow bool, s *scratch, rows []T) error
}

// scratch holds the typed slice that one column's values are gathered in
// before dst.Append, which copies them into the driver's own buffers. One
// scratch serves every column of a Write in turn, so a Write allocates no
// slice per column; Writer pools them.
type scratch struct {
	strs  []string
	times []time.Time
	u64   []uint64
	u16   []uint16
	u8    []uint8
	i8    []int8
	i32   []int32
}

// clear drops the references to the strings of the rows just written, so
// that a pooled scratch keeps no rows alive after Write returns.
func (s *scratch) clear() {
	clear(s.strs[:cap(s.strs)])
	s.strs = s.strs[:0]
	// time.Time holds a *Location: drop those too.
	clear(s.times[:cap(s.times)])
	s.times = s.times[:0]
}

// gather returns a column of any type that the driver appends from a []V in
// one call, with the values of get gathered in the scratch slice buf.
func gather[T, V any](name string, buf func(*scratch) *[]V, get func(*T) V) column[T] {
	return column[T]{name: name, add: func(dst driver.BatchColumn, _ bool, s *scratch, rows []T) error {
		b := buf(s)
		*b = (*b)[:0]
		for i := range rows {
			*b = append(*b, get(&rows[i]))
		}
		return dst.Append(*b)
	}}
}

func strsBuf(s *scratch) *[]string     { return &s.strs }
func timesBuf(s *scratch) *[]time.Time { return &s.times }
func u64Buf(s *scratch) *[]uint64      { return &s.u64 }
func u16Buf(s *scratch) *[]uint16      { return &s.u16 }
func u8Buf(s *scratch) *[]uint8        { return &s.u8 }
func i8Buf(s *scratch) *[]int8         { return &s.i8 }
func i32Buf(s *scratch) *[]int32       { return &s.i32 }

// str is a String or LowCardinality(String) column.
func str[T any](name string, get func(*T) string) column[T] {
	bulk := gather(name, strsBuf, get)
	return column[T]{name: name, add: func(dst driver.BatchColumn, perRow bool, s *scratch, rows []T) error {
		if !perRow {
			return bulk.add(dst, false, s, rows)
		}
		// The driver's LowCardinality.Append walks a slice by reflection;
		// AppendRow takes the string as it is.
		for i := range rows {
			if err := dst.AppendRow(get(&rows[i])); err != nil {
				return err
			}
		}
		return nil
	}}
}

// dateTime is a DateTime column; the zero time is stored as 0 (1970-01-01
// 00:00:00), as the driver does.
func dateTime[T any](name string, get func(*T) time.Time) column[T] {
	return gather(name, timesBuf, get)
}

func uint64Col[T any](name string, get func(*T) uint64) column[T] { return gather(name, u64Buf, get) }
func uint16Col[T any](name string, get func(*T) uint16) column[T] { return gather(name, u16Buf, get) }
func int8Col[T any](name string, get func(*T) int8) column[T]     { return gather(name, i8Buf, get) }
func int32Col[T any](name string, get func(*T) int32) column[T]   { return gather(name, i32Buf, get) }

// boolCol is a UInt8 column holding 0 or 1 (18.16 has no Bool).
func boolCol[T any](name string, get func(*T) bool) column[T] {
	return gather(name, u8Buf, func(r *T) uint8 {
		if get(r) {
			return 1
		}
		return 0
	})
}

// int32Array is an Array(Int32) column. It is appended row by row: the
// driver's Array.Append walks the outer slice by reflection, while AppendRow
// of an []int32 takes its typed path.
func int32Array[T any](name string, get func(*T) []int32) column[T] {
	return column[T]{name: name, add: func(dst driver.BatchColumn, _ bool, _ *scratch, rows []T) error {
		for i := range rows {
			if err := dst.AppendRow(get(&rows[i])); err != nil {
				return err
			}
		}
		return nil
	}}
}

// lowCardinality reports whether the server made c a LowCardinality column.
func lowCardinality(c chcol.Interface) bool {
	return strings.HasPrefix(string(c.Type()), "LowCardinality(")
}
