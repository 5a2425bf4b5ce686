package migrations

import (
	"reflect"
	"testing"
)

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one without semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"one", "SELECT 1;\n", []string{"SELECT 1"}},
		{"two", "SELECT 1;\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"spaces after semicolon", "SELECT 1;  \t\r\nSELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"comment after semicolon", "SELECT 1; -- first\nSELECT 2;", []string{"SELECT 1", "-- first\nSELECT 2"}},
		{"semicolon inside a line", "SELECT 1; SELECT 2;\n", []string{"SELECT 1; SELECT 2"}},
		{"string with semicolon at line end", "SELECT 'a;\nb';\nSELECT 2", []string{"SELECT 'a;\nb'", "SELECT 2"}},
		{"escaped quote", "SELECT 'it\\'s;\n';\nSELECT 2", []string{"SELECT 'it\\'s;\n'", "SELECT 2"}},
		{"doubled quote", "SELECT 'it''s;\n';\nSELECT 2", []string{"SELECT 'it''s;\n'", "SELECT 2"}},
		{"backquoted identifier", "SELECT 1 AS `x;\n`;\nSELECT 2", []string{"SELECT 1 AS `x;\n`", "SELECT 2"}},
		{"double-quoted identifier", "SELECT 1 AS \"x;\n\";\nSELECT 2", []string{"SELECT 1 AS \"x;\n\"", "SELECT 2"}},
		{"line comment with semicolon", "-- not here;\nSELECT 1;\n", []string{"-- not here;\nSELECT 1"}},
		{"block comment with semicolon", "/* a;\nb; */ SELECT 1;\n", []string{"/* a;\nb; */ SELECT 1"}},
		{"only comments dropped", "SELECT 1;\n-- trailing;\n/* note */\n", []string{"SELECT 1"}},
		{"empty statements dropped", ";\n;\nSELECT 1;\n;\n", []string{"SELECT 1"}},
		{"empty", "", nil},
		{"unterminated string", "SELECT 'a;\n", []string{"SELECT 'a;"}},
		{"unterminated block comment", "SELECT 1;\n/* a;\n", []string{"SELECT 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SplitStatements(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SplitStatements(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}
