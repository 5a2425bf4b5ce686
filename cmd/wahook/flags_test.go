package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wahook/wahook/api"
)

// secretFlags is a flag set with a secret list flag (api-token) and a
// secret (phone-hash-key), read from the environment.
func secretFlags(t *testing.T) (*flags, *stringList, *string) {
	t.Helper()
	f := newFlags("test", io.Discard)
	var tokens stringList
	f.ListVar(&tokens, "api-token", "")
	f.Secret("api-token")
	f.JoinList("api-token", joinScopedTokens)
	key := f.String("phone-hash-key", "", "")
	f.Secret("phone-hash-key")
	for _, v := range []string{"WAHOOK_API_TOKEN", "WAHOOK_API_TOKEN_FILE", "WAHOOK_PHONE_HASH_KEY", "WAHOOK_PHONE_HASH_KEY_FILE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	return f, &tokens, key
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScopedTokenFromList: a scoped token's waba=ID,ID in a
// comma-separated list (WAHOOK_API_TOKEN or a line of its _FILE) was cut
// at its commas, and each further WABA id became a token of its own,
// unscoped: whoever knew a tenant's WABA id saw every WABA. Its pieces
// are put back together within one value (however ParseToken reads the
// scope: a space before waba=, ids with '+'); a token of digits only is
// refused; the list is still split at commas and lines (two app secrets
// on one line stay two).
func TestScopedTokenFromList(t *testing.T) {
	const scoped = "tenantA:tenantAtoken123456:waba=1234567890123456,6543210987654321"
	for _, tc := range []struct{ name, env, file, first string }{
		{"file", "", scoped + "\nadmin-token-0123456789\n", scoped},
		{"variable", scoped + ",admin-token-0123456789", "", scoped},
		{"space before waba=", "tenantA:tenantAtoken123456: waba=1234567890123456,6543210987654321,admin-token-0123456789", "",
			"tenantA:tenantAtoken123456: waba=1234567890123456,6543210987654321"},
		{"ids with +", "tenantA:tenantAtoken123456:waba=1234567890123456,6543210987654321+1111222233334444,admin-token-0123456789", "",
			"tenantA:tenantAtoken123456:waba=1234567890123456,6543210987654321+1111222233334444"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, tokens, _ := secretFlags(t)
			if tc.file != "" {
				t.Setenv("WAHOOK_API_TOKEN_FILE", writeFile(t, tc.file))
			} else {
				t.Setenv("WAHOOK_API_TOKEN", tc.env)
			}
			if err := f.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if want := (stringList{tc.first, "admin-token-0123456789"}); !slices.Equal(*tokens, want) {
				t.Fatalf("tokens: %q, want %q", *tokens, want)
			}
			spec, err := api.ParseToken((*tokens)[0])
			if err != nil || len(spec.Wabas) < 2 || !slices.Contains(spec.Wabas, "6543210987654321") {
				t.Fatalf("the scoped token: %+v %v; want all its WABAs", spec, err)
			}
		})
	}
	// Not across lines: a line of digits after a scoped token's line is a
	// token of its own, refused.
	f, tokens, _ := secretFlags(t)
	t.Setenv("WAHOOK_API_TOKEN_FILE", writeFile(t, "tenantA:tenantAtoken123456:waba=1234567890123456\n98765432109876543210\n"))
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if len(*tokens) != 2 {
		t.Fatalf("tokens across lines: %q, want two", *tokens)
	}
	o := apiOptions{tokens: *tokens}
	if err := o.build(); err == nil || !strings.Contains(err.Error(), "digits only") {
		t.Fatalf("a token of digits only: %v, want it refused", err)
	}

	f = newFlags("test", io.Discard)
	var secrets stringList
	f.ListVar(&secrets, "app-secret", "")
	f.Secret("app-secret")
	t.Setenv("WAHOOK_APP_SECRET", "")
	t.Setenv("WAHOOK_APP_SECRET_FILE", writeFile(t, "main=oldsecret0123,main=newsecret4567\n"))
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (stringList{"main=oldsecret0123", "main=newsecret4567"}); !slices.Equal(secrets, want) {
		t.Fatalf("two app secrets on a line of the file: %q, want %q", secrets, want)
	}
}

// TestSecretEnvBesideFile: an empty variable beside its _FILE (compose's
// ${X:-}) hid the file, and the secret was taken for unset; and the same
// secret given by a variable with a trailing newline and by a file gave
// two values (numbers hashed apart by two instances).
func TestSecretEnvBesideFile(t *testing.T) {
	f, _, key := secretFlags(t)
	t.Setenv("WAHOOK_PHONE_HASH_KEY", "")
	t.Setenv("WAHOOK_PHONE_HASH_KEY_FILE", writeFile(t, "shared-key\n"))
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if *key != "shared-key" {
		t.Fatalf("an empty variable beside its _FILE: %q, want the file's shared-key", *key)
	}

	f, _, key = secretFlags(t)
	t.Setenv("WAHOOK_PHONE_HASH_KEY", "shared-key\n")
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if *key != "shared-key" {
		t.Fatalf("the variable with a trailing newline: %q, want shared-key as the file gives it", *key)
	}

	// A variable that says something wins over the file, as before.
	f, _, key = secretFlags(t)
	t.Setenv("WAHOOK_PHONE_HASH_KEY", "from-the-variable")
	t.Setenv("WAHOOK_PHONE_HASH_KEY_FILE", writeFile(t, "from-the-file\n"))
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if *key != "from-the-variable" {
		t.Fatalf("variable and file: %q, want the variable's", *key)
	}
}
