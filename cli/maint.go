package cli

import (
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
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

// ttlArg is a --ttl flag's value on the wire ("" for none).
func ttlArg(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// localStore is the in-process client, or nil when the commands go to
// a fleet.
func (a *app) localStore(cmd *cobra.Command) (*localClient, error) {
	c, err := a.connect(cmd.Context())
	if err != nil {
		return nil, err
	}
	lc, _ := c.(*localClient)
	return lc, nil
}

// storeCmdE wraps a command that acts on a store: in process on the one
// under --home (local), through a fleet on the current vault's worker's
// (fleet).
func (a *app) storeCmdE(fleet func(cmd *cobra.Command, v string) error, local func(cmd *cobra.Command, lc *localClient) (any, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		lc, err := a.localStore(cmd)
		if err != nil {
			return err
		}
		if lc == nil {
			return a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error { return fleet(cmd, v) })(cmd, nil)
		}
		r, err := local(cmd, lc)
		if err != nil {
			return &requestError{toErr(err)}
		}
		return a.emit(r)
	}
}

// maintCmds are the maintenance verbs: stats, compact, maintain. In
// process they act on the store under --home (stats adds the current
// vault's figures when one is chosen); through a fleet, on the store of
// the current vault's worker.
func (a *app) maintCmds() []*cobra.Command {
	stats := &cobra.Command{
		Use: "stats", Short: "What the vault and its store hold: files, versions, chunks, logical and unique bytes, orphans, database size", Args: cobra.NoArgs,
		Example: "  avfs stats\n  avfs stats --vault task-1 -o yaml",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, verr := a.currentVault()
			if verr == nil {
				return call[messages.StatsResult](a, cmd, messages.OpStats, v, nil)
			}
			lc, err := a.localStore(cmd)
			if err != nil {
				return err
			}
			if lc == nil {
				return verr // a fleet has a store per worker: name a vault
			}
			st, err := lc.store.Stats(cmd.Context())
			if err != nil {
				return &requestError{toErr(err)}
			}
			return a.emit(messages.StatsResult{Store: handler.StoreStats(st)})
		},
	}
	compact := &cobra.Command{
		Use: "compact", Short: "Give the database's free pages back to the file system (VACUUM), and say how much", Args: cobra.NoArgs,
		Example: "  avfs gc && avfs compact",
		RunE: a.storeCmdE(func(cmd *cobra.Command, v string) error {
			return call[messages.CompactResult](a, cmd, messages.OpCompact, v, nil)
		}, func(cmd *cobra.Command, lc *localClient) (any, error) {
			a.progressf("compacting %s...\n", a.cfg.StorePath())
			r, err := lc.store.Compact(cmd.Context())
			return handler.CompactResult(r), err
		}),
	}
	maintain := &cobra.Command{
		Use: "maintain", Short: "Delete expired vaults, apply every vault's retention, gc, optimize the search index, compact", Args: cobra.NoArgs,
		Example: "  avfs maintain\n  avfs maintain --quiet -o json",
		RunE: a.storeCmdE(func(cmd *cobra.Command, v string) error {
			a.progressf("maintaining the store of %s's worker...\n", v)
			return call[messages.MaintainResult](a, cmd, messages.OpMaintain, v, nil)
		}, func(cmd *cobra.Command, lc *localClient) (any, error) {
			p := a.newSteps("maintain")
			defer p.done()
			return lc.h.Maintain(cmd.Context(), vault.Meta{Actor: a.actor()}, p.step)
		}),
	}
	return []*cobra.Command{stats, compact, maintain}
}

// auditClearCmd is `audit clear`.
func (a *app) auditClearCmd() *cobra.Command {
	var args messages.AuditClearArgs
	c := &cobra.Command{
		Use: "clear --before TIME|DURATION [--dry-run]", Short: "Delete the vault's audit events from before a time (the last minute always stays)", Args: cobra.NoArgs,
		Example: "  avfs audit clear --before 720h --dry-run\n  avfs audit clear --before 2026-01-01T00:00:00Z",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, _ []string) error {
			return call[messages.AuditClearResult](a, cmd, messages.OpAuditClear, v, args)
		}),
	}
	c.Flags().StringVar(&args.Before, "before", "", "RFC 3339 time, or a duration ago (720h: older than 30 days)")
	c.Flags().BoolVar(&args.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
	c.MarkFlagRequired("before")
	return c
}

// vaultSettingsCmds are `vault settings [NAME]` and `vault set KEY VALUE`.
func (a *app) vaultSettingsCmds() []*cobra.Command {
	settings := &cobra.Command{
		Use: "settings [NAME]", Short: "Show a vault's retention, quota mode and expiry", Args: cobra.MaximumNArgs(1),
		Example: "  avfs vault settings\n  avfs vault settings task-1",
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := a.vaultArg(args, 0)
			if err != nil {
				return err
			}
			return call[messages.VaultSettingsResult](a, cmd, messages.OpVaultSettings, name, nil)
		},
	}
	set := &cobra.Command{
		Use: "set KEY VALUE", Short: "Set auto_keep, auto_max_age, quota_mode, replication or ttl of the current vault (\"default\" takes the config's)", Args: cobra.ExactArgs(2),
		Long: `vault set changes one setting of the current vault:
  auto_keep N        keep the newest N auto-checkpoints (0: all)
  auto_max_age D     drop auto-checkpoints older than D (72h; 0: no limit)
  quota_mode M       what max_size_mb counts: logical (file sizes) or
                     unique (bytes of the distinct chunks the tree holds)
  replication R      when a fleet acknowledges a change: sync (once the
                     fleet's change log holds it), async (at once, logged
                     right after) or checkpoint (only pushes are kept)
  ttl D              delete the vault D from now (none: never)
VALUE default makes the vault follow the configuration again
(checkpoints.auto_keep, checkpoints.auto_max_age, quota.mode, replication). Named
checkpoints are never pruned; auto-checkpoints are pruned when exec takes
a new one, and at once by this command.`,
		Example: "  avfs vault set auto_keep 10\n  avfs vault set quota_mode unique\n  avfs vault set ttl 24h",
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return call[messages.VaultSettingsResult](a, cmd, messages.OpVaultSet, v, messages.VaultSetArgs{Key: args[0], Value: args[1]})
		}),
	}
	return []*cobra.Command{settings, set}
}

// steps shows the progress of a command made of steps on stderr: a bar
// on a terminal, elsewhere a plain line per step at most every
// plainEvery (and always for the last steps), nothing with --quiet.
type steps struct {
	a    *app
	verb string
	bar  *progressbar.ProgressBar
	last time.Time
}

func (a *app) newSteps(verb string) *steps { return &steps{a: a, verb: verb} }

func (s *steps) step(name string, done, total int) {
	switch {
	case s.a.quiet:
	case isTerminal(s.a.stderr):
		if s.bar == nil {
			s.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(s.a.stderr), progressbar.OptionShowCount(),
				progressbar.OptionSetElapsedTime(true), progressbar.OptionSetWidth(24), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(s.a.stderr) }))
		}
		s.bar.Describe(s.verb + ": " + name)
		s.bar.Set(done)
	case time.Since(s.last) >= plainEvery || total-done <= 3:
		s.last = time.Now()
		s.a.progressf("%s [%d/%d] %s\n", s.verb, done+1, total, name)
	}
}

func (s *steps) done() {
	if s.bar != nil {
		s.bar.Finish()
	}
}
