package schema

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestLookupErrorVerdicts(t *testing.T) {
	for _, tc := range []struct {
		code      int32
		class     ErrorClass
		verdict   Verdict
		retryable bool
	}{
		{130429, ClassThroughput, VerdictSlowDown, true},
		{131056, ClassPairRate, VerdictWaitRecipient, true},
		{131057, ClassMaintenance, VerdictPause, true},
		{131048, ClassQuality, VerdictStop, false},
		{131026, ClassUndeliverable, VerdictNotRateLimit, false},
		{132015, ClassTemplate, VerdictNotRateLimit, false},
		{134101, ClassTemplate, VerdictNotRateLimit, true},
		{131000, ClassService, VerdictNotRateLimit, true},
		{250, ClassAuth, VerdictStop, false},
		// A number that cannot send at all: every message from it fails
		// until it is put right (they were a request or registration
		// error, not_rate_limit, and the signal let its sends go on).
		{33, ClassNumberUnusable, VerdictStop, false},
		{131045, ClassNumberUnusable, VerdictStop, false},
		{133010, ClassNumberUnusable, VerdictStop, false},
		{133005, ClassRegistration, VerdictNotRateLimit, false},
	} {
		e, ok := LookupError(tc.code)
		if !ok || e.Class != tc.class || e.Verdict != tc.verdict || e.Retryable != tc.retryable || e.Title == "" {
			t.Errorf("LookupError(%d) = %+v, %v; want class %s verdict %s retryable %v", tc.code, e, ok, tc.class, tc.verdict, tc.retryable)
		}
	}
	if e, ok := LookupError(987654); ok || e.Class != ClassUnknown || e.Title != "" {
		t.Errorf("unknown code: %+v, %v", e, ok)
	}
}

func TestErrorClassesComplete(t *testing.T) {
	seen := map[ErrorClass]bool{}
	for _, c := range ErrorClasses() {
		if _, ok := classVerdict[c]; !ok {
			t.Errorf("class %s has no verdict", c)
		}
		seen[c] = true
	}
	for c := range classVerdict {
		if !seen[c] {
			t.Errorf("class %s missing from ErrorClasses", c)
		}
	}
	for _, e := range ErrorCodes() {
		if !seen[e.Class] {
			t.Errorf("code %d has class %q outside ErrorClasses", e.Code, e.Class)
		}
	}
}

// Every code in the tables of docs/meta-webhooks.md section 10 (10.1 to
// 10.4) is in the catalogue, and every code of the catalogue is named in
// section 10 (10.5 included), so that the page and the catalogue cannot
// drift apart either way.
func TestCatalogueCoversWebhooksReference(t *testing.T) {
	b, err := os.ReadFile("../docs/meta-webhooks.md")
	if err != nil {
		t.Fatalf("the project's reference of Meta's payloads: %v", err)
	}
	doc := string(b)
	start, end := strings.Index(doc, "\n## 10. "), strings.Index(doc, "\n### 10.5 ")
	stop := strings.Index(doc, "\n## 11. ")
	if start < 0 || end < start || stop < end {
		t.Fatal("section 10, 10.5 or 11 not found")
	}
	row := regexp.MustCompile("(?m)^\\| `(\\d+)`")
	n := 0
	for _, m := range row.FindAllStringSubmatch(doc[start:end], -1) {
		code, _ := strconv.ParseInt(m[1], 10, 32)
		n++
		if _, ok := LookupError(int32(code)); !ok {
			t.Errorf("code %d of docs/meta-webhooks.md section 10 is not in the catalogue", code)
		}
	}
	if n < 50 {
		t.Fatalf("found only %d codes in section 10; the table format changed?", n)
	}

	// The reverse: each catalogue code is named in section 10, alone
	// (`131056`) or inside a range (`200`-`299`).
	named := map[int64]bool{}
	single := regexp.MustCompile("`(\\d+)`(?:-`(\\d+)`)?")
	for _, m := range single.FindAllStringSubmatch(doc[start:stop], -1) {
		lo, _ := strconv.ParseInt(m[1], 10, 64)
		hi := lo
		if m[2] != "" {
			hi, _ = strconv.ParseInt(m[2], 10, 64)
		}
		for c := lo; c <= hi && c-lo < 10000; c++ {
			named[c] = true
		}
	}
	for _, e := range ErrorCodes() {
		if !named[int64(e.Code)] {
			t.Errorf("catalogue code %d (%s) is not in docs/meta-webhooks.md section 10", e.Code, e.Title)
		}
	}
}

// 130497 restricts the business in one country: it must not stop the
// number (verdict stop did), only that country's recipients.
func TestCountryRestrictionIsNotAStop(t *testing.T) {
	e, ok := LookupError(130497)
	if !ok || e.Class != ClassCountry || e.Verdict != VerdictSkipCountry || e.Retryable {
		t.Fatalf("130497: %+v", e)
	}
}
