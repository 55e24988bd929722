package handler

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func (h *Handler) maintOps() {
	h.ops[messages.OpVaultSettings] = bind(h.vaultSettings)
	h.ops[messages.OpVaultSet] = bind(h.vaultSet)
	h.ops[messages.OpStats] = bind(h.stats)
	h.ops[messages.OpCompact] = bind(h.compact)
	h.ops[messages.OpMaintain] = bind(h.maintain)
	h.ops[messages.OpAuditClear] = bind(h.auditClear)
}

// SweepOwned says which expired vaults maint.run may delete here: in
// process, all (the default); a fleet worker passes nil, as it deletes
// its expired vaults through the fleet, so that the delete reaches every
// copy. Call it before serving.
func (h *Handler) SweepOwned(fn func(vault.Expired) bool) { h.sweep = fn }

// Settings converts a vault's effective settings.
func Settings(e vault.Effective) messages.VaultSettings {
	out := messages.VaultSettings{AutoKeep: e.AutoKeep, AutoMaxAge: e.AutoMaxAge.String(), QuotaMode: e.QuotaMode, Replication: e.Replication, Inherited: []string{}}
	if e.ExpiresAt != nil {
		at := rfc3339(*e.ExpiresAt)
		out.ExpiresAt = &at
	}
	if e.Own.AutoKeep == nil {
		out.Inherited = append(out.Inherited, "auto_keep")
	}
	if e.Own.AutoMaxAge == nil {
		out.Inherited = append(out.Inherited, "auto_max_age")
	}
	if e.Own.QuotaMode == "" {
		out.Inherited = append(out.Inherited, "quota_mode")
	}
	if e.Own.Replication == "" {
		out.Inherited = append(out.Inherited, "replication")
	}
	return out
}

func (h *Handler) vaultSettings(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	e, err := h.vault(req).Settings(ctx)
	if err != nil {
		return nil, err
	}
	return messages.VaultSettingsResult{Settings: Settings(e)}, nil
}

func (h *Handler) vaultSet(ctx context.Context, req messages.Request, a messages.VaultSetArgs) (any, error) {
	v := h.vault(req)
	e, err := v.Settings(ctx)
	if err != nil {
		return nil, err
	}
	st := e.Own
	def := a.Value == "default"
	switch a.Key {
	case "auto_keep":
		st.AutoKeep = nil
		if !def {
			n, err := strconv.ParseInt(a.Value, 10, 64)
			if err != nil || n < 0 {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "auto_keep %q: want a whole number (0: keep all) or default", a.Value)
			}
			st.AutoKeep = &n
		}
	case "auto_max_age":
		st.AutoMaxAge = nil
		if !def {
			d, err := time.ParseDuration(a.Value)
			if err != nil || d < 0 {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "auto_max_age %q: want a duration like 72h (0: no limit) or default", a.Value)
			}
			st.AutoMaxAge = &d
		}
	case "quota_mode":
		st.QuotaMode = ""
		if !def {
			if a.Value == "" || vault.ValidQuotaMode(a.Value) != nil {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "quota_mode %q: want logical, unique or default", a.Value)
			}
			st.QuotaMode = a.Value
		}
	case "replication":
		st.Replication = ""
		if !def {
			if a.Value == "" || vault.ValidReplication(a.Value) != nil {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "replication %q: want sync, async, checkpoint or default", a.Value)
			}
			st.Replication = a.Value
		}
	case "ttl":
		st.ExpiresAt = nil
		if a.Value != "none" {
			d, err := time.ParseDuration(a.Value)
			if err != nil || d <= 0 {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "ttl %q: want a duration from now like 2h, or none", a.Value)
			}
			at := time.Now().Add(d).UTC()
			st.ExpiresAt = &at
		}
	default:
		return nil, messages.Errorf(messages.CodeInvalidArgument, "vault setting %q: want auto_keep, auto_max_age, quota_mode, replication or ttl", a.Key)
	}
	e, err = v.SetSettings(ctx, st, meta(ctx, req))
	if err != nil {
		return nil, err
	}
	return messages.VaultSettingsResult{Settings: Settings(e)}, nil
}

func gcCounts(g vault.GCStats) messages.GCCounts {
	return messages.GCCounts{Nodes: g.Nodes, Chunks: g.Chunks, Bytes: g.Bytes}
}

// StoreStats converts a store's figures.
func StoreStats(s vault.StoreStats) messages.StoreStats {
	return messages.StoreStats{Vaults: s.Vaults, Files: s.Files, Dirs: s.Dirs, Nodes: s.Nodes, Versions: s.Versions, Chunks: s.Chunks, ChunkBytes: s.ChunkBytes,
		LogicalBytes: s.LogicalBytes, AuditEvents: s.AuditEvents, Orphans: gcCounts(s.Orphans), DBBytes: s.DBBytes, WALBytes: s.WALBytes, FreeBytes: s.FreeBytes}
}

func (h *Handler) stats(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	vs, err := h.vault(req).Stats(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := h.store.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return messages.StatsResult{Vault: &messages.VaultStats{Namespace: vs.Namespace, Name: vs.Name, Files: vs.Files, Dirs: vs.Dirs,
		Checkpoints: vs.Checkpoints, AutoCheckpoints: vs.AutoCheckpoints, Versions: vs.Versions, LogicalBytes: vs.LogicalBytes,
		UniqueBytes: vs.UniqueBytes, AuditEvents: vs.AuditEvents}, Store: StoreStats(ss)}, nil
}

// CompactResult converts what Compact did.
func CompactResult(r vault.CompactResult) messages.CompactResult {
	return messages.CompactResult{BeforeBytes: r.BeforeBytes, AfterBytes: r.AfterBytes, FreedBytes: r.FreedBytes}
}

func (h *Handler) compact(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	if _, err := h.vault(req).Exists(ctx); err != nil {
		return nil, err
	}
	r, err := h.store.Compact(ctx)
	if err != nil {
		return nil, err
	}
	return CompactResult(r), nil
}

// Maintain runs vault.Store.Maintain on the handler's store, with
// progress reported to progress (nil: none).
func (h *Handler) Maintain(ctx context.Context, m vault.Meta, progress func(step string, done, total int)) (messages.MaintainResult, error) {
	start := time.Now()
	// Its changes span every vault of the store: none of them logs the
	// request (a repeated maint.run just runs again, changing nothing).
	m.RequestID, m.ArgsHash = "", ""
	r, err := h.store.Maintain(ctx, vault.MaintainOptions{Sweep: h.sweep, Progress: progress}, m)
	if err != nil {
		return messages.MaintainResult{}, err
	}
	out := messages.MaintainResult{Vaults: r.Vaults, Versions: r.Versions, AutoCheckpoints: r.AutoCheckpoints, Expired: r.Expired,
		Freed: gcCounts(r.Freed), Compact: CompactResult(r.Compact), DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	if out.Expired == nil {
		out.Expired = []string{}
	}
	for _, name := range r.Expired {
		if ns, v, ok := strings.Cut(name, "/"); ok {
			h.Changed(messages.OpVaultDelete, ns, v)
		}
	}
	return out, nil
}

func (h *Handler) maintain(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	if _, err := h.vault(req).Exists(ctx); err != nil {
		return nil, err
	}
	return h.Maintain(ctx, meta(ctx, req), nil)
}

func (h *Handler) auditClear(ctx context.Context, req messages.Request, a messages.AuditClearArgs) (any, error) {
	if a.Before == "" {
		return nil, messages.Errorf(messages.CodeInvalidArgument, "audit clear needs --before TIME or DURATION (720h: older than 30 days)")
	}
	before, err := ParseSince(a.Before, time.Now())
	if err != nil {
		return nil, messages.Errorf(messages.CodeInvalidArgument, "before %q: want an RFC 3339 time or a duration like 720h", a.Before)
	}
	n, err := h.vault(req).AuditClear(ctx, before, a.DryRun, meta(ctx, req))
	if err != nil {
		return nil, err
	}
	return messages.AuditClearResult{Events: n, Before: rfc3339(before), DryRun: a.DryRun}, nil
}
