package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// showAs prints a result: its JSON as received, or for a person what
// human writes.
func (a *app) showAs(raw json.RawMessage, human func(w io.Writer)) error {
	switch a.format {
	case outJSON:
		_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	case outYAML:
		return writeYAML(a.stdout, raw)
	}
	tw := tabwriter.NewWriter(controlEscaper{a.stdout}, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// callAs sends op and shows its result, typed as T, with human.
func callAs[T any](a *app, cmd *cobra.Command, op messages.Op, v string, args any, human func(w io.Writer, r *T)) error {
	var out T
	raw, err := a.do(cmd.Context(), op, v, args, &out)
	if err != nil {
		return err
	}
	return a.showAs(raw, func(w io.Writer) { human(w, &out) })
}

func printWrite(w io.Writer, r *messages.HistoryWriteResult) {
	fmt.Fprintf(w, "%s\t%d bytes, the content of version %d\n", r.Path, r.Size, r.Version)
}

// historyCmds are the file-history verbs: log, checkout, revert, diff,
// prune and history (cat -v N is in fileCmds).
func (a *app) historyCmds() []*cobra.Command {
	var limit int
	log := &cobra.Command{
		Use: "log PATH [-n N]", Short: "List the versions of a file, oldest first", Args: cobra.ExactArgs(1),
		Example: "  avfs log /src/main.go -n 5",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return callAs(a, cmd, messages.OpHistoryLog, v, messages.HistoryLogArgs{Path: args[0], Limit: limit}, func(w io.Writer, r *messages.HistoryLogResult) {
				fmt.Fprintln(w, "VERSION\tSIZE\tCREATED\tHASH")
				for _, x := range r.Versions {
					fmt.Fprintf(w, "%d\t%d\t%s\t%.12s\n", x.Version, x.Size, x.CreatedAt, x.Hash)
				}
			})
		}),
	}
	log.Flags().IntVarP(&limit, "limit", "n", 0, "show only the latest N versions")

	var version int64
	checkout := &cobra.Command{
		Use: "checkout PATH -v N", Short: "Write version N of a file back as its content (a new version)", Args: cobra.ExactArgs(1),
		Example: "  avfs checkout /src/main.go -v 3",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return callAs(a, cmd, messages.OpHistoryCheckout, v, messages.HistoryVersionArgs{Path: args[0], Version: version}, printWrite)
		}),
	}
	checkout.Flags().Int64VarP(&version, "version", "v", 0, "the version to check out (see avfs log)")
	checkout.MarkFlagRequired("version")

	revert := &cobra.Command{
		Use: "revert PATH", Short: "Write the version before a file's latest back as its content", Args: cobra.ExactArgs(1),
		Example: "  avfs revert /src/main.go",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return callAs(a, cmd, messages.OpHistoryRevert, v, messages.HistoryVersionArgs{Path: args[0]}, printWrite)
		}),
	}

	var d messages.HistoryDiffArgs
	diff := &cobra.Command{
		Use:   "diff PATH [PATH2] [--v1 N] [--v2 N]",
		Short: "Unified line diff of two files or two versions (one path alone: its previous version against the current file)",
		Args:  cobra.RangeArgs(1, 2),
		Example: "  avfs diff /src/main.go                 # previous version -> current\n" +
			"  avfs diff /src/main.go --v1 2 --v2 5\n" +
			"  avfs diff /a.txt /b.txt",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			da := d
			da.Path = args[0]
			if len(args) == 2 {
				da.Path2 = args[1]
			}
			return callAs(a, cmd, messages.OpHistoryDiff, v, da, func(w io.Writer, r *messages.HistoryDiffResult) {
				switch {
				case r.Equal:
				case r.Binary:
					fmt.Fprintf(w, "Binary files %s and %s differ\n", r.From, r.To)
				default:
					io.WriteString(w, r.Diff)
				}
			})
		}),
	}
	diff.Flags().Int64Var(&d.V1, "v1", 0, "version of the first path (default: the current file; with one path, its previous version)")
	diff.Flags().Int64Var(&d.V2, "v2", 0, "version of the second path (default: the current file)")

	var p messages.HistoryPruneArgs
	prune := &cobra.Command{
		Use: "prune --keep N | --older-than DURATION [--dry-run]", Short: "Drop old file versions (the latest of each file always stays)", Args: cobra.NoArgs,
		Example: "  avfs prune --keep 10 --dry-run\n  avfs prune --older-than 168h",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			return callAs(a, cmd, messages.OpHistoryPrune, v, p, func(w io.Writer, r *messages.HistoryPruneResult) {
				verb := "pruned"
				if r.DryRun {
					verb = "would prune"
				}
				fmt.Fprintf(w, "%s %d versions of %d files\n", verb, r.Versions, r.Paths)
			})
		}),
	}
	prune.Flags().Int64Var(&p.Keep, "keep", 0, "keep the latest N versions of each file")
	prune.Flags().StringVar(&p.OlderThan, "older-than", "", "drop versions older than this (e.g. 72h)")
	prune.Flags().BoolVar(&p.DryRun, "dry-run", false, "count what would be dropped, drop nothing")

	printSettings := func(w io.Writer, r *messages.HistoryResult) {
		fmt.Fprintf(w, "keep\t%d (0: all)\nmax_age\t%s\ncoalesce\t%s\n", r.History.Keep, r.History.MaxAge, r.History.Coalesce)
	}
	hist := &cobra.Command{
		Use: "history", Short: "Show or set the vault's file-history retention", Args: cobra.NoArgs,
		Example: "  avfs history\n  avfs history set --keep 20 --max-age 720h --coalesce 2s",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			return callAs(a, cmd, messages.OpHistoryGet, v, nil, printSettings)
		}),
	}
	var hs messages.HistorySettings
	set := &cobra.Command{
		Use: "set [--keep N] [--max-age DURATION] [--coalesce DURATION]", Short: "Set history retention (unset flags keep their value)", Args: cobra.NoArgs,
		Example: "  avfs history set --keep 20 --coalesce 2s",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			var cur messages.HistoryResult
			if _, err := a.do(cmd.Context(), messages.OpHistoryGet, v, nil, &cur); err != nil {
				return err
			}
			args := cur.History
			if cmd.Flags().Changed("keep") {
				args.Keep = hs.Keep
			}
			if cmd.Flags().Changed("max-age") {
				args.MaxAge = hs.MaxAge
			}
			if cmd.Flags().Changed("coalesce") {
				args.Coalesce = hs.Coalesce
			}
			return callAs(a, cmd, messages.OpHistorySet, v, args, printSettings)
		}),
	}
	set.Flags().Int64Var(&hs.Keep, "keep", 0, "versions kept per file (0: all)")
	set.Flags().StringVar(&hs.MaxAge, "max-age", "", "drop versions older than this (0s: never)")
	set.Flags().StringVar(&hs.Coalesce, "coalesce", "", "fold writes within this window of a version into it (0s: one version per write)")
	hist.AddCommand(set)
	return []*cobra.Command{log, checkout, revert, diff, prune, hist}
}
