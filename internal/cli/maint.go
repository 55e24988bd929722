package cli

import (
	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// snapshotCmd is `checkpoint` under agentvfs's name, with `info NAME`.
func (a *app) snapshotCmd() *cobra.Command {
	c := a.checkpointCmd()
	c.Use, c.Short = "snapshot", "Save, list, show, restore, delete and diff snapshots (another name for checkpoints)"
	c.Example = "  avfs snapshot save before-refactor -m 'green tests'\n  avfs snapshot info before-refactor\n  avfs snapshot restore before-refactor"
	c.AddCommand(&cobra.Command{
		Use: "info NAME", Short: "Show one snapshot", Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			var l messages.CheckpointListResult
			if _, err := a.do(cmd.Context(), messages.OpCheckpointList, v, nil, &l); err != nil {
				return err
			}
			for _, cp := range l.Checkpoints {
				if cp.Name == args[0] {
					return a.emit(messages.CheckpointResult{Checkpoint: cp})
				}
			}
			return &requestError{&messages.Error{Code: messages.CodeCheckpointNotFound, Message: "snapshot " + args[0] + " not found"}}
		}),
	})
	return c
}
