package httpbody

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestReadLimited: a body read to its end whatever its size against the
// first allocation; one byte past the limit refused; a reader that fails
// first is an incomplete body.
func TestReadLimited(t *testing.T) {
	for _, size := range []int{0, 1, 100, 4096, 4097, 70_000} {
		want := bytes.Repeat([]byte("x"), size)
		got, err := ReadLimited(iotest.HalfReader(bytes.NewReader(want)), 1000, 70_000)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: got %d bytes, %v", size, len(got), err)
		}
	}
	if _, err := ReadLimited(bytes.NewReader(make([]byte, 70_001)), 1000, 70_000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte past the limit: %v, want ErrTooLarge", err)
	}
	cut := io.MultiReader(bytes.NewReader(make([]byte, 5000)), iotest.ErrReader(io.ErrUnexpectedEOF))
	if _, err := ReadLimited(cut, 1000, 70_000); !errors.Is(err, ErrIncomplete) {
		t.Errorf("a body cut short: %v, want ErrIncomplete", err)
	}
}
