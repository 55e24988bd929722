package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/mount"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Mounts keeps one FUSE mount per active vault under a root directory, at
// a stable path (root/<namespace>/<vault>) so that tools which remember
// absolute paths (cargo's fingerprints, git worktrees) keep their caches
// from one command to the next.
type Mounts struct {
	root string
	log  *slog.Logger
	// backing, if not nil, is the content cache every mount hands the
	// kernel for passthrough reads (mount.Options.Passthrough).
	backing *tree.Backing
	// userSync, if not nil, is the OnSync of the mounts asked for with
	// mount.start (Parts.MountSync), given their vault; set before the
	// first mount.
	userSync func(ctx context.Context, ns, vault string) error
	// wakeHere is every mount's Options.WakeHere (config
	// mount.wake_here); set before the first mount.
	wakeHere bool

	mu   sync.Mutex
	m    map[string]*activeMount
	user map[string]*userMount // by directory: mounts asked for with mount.start
}

type activeMount struct {
	mnt *mount.Mount
	// run serialises commands in one vault: requests to a vault apply in
	// order, one at a time, and background runs take turns. Holding its
	// one token is holding the lock; a channel, so that a run killed
	// while it waits for its turn stops waiting. flock extends that to
	// other processes.
	run  chan struct{}
	lock *os.File
	// inc is the vault's incarnation when it was mounted: another
	// process may delete the vault and create another of the same name,
	// which this mount does not show.
	inc string
}

// lockRun takes am's run lock, or gives up when ctx ends.
func (am *activeMount) lockRun(ctx context.Context) error {
	select {
	case am.run <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (am *activeMount) unlockRun() { <-am.run }

// NewMounts returns a mount manager rooted at root. backing, if not nil,
// gives its mounts FUSE passthrough onto that content cache.
func NewMounts(root string, log *slog.Logger, backing *tree.Backing) *Mounts {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Mounts{root: root, log: log, backing: backing, m: map[string]*activeMount{}, user: map[string]*userMount{}}
}

func key(ns, name string) string { return ns + "/" + name }

// acquire mounts v if needed and takes its run lock; the func it returns
// undoes the lock but keeps the mount.
func (ms *Mounts) acquire(ctx context.Context, v *vault.Vault) (*activeMount, func(), error) {
	inc, err := v.Incarnation(ctx)
	if err != nil {
		return nil, nil, err
	}
	ms.mu.Lock()
	am, ok := ms.m[key(v.Namespace(), v.Name())]
	stale := ok && am.inc != inc
	if stale {
		ms.log.Info("vault deleted and created again elsewhere: mounting the new one", "dir", am.mnt.Dir())
	}
	if ok && !stale && !am.mnt.Serving() {
		// Unmounted from outside, or its server stopped: a dead mount
		// would fail the command with ENOTCONN. Mount it again.
		ms.log.Warn("mount found dead: mounting again", "dir", am.mnt.Dir())
		stale = true
	}
	if stale {
		am.run <- struct{}{} // wait for a command still running in it
		ms.close(am)
		am.lock.Close()
		<-am.run
		delete(ms.m, key(v.Namespace(), v.Name()))
		ok = false
	}
	if !ok {
		am, err = ms.mount(ctx, v)
		if err != nil {
			ms.mu.Unlock()
			return nil, nil, err
		}
		am.inc = inc
		ms.m[key(v.Namespace(), v.Name())] = am
	}
	ms.mu.Unlock()
	if err := am.lockRun(ctx); err != nil {
		return nil, nil, err
	}
	if err := unix.Flock(int(am.lock.Fd()), unix.LOCK_EX); err != nil {
		am.unlockRun()
		return nil, nil, fmt.Errorf("lock vault %s: %w", v.Name(), err)
	}
	// Changes made elsewhere (another process, another worker's store
	// copy pulled in) must be in the mount before the command runs.
	if err := am.mnt.Refresh(ctx); err != nil {
		unix.Flock(int(am.lock.Fd()), unix.LOCK_UN)
		am.unlockRun()
		return nil, nil, fmt.Errorf("refresh mount of %s: %w", v.Name(), err)
	}
	return am, func() {
		unix.Flock(int(am.lock.Fd()), unix.LOCK_UN)
		am.unlockRun()
	}, nil
}

// dir is where ns/name is mounted, whether it is mounted now or not.
func (ms *Mounts) dir(ns, name string) string { return filepath.Join(ms.root, ns, name) }

func (ms *Mounts) mount(ctx context.Context, v *vault.Vault) (*activeMount, error) {
	dir := ms.dir(v.Namespace(), v.Name())
	if err := config.EnsureDir(filepath.Dir(dir)); err != nil { // 0700: under the home
		return nil, err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, config.FileMode)
	if err != nil {
		return nil, err
	}
	// Only one process may serve the stable path: wait for another
	// process's command in this vault to finish and its mount to go.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		return nil, err
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	// A process killed with SIGKILL leaves a dead mount behind, which
	// answers ENOTCONN once its connection is gone (which may be after
	// its lock was released); a lazy unmount clears it.
	if _, err := os.Stat(dir); errors.Is(err, syscall.ENOTCONN) {
		unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		lock.Close()
		return nil, err
	}
	// QueueCloses: the runner Syncs the mount after each command,
	// before anything reads the vault for the envelope.
	m, err := mount.New(ctx, v, dir, mount.Options{Meta: vault.Meta{Actor: "exec"}, Logger: ms.log, QueueCloses: true, Passthrough: ms.backing, WakeHere: ms.wakeHere})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("mount vault %s: %w", v.Name(), err)
	}
	return &activeMount{mnt: m, lock: lock, run: make(chan struct{}, 1)}, nil
}

// refresh brings the mount of ns/name, if any, up to date after a change
// made through the API (a write, a restore), at once rather than at its
// next poll of the vault's change log.
func (ms *Mounts) refresh(ctx context.Context, ns, name string) {
	ms.mu.Lock()
	var list []*mount.Mount
	if am := ms.m[key(ns, name)]; am != nil {
		list = append(list, am.mnt)
	}
	for _, um := range ms.user {
		if um.ns == ns && um.vault == name {
			list = append(list, um.mnt)
		}
	}
	ms.mu.Unlock()
	for _, m := range list {
		if err := m.Refresh(ctx); err != nil {
			ms.log.Warn("refresh mount", "dir", m.Dir(), telemetry.LogKeyErr, err)
		}
	}
}

// release unmounts ns/name if it is mounted (before a vault is deleted).
func (ms *Mounts) release(ns, name string) error {
	ms.mu.Lock()
	am := ms.m[key(ns, name)]
	delete(ms.m, key(ns, name))
	ms.mu.Unlock()
	if am == nil {
		return nil
	}
	am.lockRun(context.Background())
	defer am.unlockRun()
	defer am.lock.Close()
	return ms.close(am)
}

// close unmounts am; if the mount's own unmount fails, it detaches the
// mount point so that no dead mount outlives the vault.
func (ms *Mounts) close(am *activeMount) error {
	err := am.mnt.Close()
	if err != nil {
		ms.log.Warn("unmount", "dir", am.mnt.Dir(), telemetry.LogKeyErr, err)
		if derr := unix.Unmount(am.mnt.Dir(), unix.MNT_DETACH); derr == nil || errors.Is(derr, unix.EINVAL) {
			return nil
		}
	}
	return err
}

// Close unmounts everything.
func (ms *Mounts) Close() error {
	ms.mu.Lock()
	all, user := ms.m, ms.user
	ms.m, ms.user = map[string]*activeMount{}, map[string]*userMount{}
	ms.mu.Unlock()
	var errs []error
	for _, um := range user {
		errs = append(errs, um.mnt.Close())
	}
	for _, am := range all {
		am.lockRun(context.Background())
		errs = append(errs, ms.close(am))
		am.lock.Close()
		am.unlockRun()
	}
	return errors.Join(errs...)
}

// active is the number of vaults mounted now.
func (ms *Mounts) active() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.m)
}
