package migrations

import "strings"

// SplitStatements splits SQL into statements at each ';' that ends a line
// (only spaces, tabs or a -- comment may follow it), outside string literals,
// quoted identifiers and comments. Statements are trimmed; those holding only
// comments are dropped. A ';' inside a line does not split, so a file may
// hold a statement that contains one.
func SplitStatements(sql string) []string {
	var out []string
	start := 0
	code := false // the current statement holds more than comments and space
	flush := func(end int) {
		if code {
			out = append(out, strings.TrimSpace(sql[start:end]))
		}
		start, code = end+1, false
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"' || c == '`':
			i = quotedEnd(sql, i)
			code = true
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			i = lineEnd(sql, i) - 1
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if end := strings.Index(sql[i+2:], "*/"); end >= 0 {
				i += 2 + end + 1
			} else {
				i = len(sql)
			}
		case c == ';' && endsLine(sql[i+1:]):
			flush(i)
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			code = true
		}
	}
	if start < len(sql) {
		flush(len(sql))
	}
	return out
}

// quotedEnd returns the index of the quote that closes the one at i; a
// backslash escapes the next byte and a doubled quote stands for itself.
func quotedEnd(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j
		}
	}
	return len(s) - 1
}

func lineEnd(s string, i int) int {
	if n := strings.IndexByte(s[i:], '\n'); n >= 0 {
		return i + n
	}
	return len(s)
}

// endsLine reports whether rest, the text after a ';', has nothing but
// spaces, tabs or a -- comment before the end of its line.
func endsLine(rest string) bool {
	line := rest[:lineEnd(rest, 0)]
	line = strings.TrimLeft(line, " \t\r")
	return line == "" || strings.HasPrefix(line, "--")
}
