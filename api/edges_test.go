package api

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Requests the API refused with the wrong code, or took when it should
// not have: an over-long URL answered 431 with code internal (a bug, to
// the client), and from=0001-01-01T00:00:00Z silently became the default
// range.
func TestRequestEdges(t *testing.T) {
	const tok = "token-one-0123456789"
	s := intakeServer(t, &memPublisher{}, Limits{}, &clock{t: time.Now()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() { _ = s.Shutdown(context.Background()) }()
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, path string
		status     int
		code       string
		param      string
	}{
		{"over-long URL", "/api/v1/failures?campaign=" + strings.Repeat("x", 20_000), 431, CodeBadParameter, ""},
		{"over-long campaign", "/api/v1/failures?campaign=" + strings.Repeat("x", 5_000), 400, CodeBadParameter, "campaign"},
		{"year 1", "/api/v1/failures?from=0001-01-01T00:00:00Z", 400, CodeBadParameter, "from"},
		{"year 1 date", "/api/v1/failures?from=0001-01-01", 400, CodeBadParameter, "from"},
		{"after 2106", "/api/v1/failures?to=2200-01-01T00:00:00Z", 400, CodeBadParameter, "to"},
	} {
		code, body := get(tc.path)
		var e struct{ Error Error }
		_ = json.Unmarshal([]byte(body), &e)
		if code != tc.status || e.Error.Code != tc.code || e.Error.Parameter != tc.param {
			t.Errorf("%s: %d %s, want %d %s %q", tc.name, code, body, tc.status, tc.code, tc.param)
		}
	}
}
