package runner

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/policy"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// PolicyFrom builds the policy of a configuration: its rules if it has
// any, else the built-in set.
func PolicyFrom(c *config.Config) (*policy.Policy, error) {
	if len(c.Policy.Rules) == 0 && (c.Policy.Fallback == "" || c.Policy.Fallback == string(policy.AllowWithCheckpoint)) {
		return policy.Default(), nil
	}
	rules := policy.DefaultRules()
	if len(c.Policy.Rules) > 0 {
		var err error
		if rules, err = policy.DecodeRules(c.Policy.Rules); err != nil {
			return nil, err
		}
	}
	fb, err := policy.ParseAction(c.Policy.Fallback)
	if err != nil {
		return nil, fmt.Errorf("policy fallback: %w", err)
	}
	return policy.New(rules, fb)
}

// Parts are what Wire plugs a runner into, handed over by the
// composition root (package node), which owns them.
type Parts struct {
	Store   *vault.Store
	Handler *handler.Handler
	// Worker is the id reported in envelopes ("local" in-process).
	Worker string
	Logger *slog.Logger
	Tracer trace.TracerProvider // nil: no tracing
	Meter  metric.MeterProvider // nil: no metrics
	// Serving says the process serves requests until stopped (a
	// worker, `avfs serve`), not one command line: it then keeps
	// sandbox inits alive between commands (SandboxConfig.KeepInits).
	Serving bool
	// MountSync, if not nil, runs after every fsync through a mount
	// asked for with mount.start has committed to the store, before the
	// fsync returns (mount.Options.OnSync); its error fails the fsync
	// with EIO. A fleet worker sets it (through the node) so that what
	// an fsync committed is held by the fleet when it returns. Exec's
	// mounts never run it.
	MountSync func(ctx context.Context, ns, vault string) error
}

// Wire registers exec, approvals and policy on p.Handler for a process
// serving p.Store under c.Home, and returns the cleanup that unmounts.
func Wire(c *config.Config, p Parts) (func() error, error) {
	pol, err := PolicyFrom(c)
	if err != nil {
		return nil, err
	}
	sb, err := SandboxFrom(c)
	if err != nil {
		return nil, err
	}
	sb.KeepInits = p.Serving
	var backing *tree.Backing
	if c.Mount.Passthrough {
		if backing, err = tree.OpenBacking(c.ContentCacheDir(), c.Mount.ContentCacheMB<<20); err != nil {
			return nil, err
		}
	}
	mounts := NewMounts(filepath.Join(c.Home, "mnt"), p.Logger, backing)
	mounts.userSync = p.MountSync
	mounts.wakeHere = c.Mount.WakeHere
	r := NewRunner(p.Store, pol, mounts, Config{
		Timeout: c.Exec.Timeout, Grace: c.Exec.Grace, MaxOutput: c.Exec.MaxOutput, EnvAllow: c.Exec.EnvAllow,
		ApprovalTTL: c.Approvals.TTL, Worker: p.Worker, Tracer: p.Tracer, Meter: p.Meter, Sandbox: sb,
		RunsDir: filepath.Join(c.Home, "runs"), MaxRuns: c.Exec.MaxRuns,
	}, p.Logger)
	r.Register(p.Handler)
	unobserve, err := observeMounts(telemetry.MeterProvider(p.Meter), mounts)
	if err != nil {
		return nil, fmt.Errorf("mount metrics: %w", err)
	}
	return func() error { r.Close(); unobserve(); return mounts.Close() }, nil
}
