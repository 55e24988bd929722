package runner

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/exec"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/policy"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Config tunes command runs.
type Config struct {
	Timeout     time.Duration // default 300 s
	Grace       time.Duration // default 5 s
	MaxOutput   int           // per stream, default 1 MiB
	EnvAllow    []string      // host variables passed through; default exec.DefaultEnvAllow()
	ApprovalTTL time.Duration // default 1 h
	Worker      string        // id reported in envelopes
	Sandbox     SandboxConfig // how commands are confined; zero = namespaces, no network
	// Tracer records the steps of a run (policy, checkpoint.save, mount,
	// exec, changes) as children of the request's span; nil means none.
	Tracer trace.TracerProvider
	// Meter records exec outcomes, durations and running commands; nil
	// means none.
	Meter metric.MeterProvider
	// RunsDir keeps the records and logs of background runs (runs.go);
	// "" serves no run.* ops.
	RunsDir string
	MaxRuns int // concurrent background runs per vault; default DefaultMaxRuns
}

// Runner runs commands in vaults.
type Runner struct {
	store  *vault.Store
	policy *policy.Policy
	mounts *Mounts
	sbox   *sandboxes
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	m      execMetrics
	now    func() time.Time
	runs   *runs // nil without Config.RunsDir
}

// NewRunner returns a Runner. mounts may be shared with other runners of
// the same process.
func NewRunner(store *vault.Store, pol *policy.Policy, mounts *Mounts, cfg Config, log *slog.Logger) *Runner {
	if cfg.Timeout == 0 {
		cfg.Timeout = 300 * time.Second
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = 1 << 20
	}
	if len(cfg.EnvAllow) == 0 {
		cfg.EnvAllow = exec.DefaultEnvAllow()
	}
	if cfg.ApprovalTTL == 0 {
		cfg.ApprovalTTL = time.Hour
	}
	if cfg.Worker == "" {
		cfg.Worker = "local"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The mounts of other vaults are never a command's business.
	cfg.Sandbox.Hide = append(slices.Clone(cfg.Sandbox.Hide), mounts.root)
	if cfg.Sandbox.CacheDir == "" {
		cfg.Sandbox.CacheDir = filepath.Join(filepath.Dir(mounts.root), "cache")
	}
	r := &Runner{store: store, policy: pol, mounts: mounts, cfg: cfg, log: log, now: time.Now, sbox: newSandboxes(cfg.Sandbox),
		tracer: telemetry.Provider(cfg.Tracer).Tracer(scopeName), m: newExecMetrics(telemetry.MeterProvider(cfg.Meter))}
	if cfg.RunsDir != "" {
		r.runs = newRuns(r, cfg.RunsDir, cfg.MaxRuns)
	}
	return r
}

// Register plugs exec, approvals and policy checks into h, and keeps
// mounts coherent with changes made through h's other operations.
func (r *Runner) Register(h *handler.Handler) {
	handler.Register(h, messages.OpExec, r.Exec)
	handler.Register(h, messages.OpPolicyCheck, func(ctx context.Context, req messages.Request, a messages.PolicyCheckArgs) (any, error) {
		// Judged against a workspace as exec judges it, so that paths
		// outside the vault get the decision exec would give; without a
		// vault, against where one of the namespace would be mounted.
		d, err := r.decide(a.Argv, a.Shell, r.mounts.dir(req.Namespace, cmp.Or(req.Vault, "vault")))
		if err != nil {
			return nil, err
		}
		return messages.PolicyCheckResult{Decision: d}, nil
	})
	handler.Register(h, messages.OpApprovalList, r.approvalList)
	handler.Register(h, messages.OpApprovalShow, r.approvalShow)
	handler.Register(h, messages.OpApprovalGrant, r.approvalGrant)
	handler.Register(h, messages.OpApprovalDeny, r.approvalDeny)
	r.registerUserMounts(h)
	if r.runs != nil {
		r.runs.register(h)
	}
	h.OnChange(func(op messages.Op, ns, name string) {
		if op == messages.OpVaultDelete {
			if r.runs != nil {
				r.runs.stopVault(ns, name) // they hold the mount release waits for
			}
			r.mounts.release(ns, name)
			return
		}
		r.mounts.refresh(context.Background(), ns, name)
	})
}

func wireDecision(d policy.Decision) messages.Decision {
	cats := d.Categories
	if cats == nil {
		cats = []string{}
	}
	return messages.Decision{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason, Categories: cats,
		Network: d.Network, RequireSandbox: d.RequireSandbox}
}

// decide asks the policy about argv or a shell string. workspace is the
// host directory the command would run in ("" skips host-path checks).
func (r *Runner) decide(argv []string, shell, workspace string) (messages.Decision, error) {
	switch {
	case len(argv) > 0 && shell != "":
		return messages.Decision{}, messages.Errorf(messages.CodeInvalidArgument, "give a command (argv) or --shell, not both")
	case len(argv) > 0:
		return wireDecision(r.policy.Check(argv, workspace)), nil
	case shell != "":
		return wireDecision(r.policy.CheckShell(shell, workspace)), nil
	}
	return messages.Decision{}, messages.Errorf(messages.CodeInvalidArgument, "no command: pass -- ARGV... or --shell STRING")
}

func newID(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Exec runs one command and returns its envelope. A request id seen
// before returns the stored envelope of the first completed run.
func (r *Runner) Exec(ctx context.Context, req messages.Request, a messages.ExecArgs) (messages.Envelope, error) {
	return r.exec(ctx, req, a, false)
}

func (r *Runner) exec(ctx context.Context, req messages.Request, a messages.ExecArgs, approved bool) (messages.Envelope, error) {
	env := messages.Envelope{
		Schema: messages.EnvelopeSchema, RequestID: req.RequestID, Namespace: req.Namespace, Vault: req.Vault,
		Worker: r.cfg.Worker, Attempt: handler.Attempt(ctx), TraceID: telemetry.TraceID(ctx), Command: a.Argv, Cwd: "/", StartedAt: r.now().UTC().Format(time.RFC3339Nano),
	}
	if env.Command != nil && len(env.Command) == 0 {
		env.Command = nil
	}
	if a.Shell != "" {
		s := a.Shell
		env.Shell = &s
	}
	// A granted run replaces the approval_required answer stored under
	// the same id, so only the first, unapproved run looks it up.
	key := vault.RequestKey{Namespace: req.Namespace, Vault: req.Vault, ID: req.RequestID, Op: string(messages.OpExec), ArgsHash: handler.HashArgs(a)}
	if req.RequestID != "" && !approved {
		if prev, ok, err := r.stored(ctx, key); err != nil || ok {
			return prev, err
		}
	}
	// Validate everything before anything happens.
	if a.Cwd != "" {
		env.Cwd = a.Cwd
	}
	cwdComps, err := vault.CleanPath(env.Cwd)
	if err != nil {
		return env, err
	}
	env.Cwd = vault.JoinPath(cwdComps)
	timeout := r.cfg.Timeout
	if a.Timeout != "" {
		if timeout, err = time.ParseDuration(a.Timeout); err != nil || timeout <= 0 {
			return env, messages.Errorf(messages.CodeInvalidArgument, "timeout %q: want a positive duration like 30s", a.Timeout)
		}
	}
	mode := a.Checkpoint
	if mode == "" {
		mode = "auto"
	}
	if mode != "auto" && mode != "always" && mode != "never" {
		return env, messages.Errorf(messages.CodeInvalidArgument, "checkpoint %q: want auto, always or never", mode)
	}
	for k := range a.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return env, messages.Errorf(messages.CodeInvalidArgument, "env name %q", k)
		}
	}
	limits, err := r.sbox.commandLimits(req.Namespace, req.Vault, a)
	if err != nil {
		return env, err
	}
	v := r.store.Vault(req.Namespace, req.Vault)
	st, err := v.Stat(ctx, env.Cwd)
	if err != nil {
		return env, err
	}
	if st.Kind != vault.KindDir {
		return env, fmt.Errorf("cwd %s: %w", env.Cwd, vault.ErrNotDir)
	}
	m := vault.Meta{Actor: req.Actor, RequestID: req.RequestID, TraceID: env.TraceID}

	// The policy decides before the vault is mounted: a denied or held
	// command costs no mount. It judges paths against the mount's
	// directory, which is known before the mount exists, without touching
	// it (policy's paths are strings).
	root := r.mounts.dir(req.Namespace, req.Vault)
	_, span := r.tracer.Start(ctx, "policy")
	env.Decision, err = r.decide(a.Argv, a.Shell, root)
	span.SetAttributes(attribute.String("avfs.decision", env.Decision.Action), attribute.String("avfs.rule", env.Decision.Rule))
	telemetry.End(span, err)
	if err != nil {
		return env, err
	}
	details := map[string]any{"command": a.Argv, "shell": a.Shell, "decision": env.Decision.Action, "rule": env.Decision.Rule}
	grantedBy := ""
	switch {
	case env.Decision.Network && approved:
		grantedBy = "approval"
	case env.Decision.Network:
		grantedBy = "rule"
	}
	cmdEnv := r.environ(root, a.Env)
	// The directories a sandbox shows come from the worker's environment
	// only: an agent's --env GOPATH=<another tenant's mount> must not
	// bind it.
	plan, err := r.sbox.plan(req.Namespace, req.Vault, root, cmdEnv, r.environ(root, nil), grantedBy, limits)
	if err != nil {
		return env, err
	}
	details["sandbox"] = plan.info.Mode
	if env.Decision.RequireSandbox && plan.sb == nil {
		env.Decision.Action = string(policy.Deny)
		env.Decision.Reason = "a rule requires a sandbox, and this vault's commands run without one (sandbox mode none)"
		details["decision"], details["reason"] = env.Decision.Action, env.Decision.Reason
	}
	switch policy.Action(env.Decision.Action) {
	case policy.Deny:
		env.Status = messages.StatusDenied
		v.Record(ctx, "exec.denied", env.Cwd, details, m)
		r.m.finished(ctx, env.Status, 0, false)
		return env, nil
	case policy.RequireApproval:
		if !approved {
			id, err := r.hold(ctx, req, a, env.Decision)
			if err != nil {
				return env, err
			}
			env.Status, env.ApprovalID = messages.StatusApprovalRequired, &id
			r.m.finished(ctx, env.Status, 0, false)
			details["approval_id"] = id
			v.Record(ctx, "exec.approval_required", env.Cwd, details, m)
			// A retry of this request id answers with the same approval
			// instead of holding the command twice.
			if req.RequestID != "" {
				b, _ := json.Marshal(env)
				if err := r.store.StoreResult(ctx, key, b); err != nil {
					return env, err
				}
			}
			return env, nil
		}
	}

	mctx, span := r.tracer.Start(ctx, "mount")
	am, release, err := r.mounts.acquire(mctx, v)
	telemetry.End(span, err)
	if err != nil {
		return env, err
	}
	defer release()

	if mode == "always" || (mode == "auto" && policy.Action(env.Decision.Action) != policy.Allow) {
		name := fmt.Sprintf("auto-%s-%s", r.now().UTC().Format("20060102T150405Z"), newID("")[:4])
		// No request id: the request log keeps it for the exec's result.
		// The span context is kept so that a restore links back here.
		sctx, span := r.tracer.Start(ctx, "checkpoint.save", trace.WithAttributes(attribute.Bool("avfs.auto", true)))
		_, err := v.SaveCheckpoint(sctx, name, "before: "+a.CommandLine(), true,
			vault.Meta{Actor: req.Actor, TraceID: env.TraceID, Trace: telemetry.Serialize(sctx)})
		telemetry.End(span, err)
		if err != nil {
			return env, err
		}
		r.m.checkpoints.Add(ctx, 1, metric.WithAttributes(attribute.Bool("auto", true)))
		env.Checkpoint = &name
	}
	// The change summary compares with a hidden snapshot even when an
	// auto-checkpoint was taken: retention may prune that checkpoint
	// while the command runs (another exec of the vault saving one).
	before, err := v.Snapshot(ctx)
	if err != nil {
		return env, err
	}
	defer v.DropSnapshot(context.WithoutCancel(ctx), before)

	spec := exec.Spec{
		Argv: a.Argv, Shell: a.Shell, Dir: filepath.Join(root, filepath.FromSlash(env.Cwd)),
		Env: plan.env, Timeout: timeout, Grace: r.cfg.Grace, MaxOutput: r.cfg.MaxOutput, EnterDir: true, Sandbox: plan.sb,
	}
	env.Sandbox = &plan.info
	if a.Stdin != nil {
		spec.Stdin = strings.NewReader(string(a.Stdin))
	}
	if fn := outputFrom(ctx); fn != nil {
		spec.Stdout, spec.Stderr = streamWriter{fn, messages.StreamStdout}, streamWriter{fn, messages.StreamStderr}
	}
	ectx, span := r.tracer.Start(ctx, "exec")
	r.m.running.Add(ctx, 1)
	res, runErr := exec.Run(ectx, spec)
	r.m.running.Add(ctx, -1)
	if res.ExitCode != nil {
		span.SetAttributes(attribute.Int("avfs.exit_code", *res.ExitCode))
	}
	span.SetAttributes(attribute.Bool("avfs.timed_out", res.TimedOut))
	telemetry.End(span, runErr)
	env.StartedAt = res.StartedAt.UTC().Format(time.RFC3339Nano)
	env.DurationMS = res.Duration.Milliseconds()
	env.ExitCode, env.TimedOut = res.ExitCode, res.TimedOut
	if res.Signal != "" {
		s := res.Signal
		env.Signal = &s
	}
	env.Stdout, env.Stderr = string(res.Stdout), string(res.Stderr)
	env.StdoutBytes, env.StderrBytes = res.StdoutBytes, res.StderrBytes
	env.StdoutTruncated, env.StderrTruncated = res.StdoutTruncated, res.StderrTruncated
	env.Sandbox.Limit = res.Limit
	for _, rf := range res.Refused {
		env.Sandbox.Refused = append(env.Sandbox.Refused, messages.SandboxRefusal{Kind: rf.Kind, Call: rf.Call, Target: rf.Target, Count: rf.Count})
	}
	switch {
	case runErr != nil:
		env.Status, env.Error = messages.StatusFailedToStart, runErr.Error()
	case res.Limit == exec.LimitMemory && res.Signal == "SIGKILL":
		env.Status = messages.StatusLimitExceeded
	case res.TimedOut:
		env.Status = messages.StatusTimedOut
	case res.Canceled:
		env.Status = messages.StatusCanceled
	default:
		env.Status = messages.StatusCompleted
	}
	r.m.finished(ctx, env.Status, res.Duration.Seconds(), runErr == nil)
	// Everything the command wrote must be in the vault before comparing.
	ctx, span = r.tracer.Start(ctx, "changes")
	defer span.End()
	if err := am.mnt.Sync(context.WithoutCancel(ctx)); err != nil {
		r.log.WarnContext(ctx, "sync mount after exec", telemetry.LogKeyVault, req.Vault, telemetry.LogKeyErr, err)
	}
	ch, err := v.Diff(context.WithoutCancel(ctx), before, "")
	if err != nil {
		telemetry.Fail(span, err)
		return env, err
	}
	sum := handler.Changes(ch)
	env.Changes = &sum
	details["status"], details["exit_code"], details["checkpoint"] = env.Status, env.ExitCode, env.Checkpoint
	details["added"], details["modified"], details["deleted"] = len(ch.Added), len(ch.Modified), len(ch.Deleted)
	details["network"], details["limit"] = plan.info.Network, res.Limit
	if len(env.Sandbox.Refused) > 0 {
		details["refused"] = env.Sandbox.Refused
	}
	v.Record(context.WithoutCancel(ctx), "exec.run", env.Cwd, details, m)
	if req.RequestID != "" && env.Status != messages.StatusCanceled {
		b, _ := json.Marshal(env)
		store := r.store.StoreResult
		if approved {
			store = r.store.ReplaceResult // over the approval_required answer
		}
		if err := store(context.WithoutCancel(ctx), key, b); err != nil && !errors.Is(err, vault.ErrConflict) {
			return env, err
		}
	}
	return env, nil
}

// stored returns the envelope recorded for request k.
func (r *Runner) stored(ctx context.Context, k vault.RequestKey) (messages.Envelope, bool, error) {
	b, ok, err := r.store.StoredResult(ctx, k)
	if err != nil || !ok {
		return messages.Envelope{}, false, err
	}
	var env messages.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return env, false, err
	}
	return env, true, nil
}

// environ is the environment of a command: allow-listed host variables,
// HOME inside the vault, the host's toolchain homes (so rustup, cargo and
// go find their toolchains and caches although HOME moved), then --env.
// A sandbox replaces GOCACHE with the namespace's own (namespaceCaches).
func (r *Runner) environ(root string, set map[string]string) []string {
	host := os.Environ()
	over := map[string]string{"HOME": root}
	if h, err := os.UserHomeDir(); err == nil {
		defaults := map[string]string{
			"CARGO_HOME": filepath.Join(h, ".cargo"), "RUSTUP_HOME": filepath.Join(h, ".rustup"),
			"GOPATH": filepath.Join(h, "go"), "GOMODCACHE": filepath.Join(h, "go", "pkg", "mod"),
		}
		if c, err := os.UserCacheDir(); err == nil {
			defaults["GOCACHE"] = filepath.Join(c, "go-build")
		}
		for k, val := range defaults {
			if os.Getenv(k) == "" {
				over[k] = val
			}
		}
	}
	for k, val := range set {
		over[k] = val
	}
	return exec.BuildEnv(r.cfg.EnvAllow, host, over)
}
