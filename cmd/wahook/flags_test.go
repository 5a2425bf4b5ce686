package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
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

// TestSecretFromFile: a list secret's _FILE holds one value a line, commas
// kept. It was split at every comma too, so a scoped token's waba=ID,ID
// gave its second WABA id as a token of its own, which saw every WABA.
func TestSecretFromFile(t *testing.T) {
	f, tokens, _ := secretFlags(t)
	t.Setenv("WAHOOK_API_TOKEN_FILE", writeFile(t, "tenantA:tenantAtoken123456:waba=1234567890123456,6543210987654321\nadmin-token-0123456789\n"))
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := stringList{"tenantA:tenantAtoken123456:waba=1234567890123456,6543210987654321", "admin-token-0123456789"}
	if !slices.Equal(*tokens, want) {
		t.Fatalf("tokens from the file: %q, want %q", *tokens, want)
	}
	spec, err := api.ParseToken((*tokens)[0])
	if err != nil || !slices.Equal(spec.Wabas, []string{"1234567890123456", "6543210987654321"}) {
		t.Fatalf("the scoped token: %+v %v; want both WABAs", spec, err)
	}
	// In the variable, comma-separated itself, a WABA id cut from its
	// token is refused rather than taken for a token of every WABA.
	if _, err := api.ParseToken("6543210987654321"); err == nil {
		t.Fatal("a token of digits only (a WABA id cut from waba=ID,ID) was taken")
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
