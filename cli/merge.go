package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// vaultMergeCmd is `vault merge FORK [--into BASE]`: the fork's changes
// since its fork point brought into BASE (default: the fork's parent).
func (a *app) vaultMergeCmd() *cobra.Command {
	var into, strategy string
	var paths []string
	var dry bool
	c := &cobra.Command{
		Use:   "merge FORK [--into BASE] [--paths GLOB]... [--dry-run] [--strategy ours|theirs]",
		Short: "Merge a fork's changes back into its source, three-way against the fork point",
		Long: "Merge brings the changes FORK made since it was forked into BASE (default: the vault FORK was forked from). " +
			"An entry changed on one side takes that side; a text file changed on both sides is merged line by line; " +
			"anything else changed on both sides is a conflict, and while one remains nothing is applied " +
			"(exit status 1, error MERGE_CONFLICT listing them) unless --strategy ours (keep BASE's side) or theirs (take FORK's) resolves it. " +
			"The merge is one transaction, after a checkpoint of BASE that `avfs checkpoint restore` uses to undo it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch strategy {
			case "", messages.MergeOurs, messages.MergeTheirs:
			default:
				return usagef("--strategy %q: want ours or theirs", strategy)
			}
			target := into
			if target == "" {
				var err error
				if target, err = a.parentOf(cmd.Context(), args[0]); err != nil {
					return err
				}
			}
			return callAs(a, cmd, messages.OpVaultMerge, target, messages.VaultMergeArgs{Fork: args[0], Paths: paths, DryRun: dry, Strategy: strategy}, printMerge)
		},
	}
	f := c.Flags()
	f.StringVar(&into, "into", "", "the vault to merge into (default: the one FORK was forked from)")
	f.StringArrayVar(&paths, "paths", nil, "merge only entries matching this glob (repeatable): /src/*.go from the root, *.go by name at any depth")
	f.BoolVar(&dry, "dry-run", false, "show what the merge would change, and its conflicts, without changing anything")
	f.StringVar(&strategy, "strategy", "", "resolve conflicts: ours (keep the target's side) or theirs (take the fork's)")
	return c
}

// parentOf is the vault fork was forked from.
func (a *app) parentOf(ctx context.Context, fork string) (string, error) {
	var info messages.VaultResult
	if _, err := a.do(ctx, messages.OpVaultInfo, fork, nil, &info); err != nil {
		return "", err
	}
	if info.Vault.Parent == nil {
		return "", messages.Errorf(messages.CodeInvalidArgument, "vault %q is not a fork: name the vault to merge into with --into", fork)
	}
	return *info.Vault.Parent, nil
}

func printMerge(w io.Writer, r *messages.MergeResult) {
	verb := "merged"
	if r.DryRun {
		verb = "would merge"
	}
	ch := r.Changes
	fmt.Fprintf(w, "%s %s into %s:\t%d added, %d modified, %d deleted", verb, r.Fork, r.Into, len(ch.Added), len(ch.Modified), len(ch.Deleted))
	if len(r.Merged) > 0 {
		fmt.Fprintf(w, ", %d merged line by line", len(r.Merged))
	}
	if r.Checkpoint != "" {
		fmt.Fprintf(w, " (undo: avfs checkpoint restore %s)", r.Checkpoint)
	}
	fmt.Fprintln(w)
	for _, l := range []struct {
		what string
		cs   []messages.Change
	}{{"added", ch.Added}, {"modified", ch.Modified}, {"deleted", ch.Deleted}} {
		for _, c := range l.cs {
			fmt.Fprintf(w, "  %s\t%s\n", l.what, c.Path)
		}
	}
	unresolved := 0
	for _, c := range r.Conflicts {
		how := "unresolved"
		if c.Resolved != "" {
			how = "resolved: " + c.Resolved
		} else {
			unresolved++
		}
		hunks := ""
		if c.Hunks > 0 {
			hunks = ", " + pluralize(int64(c.Hunks), "hunk")
		}
		fmt.Fprintf(w, "  conflict\t%s\t%s%s (%s)\n", c.Path, c.Kind, hunks, how)
	}
	if unresolved > 0 {
		fmt.Fprintf(w, "%s: the merge applies nothing until --strategy ours|theirs resolves them\n", pluralize(int64(unresolved), "conflict"))
	}
}
