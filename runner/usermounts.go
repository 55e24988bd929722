package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/mount"
	"github.com/avfs/avfs/vault"
)

// Mounts a person asked for: `avfs mount DIR` through a fleet sends
// mount.start to the vault's owner, which serves the vault at DIR from
// its own store, so the mount and the fleet's requests share one copy.
// The mount lasts until mount.stop, an unmount from outside (`avfs
// unmount`), or the worker's stop.

// MachineID identifies this machine: /etc/machine-id, else the host name.
func MachineID() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b))
	}
	h, _ := os.Hostname()
	return h
}

// userMount is one mount.start's mount.
type userMount struct {
	mnt       *mount.Mount
	ns, vault string
}

// serve mounts v at dir, an existing directory on this machine. A second
// request for the same vault and directory (a redelivery) is answered
// with the mount already there.
func (ms *Mounts) serve(ctx context.Context, v *vault.Vault, dir string, ro bool) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if um := ms.user[dir]; um != nil && um.mnt.Serving() {
		if um.ns == v.Namespace() && um.vault == v.Name() {
			return nil
		}
		return messages.Errorf(messages.CodeConflict, "%s: vault %s is mounted there", dir, um.vault)
	}
	o := mount.Options{ReadOnly: ro, Meta: vault.Meta{Actor: "mount"}, Logger: ms.log, Passthrough: ms.backing, WakeHere: ms.wakeHere}
	if f := ms.userSync; f != nil {
		// An fsync returns once the fleet holds what it committed.
		ns, name := v.Namespace(), v.Name()
		o.OnSync = func(ctx context.Context) error { return f(ctx, ns, name) }
	}
	m, err := mount.New(ctx, v, dir, o)
	if err != nil {
		return messages.Errorf(messages.CodeUnavailable, "mount %s: %v", dir, err)
	}
	um := &userMount{mnt: m, ns: v.Namespace(), vault: v.Name()}
	ms.user[dir] = um
	go func() {
		// Unmounted from outside: commit what is buffered, forget it.
		m.Wait()
		ms.mu.Lock()
		if ms.user[dir] == um {
			delete(ms.user, dir)
		}
		ms.mu.Unlock()
		m.Close()
	}()
	return nil
}

// unserve ends the mount at dir that serve made for ns/name.
func (ms *Mounts) unserve(ns, name, dir string) error {
	ms.mu.Lock()
	um := ms.user[dir]
	if um == nil || um.ns != ns || um.vault != name {
		ms.mu.Unlock()
		return messages.Errorf(messages.CodeNotFound, "%s: vault %s is not mounted there", dir, name)
	}
	delete(ms.user, dir)
	ms.mu.Unlock()
	return um.mnt.Close()
}

// registerUserMounts plugs mount.start and mount.stop into h.
func (r *Runner) registerUserMounts(h *handler.Handler) {
	handler.Register(h, messages.OpMountStart, func(ctx context.Context, req messages.Request, a messages.MountArgs) (any, error) {
		dir, err := mountDir(a)
		if err != nil {
			return nil, err
		}
		if a.Machine != "" && a.Machine != MachineID() {
			return nil, messages.Errorf(messages.CodeUnavailable,
				"vault %s is served by worker %s on another machine: a mount must run on the owner's machine", req.Vault, r.cfg.Worker)
		}
		v := r.store.Vault(req.Namespace, req.Vault)
		if ok, err := v.Exists(ctx); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("vault %q: %w", req.Vault, vault.ErrVaultNotFound)
		}
		if err := r.mounts.serve(ctx, v, dir, a.ReadOnly); err != nil {
			return nil, err
		}
		return messages.MountResult{Dir: dir, Namespace: req.Namespace, Vault: req.Vault, ReadOnly: a.ReadOnly, Worker: r.cfg.Worker}, nil
	})
	handler.Register(h, messages.OpMountStop, func(ctx context.Context, req messages.Request, a messages.MountArgs) (any, error) {
		dir, err := mountDir(a)
		if err != nil {
			return nil, err
		}
		if err := r.mounts.unserve(req.Namespace, req.Vault, dir); err != nil {
			return nil, err
		}
		return messages.MountResult{Dir: dir, Namespace: req.Namespace, Vault: req.Vault, ReadOnly: a.ReadOnly, Worker: r.cfg.Worker}, nil
	})
}

// mountDir checks a mount request's directory.
func mountDir(a messages.MountArgs) (string, error) {
	if a.Dir == "" || !filepath.IsAbs(a.Dir) {
		return "", messages.Errorf(messages.CodeInvalidArgument, "mount: dir %q: want an absolute path", a.Dir)
	}
	return filepath.Clean(a.Dir), nil
}
