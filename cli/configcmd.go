package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/policy"
	"github.com/avfs/avfs/runner"
)

// configDoc is what `config show` prints.
type configDoc struct {
	Config map[string]any `json:"config"`
}

// policyDoc is what `policy show` prints: the rules in force, the
// built-in ones when the configuration names none.
type policyDoc struct {
	Source   string        `json:"source"` // "default" or "config"
	Rules    []policy.Rule `json:"rules"`
	Fallback policy.Action `json:"fallback"`
}

// checkConfig refuses a configuration with unknown keys or bad policy
// rules before any command acts on it.
func (a *app) checkConfig() error {
	const hint = "fix the file (AVFS_CONFIG or --config picks another); `avfs config show` lists the keys"
	if err := config.Validate(a.viper); err != nil {
		return &usageError{err.Error(), hint}
	}
	if _, err := runner.PolicyFrom(a.cfg); err != nil {
		return &usageError{fmt.Sprintf("config %s: %v", a.viper.ConfigFileUsed(), err), hint}
	}
	if err := node.StoreOptions(a.cfg).Defaults.Validate(); err != nil {
		return &usageError{fmt.Sprintf("config %s: checkpoints or quota: %v", a.viper.ConfigFileUsed(), err), hint}
	}
	if _, err := logLevel(a.cfg.LogLevel); err != nil {
		return &usageError{err.Error(), "--log-level, AVFS_LOG_LEVEL or log_level in the config file"}
	}
	return nil
}

// logLevels are the values of log_level, in order.
var logLevels = []string{"debug", "info", "warn", "error"}

// logLevel parses a log_level value (any case).
func logLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelWarn, fmt.Errorf("log level %q: want one of %s", s, strings.Join(logLevels, ", "))
}

func (a *app) policyShowCmd() *cobra.Command {
	return &cobra.Command{
		Use: "show", Short: "Print the rules in force, in order (the first match wins), and the fallback", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := runner.PolicyFrom(a.cfg)
			if err != nil {
				return err
			}
			doc := policyDoc{Source: "default", Rules: p.Rules(), Fallback: p.Fallback()}
			if len(a.cfg.Policy.Rules) > 0 {
				doc.Source = "config"
			}
			return a.emit(doc)
		},
	}
}

func (p printer) policy(w io.Writer, d policyDoc) {
	if p.wide {
		fmt.Fprintln(w, "#\tNAME\tACTION\tPROGRAMS\tSUBCOMMANDS\tARGS\tPATHS OUTSIDE\tNETWORK\tSANDBOX ONLY\tCATEGORIES\tREASON")
	} else {
		fmt.Fprintln(w, "#\tNAME\tACTION\tMATCHES")
	}
	for i, r := range d.Rules {
		if p.wide {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%v\t%v\t%v\t%s\t%s\n", i, r.Name, r.Action, list(r.Programs), list(r.Subcommands), list(r.Args),
				r.PathsOutside, r.Network, r.RequireSandbox, list(r.Categories), r.Reason)
			continue
		}
		m := list(r.Programs)
		if len(r.Subcommands) > 0 {
			m += " " + list(r.Subcommands)
		}
		if len(r.Args) > 0 {
			m += " args " + list(r.Args)
		}
		if r.PathsOutside {
			m += " (paths outside the vault)"
		}
		if r.Network {
			m += " (gets the network)"
		}
		if r.RequireSandbox {
			m += " (only in a sandbox)"
		}
		if len(m) > 70 {
			m = m[:67] + "..."
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", i, r.Name, r.Action, m)
	}
	fmt.Fprintf(w, "-\tdefault\t%s\tanything else\n", d.Fallback)
	if d.Source == "default" {
		fmt.Fprintln(w, "(the built-in rules: policy.rules in avfs.yaml replaces them; -o wide shows every field, -o yaml a file to start from)")
	}
}

func list(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}
