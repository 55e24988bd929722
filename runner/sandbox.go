package runner

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/exec"
	"github.com/avfs/avfs/messages"
)

// SandboxConfig says how commands are confined. The zero value runs every
// command in namespaces with no network, the system's and the toolchains'
// directories read-only, and no limits.
type SandboxConfig struct {
	Mode     string // messages.SandboxNamespaces ("" too) or messages.SandboxNone
	Fallback bool   // run unsandboxed where namespaces cannot be made, instead of failing
	Network  bool   // every command gets the host's network
	Binds    []exec.Bind
	TmpSize  int64 // bytes; 0 = exec.DefaultTmpSize
	Limits   exec.Limits
	// Hide are host paths no command may see even under a bind: the
	// worker's home (its store, its credentials, other vaults' mounts).
	Hide   []string
	Vaults []VaultSandbox
	// CacheDir holds each namespace's own build caches (Go's GOCACHE at
	// CacheDir/NAMESPACE/go-build), bound writable into its commands: a
	// cache shared by tenants would let one plant build results that
	// another's go build trusts. NewRunner defaults it to "cache" next to
	// the mounts' directory (the worker's home).
	CacheDir string
	// KeepInits keeps a sandbox init per vault alive between its commands
	// (exec.Pool), for a process that serves many: a sandboxed command
	// then costs about what an unsandboxed one does. A one-shot process
	// leaves it off, since starting a kept init costs what starting a
	// one-shot init does.
	KeepInits bool
}

// VaultSandbox overrides the sandbox of one vault.
type VaultSandbox struct {
	Namespace, Vault string
	Mode             string      // "" keeps the general mode
	Network          bool        // grants the network to every command in the vault
	Limits           exec.Limits // non-zero fields replace the general ones
}

// SandboxFrom turns the configuration's sandbox section into a
// SandboxConfig for a worker whose home is c.Home.
func SandboxFrom(c *config.Config) (SandboxConfig, error) {
	s := c.Sandbox
	out := SandboxConfig{Mode: s.Mode, Fallback: s.Fallback, Network: s.Network, TmpSize: s.TmpSizeMB << 20,
		Limits: limits(s.Limits), Hide: []string{c.Home}, CacheDir: filepath.Join(c.Home, "cache")}
	if err := validMode(s.Mode); err != nil {
		return out, err
	}
	for _, b := range s.Binds {
		p, mode, _ := strings.Cut(b, ":")
		if !filepath.IsAbs(p) || (mode != "" && mode != "rw" && mode != "ro") {
			return out, fmt.Errorf("sandbox.binds: %q: want an absolute path, optionally followed by :ro or :rw", b)
		}
		out.Binds = append(out.Binds, exec.Bind{Path: filepath.Clean(p), Writable: mode == "rw"})
	}
	for _, v := range s.Vaults {
		if err := validMode(v.Mode); err != nil {
			return out, fmt.Errorf("sandbox.vaults %s: %w", v.Vault, err)
		}
		ns := v.Namespace
		if ns == "" {
			ns = "default"
		}
		out.Vaults = append(out.Vaults, VaultSandbox{Namespace: ns, Vault: v.Vault, Mode: v.Mode, Network: v.Network, Limits: limits(v.Limits)})
	}
	return out, nil
}

func validMode(m string) error {
	if m != "" && m != messages.SandboxNamespaces && m != messages.SandboxNone {
		return fmt.Errorf("sandbox mode %q: want namespaces or none", m)
	}
	return nil
}

func limits(l config.SandboxLimits) exec.Limits {
	return exec.Limits{MemoryBytes: l.MemoryMB << 20, Pids: l.Pids, CPUs: l.CPUs}
}

// sandboxPlan is how one command will be confined.
type sandboxPlan struct {
	info messages.SandboxInfo
	sb   *exec.Sandbox // nil for mode none
	env  []string      // the command's environment, with its namespace's caches
}

// sandboxes decides plans; it remembers whether this machine can make
// namespaces at all, so that a fallback costs one probe per process.
type sandboxes struct {
	cfg   SandboxConfig
	probe func() error
	pool  *exec.Pool // nil unless cfg.KeepInits
}

func newSandboxes(cfg SandboxConfig) *sandboxes {
	var pool *exec.Pool
	if cfg.KeepInits {
		pool = exec.NewPool()
	}
	return &sandboxes{cfg: cfg, pool: pool, probe: sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := exec.Run(ctx, exec.Spec{Argv: []string{"true"}, Sandbox: &exec.Sandbox{Binds: exec.SystemBinds()}})
		return err
	})}
}

// close ends the kept inits.
func (s *sandboxes) close() {
	if s.pool != nil {
		s.pool.Close()
	}
}

// vault is the sandbox configuration of ns/name, before the probe.
func (s *sandboxes) vault(ns, name string) VaultSandbox {
	v := VaultSandbox{Mode: s.cfg.Mode, Network: s.cfg.Network, Limits: s.cfg.Limits}
	for _, o := range s.cfg.Vaults {
		if o.Namespace != ns || o.Vault != name {
			continue
		}
		if o.Mode != "" {
			v.Mode = o.Mode
		}
		v.Network = v.Network || o.Network
		if o.Limits.MemoryBytes != 0 {
			v.Limits.MemoryBytes = o.Limits.MemoryBytes
		}
		if o.Limits.Pids != 0 {
			v.Limits.Pids = o.Limits.Pids
		}
		if o.Limits.CPUs != 0 {
			v.Limits.CPUs = o.Limits.CPUs
		}
	}
	if v.Mode == "" {
		v.Mode = messages.SandboxNamespaces
	}
	return v
}

// plan decides how a command in ns/name runs. workspace is the vault's
// mount, env the command's environment (its GOCACHE is replaced by the
// namespace's own), hostEnv the worker's environment for it without what
// the request sets (its toolchain variables name the directories to bind);
// grantedBy is "rule" or "approval" when the policy grants the network,
// else ""; lim are its limits (commandLimits).
func (s *sandboxes) plan(ns, name, workspace string, env, hostEnv []string, grantedBy string, lim exec.Limits) (sandboxPlan, error) {
	v := s.vault(ns, name)
	v.Limits = lim
	if v.Mode == messages.SandboxNamespaces && s.cfg.Fallback {
		if err := s.probe(); err != nil {
			v.Mode = messages.SandboxNone
		}
	}
	if v.Mode == messages.SandboxNone {
		return sandboxPlan{info: messages.SandboxInfo{Mode: messages.SandboxNone, Network: true, NetworkBy: "host"}, env: env}, nil
	}
	info := messages.SandboxInfo{Mode: messages.SandboxNamespaces,
		Limits: messages.SandboxLimits{MemoryBytes: v.Limits.MemoryBytes, Pids: v.Limits.Pids, CPUs: v.Limits.CPUs}}
	switch {
	case v.Network:
		info.Network, info.NetworkBy = true, "vault"
	case grantedBy != "":
		info.Network, info.NetworkBy = true, grantedBy
	}
	sb := &exec.Sandbox{Network: info.Network, TmpSize: s.cfg.TmpSize, Limits: v.Limits, Hide: s.cfg.Hide, Pool: s.pool}
	env, cache, err := s.namespaceCaches(ns, workspace, env)
	if err != nil {
		return sandboxPlan{}, err
	}
	sb.Binds = append(exec.SystemBinds(), toolchainBinds(hostEnv, workspace)...)
	sb.Binds = append(sb.Binds, s.cfg.Binds...)
	sb.Binds = append(sb.Binds, cache...)
	sb.Binds = append(sb.Binds, exec.Bind{Path: workspace, Writable: true})
	sb.Binds = dedupBinds(sb.Binds)
	return sandboxPlan{info: info, sb: sb, env: env}, nil
}

// namespaceCaches points the command's GOCACHE at its namespace's own
// cache, unless it names a directory in the vault, and returns the binds
// that cache needs.
func (s *sandboxes) namespaceCaches(ns, workspace string, env []string) ([]string, []exec.Bind, error) {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "GOCACHE" {
			if within(workspace, v) {
				return env, nil, nil
			}
			continue
		}
		out = append(out, kv)
	}
	dir := filepath.Join(s.cfg.CacheDir, ns, "go-build")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("build cache of namespace %s: %w", ns, err)
	}
	// An operator may point a namespace's cache elsewhere with a symlink;
	// the sandbox binds what it names.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return append(out, "GOCACHE="+dir), []exec.Bind{{Path: dir, Writable: true}}, nil
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	p = filepath.Clean(p)
	return filepath.IsAbs(p) && (p == dir || strings.HasPrefix(p, dir+"/"))
}

// toolchainBinds shows, read-only, the toolchains and module caches that
// the worker's environment for a command names (outside the workspace, which is bound
// writable anyway). Go's build cache is not among them: it is the
// namespace's own (namespaceCaches), because Go trusts its entries.
func toolchainBinds(env []string, workspace string) []exec.Bind {
	var binds []exec.Bind
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GOROOT", "GOPATH", "GOMODCACHE", "CARGO_HOME", "RUSTUP_HOME":
			if filepath.IsAbs(v) && !within(workspace, v) {
				binds = append(binds, exec.Bind{Path: filepath.Clean(v)})
			}
		}
	}
	return binds
}

// dedupBinds keeps one bind per path, the last one given.
func dedupBinds(binds []exec.Bind) []exec.Bind {
	last := map[string]int{}
	for i, b := range binds {
		last[filepath.Clean(b.Path)] = i
	}
	out := binds[:0:0]
	for i, b := range binds {
		if last[filepath.Clean(b.Path)] == i {
			out = append(out, b)
		}
	}
	return out
}

// The largest limits a command may ask for.
const (
	maxMemoryMB = math.MaxInt64 >> 20
	maxCPUs     = 4096
)

// commandLimits are the limits a command of ns/name runs under when it
// asks for a (its --memory-mb, --pids, --cpus): each may only lower the
// vault's, and none applies without a sandbox. A value above the vault's
// is INVALID_ARGUMENT rather than clamped, so that a caller never believes
// a limit applied that did not.
func (s *sandboxes) commandLimits(ns, name string, a messages.ExecArgs) (exec.Limits, error) {
	v := s.vault(ns, name)
	if a.MemoryMB == 0 && a.Pids == 0 && a.CPUs == 0 {
		return v.Limits, nil
	}
	if a.MemoryMB < 0 || a.Pids < 0 || a.CPUs < 0 {
		return v.Limits, messages.Errorf(messages.CodeInvalidArgument, "--memory-mb, --pids and --cpus must not be negative")
	}
	// Past these a limit is not a number the kernel can hold: MiB shifted
	// to bytes would overflow, and a CPU share becomes a quota per period.
	if a.MemoryMB > maxMemoryMB {
		return v.Limits, messages.Errorf(messages.CodeInvalidArgument, "--memory-mb %d: at most %d", a.MemoryMB, maxMemoryMB)
	}
	if math.IsNaN(a.CPUs) || a.CPUs > maxCPUs {
		return v.Limits, messages.Errorf(messages.CodeInvalidArgument, "--cpus %v: want a number from 0 to %d", a.CPUs, maxCPUs)
	}
	if v.Mode == messages.SandboxNone {
		return v.Limits, messages.Errorf(messages.CodeInvalidArgument, "--memory-mb, --pids and --cpus need the sandbox, and this vault's commands run without one (sandbox mode none)")
	}
	l := v.Limits
	above := func(flag string, asked, limit any) error {
		return messages.Errorf(messages.CodeInvalidArgument, "%s %v is above this vault's limit of %v: a command may only lower its limits", flag, asked, limit)
	}
	if a.MemoryMB > 0 {
		if l.MemoryBytes > 0 && a.MemoryMB<<20 > l.MemoryBytes {
			return v.Limits, above("--memory-mb", a.MemoryMB, l.MemoryBytes>>20)
		}
		l.MemoryBytes = a.MemoryMB << 20
	}
	if a.Pids > 0 {
		if l.Pids > 0 && a.Pids > l.Pids {
			return v.Limits, above("--pids", a.Pids, l.Pids)
		}
		l.Pids = a.Pids
	}
	if a.CPUs > 0 {
		if l.CPUs > 0 && a.CPUs > l.CPUs {
			return v.Limits, above("--cpus", a.CPUs, l.CPUs)
		}
		l.CPUs = a.CPUs
	}
	return l, nil
}
