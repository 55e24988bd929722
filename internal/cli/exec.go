package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

func (a *app) execCmd() *cobra.Command {
	var args messages.ExecArgs
	var env []string
	var timeout string
	var stdin bool
	c := &cobra.Command{
		Use:   "exec [flags] [--shell STRING | -- ARGV...]",
		Short: "Run a policy-checked command in the vault and print its ExecutionEnvelope",
		Long: `exec runs one command with the vault mounted as its working tree. The policy
decides first (allow, allow_with_checkpoint, deny, require_approval); a
checkpoint is taken before mutating commands; the envelope reports exit code,
captured output and every file the command changed. avfs exits with the
command's exit code, 124 when it timed out, 125 when avfs refused or failed.`,
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, argv []string) error {
			x := args
			x.Argv = argv
			if x.Shell != "" && len(argv) > 0 {
				return fmt.Errorf("give --shell or -- ARGV..., not both")
			}
			if x.Shell == "" && len(argv) == 0 {
				return fmt.Errorf("no command: pass -- ARGV... or --shell STRING")
			}
			if d, err := time.ParseDuration(timeout); timeout != "" && (err != nil || d <= 0) {
				return usagef("--timeout %q: want a positive duration like 30s or 5m", timeout)
			}
			x.Timeout = timeout
			if stdin {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return err
				}
				x.Stdin = b
			}
			for _, kv := range env {
				k, val, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--env %q: want K=V", kv)
				}
				if x.Env == nil {
					x.Env = map[string]string{}
				}
				x.Env[k] = val
			}
			var out messages.Envelope
			raw, err := a.do(cmd.Context(), messages.OpExec, v, x, &out)
			if err != nil {
				return err
			}
			if a.json {
				fmt.Fprintf(a.stdout, "%s\n", raw)
			} else {
				fmt.Fprint(a.stdout, out.Stdout)
				fmt.Fprint(a.stderr, out.Stderr)
				fmt.Fprintf(a.stdout, "%s\n", raw)
			}
			if code := exitCode(out); code != 0 {
				return &exitError{code}
			}
			return nil
		}),
	}
	f := c.Flags()
	f.StringVar(&timeout, "timeout", "", "kill the command after this long (default 300s)")
	f.StringVar(&args.Cwd, "cwd", "/", "vault directory to run in")
	f.StringVar(&args.Checkpoint, "checkpoint", "auto", "auto (per policy), always or never")
	f.StringArrayVar(&env, "env", nil, "K=V added to the command's environment (repeatable)")
	f.StringVar(&args.Shell, "shell", "", "run this shell string with /bin/sh -c (every command in it is policy-checked)")
	f.BoolVar(&stdin, "stdin", false, "pass avfs's stdin to the command (default: closed)")
	return c
}

// exitCode maps an envelope to avfs's exit status, as timeout(1) and
// docker run do.
func exitCode(e messages.Envelope) int {
	switch e.Status {
	case messages.StatusTimedOut:
		return 124
	case messages.StatusDenied, messages.StatusApprovalRequired, messages.StatusFailedToStart:
		return 125
	case messages.StatusCanceled:
		return 130
	}
	if e.ExitCode != nil {
		return *e.ExitCode
	}
	if e.Signal != nil {
		return 128 + signalNumber(*e.Signal)
	}
	return 0
}

func signalNumber(name string) int {
	switch name {
	case "SIGHUP":
		return 1
	case "SIGINT":
		return 2
	case "SIGQUIT":
		return 3
	case "SIGABRT":
		return 6
	case "SIGKILL":
		return 9
	case "SIGSEGV":
		return 11
	case "SIGPIPE":
		return 13
	case "SIGTERM":
		return 15
	}
	return 0
}

func (a *app) proxyCmd() *cobra.Command {
	c := &cobra.Command{Use: "proxy", Short: "agentvfs-compatible spellings"}
	c.AddCommand(a.execCmd())
	return c
}

func (a *app) approvalCmd() *cobra.Command {
	c := &cobra.Command{Use: "approval", Short: "List, show, grant and deny commands waiting for approval"}
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "List approvals in the namespace", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call[messages.ApprovalListResult](a, cmd, messages.OpApprovalList, "", nil)
		},
	})
	c.AddCommand(&cobra.Command{
		Use: "show ID", Short: "Show an approval and, once run, its envelope", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call[messages.ApprovalResult](a, cmd, messages.OpApprovalShow, "", messages.ApprovalArgs{ID: args[0]})
		},
	})
	c.AddCommand(&cobra.Command{
		Use: "grant ID", Short: "Grant: the held command runs now, once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call[messages.ApprovalResult](a, cmd, messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: args[0]})
		},
	})
	var reason string
	deny := &cobra.Command{
		Use: "deny ID", Short: "Deny: the held command never runs", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call[messages.ApprovalResult](a, cmd, messages.OpApprovalDeny, "", messages.ApprovalArgs{ID: args[0], Reason: reason})
		},
	}
	deny.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	c.AddCommand(deny)
	return c
}

func (a *app) policyCmd() *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "Inspect the command policy"}
	var shell string
	check := &cobra.Command{
		Use: "check [--shell STRING | -- ARGV...]", Short: "Show the decision for a command without running it",
		RunE: func(cmd *cobra.Command, argv []string) error {
			return call[messages.PolicyCheckResult](a, cmd, messages.OpPolicyCheck, "", messages.PolicyCheckArgs{Argv: argv, Shell: shell})
		},
	}
	check.Flags().StringVar(&shell, "shell", "", "a shell string to classify")
	c.AddCommand(check, a.policyShowCmd())
	return c
}
