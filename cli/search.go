package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// searchCmds are search, grep, find, tree and pwd.
func (a *app) searchCmds() []*cobra.Command {
	var rebuild bool
	var limit int
	search := &cobra.Command{
		Use: "search QUERY [--rebuild]", Short: "Full-text search of file contents, best match first", Args: cobra.ExactArgs(1),
		Example: "  avfs search 'parse AND config'\n  avfs search '\"connection refused\"' --rebuild",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			if rebuild {
				var r messages.ReindexResult
				if _, err := a.do(cmd.Context(), messages.OpReindex, v, nil, &r); err != nil {
					return err
				}
				a.progressf("indexed %d files\n", r.Files)
			}
			return callAs(a, cmd, messages.OpSearch, v, messages.SearchArgs{Query: args[0], Limit: limit}, func(w io.Writer, r *messages.SearchResult) {
				for _, h := range r.Hits {
					fmt.Fprintf(w, "%s\t%s\n", h.Path, strings.ReplaceAll(h.Snippet, "\n", " "))
				}
			})
		}),
	}
	search.Flags().BoolVar(&rebuild, "rebuild", false, "first index every file the index lacks")
	search.Flags().IntVarP(&limit, "limit", "n", 0, "at most N files (default 100)")

	var g messages.GrepArgs
	var lineNumbers bool
	grep := &cobra.Command{
		Use: "grep REGEX [PATH] [-i] [-n] [-l N]", Short: "Match a regular expression against the lines of text files", Args: cobra.RangeArgs(1, 2),
		Example: "  avfs grep 'func [A-Z]' /src -n\n  avfs grep -i todo -l 20",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			ga := g
			ga.Pattern = args[0]
			if len(args) == 2 {
				ga.Path = args[1]
			}
			return callAs(a, cmd, messages.OpGrep, v, ga, func(w io.Writer, r *messages.GrepResult) {
				for _, m := range r.Matches {
					if lineNumbers {
						fmt.Fprintf(w, "%s:%d:%s\n", m.Path, m.Line, m.Text)
					} else {
						fmt.Fprintf(w, "%s:%s\n", m.Path, m.Text)
					}
				}
				if r.Truncated {
					fmt.Fprintf(w, "(stopped after %d matches; raise -l)\n", len(r.Matches))
				}
			})
		}),
	}
	grep.Flags().BoolVarP(&g.IgnoreCase, "ignore-case", "i", false, "ignore case")
	grep.Flags().BoolVarP(&lineNumbers, "line-number", "n", false, "print line numbers (always in JSON)")
	grep.Flags().IntVarP(&g.Limit, "limit", "l", 0, "stop after N matching lines (default 1000)")

	var f messages.FindArgs
	var findMeta []string
	find := &cobra.Command{
		Use: "find [PATH] [--name GLOB] [--type f|d|l] [--min-size N] [--max-size N] [--depth N] [--tag T]... [--meta K=V]...", Short: "List the entries that pass every filter", Args: cobra.MaximumNArgs(1),
		Example: "  avfs find /src --name '*.go' --type f\n  avfs find --min-size 1000000\n  avfs find --tag reviewed --meta owner=ana",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			fa := f
			if len(args) == 1 {
				fa.Path = args[0]
			}
			m, err := keyValues(findMeta)
			if err != nil {
				return err
			}
			fa.Meta = m
			return callAs(a, cmd, messages.OpFind, v, fa, func(w io.Writer, r *messages.FindResult) {
				for _, e := range r.Entries {
					fmt.Fprintln(w, e.Path)
				}
			})
		}),
	}
	find.Flags().StringVar(&f.Name, "name", "", "glob on the entry's name")
	find.Flags().StringVar(&f.Type, "type", "", "f (file), d (directory) or l (symlink)")
	find.Flags().Int64Var(&f.MinSize, "min-size", 0, "at least this many bytes")
	find.Flags().Int64Var(&f.MaxSize, "max-size", 0, "at most this many bytes")
	find.Flags().IntVar(&f.Depth, "depth", 0, "at most this many levels below PATH")
	find.Flags().StringArrayVar(&f.Tags, "tag", nil, "has this tag (repeatable: all of them)")
	find.Flags().StringArrayVar(&findMeta, "meta", nil, "has this KEY=VALUE (repeatable: all of them)")

	var levels int
	tree := &cobra.Command{
		Use: "tree [PATH] [-L N]", Short: "Show a directory tree", Args: cobra.MaximumNArgs(1),
		Example: "  avfs tree /src -L 2",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			fa := messages.FindArgs{Path: "/", Depth: levels}
			if len(args) == 1 {
				fa.Path = args[0]
			}
			return callAs(a, cmd, messages.OpFind, v, fa, func(w io.Writer, r *messages.FindResult) {
				fmt.Fprintln(w, r.Path)
				base := strings.Count(strings.TrimSuffix(r.Path, "/"), "/")
				for _, e := range r.Entries {
					depth := strings.Count(e.Path, "/") - base - 1
					name := e.Name
					if e.Type == "dir" {
						name += "/"
					}
					if e.Target != "" {
						name += " -> " + e.Target
					}
					fmt.Fprintf(w, "%s%s\n", strings.Repeat("    ", depth), name)
				}
			})
		}),
	}
	tree.Flags().IntVarP(&levels, "level", "L", 0, "at most N levels deep")

	pwd := &cobra.Command{
		Use: "pwd", Short: "Print the current vault and directory", Args: cobra.NoArgs,
		Example: "  avfs pwd",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			// Vault paths are absolute: the working directory is the root.
			return a.emit(map[string]string{"vault": v, "namespace": a.cfg.Namespace, "path": "/"})
		}),
	}
	return []*cobra.Command{search, grep, find, tree, pwd}
}
