package policy

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-viper/mapstructure/v2"
)

const ws = "/mnt/ws"

type want struct {
	action Action
	rule   string
}

func assertDecision(t testing.TB, what string, got Decision, w want) {
	t.Helper()
	if got.Action != w.action || got.Rule != w.rule {
		t.Errorf("%s: got %s by %q (%s, command %q), want %s by %q",
			what, got.Action, got.Rule, got.Reason, got.Command, w.action, w.rule)
	}
	if got.Categories == nil {
		t.Errorf("%s: got nil categories, want non-nil", what)
	}
}

func TestCheckDefaults(t *testing.T) {
	p := Default()
	tests := []struct {
		argv []string
		want want
	}{
		// privilege
		{[]string{"sudo", "ls"}, want{Deny, "privilege"}},
		{[]string{"/usr/bin/sudo", "-u", "root", "ls"}, want{Deny, "privilege"}},
		{[]string{"chown", "me", "a.txt"}, want{Deny, "privilege"}},
		{[]string{"docker", "run", "-v", "/:/host", "alpine"}, want{Deny, "privilege"}},
		{[]string{"mount", "/dev/sda1", "x"}, want{Deny, "host-admin"}},
		{[]string{"mkfs.ext4", "disk.img"}, want{Deny, "host-admin"}},
		{[]string{"dd", "if=a", "of=b"}, want{Deny, "host-admin"}},
		{[]string{"systemctl", "stop", "x"}, want{Deny, "host-admin"}},
		// host paths
		{[]string{"cat", "/etc/passwd"}, want{Deny, "host-path"}},
		{[]string{"cat", "../../etc/passwd"}, want{Deny, "host-path"}},
		{[]string{"ls", ".."}, want{Deny, "host-path"}},
		{[]string{"cat", "a/../../x"}, want{Deny, "host-path"}},
		{[]string{"cat", "~/.ssh/id_rsa"}, want{Deny, "host-path"}},
		{[]string{"rm", "-rf", "/"}, want{Deny, "host-path"}},
		{[]string{"rm", "-rf", "/tmp/../etc"}, want{Deny, "host-path"}},
		{[]string{"sort", "-o/etc/x", "a"}, want{Deny, "host-path"}},
		{[]string{"gcc", "--output=/usr/local/bin/x", "a.c"}, want{Deny, "host-path"}},
		{[]string{"make", "install", "PREFIX=/usr/local"}, want{Deny, "host-path"}},
		{[]string{"git", "-C", "/other/repo", "status"}, want{Deny, "host-path"}},
		{[]string{"cat", "/mnt/ws/a.txt"}, want{Allow, "read-only"}},
		{[]string{"cat", "/mnt/ws"}, want{Allow, "read-only"}},
		{[]string{"cat", "/mnt/wsx/a.txt"}, want{Deny, "host-path"}},
		{[]string{"cat", "./a.txt"}, want{Allow, "read-only"}},
		{[]string{"cat", "sub/../a.txt"}, want{Allow, "read-only"}},
		{[]string{"ls", "/tmp"}, want{Allow, "read-only"}},
		{[]string{"ls", "/tmp/build"}, want{Allow, "read-only"}},
		{[]string{"grep", "-r", "x", "/dev/null"}, want{Allow, "read-only"}},
		{[]string{"git", "diff", "HEAD~1..HEAD"}, want{Allow, "git-read-only"}},
		{[]string{"curl", "https://example.com/a/../../b"}, want{RequireApproval, "network"}},
		// network
		{[]string{"curl", "http://x"}, want{RequireApproval, "network"}},
		{[]string{"/usr/bin/wget", "x"}, want{RequireApproval, "network"}},
		{[]string{"ssh", "host"}, want{RequireApproval, "network"}},
		{[]string{"git", "push"}, want{RequireApproval, "git-network"}},
		{[]string{"git", "-C", "sub", "push", "origin", "main"}, want{RequireApproval, "git-network"}},
		{[]string{"git", "-c", "user.name=x", "fetch"}, want{RequireApproval, "git-network"}},
		{[]string{"git", "--no-pager", "clone", "u"}, want{RequireApproval, "git-network"}},
		// package installs
		{[]string{"npm", "install"}, want{RequireApproval, "js-package-install"}},
		{[]string{"npm", "i", "left-pad"}, want{RequireApproval, "js-package-install"}},
		{[]string{"npm", "--prefix", "web", "ci"}, want{RequireApproval, "js-package-install"}},
		{[]string{"yarn", "add", "x"}, want{RequireApproval, "js-package-install"}},
		{[]string{"npx", "cowsay"}, want{RequireApproval, "js-package-run"}},
		{[]string{"pip", "install", "requests"}, want{RequireApproval, "pip-install"}},
		{[]string{"python3", "-m", "pip", "install", "requests"}, want{RequireApproval, "python-pip-install"}},
		{[]string{"cargo", "install", "ripgrep"}, want{RequireApproval, "cargo-install"}},
		{[]string{"go", "install", "x@latest"}, want{RequireApproval, "go-install"}},
		{[]string{"go", "get", "x"}, want{RequireApproval, "go-install"}},
		{[]string{"apt-get", "-y", "install", "x"}, want{RequireApproval, "system-package-install"}},
		{[]string{"gem", "install", "x"}, want{RequireApproval, "ruby-package-install"}},
		// read-only
		{[]string{"ls", "-la"}, want{Allow, "read-only"}},
		{[]string{"grep", "-rn", "TODO", "."}, want{Allow, "read-only"}},
		{[]string{"find", ".", "-name", "*.go"}, want{Allow, "read-only"}},
		{[]string{"sed", "-n", "1,5p", "a.txt"}, want{Allow, "read-only"}},
		{[]string{"[", "-f", "x", "]"}, want{Allow, "read-only"}},
		{[]string{"env"}, want{Allow, "read-only"}},
		{[]string{"git", "status"}, want{Allow, "git-read-only"}},
		{[]string{"git", "log", "--oneline"}, want{Allow, "git-read-only"}},
		{[]string{"command", "-v", "curl"}, want{Allow, "wrapper"}},
		// mutating
		{[]string{"rm", "-rf", "build"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"sed", "-i", "s/a/b/", "f"}, want{AllowWithCheckpoint, "sed-in-place"}},
		{[]string{"sed", "--in-place=.bak", "s/a/b/", "f"}, want{AllowWithCheckpoint, "sed-in-place"}},
		{[]string{"find", ".", "-name", "*.o", "-delete"}, want{AllowWithCheckpoint, "find-delete"}},
		{[]string{"find", ".", "-fprint", "list"}, want{AllowWithCheckpoint, "find-write"}},
		{[]string{"git", "commit", "-m", "x"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"git", "branch", "-D", "x"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"go", "test", "./..."}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"npm", "test"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"make"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"some-unknown-tool", "x"}, want{AllowWithCheckpoint, "default"}},
		// wrappers
		{[]string{"env", "FOO=1", "sudo", "ls"}, want{Deny, "privilege"}},
		{[]string{"env", "-i", "-u", "HOME", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"env", "-", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"env", "-S", "curl x"}, want{RequireApproval, "network"}},
		{[]string{"env", "FOO=1", "ls"}, want{Allow, "read-only"}},
		{[]string{"timeout", "5", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"timeout", "-s", "KILL", "-k", "1", "5", "git", "push"}, want{RequireApproval, "git-network"}},
		{[]string{"nice", "-n", "10", "npm", "install"}, want{RequireApproval, "js-package-install"}},
		{[]string{"nohup", "wget", "x"}, want{RequireApproval, "network"}},
		{[]string{"xargs", "-0", "-n1", "curl"}, want{RequireApproval, "network"}},
		{[]string{"xargs", "-I{}", "{}", "x"}, want{Deny, "dynamic-command"}},
		{[]string{"xargs", "-I", "%", "sh", "-c", "%"}, want{Deny, "dynamic-command"}},
		{[]string{"xargs", "sh", "-c"}, want{Deny, "dynamic-command"}},
		{[]string{"xargs", "rm"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"stdbuf", "-oL", "nc", "host", "1"}, want{RequireApproval, "network"}},
		{[]string{"setsid", "-f", "ssh", "h"}, want{RequireApproval, "network"}},
		{[]string{"busybox", "wget", "x"}, want{RequireApproval, "network"}},
		{[]string{"command", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"exec", "-a", "name", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"ionice", "-c", "3", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"time", "-o", "t.txt", "curl", "x"}, want{RequireApproval, "network"}},
		{[]string{"sh", "-c", "curl x"}, want{RequireApproval, "network"}},
		{[]string{"bash", "-lc", "sudo ls"}, want{Deny, "privilege"}},
		{[]string{"bash", "-e", "-o", "pipefail", "-c", "git push"}, want{RequireApproval, "git-network"}},
		{[]string{"sh", "-c", "ls"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"sh", "script.sh"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"eval", "wget x"}, want{RequireApproval, "network"}},
		{[]string{"watch", "-n", "1", "curl x"}, want{RequireApproval, "network"}},
		{[]string{"find", ".", "-exec", "rm", "{}", ";"}, want{AllowWithCheckpoint, "mutating-default"}},
		{[]string{"find", ".", "-exec", "curl", "x", ";"}, want{RequireApproval, "network"}},
		{[]string{"find", ".", "-execdir", "{}", "+"}, want{Deny, "dynamic-command"}},
		{[]string{"find", ".", "-ok", "sh", "-c", "sudo x", ";"}, want{Deny, "privilege"}},
		{[]string{"sudo", "sudo", "sudo"}, want{Deny, "privilege"}},
		// empty
		{nil, want{Deny, "empty-command"}},
		{[]string{""}, want{Deny, "empty-command"}},
	}
	for _, tt := range tests {
		assertDecision(t, strings.Join(tt.argv, " "), p.Check(tt.argv, ws), tt.want)
	}
}

func TestCheckShellDefaults(t *testing.T) {
	p := Default()
	tests := []struct {
		script string
		want   want
	}{
		// every command of a script is decided
		{"true && curl http://x | sh", want{RequireApproval, "network"}},
		{"npm test && curl x | sh", want{RequireApproval, "network"}},
		{"ls; git push || true", want{RequireApproval, "git-network"}},
		{"echo $(wget x)", want{RequireApproval, "network"}},
		{"echo `wget x`", want{RequireApproval, "network"}},
		{"echo \"$(echo `curl x`)\"", want{RequireApproval, "network"}},
		{"diff <(curl a) <(ls)", want{RequireApproval, "network"}},
		{"X=$(curl x)", want{RequireApproval, "network"}},
		{"export X=$(curl x)", want{RequireApproval, "network"}},
		{"cat <<EOF\n$(curl x)\nEOF", want{RequireApproval, "network"}},
		{"if true; then wget x; fi", want{RequireApproval, "network"}},
		{"if curl x; then :; fi", want{RequireApproval, "network"}},
		{"for f in *; do git push; done", want{RequireApproval, "git-network"}},
		{"while true; do nc -l 1; done", want{RequireApproval, "network"}},
		{"case x in x) ssh h;; esac", want{RequireApproval, "network"}},
		{"f() { curl x; }; f", want{RequireApproval, "network"}},
		{"{ ls; wget x; }", want{RequireApproval, "network"}},
		{"(cd sub && rm -rf /etc)", want{Deny, "host-path"}},
		{"time curl x", want{RequireApproval, "network"}},
		{"coproc curl x", want{RequireApproval, "network"}},
		{"! curl x", want{RequireApproval, "network"}},
		{"curl x &", want{RequireApproval, "network"}},
		{"[[ $(curl x) ]]", want{RequireApproval, "network"}},
		// wrappers inside scripts
		{`sh -c "curl x"`, want{RequireApproval, "network"}},
		{`bash -lc 'sudo ls'`, want{Deny, "privilege"}},
		{`bash -c "bash -c 'sudo ls'"`, want{Deny, "privilege"}},
		{`env FOO=1 sudo ls`, want{Deny, "privilege"}},
		{`timeout 5 curl x`, want{RequireApproval, "network"}},
		{`find . -exec rm {} \;`, want{AllowWithCheckpoint, "mutating-default"}},
		{`find . -exec curl x \;`, want{RequireApproval, "network"}},
		{`find . -name '*.go' | xargs grep foo`, want{Allow, "read-only"}},
		{`eval "$(curl x)"`, want{Deny, "dynamic-command"}},
		{"alias c=curl\nc --version", want{Deny, "dynamic-command"}},
		{`script -qc "curl x" /dev/null`, want{RequireApproval, "network"}},
		{`script --command='sudo ls' log`, want{Deny, "privilege"}},
		{`script -c "$CMD"`, want{Deny, "dynamic-command"}},
		{"alias", want{AllowWithCheckpoint, "default"}},
		{`S=push; git $S`, want{RequireApproval, "git-network"}},
		{`sed $OPTS f`, want{AllowWithCheckpoint, "sed-in-place"}},
		{`sed "$OPT" f`, want{AllowWithCheckpoint, "sed-in-place"}},
		{`python3 -m pip "$CMD" x`, want{RequireApproval, "python-pip-install"}},
		{`python3 -m $ARGS`, want{RequireApproval, "python-pip-install"}},
		{`python3 main.py "$X"`, want{AllowWithCheckpoint, "mutating-default"}},
		{`python3 main.py "$X" "$Y"`, want{AllowWithCheckpoint, "mutating-default"}},
		{`cat "$f"`, want{Allow, "read-only"}},
		{`/usr/bin/c?rl x`, want{Deny, "dynamic-command"}},
		{`{curl,x}`, want{Deny, "dynamic-command"}},
		{`env $CMD x`, want{Deny, "dynamic-command"}},
		{`timeout $T curl x`, want{Deny, "dynamic-command"}},
		{`sh -c "$S"`, want{Deny, "dynamic-command"}},
		{`bash -c $'curl x'`, want{Deny, "dynamic-command"}},
		// quoting is removed as the shell would
		{`"curl" x`, want{RequireApproval, "network"}},
		{`c'ur'l x`, want{RequireApproval, "network"}},
		{`\curl x`, want{RequireApproval, "network"}},
		{`git "pu"sh`, want{RequireApproval, "git-network"}},
		// dynamic program names and unparsable scripts
		{`$CMD foo`, want{Deny, "dynamic-command"}},
		{`"$(echo rm)" -rf /`, want{Deny, "dynamic-command"}},
		{`${X:-curl} x`, want{Deny, "dynamic-command"}},
		{`echo "unterminated`, want{Deny, "unparsable-shell"}},
		{`if true; then`, want{Deny, "unparsable-shell"}},
		{"", want{Deny, "empty-command"}},
		{"  \n# just a comment\n", want{Deny, "empty-command"}},
		{"X=1", want{AllowWithCheckpoint, "default"}},
		// host paths
		{"cat /etc/passwd", want{Deny, "host-path"}},
		{"cat /mnt/ws/a.txt", want{Allow, "read-only"}},
		{"cat ./a.txt", want{Allow, "read-only"}},
		{"ls /tmp", want{Allow, "read-only"}},
		{"cat ../../etc/passwd", want{Deny, "host-path"}},
		{"cat ~/.ssh/id_rsa", want{Deny, "host-path"}},
		{"cat $HOME/.ssh/id_rsa", want{Deny, "host-path"}},
		{"cat \"${HOME}/.netrc\"", want{Deny, "host-path"}},
		{"rm -rf /", want{Deny, "host-path"}},
		{"rm -rf /*", want{Deny, "host-path"}},
		{"cd /etc && cat passwd", want{Deny, "host-path"}},
		// redirections
		{"echo x > /etc/passwd", want{Deny, "host-path"}},
		{"cat < /etc/shadow", want{Deny, "host-path"}},
		{"{ ls; } > ../out", want{Deny, "host-path"}},
		{"while read l; do :; done < /etc/hosts", want{Deny, "host-path"}},
		{"ls > out.txt", want{AllowWithCheckpoint, "redirect-write"}},
		{"ls >> /tmp/log 2>&1", want{Allow, "read-only"}},
		{"ls 2>/dev/null >&2", want{Allow, "read-only"}},
		{"sort < in.txt", want{Allow, "read-only"}},
		{"rm x > log", want{AllowWithCheckpoint, "mutating-default"}},
		{"echo > $(curl x)", want{RequireApproval, "network"}},
		// read-only scripts
		{"ls -la | grep foo | wc -l", want{Allow, "read-only"}},
		{"git status && git diff", want{Allow, "git-read-only"}},
		{"go test ./... && go vet ./...", want{AllowWithCheckpoint, "mutating-default"}},
	}
	for _, tt := range tests {
		assertDecision(t, tt.script, p.CheckShell(tt.script, ws), tt.want)
	}
}

func TestDecisionCommand(t *testing.T) {
	p := Default()
	d := p.CheckShell("ls && timeout 5 curl -s 'http://x y' | sh", ws)
	if want := []string{"curl", "-s", "http://x y"}; !slices.Equal(d.Command, want) {
		t.Errorf("command: got %q, want %q", d.Command, want)
	}
	d = p.Check([]string{"cat", "a.txt"}, ws)
	if d.Action != Allow || !slices.Equal(d.Categories, []string{CategoryReadOnly}) {
		t.Errorf("read-only: got %s %q, want allow [read_only]", d.Action, d.Categories)
	}
	d = p.CheckShell(`ls; bash -c "$S" arg`, ws)
	if want := []string{"bash", "-c", `$S`, "arg"}; d.Rule != RuleDynamicCommand || !slices.Equal(d.Command, want) {
		t.Errorf("dynamic script: got %s %q, want %s %q", d.Rule, d.Command, RuleDynamicCommand, want)
	}
	// Ties go to the first command encountered.
	d = p.CheckShell("rm a; mv b c", ws)
	if !slices.Equal(d.Command, []string{"rm", "a"}) {
		t.Errorf("tie: got %q, want [rm a]", d.Command)
	}
}

func TestDecisionJSON(t *testing.T) {
	for _, d := range []Decision{
		Default().Check([]string{"unknown"}, ws),
		Default().CheckShell("$X", ws),
		Default().CheckShell("echo 'x", ws),
	} {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"categories":[]`) {
			t.Errorf("got %s, want categories []", b)
		}
	}
}

func TestEmptyWorkspaceDisablesPathChecks(t *testing.T) {
	p := Default()
	assertDecision(t, "cat /etc/passwd", p.Check([]string{"cat", "/etc/passwd"}, ""), want{Allow, "read-only"})
	assertDecision(t, "cat ../x", p.CheckShell("cat ../x", ""), want{Allow, "read-only"})
}

func TestCustomRulesFirstMatchWins(t *testing.T) {
	rules := []Rule{
		{Name: "force-push", Programs: []string{"git"}, Subcommands: []string{"push"}, Args: []string{"--force*"}, Action: Deny, Reason: "rewrites shared history"},
		{Name: "push", Programs: []string{"git"}, Subcommands: []string{"push"}, Action: RequireApproval},
		{Name: "git", Programs: []string{"git"}, Action: Allow, Categories: []string{"vcs"}},
		{Name: "etc", Args: []string{"/etc/*"}, Action: Deny},
		{Name: "outside", PathsOutside: true, Action: RequireApproval},
	}
	p, err := New(rules, Deny)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		argv []string
		want want
	}{
		{[]string{"git", "push", "--force-with-lease"}, want{Deny, "force-push"}},
		{[]string{"git", "push", "origin"}, want{RequireApproval, "push"}},
		{[]string{"git", "status"}, want{Allow, "git"}},
		{[]string{"/usr/bin/git", "status", "/etc/x"}, want{Allow, "git"}},
		{[]string{"cat", "/etc/ssl/certs/x"}, want{Deny, "etc"}}, // * crosses '/' in args
		{[]string{"cat", "/var/x"}, want{RequireApproval, "outside"}},
		{[]string{"cat", "x"}, want{Deny, "default"}},
	}
	for _, tt := range tests {
		assertDecision(t, strings.Join(tt.argv, " "), p.Check(tt.argv, ws), tt.want)
	}
	if d := p.Check([]string{"git", "status"}, ws); !slices.Equal(d.Categories, []string{"vcs"}) || d.Reason != `matched rule "git"` {
		t.Errorf("got %q %q, want [vcs] and a default reason", d.Categories, d.Reason)
	}

	// The policy keeps its own copy of the rules.
	rules[2].Action = Deny
	rules[2].Programs[0] = "nope"
	assertDecision(t, "after mutation", p.Check([]string{"git", "status"}, ws), want{Allow, "git"})
}

// TestRulesFromConfig decodes rules the way the configuration loader does
// (viper hands mapstructure a map), checking the snake_case tags.
func TestRulesFromConfig(t *testing.T) {
	raw := map[string]any{
		"rules": []any{
			map[string]any{
				"name":          "network-fetch",
				"programs":      []any{"curl", "wget"},
				"action":        "require_approval",
				"reason":        "fetches from the network",
				"categories":    []any{"network"},
				"paths_outside": false,
			},
			map[string]any{"name": "host", "paths_outside": true, "action": "deny"},
		},
	}
	var cfg struct {
		Rules []Rule `mapstructure:"rules"`
	}
	if err := mapstructure.Decode(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg.Rules, Allow)
	if err != nil {
		t.Fatal(err)
	}
	assertDecision(t, "curl", p.Check([]string{"curl", "x"}, ws), want{RequireApproval, "network-fetch"})
	assertDecision(t, "cat /etc/x", p.Check([]string{"cat", "/etc/x"}, ws), want{Deny, "host"})
	assertDecision(t, "ls", p.Check([]string{"ls"}, ws), want{Allow, "default"})
}

func TestNewRejectsInvalidRules(t *testing.T) {
	tests := map[string][]Rule{
		"unknown action":  {{Name: "x", Action: "maybe"}},
		"missing action":  {{Name: "x"}},
		"missing name":    {{Action: Allow}},
		"reserved name":   {{Name: "default", Action: Allow}},
		"duplicate name":  {{Name: "x", Action: Allow}, {Name: "x", Action: Deny}},
		"bad program":     {{Name: "x", Programs: []string{"[a-"}, Action: Allow}},
		"bad subcommand":  {{Name: "x", Subcommands: []string{"\\"}, Action: Allow}},
		"bad arg pattern": {{Name: "x", Args: []string{"[]"}, Action: Allow}},
		"empty pattern":   {{Name: "x", Programs: []string{""}, Action: Allow}},
	}
	for name, rules := range tests {
		if _, err := New(rules, Allow); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%s: got %v, want ErrInvalidRule", name, err)
		}
	}
	if _, err := New(nil, "sometimes"); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("bad fallback: got %v, want ErrInvalidRule", err)
	}
	_, err := New([]Rule{{Name: "x", Action: "maybe"}}, Allow)
	if !errors.Is(err, ErrUnknownAction) {
		t.Errorf("unknown action: got %v, want it to wrap ErrUnknownAction too", err)
	}
	p, err := New([]Rule{{Name: "x", Action: " Deny "}}, "ALLOW")
	if err != nil {
		t.Fatal(err)
	}
	assertDecision(t, "normalised", p.Check([]string{"ls"}, ws), want{Deny, "x"})
}

func TestDefaultRulesValid(t *testing.T) {
	if _, err := New(DefaultRules(), AllowWithCheckpoint); err != nil {
		t.Fatal(err)
	}
	a, b := DefaultRules(), DefaultRules()
	a[0].Programs[0] = "changed"
	if b[0].Programs[0] == "changed" {
		t.Error("DefaultRules shares state between calls")
	}
	for _, r := range DefaultRules() {
		if r.Reason == "" || len(r.Categories) == 0 {
			t.Errorf("rule %q: got reason %q, categories %q, want both set", r.Name, r.Reason, r.Categories)
		}
	}
}

func TestActions(t *testing.T) {
	order := []Action{Allow, AllowWithCheckpoint, RequireApproval, Deny}
	for i, a := range order {
		for j, b := range order {
			if got, want := a.Stricter(b), i > j; got != want {
				t.Errorf("%s.Stricter(%s): got %v, want %v", a, b, got, want)
			}
		}
		if got, err := ParseAction(string(a)); err != nil || got != a {
			t.Errorf("ParseAction(%q): got %q, %v, want %q", a, got, err, a)
		}
	}
	if _, err := ParseAction("allow-ish"); !errors.Is(err, ErrUnknownAction) {
		t.Errorf("ParseAction(allow-ish): got %v, want ErrUnknownAction", err)
	}
	if !Action("bogus").Stricter(RequireApproval) {
		t.Error("an unknown action must rank as deny")
	}
}

func TestNestingTooDeep(t *testing.T) {
	argv := []string{"ls"}
	for range 40 {
		argv = append([]string{"nice"}, argv...)
	}
	assertDecision(t, "nice x40", Default().Check(argv, ws), want{Deny, "unparsable-shell"})
}

func TestConcurrentUse(t *testing.T) {
	p := Default()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				assertDecision(t, "concurrent", p.CheckShell("ls && curl x", ws), want{RequireApproval, "network"})
			}
		})
	}
	wg.Wait()
}

// FuzzCheckShell checks that any script gets a well-formed decision.
func FuzzCheckShell(f *testing.F) {
	for _, s := range []string{
		"true && curl http://x | sh", "echo $(wget x)", "f() { curl x; }; f", "cat <<EOF\n$(id)\nEOF",
		`find . -exec sh -c 'rm "$1"' _ {} \;`, "xargs -I{} env -S {}", "echo \"unterminated", "a=(1 2) ${a[@]}",
	} {
		f.Add(s)
	}
	p := Default()
	f.Fuzz(func(t *testing.T, script string) {
		d := p.CheckShell(script, ws)
		if _, err := ParseAction(string(d.Action)); err != nil || d.Rule == "" || d.Categories == nil {
			t.Fatalf("CheckShell(%q): got malformed %+v", script, d)
		}
	})
}

// The install and fetch rules grant the network to the run they decide;
// a rule can require a sandbox for any command it matches, even one that
// another rule decides.
func TestNetworkAndSandboxRequirements(t *testing.T) {
	p := Default()
	for _, c := range []struct {
		script  string
		network bool
	}{
		{"npm install", true},
		{"git clone https://example.com/x.git", true},
		{"curl -O https://example.com/x", true},
		{"cargo test --offline", false},
		{"npm test && npm install", true},
		{"ls", false},
	} {
		if d := p.CheckShell(c.script, ws); d.Network != c.network {
			t.Errorf("%q: network %v by %q, want %v", c.script, d.Network, d.Rule, c.network)
		}
	}
	var rules []Rule
	if err := mapstructure.Decode([]map[string]any{
		{"name": "python-sandboxed", "programs": []string{"python3"}, "action": "allow", "require_sandbox": true},
		{"name": "rest", "programs": []string{"*"}, "action": "allow_with_checkpoint"},
	}, &rules); err != nil {
		t.Fatal(err)
	}
	p, err := New(rules, Allow)
	if err != nil {
		t.Fatal(err)
	}
	for script, want := range map[string]bool{"python3 x.py": true, "ls; python3 x.py": true, "ls": false, "env python3 x.py": true} {
		if d := p.CheckShell(script, ws); d.RequireSandbox != want {
			t.Errorf("%q: require_sandbox %v (decided by %q), want %v", script, d.RequireSandbox, d.Rule, want)
		}
	}
}
