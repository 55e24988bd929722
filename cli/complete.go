package cli

import (
	"context"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/messages"
)

// Shell completion (bash, zsh, fish, powershell: `avfs completion SHELL`)
// of what only avfs knows: vault, checkpoint and worker names, vault
// paths, approval ids and the values of enumerated flags. Every function
// here answers from the vaults under --home (or the fleet a serve on that
// home or --nats points at) and stays silent on any error: a completion
// never prints one.

type completeFunc = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)

const noFiles = cobra.ShellCompDirectiveNoFileComp

// fixed completes one of a fixed set of values.
func fixed(values ...string) completeFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, noFiles
	}
}

// auditActions are the actions `audit --action` filters on (a trailing
// dot selects a family).
var auditActions = []string{
	"file.", "file.write", "file.truncate", "dir.create", "symlink.create", "remove", "rename", "copy", "setattr",
	"checkpoint.", "checkpoint.save", "checkpoint.restore", "checkpoint.delete",
	"vault.", "vault.create", "vault.delete", "vault.fork", "vault.forked", "vault.merge", "merge.take", "quota.set",
	"exec.", "approval.",
}

// registerCompletions wires argument and flag completion into the tree.
func (a *app) registerCompletions(root *cobra.Command) {
	byPath := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		byPath[strings.TrimPrefix(c.CommandPath(), "avfs ")] = c
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	args := func(fn completeFunc, paths ...string) {
		for _, p := range paths {
			if c := byPath[p]; c != nil && c.ValidArgsFunction == nil {
				c.ValidArgsFunction = fn
			}
		}
	}
	flag := func(name string, fn completeFunc, paths ...string) {
		for _, p := range paths {
			if c := byPath[p]; c != nil && c.Flags().Lookup(name) != nil {
				c.RegisterFlagCompletionFunc(name, fn)
			}
		}
	}
	nth := func(n int, fn completeFunc) completeFunc {
		return func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
			if len(args) != n {
				return nil, noFiles
			}
			return fn(cmd, args, to)
		}
	}
	upTo := func(n int, fn completeFunc) completeFunc {
		return func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
			if len(args) >= n {
				return nil, noFiles
			}
			return fn(cmd, args, to)
		}
	}
	none := fixed()

	args(nth(0, a.completeVaults), "vault info", "vault use", "vault delete", "vault fork", "vault merge")
	args(func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return a.completeVaults(cmd, args, to)
		}
		return nil, cobra.ShellCompDirectiveDefault // the host file
	}, "vault export")
	args(func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return nil, noFiles // a new vault's name
	}, "vault import")
	args(nth(0, a.completeCheckpoints), "checkpoint restore", "checkpoint delete")
	args(upTo(2, a.completeCheckpoints), "checkpoint diff")
	args(none, "checkpoint save", "vault create", "vault list", "checkpoint list", "quota", "audit", "version", "gc", "demo",
		"serve", "worker", "dispatcher", "fleet status", "fleet dlq list", "config show", "policy show", "approval list")
	args(nth(0, a.completePaths), "cat", "stat", "mkdir", "write")
	args(upTo(1, a.completePaths), "ls")
	args(upTo(2, a.completePaths), "rm", "mv", "cp", "ln")
	args(func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return a.completePaths(cmd, args, to)
		}
		return nil, cobra.ShellCompDirectiveFilterDirs
	}, "export")
	args(func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveFilterDirs
		}
		return a.completePaths(cmd, args, to)
	}, "import")
	args(nth(0, a.completeApprovals(false)), "approval show")
	args(nth(0, a.completeApprovals(true)), "approval grant", "approval deny")
	args(nth(0, a.completeDeadLetters), "fleet dlq replay", "fleet dlq drop")
	args(func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return quotaKeys, noFiles
		case 1:
			return []string{"none"}, noFiles
		}
		return nil, noFiles
	}, "quota set")
	args(func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch {
		case len(args) == 0:
			return []string{"auto_keep", "auto_max_age", "quota_mode", "replication", "ttl"}, noFiles
		case len(args) == 1 && args[0] == "quota_mode":
			return []string{"logical", "unique", "default"}, noFiles
		case len(args) == 1 && args[0] == "replication":
			return []string{"sync", "async", "checkpoint", "default"}, noFiles
		case len(args) == 1 && args[0] == "ttl":
			return []string{"none"}, noFiles
		case len(args) == 1:
			return []string{"default"}, noFiles
		}
		return nil, noFiles
	}, "vault set")
	args(nth(0, a.completeVaults), "vault settings")
	args(none, "stats", "compact", "maintain", "audit clear")
	args(func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	}, "mount", "unmount")

	root.RegisterFlagCompletionFunc("output", fixed(outputFormats...))
	root.RegisterFlagCompletionFunc("vault", a.completeVaults)
	root.RegisterFlagCompletionFunc("namespace", none)
	root.RegisterFlagCompletionFunc("nats", none)
	root.RegisterFlagCompletionFunc("home", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	})
	root.RegisterFlagCompletionFunc("config", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	})
	flag("checkpoint", fixed("auto", "always", "never"), "exec", "proxy exec")
	flag("checkpoint", a.completeCheckpointsOf("from"), "attempts run")
	flag("checkpoint", a.completeCheckpointsOf(""), "vault fork")
	flag("placement", fixed(messages.PlacementSource, messages.PlacementSpread), "vault fork", "attempts run")
	flag("keep", fixed("best", "all", "none"), "attempts run")
	flag("merge", fixed("best"), "attempts run")
	flag("into", a.completeVaults, "vault merge")
	flag("strategy", fixed(messages.MergeOurs, messages.MergeTheirs), "vault merge")
	flag("from", a.completeVaults, "attempts run")
	flag("cwd", a.completeDirs, "exec", "proxy exec")
	flag("path", a.completePaths, "audit")
	flag("action", fixed(auditActions...), "audit")
	flag("timeout", fixed("30s", "5m", "1h"), "exec", "proxy exec", "attempts run")
	flag("id", a.completeWorkers, "worker", "serve")
	flag("mode", fixed("0644", "0755", "0600"), "write")
}

// completer is a client for completion: nil when there is nothing to ask
// (no fleet, no store yet: completion must not create one).
func (a *app) completer(cmd *cobra.Command) (context.Context, Client) {
	cfg, v, err := config.Load(cmd.Flags())
	if err != nil {
		return nil, nil
	}
	a.cfg, a.viper = cfg, v
	if cfg.NATS.URL == "" && runningServe(cfg.Home) == "" {
		if _, err := os.Stat(cfg.StorePath()); err != nil {
			return nil, nil
		}
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := a.connect(ctx)
	if err != nil {
		return nil, nil
	}
	return ctx, c
}

func (a *app) completeVaults(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
	ctx, c := a.completer(cmd)
	if c == nil {
		return nil, noFiles
	}
	var r messages.VaultListResult
	if _, err := a.do(ctx, messages.OpVaultList, "", nil, &r); err != nil {
		return nil, noFiles
	}
	var out []string
	for _, v := range r.Vaults {
		if strings.HasPrefix(v.Name, to) {
			out = append(out, v.Name+"\t"+size(v.Bytes)+", "+pluralize(v.Files, "file"))
		}
	}
	return out, noFiles
}

func (a *app) completeCheckpoints(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
	return a.completeCheckpointsOf("")(cmd, args, to)
}

// completeCheckpointsOf completes the checkpoints of the vault named by
// flag vaultFlag (or the first argument, or the current vault).
func (a *app) completeCheckpointsOf(vaultFlag string) completeFunc {
	return func(cmd *cobra.Command, args []string, to string) ([]string, cobra.ShellCompDirective) {
		ctx, c := a.completer(cmd)
		if c == nil {
			return nil, noFiles
		}
		v := ""
		if vaultFlag != "" {
			v, _ = cmd.Flags().GetString(vaultFlag)
		} else if cmd.Name() == "fork" && len(args) > 0 {
			v = args[0]
		}
		if v == "" {
			var err error
			if v, err = a.currentVault(); err != nil {
				return nil, noFiles
			}
		}
		var r messages.CheckpointListResult
		if _, err := a.do(ctx, messages.OpCheckpointList, v, nil, &r); err != nil {
			return nil, noFiles
		}
		var out []string
		for _, ck := range r.Checkpoints {
			if strings.HasPrefix(ck.Name, to) {
				out = append(out, ck.Name+"\t"+strings.TrimSpace(ck.Message))
			}
		}
		return out, noFiles
	}
}

// completePaths lists the vault directory that toComplete is in.
func (a *app) completePaths(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
	return a.listPaths(cmd, to, false)
}

func (a *app) completeDirs(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
	return a.listPaths(cmd, to, true)
}

func (a *app) listPaths(cmd *cobra.Command, to string, dirsOnly bool) ([]string, cobra.ShellCompDirective) {
	if to == "" {
		return []string{"/"}, noFiles | cobra.ShellCompDirectiveNoSpace
	}
	if !strings.HasPrefix(to, "/") {
		return nil, noFiles
	}
	ctx, c := a.completer(cmd)
	if c == nil {
		return nil, noFiles
	}
	v, err := a.currentVault()
	if err != nil {
		return nil, noFiles
	}
	dir := to
	if !strings.HasSuffix(dir, "/") {
		dir = path.Dir(dir)
	}
	var r messages.LsResult
	if _, err := a.do(ctx, messages.OpLs, v, messages.LsArgs{Path: dir}, &r); err != nil {
		return nil, noFiles
	}
	var out []string
	for _, e := range r.Entries {
		p := e.Path
		if e.Type == "dir" {
			p += "/"
		} else if dirsOnly {
			continue
		}
		if strings.HasPrefix(p, to) {
			out = append(out, p)
		}
	}
	// A directory is a step on the way: no space after it.
	d := noFiles
	for _, p := range out {
		if strings.HasSuffix(p, "/") {
			d |= cobra.ShellCompDirectiveNoSpace
		}
	}
	return out, d
}

func (a *app) completeApprovals(pendingOnly bool) completeFunc {
	return func(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
		ctx, c := a.completer(cmd)
		if c == nil {
			return nil, noFiles
		}
		var r messages.ApprovalListResult
		if _, err := a.do(ctx, messages.OpApprovalList, "", nil, &r); err != nil {
			return nil, noFiles
		}
		var out []string
		for _, x := range r.Approvals {
			if (!pendingOnly || x.Status == "pending") && strings.HasPrefix(x.ID, to) {
				out = append(out, x.ID+"\t"+x.Status+": "+approvalCommand(x))
			}
		}
		return out, noFiles
	}
}

// fromFleet completes from the fleet's JetStream state (members, dead
// letters): nothing without a fleet.
func (a *app) fromFleet(cmd *cobra.Command, list func(context.Context, jetstream.JetStream) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	if _, c := a.completer(cmd); c == nil {
		return nil, noFiles
	}
	nc, js, err := a.natsConn("avfs-complete")
	if err != nil {
		return nil, noFiles
	}
	defer nc.Close()
	out, err := list(cmd.Context(), js)
	if err != nil {
		return nil, noFiles
	}
	return out, noFiles
}

func (a *app) completeWorkers(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
	return a.fromFleet(cmd, func(ctx context.Context, js jetstream.JetStream) ([]string, error) {
		st, err := dispatcher.Status(ctx, js)
		var out []string
		for _, m := range st.Workers {
			if strings.HasPrefix(m.ID, to) {
				out = append(out, m.ID+"\t"+pluralize(int64(m.Vaults), "vault"))
			}
		}
		return out, err
	})
}

func (a *app) completeDeadLetters(cmd *cobra.Command, _ []string, to string) ([]string, cobra.ShellCompDirective) {
	return a.fromFleet(cmd, func(ctx context.Context, js jetstream.JetStream) ([]string, error) {
		d, err := dispatcher.DeadLetters(ctx, js)
		var out []string
		for _, x := range d.Dead {
			if s := strconv.FormatUint(x.Seq, 10); strings.HasPrefix(s, to) {
				out = append(out, s+"\t"+string(x.Op)+" "+x.Vault+": "+x.Reason)
			}
		}
		return out, err
	})
}

func pluralize(n int64, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return strconv.FormatInt(n, 10) + " " + noun[:len(noun)-1] + "ies"
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}
