package main

import (
	"errors"
	"strings"
	"testing"
)

// TestParseAppSecrets: values for the default app and for named apps, two
// secrets of one app for a rotation; an empty secret is refused by the
// value's place, without printing the value, whose text before "=" may be
// most of a secret.
func TestParseAppSecrets(t *testing.T) {
	apps, err := parseAppSecrets([]string{"s1", "shop=s2", "shop=s3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 2 || string(apps["default"][0]) != "s1" || len(apps["shop"]) != 2 || string(apps["shop"][1]) != "s3" {
		t.Fatalf("apps: %q", apps)
	}
	for _, v := range []string{"c2VjcmV0LXZhbHVlLTE=", "shop=", ""} {
		_, err := parseAppSecrets([]string{"s1", v})
		if !errors.Is(err, errUsage) {
			t.Fatalf("%q: %v, want a usage error", v, err)
		}
		if !strings.Contains(err.Error(), "value 2 of 2") {
			t.Errorf("%q: %v does not name the value's place", v, err)
		}
		if name, _, _ := strings.Cut(v, "="); name != "" && strings.Contains(err.Error(), name) {
			t.Errorf("%q: the error prints the value: %v", v, err)
		}
	}
}
