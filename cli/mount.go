package cli

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/mount"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/vault"
)

func (a *app) mountCmd() *cobra.Command {
	var readonly, allowOther, queueCloses bool
	c := &cobra.Command{
		Use:   "mount MOUNTPOINT [--readonly] [--allow-other] [--queue-closes]",
		Short: "Serve the vault as a real directory until `avfs unmount` or a signal",
		Long: `mount serves the vault at MOUNTPOINT until ` + "`avfs unmount MOUNTPOINT`" + ` or a signal.
Changes made to the vault elsewhere (another avfs process, an exec, a restore)
show in the mount within 200 ms. Through a fleet (--nats URL, or while ` + "`avfs serve`" + `
runs on this home) the vault's owner worker serves the mount from its own
store; it must run on this machine.`,
		Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, name string, args []string) error {
			ctx := cmd.Context()
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if a.cfg.NATS.URL != "" || runningServe(a.cfg.Home) != "" {
				if queueCloses {
					return messages.Errorf(messages.CodeInvalidArgument, "mount --queue-closes through a fleet: not implemented yet")
				}
				return a.mountThroughFleet(cmd.Context(), name, dir, readonly)
			}
			st, err := vault.Open(ctx, a.cfg.StorePath(), node.StoreOptions(a.cfg))
			if err != nil {
				return messages.Errorf(messages.CodeUnavailable, "open store: %v", err)
			}
			defer st.Close()
			v := st.Vault(a.cfg.Namespace, name)
			if ok, err := v.Exists(ctx); err != nil {
				return err
			} else if !ok {
				return &requestError{toErr(vault.ErrVaultNotFound)}
			}
			o := mount.Options{ReadOnly: readonly, AllowOther: allowOther, QueueCloses: queueCloses, Meta: vault.Meta{Actor: a.actor()}, Logger: a.log, WakeHere: a.cfg.Mount.WakeHere}
			if a.cfg.Mount.Passthrough {
				if o.Passthrough, err = tree.OpenBacking(a.cfg.ContentCacheDir(), a.cfg.Mount.ContentCacheMB<<20); err != nil {
					return messages.Errorf(messages.CodeUnavailable, "mount %s: %v", dir, err)
				}
			}
			m, err := mount.New(ctx, v, dir, o)
			if err != nil {
				return messages.Errorf(messages.CodeUnavailable, "mount %s: %v", dir, err)
			}
			if err := a.emit(map[string]any{"mountpoint": dir, "vault": name, "namespace": a.cfg.Namespace, "readonly": readonly}); err != nil {
				m.Close()
				return err
			}
			gone := make(chan struct{})
			go func() { m.Wait(); close(gone) }()
			select {
			case <-ctx.Done():
				return m.Close()
			case <-gone:
				// Unmounted from outside: Close still commits what was
				// buffered; its unmount then finds nothing mounted.
				if err := m.Close(); err != nil && !errors.Is(err, syscall.EINVAL) {
					return err
				}
				return nil
			}
		}),
	}
	c.Flags().BoolVar(&readonly, "readonly", false, "refuse every change with EROFS")
	c.Flags().BoolVar(&queueCloses, "queue-closes", false, "commit changes (and, in a vault without quotas, closed files) in bursts within 20 ms instead of before each call returns, as exec's mounts do")
	c.Flags().BoolVar(&allowOther, "allow-other", false, "let other users use the mount (root, or user_allow_other in /etc/fuse.conf); owners and modes are checked for every caller")
	return c
}

// mountThroughFleet asks the vault's owner (a worker, or `avfs serve` on
// this home) to serve the vault at dir, then waits until dir is unmounted
// from outside or a signal comes, which ends the mount.
func (a *app) mountThroughFleet(ctx context.Context, name, dir string, readonly bool) error {
	args := messages.MountArgs{Dir: dir, ReadOnly: readonly, Machine: runner.MachineID()}
	var res messages.MountResult
	if _, err := a.do(ctx, messages.OpMountStart, name, args, &res); err != nil {
		return err
	}
	if err := a.emit(res); err != nil {
		return err
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_, err := a.do(context.WithoutCancel(ctx), messages.OpMountStop, name, args, nil)
			return err
		case <-t.C:
			if !mountPoint(dir) {
				return nil
			}
		}
	}
}

// mountPoint reports whether dir is on another device than its parent.
func mountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || syscall.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

func (a *app) unmountCmd() *cobra.Command {
	return &cobra.Command{
		Use: "unmount MOUNTPOINT", Short: "Stop serving a mount (the serving `avfs mount` then exits)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if err := syscall.Unmount(dir, 0); err != nil {
				if !errors.Is(err, syscall.EBUSY) {
					return messages.Errorf(messages.CodeInvalidArgument, "unmount %s: %v", dir, err)
				}
				// Busy: detach now; the server exits once the last user lets go.
				if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
					return messages.Errorf(messages.CodeConflict, "unmount %s: %v", dir, err)
				}
			}
			return a.emit(map[string]any{"unmounted": dir})
		},
	}
}
