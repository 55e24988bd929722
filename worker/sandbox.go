package worker

import (
	"context"
	"fmt"
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
		Limits: limits(s.Limits), Hide: []string{c.Home}}
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
}

// sandboxes decides plans; it remembers whether this machine can make
// namespaces at all, so that a fallback costs one probe per process.
type sandboxes struct {
	cfg   SandboxConfig
	probe func() error
}

func newSandboxes(cfg SandboxConfig) *sandboxes {
	return &sandboxes{cfg: cfg, probe: sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := exec.Run(ctx, exec.Spec{Argv: []string{"true"}, Sandbox: &exec.Sandbox{Binds: exec.SystemBinds()}})
		return err
	})}
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
// mount, env the worker's environment for the command, without what the
// request sets (its toolchain variables name the directories to bind);
// grantedBy is "rule" or "approval" when the policy
// grants the network, else "".
func (s *sandboxes) plan(ns, name, workspace string, env []string, grantedBy string) sandboxPlan {
	v := s.vault(ns, name)
	if v.Mode == messages.SandboxNamespaces && s.cfg.Fallback {
		if err := s.probe(); err != nil {
			v.Mode = messages.SandboxNone
		}
	}
	if v.Mode == messages.SandboxNone {
		return sandboxPlan{info: messages.SandboxInfo{Mode: messages.SandboxNone, Network: true, NetworkBy: "host"}}
	}
	info := messages.SandboxInfo{Mode: messages.SandboxNamespaces,
		Limits: messages.SandboxLimits{MemoryBytes: v.Limits.MemoryBytes, Pids: v.Limits.Pids, CPUs: v.Limits.CPUs}}
	switch {
	case v.Network:
		info.Network, info.NetworkBy = true, "vault"
	case grantedBy != "":
		info.Network, info.NetworkBy = true, grantedBy
	}
	sb := &exec.Sandbox{Network: info.Network, TmpSize: s.cfg.TmpSize, Limits: v.Limits, Hide: s.cfg.Hide}
	sb.Binds = append(exec.SystemBinds(), toolchainBinds(env)...)
	sb.Binds = append(sb.Binds, s.cfg.Binds...)
	sb.Binds = append(sb.Binds, exec.Bind{Path: workspace, Writable: true})
	sb.Binds = dedupBinds(sb.Binds)
	return sandboxPlan{info: info, sb: sb}
}

// toolchainBinds shows the toolchains and caches that the command's
// environment names: read-only, except Go's build cache, which go build
// and go test must write (it is content-addressed: an entry is used only
// for the exact inputs that made it).
func toolchainBinds(env []string) []exec.Bind {
	writable := map[string]bool{"GOCACHE": true}
	var binds []exec.Bind
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GOROOT", "GOPATH", "GOMODCACHE", "GOCACHE", "CARGO_HOME", "RUSTUP_HOME":
			if filepath.IsAbs(v) {
				binds = append(binds, exec.Bind{Path: filepath.Clean(v), Writable: writable[k]})
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
