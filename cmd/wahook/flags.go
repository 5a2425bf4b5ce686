package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// flags is a subcommand's flag set whose flags fall back to environment
// variables: --nats-url to WAHOOK_NATS_URL. A flag given on the command line
// wins. A secret flag also reads WAHOOK_<NAME>_FILE, a file holding the value
// (for a list, one value per line or comma-separated).
type flags struct {
	*flag.FlagSet
	secret map[string]bool
	list   map[string]bool
	// join puts back together, in one comma-separated value, the pieces
	// of a list flag's item that hold commas themselves (JoinList).
	join map[string]func([]string) []string
	// sections are the titles --help groups the flags under, in order;
	// section maps a flag to its title (Section).
	sections []string
	section  map[string]string
	// Check and Dump are the common --check and --config-dump modes.
	Check, Dump bool
}

func newFlags(name string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet("wahook "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &flags{FlagSet: fs, secret: map[string]bool{}, list: map[string]bool{}, join: map[string]func([]string) []string{}, section: map[string]string{}}
	fs.BoolVar(&f.Check, "check", false, "validate the configuration and exit (0 when valid)")
	fs.BoolVar(&f.Dump, "config-dump", false, "print the effective configuration, secrets redacted, and exit")
	f.Section("configuration", func() {})
	f.section["check"], f.section["config-dump"] = "configuration", "configuration"
	fs.Usage = func() { f.usage(stderr) }
	return f
}

// Secret marks flag name as a secret: redacted in dumps, readable from a file.
func (f *flags) Secret(name string) { f.secret[name] = true }

// JoinList sets how the items of list flag name, read from a
// comma-separated variable or a line of its _FILE, are put back together
// where an item holds commas itself: join gets one value's pieces.
func (f *flags) JoinList(name string, join func([]string) []string) { f.join[name] = join }

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// ListVar defines a repeatable flag; its environment variable is a
// comma-separated list.
func (f *flags) ListVar(l *stringList, name, usage string) {
	f.Var(l, name, usage)
	f.list[name] = true
}

// EnvName is the environment variable behind a flag.
func EnvName(flagName string) string {
	return "WAHOOK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then fills each flag not given on the command line from
// its environment variable (or, for a secret, its _FILE variable).
func (f *flags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, f.Arg(0))
	}
	// A flag given on the command line wins over the variables of every
	// spelling of it (--number-tier and its old spelling --tier-override
	// share one value): WAHOOK_TIER_OVERRIDE was added to --number-tier's
	// items, or refused as given twice.
	given := map[string]bool{}
	givenValue := map[flag.Value]bool{}
	f.Visit(func(fl *flag.Flag) {
		given[fl.Name] = true
		if sharedValue(fl.Value) {
			givenValue[fl.Value] = true
		}
	})
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		if err != nil || given[fl.Name] || sharedValue(fl.Value) && givenValue[fl.Value] {
			return
		}
		env := EnvName(fl.Name)
		val, ok := os.LookupEnv(env)
		var values []string
		if f.secret[fl.Name] {
			// A secret's variable and its file give the same value: the
			// file's trailing newline, or one a Secret put in the
			// variable, is not part of it (two instances fed one key the
			// two ways hashed numbers apart).
			val = strings.TrimSpace(val)
			// An empty variable beside a _FILE (compose's ${X:-}) does
			// not hide the file: it was taken for the value, unset.
			if path, okFile := os.LookupEnv(env + "_FILE"); okFile && val == "" {
				b, rerr := os.ReadFile(path)
				if rerr != nil {
					err = fmt.Errorf("%w: %s_FILE: %v", errUsage, env, rerr)
					return
				}
				val, ok = strings.TrimSpace(string(b)), true
				if f.list[fl.Name] {
					// Values a line, or comma-separated as in the
					// variable, each line on its own (JoinList).
					values = []string{}
					for _, line := range strings.Split(val, "\n") {
						values = append(values, f.splitItems(fl.Name, line)...)
					}
				}
			}
		}
		if !ok {
			return
		}
		if values == nil {
			values = []string{val}
			if f.list[fl.Name] {
				values = f.splitItems(fl.Name, val)
			}
		}
		for _, v := range values {
			if serr := fl.Value.Set(v); serr != nil {
				err = fmt.Errorf("%w: %s: %v", errUsage, env, serr)
				return
			}
		}
	})
	return err
}

// givenOnCommandLine reports whether flag name was given on f's command
// line (not by its variable).
func givenOnCommandLine(f *flags, name string) bool {
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}

// sharedValue reports whether v is a value two spellings of a flag may
// share (a list's), and so a map key: the standard library's values are
// pointers, but not every Value need be comparable.
func sharedValue(v flag.Value) bool {
	_, ok := v.(*stringList)
	return ok
}

// splitItems splits one comma-separated value of list flag name into its
// items.
func (f *flags) splitItems(name, s string) []string {
	items := splitList(s)
	if join := f.join[name]; join != nil {
		items = join(items)
	}
	return items
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// WriteDump prints every flag's effective value, secrets redacted.
func (f *flags) WriteDump(w io.Writer) {
	var names []string
	f.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "check" && fl.Name != "config-dump" {
			names = append(names, fl.Name)
		}
	})
	sort.Strings(names)
	for _, n := range names {
		v := f.Lookup(n).Value.String()
		if f.secret[n] {
			v = redact(n, v, f.list[n])
		}
		fmt.Fprintf(w, "%s=%s\n", n, v)
	}
}

// redact hides a secret's value but keeps what helps an operator: whether it
// is set, and for app secrets the app names and how many secrets each has.
func redact(name, v string, list bool) string {
	if v == "" {
		return "(unset)"
	}
	if !list {
		return "(redacted)"
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if app, _, ok := strings.Cut(p, "="); ok && name == "app-secret" {
			parts[i] = app + "=(redacted)"
		} else {
			parts[i] = "(redacted)"
		}
	}
	return strings.Join(parts, ",")
}

// Section registers the flags that register defines under title, for
// --help to group them by concern. A title used again adds to its group.
func (f *flags) Section(title string, register func()) {
	before := map[string]bool{}
	f.VisitAll(func(fl *flag.Flag) { before[fl.Name] = true })
	register()
	f.VisitAll(func(fl *flag.Flag) {
		if !before[fl.Name] {
			f.section[fl.Name] = title
		}
	})
	for _, t := range f.sections {
		if t == title {
			return
		}
	}
	f.sections = append(f.sections, title)
}

// usage prints the flags by section, each with its environment variable.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage of %s (every flag falls back to its WAHOOK_* environment variable; a secret also to WAHOOK_*_FILE):\n", f.Name())
	groups := map[string][]*flag.Flag{}
	f.VisitAll(func(fl *flag.Flag) {
		t := f.section[fl.Name]
		if t == "" {
			t = "other"
		}
		groups[t] = append(groups[t], fl)
	})
	titles := append([]string(nil), f.sections...)
	if len(groups["other"]) > 0 {
		titles = append(titles, "other")
	}
	for _, t := range titles {
		if len(groups[t]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", t)
		for _, fl := range groups[t] {
			name, usage := flag.UnquoteUsage(fl)
			fmt.Fprintf(w, "  --%s", fl.Name)
			if name != "" {
				fmt.Fprintf(w, " %s", name)
			}
			fmt.Fprintf(w, "  (%s)\n    \t%s", EnvName(fl.Name), strings.ReplaceAll(usage, "\n", "\n    \t"))
			if d := fl.DefValue; d != "" && d != "0" && d != "false" && d != "[]" && !f.secret[fl.Name] {
				fmt.Fprintf(w, " (default %s)", d)
			}
			fmt.Fprintln(w)
		}
	}
}

// Sections returns the flags' section titles in order and each flag's
// title: the shape of --help, for the documentation's check.
func (f *flags) Sections() ([]string, map[string]string) { return f.sections, f.section }
