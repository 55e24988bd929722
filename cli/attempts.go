package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

func (a *app) attemptsCmd() *cobra.Command {
	c := &cobra.Command{Use: "attempts", Short: "Run parallel attempts: fork a vault N times and run a command in each"}
	var from, checkpoint, keep, commands, timeout, placement, merge string
	var count, parallel int
	run := &cobra.Command{
		Use:   "run --from VAULT (--count N -- CMD... | --commands FILE)",
		Short: "Fork --from N times, run the command(s) in the forks in parallel, print the envelopes side by side",
		RunE: func(cmd *cobra.Command, argv []string) error {
			if from == "" {
				return usagef("--from VAULT is required")
			}
			var cmds []messages.ExecArgs
			switch {
			case commands != "" && len(argv) > 0:
				return usagef("give --commands FILE or -- CMD, not both")
			case commands != "":
				f, err := os.Open(commands)
				if err != nil {
					return err
				}
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
						cmds = append(cmds, messages.ExecArgs{Shell: line, Timeout: timeout})
					}
				}
				f.Close()
				if err := sc.Err(); err != nil {
					return err
				}
			case len(argv) > 0:
				if count < 1 {
					return usagef("--count %d: want at least 1", count)
				}
				if count > client.MaxAttempts {
					return usagef("--count %d: at most %d attempts in one run", count, client.MaxAttempts)
				}
				for i := 0; i < count; i++ {
					cmds = append(cmds, messages.ExecArgs{Argv: argv, Timeout: timeout})
				}
			default:
				return usagef("no command: pass -- CMD... with --count N, or --commands FILE")
			}
			if merge != "" && merge != "best" {
				return usagef("--merge %q: want best", merge)
			}
			if parallel < 1 {
				return usagef("--parallel %d: want at least 1", parallel)
			}
			return a.runAttempts(cmd, client.Attempts{From: from, Checkpoint: checkpoint, Commands: cmds, Keep: keep, Placement: placement, Merge: merge, Parallel: parallel})
		},
	}
	f := run.Flags()
	f.StringVar(&from, "from", "", "the vault to fork")
	f.StringVar(&checkpoint, "checkpoint", "", "fork this checkpoint of --from instead of its current tree")
	f.IntVar(&count, "count", 1, fmt.Sprintf("how many attempts of the one command (at most %d)", client.MaxAttempts))
	f.IntVar(&parallel, "parallel", client.DefaultParallel, "how many attempts fork and run at a time")
	f.StringVar(&commands, "commands", "", "a file with one shell command per line, one attempt each")
	f.StringVar(&keep, "keep", "all", "which forks to keep afterwards: best (the fastest that exited 0), all or none")
	f.StringVar(&timeout, "timeout", "", "per-attempt timeout (default 300s)")
	f.StringVar(&placement, "placement", messages.PlacementSpread, "where the forks go in a fleet: spread (across workers) or source (the source's worker)")
	f.StringVar(&merge, "merge", "", "best: merge the best attempt back into --from (see vault merge); exit status 1 when it could not")
	c.AddCommand(run)
	return c
}

func (a *app) runAttempts(cmd *cobra.Command, spec client.Attempts) error {
	c, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	spec.Actor, spec.Tracer, spec.RequestID = a.actor(), a.tracer, a.requestID
	res, err := client.RunAttempts(cmd.Context(), c, a.cfg.Namespace, spec)
	if err != nil {
		return &requestError{toErr(err)}
	}
	// A merge asked for and not done fails the command, after the
	// result is shown; so does an interrupt (130, as exec's), which
	// leaves the forks made so far as --keep says.
	var failed error
	switch {
	case cmd.Context().Err() != nil:
		failed = &exitError{130}
	case res.MergeError != nil:
		failed = &exitError{1}
	}
	if a.json {
		if err := a.emit(res); err != nil {
			return err
		}
		return failed
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "ATTEMPT\tVAULT\tWORKER\tSTATUS\tEXIT\tDURATION\tADDED\tMODIFIED\tDELETED\tCOMMAND")
	for i, at := range res.Attempts {
		if at.Envelope == nil {
			fmt.Fprintf(tw, "%d\t%s\t-\terror\t-\t-\t-\t-\t-\t%s (%s)\n", i+1, at.Vault, at.Command, at.Error.Message)
			continue
		}
		e := at.Envelope
		exit := "-"
		if e.ExitCode != nil {
			exit = fmt.Sprint(*e.ExitCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", i+1, at.Vault, at.Fork.Vault.Worker, e.Status, exit, ms(float64(e.DurationMS)),
			len(e.Changes.Added), len(e.Changes.Modified), len(e.Changes.Deleted), at.Command)
	}
	tw.Flush()
	fmt.Fprintf(a.stdout, "best: %s; kept: %s\n", deref(res.Best), strings.Join(res.Kept, ", "))
	switch {
	case res.Merge != nil:
		printMerge(a.stdout, res.Merge)
	case res.MergeError != nil:
		fmt.Fprintf(a.stderr, "not merged: %s\n", res.MergeError.Message)
	}
	return failed
}
