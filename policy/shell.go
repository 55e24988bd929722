package policy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// word is one argument as far as it is known before the command runs.
type word struct {
	text string // the value; for a dynamic word, its shell source
	// dynamic means the value depends on run-time state: a parameter
	// expansion, a command substitution, ANSI-C quoting.
	dynamic bool
	// fields means the shell may expand the word to zero or several
	// arguments: an unquoted expansion, glob or brace expansion. Such a word
	// cannot be a program name, and hides where a wrapped command starts.
	fields bool
}

// CheckShell decides a shell script, run in workspace (see Check). Every
// command is classified wherever it sits: pipelines, && || ; lists,
// subshells, blocks, command and process substitutions, if/for/while/case
// bodies, function bodies, assignment values and here-documents. A
// redirection is classified as a command named by its operator (`>` out.txt),
// so writes and reads through redirections meet the rules too. The strictest
// decision wins; on a tie, the first encountered.
func (p *Policy) CheckShell(script string, workspace string) Decision {
	return p.shell(script, newScope(workspace), 0)
}

// shell decides a script known before it runs, reached at the given
// nesting depth.
func (p *Policy) shell(script string, sc scope, depth int) Decision {
	if depth > maxDepth {
		return synthetic(Deny, RuleUnparsableShell, "shells nested too deeply to follow", []string{script})
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return synthetic(Deny, RuleUnparsableShell, fmt.Sprintf("shell script does not parse: %v", err), nil)
	}
	if len(f.Stmts) == 0 {
		return synthetic(Deny, RuleEmptyCommand, "empty shell script", nil)
	}

	var d Decision
	decided := false
	add := func(nd Decision) { d, decided = strictest(d, decided, nd) }

	var visit func(syntax.Node) bool
	visit = func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			// The command before its redirections, so that on a tie the
			// decision names the command rather than `>`.
			if n.Cmd != nil {
				syntax.Walk(n.Cmd, visit)
			}
			for _, r := range n.Redirs {
				if cmd, ok := redirect(r); ok {
					add(p.match(cmd, sc))
				}
				syntax.Walk(r, visit)
			}
			return false
		case *syntax.CallExpr:
			if len(n.Args) > 0 {
				cmd := make([]word, len(n.Args))
				for i, w := range n.Args {
					cmd[i] = shellWord(w)
				}
				add(p.command(cmd, sc, depth))
			}
			// Substitutions inside the words and assignments are commands too.
			return true
		}
		return true
	}
	syntax.Walk(f, visit)

	if !decided {
		// Statements that run no command at all (`X=1`, `[[ -n x ]]`).
		return synthetic(p.fallback, RuleDefault, "no command to classify", nil)
	}
	return d
}

// redirect turns a redirection into a pseudo-command [operator, target].
// Here-documents, descriptor duplication (`2>&1`, `>&-`) and the shared
// device files carry no file access worth deciding.
func redirect(r *syntax.Redirect) ([]word, bool) {
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return nil, false
	}
	if r.Word == nil {
		return nil, false
	}
	target := shellWord(r.Word)
	if !target.dynamic {
		if r.Op == syntax.DplIn || r.Op == syntax.DplOut {
			if target.text == "-" || strings.Trim(target.text, "0123456789") == "" {
				return nil, false
			}
		}
		if strings.HasPrefix(target.text, "/") && sharedPath(path.Clean(target.text)) {
			return nil, false
		}
	}
	return []word{{text: r.Op.String()}, target}, true
}

// shellWord resolves a parsed word to its value, removing quotes and
// escapes as the shell would, or to its source when it depends on run time.
func shellWord(w *syntax.Word) word {
	var b strings.Builder
	out := word{}
	for _, part := range w.Parts {
		switch part := part.(type) {
		case *syntax.Lit:
			if hasGlob(part.Value) {
				out.fields = true
			}
			b.WriteString(unescape(part.Value, ""))
		case *syntax.SglQuoted:
			if part.Dollar {
				// $'...' decodes escapes; treat its value as unknown rather
				// than re-implement the decoding.
				out.dynamic = true
				b.WriteString(source(part))
				continue
			}
			b.WriteString(part.Value)
		case *syntax.DblQuoted:
			for _, in := range part.Parts {
				if lit, ok := in.(*syntax.Lit); ok {
					b.WriteString(unescape(lit.Value, "$`\"\\\n"))
					continue
				}
				out.dynamic = true
				b.WriteString(source(in))
			}
		default:
			// Unquoted expansions and substitutions undergo field splitting.
			out.dynamic = true
			out.fields = true
			b.WriteString(source(part))
		}
	}
	out.text = b.String()
	return out
}

// unescape removes the backslashes the shell removes: before any character
// outside quotes (only), or before the characters in special inside double
// quotes. A backslash-newline disappears in both.
func unescape(s, special string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			next := s[i+1]
			if special == "" || strings.IndexByte(special, next) >= 0 {
				i++
				if next != '\n' {
					b.WriteByte(next)
				}
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// hasGlob reports whether an unquoted literal would be expanded by pathname
// or brace expansion. A lone `[` (the test command) is not a pattern.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?':
			return true
		case '[':
			if strings.IndexByte(s[i+1:], ']') >= 0 {
				return true
			}
		case '{':
			if rest := s[i+1:]; strings.IndexByte(rest, '}') >= 0 &&
				(strings.Contains(rest, ",") || strings.Contains(rest, "..")) {
				return true
			}
		}
	}
	return false
}

// source prints a node back to shell source.
func source(n syntax.Node) string {
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, n); err != nil {
		return "<?>"
	}
	return b.String()
}
