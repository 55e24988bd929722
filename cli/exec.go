package cli

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

func (a *app) execCmd() *cobra.Command {
	var args messages.ExecArgs
	var env []string
	var timeout string
	var stdin, detach bool
	c := &cobra.Command{
		Use:   "exec [flags] [--shell STRING | -- ARGV...]",
		Short: "Run a policy-checked command in the vault and print its ExecutionEnvelope",
		Long: `exec runs one command with the vault mounted as its working tree. The policy
decides first (allow, allow_with_checkpoint, deny, require_approval); a
checkpoint is taken before mutating commands; the envelope reports exit code,
captured output and every file the command changed. avfs exits with the
command's exit code, 124 when it timed out, 125 when avfs refused or failed.

On a terminal the command's output appears as it is written (stdout to
stdout, stderr to stderr), followed by one line on stderr: status, exit code,
duration, files changed, checkpoint. With --json, or when stdout is not a
terminal, avfs prints the envelope only.

--detach starts a background run and prints its id at once; see avfs run.
Runs live in the server (avfs serve, or a fleet's worker), so --detach needs
one: without a server there is no process to own the run.`,
		Example: `  avfs exec -- sh -c 'echo a; sleep 4; echo b'
  avfs exec --shell 'cargo test' --timeout 10m
  avfs exec --memory-mb 512 --pids 64 --cpus 1 -- make -j4
  avfs exec --detach -- cargo build --release`,
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
			if math.IsNaN(x.CPUs) || math.IsInf(x.CPUs, 0) {
				return usagef("--cpus %v: want a number", x.CPUs)
			}
			if detach {
				return a.startRun(cmd, v, x)
			}
			ctx := cmd.Context()
			// --json and --output yaml print the envelope as the
			// document; otherwise a person sees the output as it comes,
			// then one line about the run instead of the envelope.
			document := a.document()
			if !document {
				ctx = withStream(ctx, a.stdout, a.stderr)
			}
			var out messages.Envelope
			// With --json the envelope is printed as it came; only what
			// decides the exit status is decoded (decoding the whole
			// Envelope type on first use cost ~0.1 ms of each exec).
			var status struct {
				Status   string  `json:"status"`
				ExitCode *int    `json:"exit_code"`
				Signal   *string `json:"signal"`
			}
			var dst any = &out
			if document {
				dst = &status
			}
			raw, err := a.do(ctx, messages.OpExec, v, x, dst)
			if err != nil {
				return err
			}
			if document {
				if err := a.show(raw, nil); err != nil {
					return err
				}
				out.Status, out.ExitCode, out.Signal = status.Status, status.ExitCode, status.Signal
			} else {
				fmt.Fprint(a.stderr, execSummary(out))
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
	f.Int64Var(&args.MemoryMB, "memory-mb", 0, "cap this command's memory (MiB); may only lower the vault's limit")
	f.IntVar(&args.Pids, "pids", 0, "cap this command's processes and threads; may only lower the vault's limit")
	f.Float64Var(&args.CPUs, "cpus", 0, "cap this command's CPU time per second, e.g. 0.5; may only lower the vault's limit")
	f.BoolVar(&detach, "detach", false, "start a background run, print its id and return (needs a server: avfs serve)")
	return c
}

// execSummary is what a person reads on stderr after a streamed exec: one
// line about the run, and for a refused command the next one to type.
func execSummary(e messages.Envelope) string {
	dur := (time.Duration(e.DurationMS) * time.Millisecond).String()
	switch e.Status {
	case messages.StatusDenied:
		return fmt.Sprintf("avfs: denied by policy rule %s: %s\n  see the decision: avfs policy check %s\n", e.Decision.Rule, e.Decision.Reason, commandArgs(e))
	case messages.StatusApprovalRequired:
		return fmt.Sprintf("avfs: approval required by policy rule %s: %s\n  to run it: avfs approval grant %s\n", e.Decision.Rule, e.Decision.Reason, deref(e.ApprovalID))
	case messages.StatusFailedToStart:
		return fmt.Sprintf("avfs: failed to start: %s\n", e.Error)
	}
	parts := []string{strings.ReplaceAll(e.Status, "_", " ")}
	switch {
	case e.ExitCode != nil:
		parts = append(parts, fmt.Sprintf("exit %d", *e.ExitCode))
	case e.Signal != nil:
		parts = append(parts, "killed by "+*e.Signal)
	}
	parts = append(parts, dur)
	if c := e.Changes; c != nil {
		n := len(c.Added) + len(c.Modified) + len(c.Deleted)
		changed := fmt.Sprintf("%d files changed", n)
		if n == 1 {
			changed = "1 file changed"
		}
		if n > 0 {
			changed += fmt.Sprintf(" (%d added, %d modified, %d deleted)", len(c.Added), len(c.Modified), len(c.Deleted))
		}
		parts = append(parts, changed)
	}
	if e.Checkpoint != nil {
		parts = append(parts, "checkpoint "+*e.Checkpoint)
	} else {
		parts = append(parts, "no checkpoint")
	}
	return "avfs: " + strings.Join(parts, ", ") + "\n"
}

// commandArgs is the envelope's command as a person types it after
// exec or policy check: --shell 'STRING' or -- ARGV..., quoted for sh.
func commandArgs(e messages.Envelope) string {
	if e.Shell != nil {
		return "--shell " + shellQuote(*e.Shell)
	}
	return "-- " + runCommand(messages.RunInfo{Command: e.Command})
}

// shellQuote quotes w for sh when it holds anything but plain characters.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
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

// startRun is exec --detach: it starts a background run in the server and
// prints its id. Without a server the run would die with this process, so
// it is refused instead of pretending.
func (a *app) startRun(cmd *cobra.Command, v string, x messages.ExecArgs) error {
	c, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	if _, local := c.(*localClient); local {
		return &requestError{messages.Errorf(messages.CodeUnavailable,
			"exec --detach needs a running server to own the run (start one with `avfs serve`, or pass --nats URL): in local mode the run would end with this command")}
	}
	var out messages.RunResult
	raw, err := a.do(cmd.Context(), messages.OpRunStart, v, x, &out)
	if err != nil {
		return err
	}
	if a.json {
		_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	}
	fmt.Fprintln(a.stdout, out.Run.ID)
	fmt.Fprintf(a.stderr, "avfs: started %s in vault %s\n  follow: avfs run logs --vault %s %s --follow\n  wait:   avfs run wait --vault %s %s\n",
		out.Run.ID, v, v, out.Run.ID, v, out.Run.ID)
	return nil
}
