package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// call sends op and shows its result typed as T.
func call[T any](a *app, cmd *cobra.Command, op messages.Op, vaultName string, args any) error {
	var out T
	raw, err := a.do(cmd.Context(), op, vaultName, args, &out)
	if err != nil {
		return err
	}
	return a.show(raw, &out)
}

// vaultArg is args[i] if present, else the current vault.
func (a *app) vaultArg(args []string, i int) (string, error) {
	if len(args) > i {
		return args[i], nil
	}
	return a.currentVault()
}

func optInt(cmd *cobra.Command, name string) *int64 {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	v, _ := cmd.Flags().GetInt64(name)
	return &v
}

func (a *app) vaultCmd() *cobra.Command {
	c := &cobra.Command{Use: "vault", Short: "Create, list, fork, delete, export and import vaults"}

	create := &cobra.Command{
		Use: "create NAME", Short: "Create an empty vault", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := messages.QuotaArgs{MaxSizeMB: optInt(cmd, "max-size-mb"), MaxFiles: optInt(cmd, "max-files"), MaxFileSizeMB: optInt(cmd, "max-file-size-mb")}
			return call[messages.VaultResult](a, cmd, messages.OpVaultCreate, args[0], messages.VaultCreateArgs{Quota: q})
		},
	}
	create.Flags().Int64("max-size-mb", 0, "limit on the logical size of the tree")
	create.Flags().Int64("max-files", 0, "limit on the number of entries (files, symlinks and directories)")
	create.Flags().Int64("max-file-size-mb", 0, "limit on any one file's size")

	list := &cobra.Command{
		Use: "list", Short: "List vaults", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call[messages.VaultListResult](a, cmd, messages.OpVaultList, "", nil)
		},
	}
	info := &cobra.Command{
		Use: "info [NAME]", Short: "Describe a vault", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := a.vaultArg(args, 0)
			if err != nil {
				return err
			}
			return call[messages.VaultResult](a, cmd, messages.OpVaultInfo, name, nil)
		},
	}
	use := &cobra.Command{
		Use: "use NAME", Short: "Make NAME the default vault for later commands", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out messages.VaultResult
			raw, err := a.do(cmd.Context(), messages.OpVaultInfo, args[0], nil, &out)
			if err != nil {
				return err
			}
			if err := a.setCurrentVault(args[0]); err != nil {
				return err
			}
			return a.show(raw, &out)
		},
	}
	var forkCheckpoint, forkPlacement string
	var forkTTL time.Duration
	var forkUse bool
	fork := &cobra.Command{
		Use: "fork SRC DST", Short: "Fork a vault (copies no content)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out messages.ForkResult
			raw, err := a.do(cmd.Context(), messages.OpVaultFork, args[0], messages.VaultForkArgs{Target: args[1], Checkpoint: forkCheckpoint, Placement: forkPlacement, TTL: ttlArg(forkTTL)}, &out)
			if err != nil {
				return err
			}
			if forkUse {
				if err := a.setCurrentVault(args[1]); err != nil {
					return err
				}
			}
			return a.show(raw, &out)
		},
	}
	fork.Flags().StringVar(&forkCheckpoint, "checkpoint", "", "fork the state saved in this checkpoint instead of the current tree")
	fork.Flags().BoolVar(&forkUse, "use", false, "make the fork the default vault")
	fork.Flags().DurationVar(&forkTTL, "ttl", 0, "delete the fork this long after it is made (2h, 30m): its owner sweeps it")
	fork.Flags().StringVar(&forkPlacement, "placement", "", "in a fleet: source (default: the source's worker, nothing copied) or spread (the least loaded worker, which fetches the content it lacks)")

	var yes bool
	del := &cobra.Command{
		Use: "delete NAME --yes", Short: "Delete a vault and its checkpoints", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return fmt.Errorf("deleting vault %q loses its files and checkpoints: pass --yes", args[0])
			}
			return call[messages.DeletedResult](a, cmd, messages.OpVaultDelete, args[0], nil)
		},
	}
	del.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")

	export := &cobra.Command{
		Use: "export NAME FILE", Short: "Write a vault, with its checkpoints, to one self-contained file", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := filepath.Abs(args[1])
			if err != nil {
				return err
			}
			fc, err := a.fleet(cmd.Context())
			if err != nil {
				return err
			}
			if fc != nil {
				return a.exportFleet(cmd, fc, args[0], file)
			}
			a.progressf("exporting %s to %s...\n", args[0], file)
			return call[messages.TransferResult](a, cmd, messages.OpVaultExport, args[0], messages.VaultTransferArgs{File: file})
		},
	}
	imp := &cobra.Command{
		Use: "import FILE NAME", Short: "Restore a file written by `vault export` as vault NAME", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			fc, err := a.fleet(cmd.Context())
			if err != nil {
				return err
			}
			if fc != nil {
				return a.importFleet(cmd, fc, file, args[1])
			}
			a.progressf("importing %s as %s...\n", file, args[1])
			return call[messages.TransferResult](a, cmd, messages.OpVaultImport, args[1], messages.VaultTransferArgs{File: file})
		},
	}
	c.AddCommand(create, list, info, use, fork, a.vaultMergeCmd(), del, export, imp)
	c.AddCommand(a.vaultSettingsCmds()...)
	return c
}

func (a *app) checkpointCmd() *cobra.Command {
	c := &cobra.Command{Use: "checkpoint", Aliases: []string{"cp-save"}, Short: "Save, list, restore, delete and diff checkpoints"}
	c.Aliases = nil
	var msg string
	save := &cobra.Command{
		Use: "save NAME", Short: "Save the current tree under NAME", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			return call[messages.CheckpointResult](a, cmd, messages.OpCheckpointSave, v, messages.CheckpointArgs{Name: args[0], Message: msg})
		},
	}
	save.Flags().StringVarP(&msg, "message", "m", "", "a note kept with the checkpoint")
	list := &cobra.Command{
		Use: "list", Short: "List checkpoints", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			return call[messages.CheckpointListResult](a, cmd, messages.OpCheckpointList, v, nil)
		},
	}
	restore := &cobra.Command{
		Use: "restore NAME", Short: "Make checkpoint NAME the current tree (prints what it undid)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			return call[messages.RestoreResult](a, cmd, messages.OpCheckpointRestore, v, messages.CheckpointArgs{Name: args[0]})
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a checkpoint", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			return call[messages.DeletedResult](a, cmd, messages.OpCheckpointDelete, v, messages.CheckpointArgs{Name: args[0]})
		},
	}
	diff := &cobra.Command{
		Use: "diff FROM [TO]", Short: "What changed from checkpoint FROM to TO (default: the current tree)", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			d := messages.DiffArgs{From: args[0]}
			if len(args) == 2 {
				d.To = args[1]
			}
			return call[messages.DiffResult](a, cmd, messages.OpCheckpointDiff, v, d)
		},
	}
	c.AddCommand(save, list, restore, del, diff)
	return c
}

func (a *app) quotaCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "quota", Short: "Show the vault's quota and usage", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			return call[messages.QuotaResult](a, cmd, messages.OpQuotaGet, v, nil)
		},
	}
	set := &cobra.Command{
		Use: "set KEY VALUE", Short: "Set max_size_mb, max_files or max_file_size_mb (\"none\" clears)", Args: cobra.ExactArgs(2),
		Long: `quota set changes one limit of the current vault. KEY is max_size_mb (the
logical size of the tree, MiB), max_files (entries: files, symlinks and
directories) or max_file_size_mb (any one file, MiB); VALUE is a whole
number, or none (also: unlimited) to lift the limit. A bad KEY or VALUE is a
usage error (exit status 2).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			val, err := quotaValue(args[0], args[1])
			if err != nil {
				return err
			}
			return call[messages.QuotaResult](a, cmd, messages.OpQuotaSet, v, messages.QuotaSetArgs{Key: args[0], Value: val})
		},
	}
	c.AddCommand(set)
	return c
}

func (a *app) auditCmd() *cobra.Command {
	var args messages.AuditArgs
	var follow bool
	c := &cobra.Command{
		Use: "audit", Short: "Query the vault's audit log", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := a.currentVault()
			if err != nil {
				return err
			}
			if follow {
				return a.auditFollow(cmd, v, args)
			}
			return call[messages.AuditResult](a, cmd, messages.OpAudit, v, args)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "then print new events as they happen, until a signal (JSON mode: one JSON document per line)")
	c.Flags().StringVar(&args.Since, "since", "", "RFC 3339 time or duration ago (15m)")
	c.Flags().StringVar(&args.Action, "action", "", "action, or a prefix like file. or checkpoint.*")
	c.Flags().StringVar(&args.Path, "path", "", "this path and everything below it")
	c.Flags().IntVar(&args.Limit, "limit", 100, "at most this many (the newest)")
	c.AddCommand(a.auditClearCmd())
	return c
}

func (a *app) configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Configuration"}
	c.AddCommand(&cobra.Command{
		Use: "show", Short: "Print the effective configuration (secrets masked)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.emit(configDoc{configShow(a)})
		},
	})
	return c
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.emit(currentVersion())
		},
	}
}

func (a *app) gcCmd() *cobra.Command {
	var dry bool
	c := &cobra.Command{
		Use: "gc [--dry-run]", Short: "Free content no vault, checkpoint, fork or file version references", Args: cobra.NoArgs,
		Example: "  avfs gc --dry-run",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			lc, ok := c.(*localClient)
			if !ok {
				return messages.Errorf(messages.CodeNotImplemented, "gc runs on the machine that holds the store")
			}
			if dry {
				st, err := lc.store.GCDryRun(cmd.Context())
				if err != nil {
					return &requestError{toErr(err)}
				}
				return a.emit(map[string]any{"would_free": st, "dry_run": true})
			}
			st, err := lc.store.GC(cmd.Context())
			if err != nil {
				return &requestError{toErr(err)}
			}
			return a.emit(map[string]any{"freed": st})
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "say what would be freed, free nothing")
	return c
}
