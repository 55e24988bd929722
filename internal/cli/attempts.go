package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// attempt is one fork and the envelope of its command.
type attempt struct {
	Vault    string               `json:"vault"`
	Command  string               `json:"command"`
	Envelope *messages.Envelope   `json:"envelope,omitempty"`
	Error    *messages.Error      `json:"error,omitempty"`
	Fork     *messages.ForkResult `json:"fork,omitempty"`
}

type attemptsResult struct {
	From     string    `json:"from"`
	Attempts []attempt `json:"attempts"`
	Best     *string   `json:"best"`
	Kept     []string  `json:"kept"`
}

func (a *app) attemptsCmd() *cobra.Command {
	c := &cobra.Command{Use: "attempts", Short: "Run parallel attempts: fork a vault N times and run a command in each"}
	var from, checkpoint, keep, commands, timeout string
	var count int
	run := &cobra.Command{
		Use:   "run --from VAULT (--count N -- CMD... | --commands FILE)",
		Short: "Fork --from N times, run the command(s) in the forks in parallel, print the envelopes side by side",
		RunE: func(cmd *cobra.Command, argv []string) error {
			if from == "" {
				return fmt.Errorf("--from VAULT is required")
			}
			var cmds []messages.ExecArgs
			switch {
			case commands != "" && len(argv) > 0:
				return fmt.Errorf("give --commands FILE or -- CMD, not both")
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
					return fmt.Errorf("--count must be at least 1")
				}
				for i := 0; i < count; i++ {
					cmds = append(cmds, messages.ExecArgs{Argv: argv, Timeout: timeout})
				}
			default:
				return fmt.Errorf("no command: pass -- CMD... with --count N, or --commands FILE")
			}
			if keep != "best" && keep != "all" && keep != "none" {
				return fmt.Errorf("--keep %q: want best, all or none", keep)
			}
			return a.runAttempts(cmd, from, checkpoint, keep, cmds)
		},
	}
	f := run.Flags()
	f.StringVar(&from, "from", "", "the vault to fork")
	f.StringVar(&checkpoint, "checkpoint", "", "fork this checkpoint of --from instead of its current tree")
	f.IntVar(&count, "count", 1, "how many attempts of the one command")
	f.StringVar(&commands, "commands", "", "a file with one shell command per line, one attempt each")
	f.StringVar(&keep, "keep", "all", "which forks to keep afterwards: best (the fastest that exited 0), all or none")
	f.StringVar(&timeout, "timeout", "", "per-attempt timeout (default 300s)")
	c.AddCommand(run)
	return c
}

func (a *app) runAttempts(cmd *cobra.Command, from, checkpoint, keep string, cmds []messages.ExecArgs) error {
	// One span for the attempt set: each fork is a send under it, and
	// each attempt's exec links to the fork it runs in.
	ctx, span := telemetry.Provider(a.tracer).Tracer("github.com/avfs/avfs/cli").Start(cmd.Context(), "attempts.run",
		trace.WithAttributes(attribute.String("avfs.vault", from), attribute.Int("avfs.attempts", len(cmds))))
	defer span.End()
	// Unique per run, so two runs in the same second cannot collide.
	stamp := time.Now().UTC().Format("20060102t150405") + "-" + client.NewRequestID()[13:17]
	res := attemptsResult{From: from, Attempts: make([]attempt, len(cmds)), Kept: []string{}}
	var wg sync.WaitGroup
	for i, x := range cmds {
		res.Attempts[i] = attempt{Vault: fmt.Sprintf("%s-attempt-%s-%02d", from, stamp, i+1), Command: commandLine(x)}
		wg.Add(1)
		go func(at *attempt, x messages.ExecArgs) {
			defer wg.Done()
			var fr messages.ForkResult
			var fork trace.SpanContext
			if _, err := a.do(telemetry.RecordSpan(ctx, &fork), messages.OpVaultFork, from, messages.VaultForkArgs{Target: at.Vault, Checkpoint: checkpoint}, &fr); err != nil {
				at.Error = toErr(err)
				return
			}
			at.Fork = &fr
			var env messages.Envelope
			ectx := telemetry.WithLinks(ctx, trace.Link{SpanContext: fork, Attributes: []attribute.KeyValue{attribute.String("avfs.link", "fork")}})
			if _, err := a.do(ectx, messages.OpExec, at.Vault, x, &env); err != nil {
				at.Error = toErr(err)
				return
			}
			at.Envelope = &env
		}(&res.Attempts[i], x)
	}
	wg.Wait()
	best := -1
	for i, at := range res.Attempts {
		e := at.Envelope
		if e == nil || e.Status != messages.StatusCompleted || e.ExitCode == nil || *e.ExitCode != 0 {
			continue
		}
		if best < 0 || e.DurationMS < res.Attempts[best].Envelope.DurationMS {
			best = i
		}
	}
	if best >= 0 {
		res.Best = &res.Attempts[best].Vault
	}
	for _, at := range res.Attempts {
		if at.Fork == nil {
			continue
		}
		if keep == "all" || (keep == "best" && res.Best != nil && *res.Best == at.Vault) {
			res.Kept = append(res.Kept, at.Vault)
			continue
		}
		if _, err := a.do(ctx, messages.OpVaultDelete, at.Vault, nil, nil); err != nil {
			return err
		}
	}
	if a.json {
		return a.emit(res)
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "ATTEMPT\tVAULT\tSTATUS\tEXIT\tDURATION\tADDED\tMODIFIED\tDELETED\tCOMMAND")
	for i, at := range res.Attempts {
		if at.Envelope == nil {
			fmt.Fprintf(tw, "%d\t%s\terror\t-\t-\t-\t-\t-\t%s (%s)\n", i+1, at.Vault, at.Command, at.Error.Message)
			continue
		}
		e := at.Envelope
		exit := "-"
		if e.ExitCode != nil {
			exit = fmt.Sprint(*e.ExitCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d ms\t%d\t%d\t%d\t%s\n", i+1, at.Vault, e.Status, exit, e.DurationMS,
			len(e.Changes.Added), len(e.Changes.Modified), len(e.Changes.Deleted), at.Command)
	}
	tw.Flush()
	fmt.Fprintf(a.stdout, "best: %s; kept: %s\n", deref(res.Best), strings.Join(res.Kept, ", "))
	return nil
}

func commandLine(x messages.ExecArgs) string {
	if x.Shell != "" {
		return x.Shell
	}
	return strings.Join(x.Argv, " ")
}
