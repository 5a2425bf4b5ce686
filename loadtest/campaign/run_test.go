package campaign

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestNATSURLNotInErrors: a NATS URL the client cannot parse is not quoted
// in the campaign's error (it may hold a password; the parser's error
// repeats it, and the command prints it); other errors pass as they are.
func TestNATSURLNotInErrors(t *testing.T) {
	_, err := nats.Connect("nats://user:p%zzSECRET@127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("the client's own error: %v (the test needs one that quotes the URL)", err)
	}
	if got := redactURLError(err); strings.Contains(got.Error(), "SECRET") || !strings.Contains(got.Error(), "cannot be parsed") {
		t.Errorf("redacted: %v", got)
	}
	other := errors.New("no servers available for connection")
	if got := redactURLError(other); got != other {
		t.Errorf("another error changed: %v", got)
	}
}
