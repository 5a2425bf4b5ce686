package migrations

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbeddedMigrationsLoad(t *testing.T) {
	all, err := Load(Files())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no embedded migrations")
	}
	if all[0].Version != 1 || all[0].Name != "0001_dead_letters" {
		t.Errorf("first migration = %d %s, want 1 0001_dead_letters", all[0].Version, all[0].Name)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Version <= all[i-1].Version {
			t.Errorf("migrations out of order: %s after %s", all[i].File, all[i-1].File)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name  string
		files fstest.MapFS
		want  error
	}{
		{"no number", fstest.MapFS{"dead_letters.sql": {Data: []byte("SELECT 1")}}, ErrBadName},
		{"short number", fstest.MapFS{"01_x.sql": {Data: []byte("SELECT 1")}}, ErrBadName},
		{"upper case", fstest.MapFS{"0001_Dead.sql": {Data: []byte("SELECT 1")}}, ErrBadName},
		{"version zero", fstest.MapFS{"0000_x.sql": {Data: []byte("SELECT 1")}}, ErrBadName},
		{"duplicate version", fstest.MapFS{
			"0002_a.sql": {Data: []byte("SELECT 1")},
			"0002_b.sql": {Data: []byte("SELECT 2")},
		}, ErrBadName},
		{"bad template", fstest.MapFS{"0001_x.sql": {Data: []byte("SELECT {{.Database")}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.files)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Load: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestLoadOrdersAndIgnoresOtherFiles(t *testing.T) {
	all, err := Load(fstest.MapFS{
		"0010_c.sql": {Data: []byte("SELECT 10")},
		"0002_b.sql": {Data: []byte("SELECT 2")},
		"README.md":  {Data: []byte("not a migration")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range all {
		got = append(got, m.Name)
	}
	if strings.Join(got, ",") != "0002_b,0010_c" {
		t.Errorf("Load order = %v, want [0002_b 0010_c]", got)
	}
}

func TestChecksumIgnoresLineEnds(t *testing.T) {
	unix, err := Load(fstest.MapFS{"0001_x.sql": {Data: []byte("SELECT 1;\nSELECT 2;\n")}})
	if err != nil {
		t.Fatal(err)
	}
	dos, err := Load(fstest.MapFS{"0001_x.sql": {Data: []byte("SELECT 1;\r\nSELECT 2;\r\n")}})
	if err != nil {
		t.Fatal(err)
	}
	edited, err := Load(fstest.MapFS{"0001_x.sql": {Data: []byte("SELECT 1;\nSELECT 3;\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if unix[0].Checksum != dos[0].Checksum {
		t.Errorf("checksum differs between LF and CRLF: %s, %s", unix[0].Checksum, dos[0].Checksum)
	}
	if unix[0].Checksum == edited[0].Checksum {
		t.Error("an edited file kept its checksum")
	}
}
