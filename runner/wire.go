package runner

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/policy"
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

// Wire registers exec, approvals and policy on h for a process serving
// the store under c.Home, and returns the cleanup that unmounts. serving
// says the process serves requests until stopped (a worker, `avfs
// serve`), not one command line: it then keeps sandbox inits alive
// between commands (SandboxConfig.KeepInits).
func Wire(c *config.Config, h *handler.Handler, log *slog.Logger, serving bool) (func() error, error) {
	pol, err := PolicyFrom(c)
	if err != nil {
		return nil, err
	}
	sb, err := SandboxFrom(c)
	if err != nil {
		return nil, err
	}
	sb.KeepInits = serving
	mounts := NewMounts(filepath.Join(c.Home, "mnt"), log)
	r := NewRunner(h.Store(), pol, mounts, Config{
		Timeout: c.Exec.Timeout, Grace: c.Exec.Grace, MaxOutput: c.Exec.MaxOutput, EnvAllow: c.Exec.EnvAllow,
		ApprovalTTL: c.Approvals.TTL, Worker: h.Worker(), Tracer: h.Tracer(), Meter: h.Meter(), Sandbox: sb,
		RunsDir: filepath.Join(c.Home, "runs"), MaxRuns: c.Exec.MaxRuns,
	}, log)
	r.Register(h)
	unobserve, err := observeMounts(h.Meter(), mounts)
	if err != nil {
		return nil, fmt.Errorf("mount metrics: %w", err)
	}
	return func() error { r.Close(); unobserve(); return mounts.Close() }, nil
}
