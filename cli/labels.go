package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

func printLabels(w io.Writer, r *messages.LabelsResult) {
	fmt.Fprintf(w, "path\t%s\ntags\t%s\n", r.Path, strings.Join(r.Tags, ", "))
	keys := make([]string, 0, len(r.Meta))
	for k := range r.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\n", k, r.Meta[k])
	}
}

// keyValues parses K=V arguments.
func keyValues(args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, messages.Errorf(messages.CodeInvalidArgument, "%q: want KEY=VALUE", a)
		}
		m[k] = v
	}
	return m, nil
}

// labelCmds are tag, untag and meta: labels on paths, kept by fork,
// checkpoint and export, and usable in find.
func (a *app) labelCmds() []*cobra.Command {
	label := func(cmd *cobra.Command, v string, args messages.LabelArgs) error {
		return callAs(a, cmd, messages.OpLabel, v, args, printLabels)
	}
	tag := &cobra.Command{
		Use: "tag PATH TAG...", Short: "Tag a file or directory", Args: cobra.MinimumNArgs(2),
		Example: "  avfs tag /src/parser.go reviewed hot",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return label(cmd, v, messages.LabelArgs{Path: args[0], Tags: args[1:]})
		}),
	}
	untag := &cobra.Command{
		Use: "untag PATH TAG...", Short: "Remove tags from a file or directory", Args: cobra.MinimumNArgs(2),
		Example: "  avfs untag /src/parser.go hot",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return label(cmd, v, messages.LabelArgs{Path: args[0], Untags: args[1:]})
		}),
	}
	var unset []string
	meta := &cobra.Command{
		Use: "meta PATH [KEY=VALUE...] [--unset KEY]", Short: "Show or set key/value metadata (and tags) of a path", Args: cobra.MinimumNArgs(1),
		Example: "  avfs meta /src/parser.go owner=ana status=draft\n  avfs meta /src/parser.go --unset status\n  avfs meta /src/parser.go",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			set, err := keyValues(args[1:])
			if err != nil {
				return err
			}
			if set == nil && len(unset) == 0 {
				return callAs(a, cmd, messages.OpLabelsGet, v, messages.PathArgs{Path: args[0]}, printLabels)
			}
			return label(cmd, v, messages.LabelArgs{Path: args[0], Set: set, Unset: unset})
		}),
	}
	meta.Flags().StringArrayVar(&unset, "unset", nil, "remove this key (repeatable)")
	return []*cobra.Command{tag, untag, meta}
}
