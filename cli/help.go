package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/messages"
)

// Version and Commit are stamped by the Makefile (-ldflags "-X
// github.com/avfs/avfs/cli.Version=... -X ...Commit=..."). A plain
// `go build` leaves Version "dev" and takes the commit from the Go build
// info, when the build had one.
var (
	Version = "dev"
	Commit  = ""
)

// versionInfo is what `avfs version` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Built    string `json:"built"` // "make" when stamped by the Makefile, else "go build"
	Go       string `json:"go"`
	Protocol string `json:"protocol"`
}

func currentVersion() versionInfo {
	v := versionInfo{Version: Version, Commit: Commit, Built: "make", Go: runtime.Version(), Protocol: messages.SubjectRoot}
	if v.Commit != "" {
		return v
	}
	v.Built, v.Commit = "go build", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			v.Commit = rev + dirty
		}
	}
	return v
}

func versionString() string {
	v := currentVersion()
	return fmt.Sprintf("%s (commit %s, built with %s)", v.Version, v.Commit, v.Built)
}

// finishTree applies what every command shares: an example, usage
// errors for unknown subcommands, shell completion of arguments.
func (a *app) finishTree(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[strings.TrimPrefix(c.CommandPath(), "avfs ")]
		}
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil && c != root {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return cmd.Help()
				}
				return unknownCommand(cmd, args[0])
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	a.registerCompletions(root)
}

// unknownCommand is the usage error of `avfs vault creat`.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usagef("%s (see `%s --help`)", msg, cmd.CommandPath())
}

// examples holds the Example of each command, by its path below avfs. A
// test checks that every command has one.
var examples = map[string]string{
	"vault":                 "  avfs vault create task-1\n  avfs vault list",
	"vault create":          "  avfs vault create task-1\n  avfs vault create task-1 --max-size-mb 500 --max-files 10000",
	"vault list":            "  avfs vault list\n  avfs vault list -o wide",
	"vault info":            "  avfs vault info task-1\n  avfs vault info            # the current vault",
	"vault use":             "  avfs vault use task-1",
	"vault fork":            "  avfs vault fork task-1 task-1-b --use\n  avfs vault fork task-1 retry --checkpoint before-refactor",
	"vault merge":           "  avfs vault merge task-1-b --dry-run\n  avfs vault merge task-1-b --into task-1 --paths '/src/*.go' --strategy theirs",
	"vault delete":          "  avfs vault delete task-1-b --yes",
	"vault export":          "  avfs vault export task-1 task-1.avfs",
	"vault import":          "  avfs vault import task-1.avfs copy",
	"checkpoint":            "  avfs checkpoint save before-refactor -m \"tests pass\"\n  avfs checkpoint restore before-refactor",
	"checkpoint save":       "  avfs checkpoint save before-refactor -m \"tests pass\"",
	"checkpoint list":       "  avfs checkpoint list",
	"checkpoint restore":    "  avfs checkpoint restore before-refactor",
	"checkpoint delete":     "  avfs checkpoint delete before-refactor",
	"checkpoint diff":       "  avfs checkpoint diff before-refactor\n  avfs checkpoint diff v1 v2 -o wide",
	"snapshot save":         "  avfs snapshot save before-refactor",
	"snapshot list":         "  avfs snapshot list",
	"snapshot info":         "  avfs snapshot info before-refactor",
	"snapshot restore":      "  avfs snapshot restore before-refactor",
	"snapshot delete":       "  avfs snapshot delete before-refactor",
	"snapshot diff":         "  avfs snapshot diff before-refactor",
	"quota":                 "  avfs quota",
	"quota set":             "  avfs quota set max_files 10000\n  avfs quota set max_size_mb none",
	"audit":                 "  avfs audit --action file. --limit 20\n  avfs audit --since 15m --path /src\n  avfs audit -f",
	"config":                "  avfs config show",
	"config show":           "  avfs config show\n  avfs config show -o yaml",
	"version":               "  avfs version\n  avfs --version",
	"gc":                    "  avfs gc",
	"write":                 "  avfs write /notes.txt 'hello'\n  avfs write -p /src/lib.rs < lib.rs\n  echo more | avfs write --append /notes.txt",
	"cat":                   "  avfs cat /src/lib.rs\n  avfs cat /logo.png > logo.png     # the bytes, when stdout is not a terminal\n  avfs cat /src/lib.rs --json       # {\"path\", \"size\", \"content\"}",
	"ls":                    "  avfs ls\n  avfs ls -l /src\n  avfs ls -R /",
	"stat":                  "  avfs stat /src/lib.rs",
	"mkdir":                 "  avfs mkdir -p /src/bin",
	"rm":                    "  avfs rm /notes.txt\n  avfs rm -r /target",
	"mv":                    "  avfs mv /notes.txt /docs/notes.txt",
	"cp":                    "  avfs cp /src/lib.rs /src/lib.rs.bak\n  avfs cp -r /src /src-copy",
	"ln":                    "  avfs ln /build/app /release/app   # one file, two names",
	"import":                "  avfs import ./my-project /\n  avfs import ./assets /static --quiet",
	"export":                "  avfs export / ./out",
	"demo":                  "  avfs demo\n  avfs demo --json",
	"exec":                  "  avfs exec -- cargo test\n  avfs exec --shell 'npm test && npm run lint'\n  avfs exec --timeout 30s --checkpoint always --env RUST_LOG=debug -- make",
	"proxy":                 "  avfs proxy exec -- ls",
	"proxy exec":            "  avfs proxy exec -- cargo test",
	"approval":              "  avfs approval list\n  avfs approval grant apr-0123",
	"approval list":         "  avfs approval list",
	"approval show":         "  avfs approval show apr-0123",
	"approval grant":        "  avfs approval grant apr-0123",
	"approval deny":         "  avfs approval deny apr-0123 --reason 'no network in CI'",
	"policy":                "  avfs policy show\n  avfs policy check -- git push",
	"policy check":          "  avfs policy check -- git push\n  avfs policy check --shell 'curl x | sh'",
	"policy show":           "  avfs policy show\n  avfs policy show -o yaml > rules.yaml",
	"serve":                 "  avfs serve\n  avfs serve --listen 127.0.0.1:4222 --http 127.0.0.1:9090",
	"keeper":                "  avfs keeper status\n  avfs keeper stop",
	"keeper status":         "  avfs keeper status\n  avfs keeper status --json",
	"keeper stop":           "  avfs keeper stop",
	"worker":                "  avfs worker --nats nats://10.0.0.1:4222 --home /srv/avfs --http :9091",
	"dispatcher":            "  avfs dispatcher --nats nats://10.0.0.1:4222",
	"fleet":                 "  avfs fleet status",
	"fleet status":          "  avfs fleet status",
	"fleet dlq":             "  avfs fleet dlq list",
	"fleet dlq list":        "  avfs fleet dlq list",
	"fleet gc":              "  avfs fleet gc --dry-run\n  avfs fleet gc",
	"fleet dlq replay":      "  avfs fleet dlq replay 42",
	"fleet dlq drop":        "  avfs fleet dlq drop 42",
	"mount":                 "  avfs mount /tmp/ws &\n  avfs mount /tmp/ws --readonly --vault task-1",
	"unmount":               "  avfs unmount /tmp/ws",
	"attempts":              "  avfs attempts run --from task-1 --count 4 -- cargo test",
	"attempts run":          "  avfs attempts run --from task-1 --count 8 --keep best -- cargo test\n  avfs attempts run --from task-1 --commands fixes.txt --merge best",
	"completion":            "  source <(avfs completion bash)\n  avfs completion zsh > \"${fpath[1]}/_avfs\"\n  avfs completion fish > ~/.config/fish/completions/avfs.fish",
	"completion bash":       "  source <(avfs completion bash)",
	"completion zsh":        "  avfs completion zsh > \"${fpath[1]}/_avfs\"",
	"completion fish":       "  avfs completion fish > ~/.config/fish/completions/avfs.fish",
	"completion powershell": "  avfs completion powershell | Out-String | Invoke-Expression",
	"help":                  "  avfs help vault create",
}

// quotaKeys are the KEYs of `quota set`.
var quotaKeys = []string{"max_size_mb", "max_files", "max_file_size_mb"}

// quotaValue checks `quota set KEY VALUE` before anything is sent: a bad
// key or value is a usage error.
func quotaValue(key, value string) (*int64, error) {
	if !slices.Contains(quotaKeys, key) {
		msg := fmt.Sprintf("quota key %q: want %s", key, strings.Join(quotaKeys, ", "))
		best, bestD := "", 4
		for _, k := range quotaKeys {
			if d := config.Distance(key, k); d < bestD {
				best, bestD = k, d
			}
		}
		if best != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", best)
		}
		return nil, usagef("%s", msg)
	}
	if value == "none" || value == "unlimited" {
		return nil, nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return nil, usagef("quota value %q: want a whole number or \"none\"", value)
	}
	return &n, nil
}
