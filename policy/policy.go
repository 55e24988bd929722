package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Errors returned by this package.
var (
	// ErrInvalidRule is wrapped by New when a rule (or the fallback) is malformed.
	ErrInvalidRule = errors.New("invalid policy rule")
	// ErrUnknownAction is wrapped by ParseAction when the name is not an Action.
	ErrUnknownAction = errors.New("unknown policy action")
)

// Action is what a Policy decides for a command.
type Action string

// Actions, from most to least permissive.
const (
	// Allow runs the command as is.
	Allow Action = "allow"
	// AllowWithCheckpoint checkpoints the vault before running the command,
	// so its effects can be undone.
	AllowWithCheckpoint Action = "allow_with_checkpoint"
	// RequireApproval holds the command until an operator grants it.
	RequireApproval Action = "require_approval"
	// Deny refuses the command.
	Deny Action = "deny"
)

// rank orders actions by strictness. An unknown action ranks as Deny so
// that a corrupted value fails closed.
func (a Action) rank() int {
	switch a {
	case Allow:
		return 0
	case AllowWithCheckpoint:
		return 1
	case RequireApproval:
		return 2
	default:
		return 3
	}
}

// Stricter reports whether a is strictly stricter than b:
// Deny > RequireApproval > AllowWithCheckpoint > Allow.
func (a Action) Stricter(b Action) bool { return a.rank() > b.rank() }

// ParseAction returns the Action named s (surrounding space and case are
// ignored), or an error wrapping ErrUnknownAction.
func ParseAction(s string) (Action, error) {
	a := Action(strings.ToLower(strings.TrimSpace(s)))
	switch a {
	case Allow, AllowWithCheckpoint, RequireApproval, Deny:
		return a, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownAction, s)
}

// Rule names the policy uses for decisions that no configured rule makes.
// New rejects configured rules that use them, so an audit entry's rule
// name is never ambiguous.
const (
	// RuleDefault decides a command that no rule matches (the fallback).
	RuleDefault = "default"
	// RuleEmptyCommand denies an empty argv or an empty shell script.
	RuleEmptyCommand = "empty-command"
	// RuleUnparsableShell denies a shell script that does not parse, or
	// commands that nest shells and wrappers too deeply to follow.
	RuleUnparsableShell = "unparsable-shell"
	// RuleDynamicCommand denies a command whose program (or shell script)
	// is only known at run time, such as `$X args`.
	RuleDynamicCommand = "dynamic-command"
)

// Decision is the outcome of checking a command.
type Decision struct {
	Action     Action   `json:"action"`
	Rule       string   `json:"rule"`
	Reason     string   `json:"reason"`
	Categories []string `json:"categories"`        // never nil, so JSON carries []
	Command    []string `json:"command,omitempty"` // the argv that decided it: for a script, its strictest command
	// Network: the deciding rule grants the host's network for the run.
	Network bool `json:"network,omitempty"`
	// RequireSandbox: some rule that matched the command, or a command it
	// wraps or runs, requires a sandbox.
	RequireSandbox bool `json:"require_sandbox,omitempty"`
}

// Rule is one entry of a policy, loaded from configuration. A rule matches
// a command when every criterion it sets matches; unset criteria match
// anything.
//
// Programs are matched against the program's basename and Subcommands
// against its first non-flag argument, both with path.Match. Args are
// matched with path.Match too, except that * and ? also match '/', since
// arguments are often paths and URLs; every Args pattern must match at
// least one argument. A subcommand whose value is only known at run time
// (`git $S`) matches every Subcommands pattern; a quoted run-time argument
// ("$X") can stand for any one Args pattern, an unquoted one (which may
// expand to several arguments) for all of them. A policy that lists its
// stricter rules first thus errs on the strict side.
type Rule struct {
	Name        string   `mapstructure:"name" json:"name" yaml:"name"`
	Programs    []string `mapstructure:"programs" json:"programs,omitempty" yaml:"programs,omitempty"`
	Subcommands []string `mapstructure:"subcommands" json:"subcommands,omitempty" yaml:"subcommands,omitempty"`
	Args        []string `mapstructure:"args" json:"args,omitempty" yaml:"args,omitempty"`
	// PathsOutside matches when an argument names a path outside the
	// workspace: an absolute path elsewhere, a ../ escape, or ~.
	PathsOutside bool     `mapstructure:"paths_outside" json:"paths_outside,omitempty" yaml:"paths_outside,omitempty"`
	Action       Action   `mapstructure:"action" json:"action" yaml:"action"`
	Reason       string   `mapstructure:"reason" json:"reason,omitempty" yaml:"reason,omitempty"`
	Categories   []string `mapstructure:"categories" json:"categories,omitempty" yaml:"categories,omitempty"`
	// Network grants the command the host's network for its run when this
	// rule decides it (after an approval, if the action requires one).
	Network bool `mapstructure:"network" json:"network,omitempty" yaml:"network,omitempty"`
	// RequireSandbox refuses the command unless it runs in a sandbox,
	// whichever rule decides it.
	RequireSandbox bool `mapstructure:"require_sandbox" json:"require_sandbox,omitempty" yaml:"require_sandbox,omitempty"`
}

// Policy decides whether commands may run. It is immutable once built and
// safe for concurrent use.
type Policy struct {
	rules    []Rule
	fallback Action
}

// New builds a Policy from rules, tried in order (the first match wins), and
// the fallback action for a command that no rule matches. A rule needs a
// unique name that is not one of the reserved Rule* names, a valid action and
// well-formed patterns; otherwise New returns an error wrapping
// ErrInvalidRule. The rules are copied.
func New(rules []Rule, fallback Action) (*Policy, error) {
	fb, err := ParseAction(string(fallback))
	if err != nil {
		return nil, fmt.Errorf("%w: fallback: %w", ErrInvalidRule, err)
	}
	p := &Policy{rules: make([]Rule, 0, len(rules)), fallback: fb}
	seen := make(map[string]bool, len(rules))
	for i, r := range rules {
		r, err := validRule(r)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d (%q): %w", ErrInvalidRule, i, r.Name, err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: rule %d: duplicate name %q", ErrInvalidRule, i, r.Name)
		}
		seen[r.Name] = true
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// validRule checks r and returns a deep copy with its action normalised.
func validRule(r Rule) (Rule, error) {
	r.Name = strings.TrimSpace(r.Name)
	switch r.Name {
	case "":
		return r, errors.New("name is required")
	case RuleDefault, RuleEmptyCommand, RuleUnparsableShell, RuleDynamicCommand:
		return r, fmt.Errorf("name %q is reserved", r.Name)
	}
	a, err := ParseAction(string(r.Action))
	if err != nil {
		return r, err
	}
	r.Action = a
	for _, list := range [][]string{r.Programs, r.Subcommands, r.Args} {
		for _, pat := range list {
			if pat == "" {
				return r, errors.New("empty pattern")
			}
			if _, err := path.Match(pat, ""); err != nil {
				return r, fmt.Errorf("pattern %q: %w", pat, err)
			}
		}
	}
	r.Programs = clone(r.Programs)
	r.Subcommands = clone(r.Subcommands)
	r.Args = clone(r.Args)
	r.Categories = clone(r.Categories)
	return r, nil
}

// Rules returns a copy of the policy's rules, in order.
func (p *Policy) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		r.Programs = clone(r.Programs)
		r.Subcommands = clone(r.Subcommands)
		r.Args = clone(r.Args)
		r.Categories = clone(r.Categories)
		out[i] = r
	}
	return out
}

// Fallback returns the action for a command that no rule matches.
func (p *Policy) Fallback() Action { return p.fallback }

// Check decides one argv, run without a shell in workspace: the absolute
// directory the command runs in, which is also the root it must stay in
// ("" disables paths_outside checks). Wrapped commands (`env X=1 cmd`,
// `timeout 5 cmd`, `sh -c STR`, `find -exec cmd ;`, ...) are decided too, and
// the strictest decision wins.
func (p *Policy) Check(argv []string, workspace string) Decision {
	cmd := make([]word, len(argv))
	for i, a := range argv {
		cmd[i] = word{text: a}
	}
	return p.command(cmd, newScope(workspace), 0)
}

// maxDepth bounds how deeply shells and wrappers may nest (`sh -c "sh -c
// ..."`) before the policy gives up and denies.
const maxDepth = 16

// scope is what a check knows about where the command runs.
type scope struct {
	workspace string // cleaned; "" disables paths_outside
}

func newScope(workspace string) scope {
	if workspace != "" {
		workspace = path.Clean(workspace)
	}
	return scope{workspace: workspace}
}

// command decides one command and every command it wraps.
func (p *Policy) command(cmd []word, sc scope, depth int) Decision {
	if len(cmd) == 0 || (cmd[0].text == "" && !cmd[0].dynamic) {
		return synthetic(Deny, RuleEmptyCommand, "empty command", nil)
	}
	if cmd[0].dynamic || cmd[0].fields {
		return synthetic(Deny, RuleDynamicCommand,
			"program name is only known at run time", texts(cmd))
	}
	if cmd[0].text == "alias" && len(cmd) > 1 {
		// The command an alias names runs under another name, which no
		// rule would recognise (alias c=curl; c ...).
		return synthetic(Deny, RuleDynamicCommand,
			"an alias gives a command another name, which is only known at run time", texts(cmd))
	}
	if depth > maxDepth {
		return synthetic(Deny, RuleUnparsableShell, "commands nested too deeply to follow", texts(cmd))
	}
	// Wrapped commands come first so that, on a tie, the decision names the
	// command that does the work rather than its wrapper.
	var d Decision
	decided := false
	for _, n := range unwrap(cmd) {
		var nd Decision
		switch {
		case n.dynamic:
			nd = synthetic(Deny, RuleDynamicCommand, n.why, texts(cmd))
		case n.script != nil && (n.script.dynamic || n.script.fields):
			nd = synthetic(Deny, RuleDynamicCommand, "shell script is only known at run time", texts(cmd))
		case n.script != nil:
			nd = p.shell(n.script.text, sc, depth+1)
		default:
			nd = p.command(n.argv, sc, depth+1)
		}
		d, decided = strictest(d, decided, nd)
	}
	d, _ = strictest(d, decided, p.match(cmd, sc))
	return d
}

// strictest returns the stricter of the current decision and next, keeping
// the current one on a tie (first encountered wins).
func strictest(cur Decision, have bool, next Decision) (Decision, bool) {
	req := cur.RequireSandbox || next.RequireSandbox
	if !have || next.Action.Stricter(cur.Action) {
		cur = next
	}
	cur.RequireSandbox = req
	return cur, true
}

// match returns the decision of the first rule matching cmd, or the fallback.
func (p *Policy) match(cmd []word, sc scope) Decision {
	for i := range p.rules {
		r := &p.rules[i]
		if ruleMatches(r, cmd, sc) {
			reason := r.Reason
			if reason == "" {
				reason = fmt.Sprintf("matched rule %q", r.Name)
			}
			return Decision{
				Action:         r.Action,
				Rule:           r.Name,
				Reason:         reason,
				Categories:     nonNil(clone(r.Categories)),
				Command:        texts(cmd),
				Network:        r.Network,
				RequireSandbox: r.RequireSandbox,
			}
		}
	}
	return synthetic(p.fallback, RuleDefault, "no rule matched", texts(cmd))
}

func ruleMatches(r *Rule, cmd []word, sc scope) bool {
	prog := path.Base(cmd[0].text)
	if len(r.Programs) > 0 && !anyMatch(r.Programs, prog) {
		return false
	}
	args := cmd[1:]
	if len(r.Subcommands) > 0 {
		sub, ok := subcommand(prog, args)
		if !ok || (!sub.dynamic && !anyMatch(r.Subcommands, sub.text)) {
			return false
		}
	}
	if !argsMatch(r.Args, args) {
		return false
	}
	if r.PathsOutside && !anyOutside(args, sc.workspace) {
		return false
	}
	return true
}

func anyMatch(patterns []string, name string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// argsMatch reports whether every pattern matches at least one argument.
// Patterns no known argument matches may be met by run-time arguments: one
// pattern per quoted argument, any number for an argument that may expand
// to several.
func argsMatch(patterns []string, args []word) bool {
	unmet := 0
	for _, pat := range patterns {
		if !anyArgMatches(pat, args) {
			unmet++
		}
	}
	if unmet == 0 {
		return true
	}
	quoted := 0
	for _, a := range args {
		switch {
		case a.fields && a.dynamic:
			return true
		case a.dynamic:
			quoted++
		}
	}
	return unmet <= quoted
}

// anyArgMatches matches pat against each known argument with path.Match,
// letting * and ? cross '/': both sides have '/' replaced by NUL, which
// path.Match treats as an ordinary character.
func anyArgMatches(pat string, args []word) bool {
	pat = strings.ReplaceAll(pat, "/", "\x00")
	for _, a := range args {
		if a.dynamic {
			continue
		}
		if ok, _ := path.Match(pat, strings.ReplaceAll(a.text, "/", "\x00")); ok {
			return true
		}
	}
	return false
}

// subcommand returns the first non-flag argument, skipping the values of
// the program's global options that take one (`git -C dir push`).
func subcommand(prog string, args []word) (word, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.dynamic {
			return a, true
		}
		t := a.text
		switch {
		case t == "--":
			if i+1 < len(args) {
				return args[i+1], true
			}
			return word{}, false
		case len(t) > 1 && (t[0] == '-' || t[0] == '+'):
			if globalValueFlag(prog, t) {
				i++
			}
		default:
			return a, true
		}
	}
	return word{}, false
}

// globalValueFlag reports whether flag, given before prog's subcommand,
// takes the next argument as its value. Only options that commonly precede
// a subcommand are listed: missing one would make its value look like the
// subcommand and let `git -C dir push` dodge a rule about push.
func globalValueFlag(prog, flag string) bool {
	var flags []string
	switch prog {
	case "git":
		flags = []string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
	case "npm":
		flags = []string{"--prefix", "-w", "--workspace", "--userconfig", "--cache", "--registry"}
	case "yarn":
		flags = []string{"--cwd"}
	case "pnpm":
		flags = []string{"-C", "--dir", "-F", "--filter"}
	case "cargo":
		flags = []string{"-C", "--config", "-Z"}
	case "go":
		flags = []string{"-C"}
	case "apt", "apt-get", "aptitude":
		flags = []string{"-o", "-c", "-t"}
	case "yum", "dnf", "microdnf":
		flags = []string{"-c", "--installroot", "--releasever"}
	case "pip", "pip3":
		flags = []string{"--proxy", "--cache-dir", "--log", "--python"}
	}
	for _, f := range flags {
		if f == flag {
			return true
		}
	}
	return false
}

func synthetic(a Action, rule, reason string, cmd []string) Decision {
	return Decision{Action: a, Rule: rule, Reason: reason, Categories: []string{}, Command: cmd}
}

func texts(cmd []word) []string {
	out := make([]string, len(cmd))
	for i, w := range cmd {
		out[i] = w.text
	}
	return out
}

func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
