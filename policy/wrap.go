package policy

import (
	"path"
	"strings"
)

// nested is a command that another command runs on its behalf.
type nested struct {
	argv    []word // a wrapped argv (`timeout 5 curl x` -> curl x)
	script  *word  // or a shell script (`sh -c STR`, `eval STR`)
	dynamic bool   // or something only known at run time: deny
	why     string // the reason, when dynamic
}

func dynamicNested(why string) nested { return nested{dynamic: true, why: why} }

// wrapSpec describes a wrapper's command line: the options to skip before
// the wrapped command starts.
type wrapSpec struct {
	valueShort  string   // short options taking a value (attached or next)
	valueLong   []string // long options taking the next argument as value when written without '='
	optional    string   // short options whose value, if any, is attached (`xargs -i{}`)
	positionals int      // operands before the command (timeout's DURATION)
	assignments bool     // NAME=VALUE operands before the command (env)
	dashFlag    bool     // a lone "-" is an option (env's -i)
	plusFlags   bool     // +o style options (shells)
}

// option is one option seen while scanning a wrapper's arguments.
type option struct {
	name    string // "c" for -c, "replace" for --replace
	value   string
	set     bool // a value was given
	dynamic bool // the value is only known at run time
}

// scan skips a wrapper's options and returns the index of its first
// operand, the options seen, and whether a word that may expand to several
// arguments makes the rest unknowable.
func scan(args []word, spec wrapSpec) (int, []option, bool) {
	var opts []option
	i := 0
	for i < len(args) {
		a := args[i]
		if a.fields {
			return i, opts, true
		}
		t := a.text
		if a.dynamic {
			break // one unknown operand: the caller decides
		}
		if t == "--" {
			i++
			break
		}
		if t == "-" && spec.dashFlag {
			i++
			continue
		}
		if strings.HasPrefix(t, "--") {
			name, val, hasVal := strings.Cut(t[2:], "=")
			dyn := false
			if !hasVal && contains(spec.valueLong, name) && i+1 < len(args) {
				i++
				if args[i].fields {
					return i, opts, true
				}
				val, hasVal, dyn = args[i].text, true, args[i].dynamic
			}
			opts = append(opts, option{name: name, value: val, set: hasVal, dynamic: dyn})
			i++
			continue
		}
		if len(t) > 1 && (t[0] == '-' || (spec.plusFlags && t[0] == '+')) {
			for j := 1; j < len(t); j++ {
				c := t[j : j+1]
				if strings.Contains(spec.optional, c) {
					opts = append(opts, option{name: c, value: t[j+1:], set: j+1 < len(t)})
					break
				}
				if !strings.Contains(spec.valueShort, c) {
					opts = append(opts, option{name: c})
					continue
				}
				val, dyn := t[j+1:], false
				if val == "" && i+1 < len(args) {
					i++
					if args[i].fields {
						return i, opts, true
					}
					val, dyn = args[i].text, args[i].dynamic
				}
				opts = append(opts, option{name: c, value: val, set: true, dynamic: dyn})
				break
			}
			i++
			continue
		}
		if spec.assignments && isAssignment(t) {
			i++
			continue
		}
		break
	}
	for n := 0; n < spec.positionals && i < len(args); n++ {
		if args[i].fields {
			return i, opts, true
		}
		i++
	}
	return i, opts, false
}

// unwrap returns the commands that cmd runs on its behalf: the command
// behind a wrapper, a shell's -c script, find's -exec commands.
func unwrap(cmd []word) []nested {
	prog := path.Base(cmd[0].text)
	args := cmd[1:]
	switch prog {
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash":
		return shellScript(args)
	case "find":
		return findExec(args)
	case "xargs":
		return xargsCommand(args)
	case "eval":
		return joinedScript(args)
	case "script":
		// util-linux script(1) runs -c's command with the shell.
		_, opts, unknown := scan(args, wrapSpec{
			valueShort: "cEIOBTmo",
			valueLong:  []string{"command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format", "output-limit"},
		})
		for _, o := range opts {
			if (o.name == "c" || o.name == "command") && o.set {
				if o.dynamic {
					return []nested{dynamicNested("script's command is only known at run time")}
				}
				s := word{text: o.value}
				return []nested{{script: &s}}
			}
		}
		if unknown {
			return []nested{dynamicNested("script's command is only known at run time")}
		}
		return nil
	case "watch":
		i, opts, unknown := scan(args, wrapSpec{valueShort: "nq", valueLong: []string{"interval", "equexit"}})
		if unknown {
			return []nested{dynamicNested("watch's command is only known at run time")}
		}
		if hasOption(opts, "x", "exec") {
			return wrapped(args[i:])
		}
		return joinedScript(args[i:])
	case "command":
		i, opts, unknown := scan(args, wrapSpec{})
		if hasOption(opts, "v", "V") {
			return nil // only looks the command up
		}
		return wrappedAt(args, i, unknown)
	case "env":
		i, opts, unknown := scan(args, wrapSpec{
			valueShort:  "uCS",
			valueLong:   []string{"unset", "chdir", "split-string"},
			assignments: true,
			dashFlag:    true,
		})
		var out []nested
		for _, o := range opts {
			if o.set && (o.name == "S" || o.name == "split-string") {
				s := word{text: o.value, dynamic: o.dynamic}
				out = append(out, nested{script: &s})
			}
		}
		return append(out, wrappedAt(args, i, unknown)...)
	}
	spec, ok := wrapperSpec(prog)
	if !ok {
		return nil
	}
	i, _, unknown := scan(args, spec)
	return wrappedAt(args, i, unknown)
}

// wrapperSpec returns the command-line shape of the wrappers that simply run
// the rest of their arguments as a command.
func wrapperSpec(prog string) (wrapSpec, bool) {
	switch prog {
	case "sudo":
		return wrapSpec{valueShort: "ugCDhprtUT", valueLong: []string{"user", "group", "close-from", "chdir", "host", "prompt", "role", "type", "other-user", "command-timeout"}}, true
	case "doas":
		return wrapSpec{valueShort: "uC"}, true
	case "nice":
		return wrapSpec{valueShort: "n", valueLong: []string{"adjustment"}}, true
	case "nohup", "setsid", "builtin", "busybox":
		return wrapSpec{}, true
	case "timeout":
		return wrapSpec{valueShort: "sk", valueLong: []string{"signal", "kill-after"}, positionals: 1}, true
	case "time":
		return wrapSpec{valueShort: "fo", valueLong: []string{"format", "output"}}, true
	case "exec":
		return wrapSpec{valueShort: "a"}, true
	case "stdbuf":
		return wrapSpec{valueShort: "ioe", valueLong: []string{"input", "output", "error"}}, true
	case "ionice":
		return wrapSpec{valueShort: "cn", valueLong: []string{"class", "classdata"}}, true
	case "taskset":
		return wrapSpec{positionals: 1}, true
	case "strace", "ltrace":
		return wrapSpec{valueShort: "abeEIoOpPsSuUXn", valueLong: []string{"output", "signal", "trace", "user"}}, true
	}
	return wrapSpec{}, false
}

// wrappedAt returns the command starting at args[i], if any.
func wrappedAt(args []word, i int, unknown bool) []nested {
	if unknown {
		return []nested{dynamicNested("where the wrapped command starts is only known at run time")}
	}
	return wrapped(args[i:])
}

func wrapped(argv []word) []nested {
	if len(argv) == 0 {
		return nil
	}
	return []nested{{argv: argv}}
}

// shellScript returns the script of `sh -c STR` (-c may be combined with
// other flags: -lc, -ec). A shell without -c runs a file or stdin, which the
// rules decide through the shell's own name.
func shellScript(args []word) []nested {
	i, opts, unknown := scan(args, wrapSpec{
		valueShort: "oO",
		valueLong:  []string{"rcfile", "init-file"},
		plusFlags:  true,
	})
	if !hasOption(opts, "c") {
		return nil
	}
	if unknown || i >= len(args) {
		// Under xargs or find, the script arrives as an argument at run time.
		return []nested{dynamicNested("shell script is only known at run time")}
	}
	s := args[i]
	return []nested{{script: &s}}
}

// joinedScript returns the script that eval and watch build by joining
// their arguments with spaces.
func joinedScript(args []word) []nested {
	if len(args) == 0 {
		return nil
	}
	s := word{}
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = a.text
		s.dynamic = s.dynamic || a.dynamic
		s.fields = s.fields || a.fields
	}
	s.text = strings.Join(parts, " ")
	return []nested{{script: &s}}
}

// findExec returns the commands of find's -exec, -execdir, -ok and -okdir
// actions, each ending at `;` or `+`. find substitutes {} at run time.
func findExec(args []word) []nested {
	var out []nested
	for i := 0; i < len(args); i++ {
		switch args[i].text {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		var argv []word
		for i++; i < len(args); i++ {
			t := args[i].text
			if !args[i].dynamic && (t == ";" || t == "+") {
				break
			}
			argv = append(argv, substituted(args[i], "{}"))
		}
		out = append(out, wrapped(argv)...)
	}
	return out
}

// xargsCommand returns the command xargs runs (none means echo). With -I,
// -i or --replace, arguments holding the replacement string are only known
// at run time.
func xargsCommand(args []word) []nested {
	i, opts, unknown := scan(args, wrapSpec{
		valueShort: "adEILnPs",
		valueLong:  []string{"arg-file", "delimiter", "max-lines", "max-args", "max-procs", "max-chars", "process-slot-var", "eof"},
		optional:   "eil",
	})
	if unknown {
		return wrappedAt(args, i, true)
	}
	repl := ""
	for _, o := range opts {
		switch o.name {
		case "I":
			repl = o.value
		case "i", "replace":
			repl = "{}"
			if o.set {
				repl = o.value
			}
		}
	}
	argv := args[i:]
	if repl != "" {
		argv = make([]word, len(args)-i)
		for j, a := range args[i:] {
			argv[j] = substituted(a, repl)
		}
	}
	return wrapped(argv)
}

// substituted marks a word dynamic when it holds a placeholder that a
// wrapper replaces at run time.
func substituted(a word, placeholder string) word {
	if placeholder != "" && strings.Contains(a.text, placeholder) {
		a.dynamic = true
	}
	return a
}

func hasOption(opts []option, names ...string) bool {
	for _, o := range opts {
		if contains(names, o.name) {
			return true
		}
	}
	return false
}

// isAssignment reports whether s looks like NAME=VALUE.
func isAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, c := range name {
		if c != '_' && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') && (i == 0 || !('0' <= c && c <= '9')) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
