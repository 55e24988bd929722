package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// runCmd is `avfs run`: the background runs that `exec --detach` starts
// (docs/cli-runs.md).
func (a *app) runCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "Status, logs, wait and kill of background runs (exec --detach)",
		Long: `A background run is a command started with avfs exec --detach. The server that
owns the vault (avfs serve, or a fleet's worker) runs it, keeps its output log
and, once it ends, its ExecutionEnvelope; the run outlives the avfs command that
started it. Runs are per vault: pass the same --vault as to exec.`,
		Example: `  id=$(avfs exec --detach --json -- cargo test | jq -r .run.id)
  avfs run logs $id --follow
  avfs run wait $id --timeout 10m`,
	}
	c.AddCommand(&cobra.Command{
		Use: "status ID", Short: "Show a run's state, and its envelope once it ended", Args: cobra.ExactArgs(1),
		Example: "  avfs run status run-0123456789ab",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			var out messages.RunResult
			raw, err := a.do(cmd.Context(), messages.OpRunStatus, v, messages.RunArgs{ID: args[0]}, &out)
			if err != nil {
				return err
			}
			return a.showRun(raw, out.Run)
		}),
	})
	c.AddCommand(&cobra.Command{
		Use: "kill ID", Short: "Stop a run: SIGTERM to its process group, SIGKILL after the grace period", Args: cobra.ExactArgs(1),
		Example: "  avfs run kill run-0123456789ab",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			var out messages.RunResult
			raw, err := a.do(cmd.Context(), messages.OpRunKill, v, messages.RunArgs{ID: args[0]}, &out)
			if err != nil {
				return err
			}
			return a.showRun(raw, out.Run)
		}),
	})
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "List the vault's runs, newest first", Args: cobra.NoArgs,
		Example: "  avfs run list --vault task-1",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			var out messages.RunListResult
			raw, err := a.do(cmd.Context(), messages.OpRunList, v, nil, &out)
			if err != nil || a.json {
				if err == nil {
					_, err = fmt.Fprintf(a.stdout, "%s\n", raw)
				}
				return err
			}
			tw := newTable(a.stdout)
			defer tw.Flush()
			fmt.Fprintln(tw, "ID\tSTATE\tSTATUS\tEXIT\tSTARTED\tCOMMAND")
			for _, r := range out.Runs {
				status, exit := "-", "-"
				if e := r.Envelope; e != nil {
					status = e.Status
					if e.ExitCode != nil {
						exit = fmt.Sprint(*e.ExitCode)
					} else if e.Signal != nil {
						exit = *e.Signal
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, status, exit, r.StartedAt, runCommand(r))
			}
			return nil
		}),
	})
	c.AddCommand(a.runLogsCmd(), a.runWaitCmd())
	return c
}

func (a *app) runLogsCmd() *cobra.Command {
	var since int64
	var follow bool
	c := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a run's output: stdout to stdout, stderr to stderr",
		Long: `logs prints the run's output from cursor --since (0, the start, by default) to
what the run has written so far; --follow keeps printing until the run ends.
With --json it prints {"chunks":[{"seq","stream","data"}...],"next","done","state"}
(data in base64); pass next as --since to read on. With --json --follow it
prints one such document per line as output arrives, the last with done true.`,
		Example: `  avfs run logs run-0123456789ab --follow
  avfs run logs run-0123456789ab --json --since 1834`,
		Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return a.runLogs(cmd.Context(), v, args[0], since, follow)
		}),
	}
	c.Flags().Int64Var(&since, "since", 0, "cursor to start from: the next of an earlier --json answer")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the run ends")
	return c
}

// runLogPoll is how often --follow asks for more output.
const runLogPoll = 250 * time.Millisecond

func (a *app) runLogs(ctx context.Context, v, id string, since int64, follow bool) error {
	for {
		var out messages.RunLogsResult
		raw, err := a.do(ctx, messages.OpRunLogs, v, messages.RunLogsArgs{ID: id, Since: since}, &out)
		if err != nil {
			return err
		}
		more := out.Next > since
		switch {
		case a.json && (more || out.Done || !follow):
			fmt.Fprintf(a.stdout, "%s\n", raw)
		case !a.json:
			for _, ch := range out.Chunks {
				w := a.stdout
				if ch.Stream == messages.StreamStderr {
					w = a.stderr
				}
				w.Write(ch.Data)
			}
		}
		since = out.Next
		if out.Done || (!follow && (a.json || !more)) {
			return nil
		}
		if !more {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(runLogPoll):
			}
		}
	}
}

func (a *app) runWaitCmd() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:     "wait ID",
		Short:   "Wait for a run to end; print its envelope and exit with its exit status, as exec does",
		Example: `  avfs run wait run-0123456789ab --timeout 10m`,
		Args:    cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			info, err := client.WaitRun(ctx, c, a.cfg.Namespace, v, args[0], 0)
			// The deadline can end a status request midway, which the
			// client reports as UNAVAILABLE: the timeout is the cause.
			if err != nil && ctx.Err() != nil && cmd.Context().Err() == nil {
				return &requestError{messages.Errorf(messages.CodeTimeout, "run %s still running after %s: wait again, or stop it with avfs run kill %s", args[0], timeout, args[0])}
			}
			var me *messages.Error
			if errors.As(err, &me) {
				return &requestError{me}
			}
			if err != nil {
				return err
			}
			raw, err := json.Marshal(messages.RunResult{Run: info})
			if err != nil {
				return err
			}
			if err := a.showRun(raw, info); err != nil {
				return err
			}
			if info.Envelope != nil {
				if code := exitCode(*info.Envelope); code != 0 {
					return &exitError{code}
				}
			} else if info.State != messages.RunDone || info.Error != nil {
				return &exitError{125}
			}
			return nil
		}),
	}
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (exit 1, TIMEOUT); 0 waits as long as it takes")
	return c
}

// showRun prints a run: the raw result in JSON mode, else a few lines.
func (a *app) showRun(raw json.RawMessage, r messages.RunInfo) error {
	if a.json {
		_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	}
	printRun(a.stdout, r)
	return nil
}

func printRun(w io.Writer, r messages.RunInfo) {
	tw := newTable(w)
	defer tw.Flush()
	fmt.Fprintf(tw, "run\t%s (vault %s, worker %s)\n", r.ID, r.Vault, r.Worker)
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "command\t%s\n", runCommand(r))
	fmt.Fprintf(tw, "started\t%s\n", r.StartedAt)
	if r.FinishedAt != nil {
		fmt.Fprintf(tw, "finished\t%s\n", *r.FinishedAt)
	}
	truncated := ""
	if r.LogTruncated {
		truncated = " (truncated)"
	}
	fmt.Fprintf(tw, "log\t%d bytes%s\n", r.LogBytes, truncated)
	switch {
	case r.Envelope != nil:
		fmt.Fprintf(tw, "result\t%s", strings.TrimPrefix(execSummary(*r.Envelope), "avfs: "))
	case r.Error != nil:
		fmt.Fprintf(tw, "error\t%s\n", r.Error)
	case r.State == messages.RunLost:
		fmt.Fprintf(tw, "result\tnone: the server that ran it stopped before it ended\n")
	}
}

// runCommand is a run's command as it reads in a table: the shell
// string, or argv quoted for sh.
func runCommand(r messages.RunInfo) string {
	if r.Shell != nil {
		return *r.Shell
	}
	words := make([]string, len(r.Command))
	for i, w := range r.Command {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}
