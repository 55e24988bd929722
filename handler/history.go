package handler

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/avfs/avfs/internal/textdiff"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func (h *Handler) historyOps() {
	h.ops[messages.OpHistoryLog] = bind(h.historyLog)
	h.ops[messages.OpHistoryCat] = bind(h.historyCat)
	h.ops[messages.OpHistoryCheckout] = bind(h.historyCheckout)
	h.ops[messages.OpHistoryRevert] = bind(h.historyRevert)
	h.ops[messages.OpHistoryDiff] = bind(h.historyDiff)
	h.ops[messages.OpHistoryPrune] = bind(h.historyPrune)
	h.ops[messages.OpHistoryGet] = bind(h.historyGet)
	h.ops[messages.OpHistorySet] = bind(h.historySet)
}

func fileVersion(v vault.Version) messages.FileVersion {
	return messages.FileVersion{Version: v.Version, Size: v.Size, CreatedAt: rfc3339(v.CreatedAt), Hash: v.Hash}
}

func (h *Handler) historyLog(ctx context.Context, req messages.Request, a messages.HistoryLogArgs) (messages.HistoryLogResult, error) {
	if a.Limit < 0 {
		return messages.HistoryLogResult{}, messages.Errorf(messages.CodeInvalidArgument, "limit %d: want 0 (all) or more", a.Limit)
	}
	vs, err := h.vault(req).Versions(ctx, a.Path, a.Limit)
	if err != nil {
		return messages.HistoryLogResult{}, err
	}
	p, _ := cleanPath(a.Path)
	out := messages.HistoryLogResult{Path: p, Versions: make([]messages.FileVersion, len(vs))}
	for i, v := range vs {
		out.Versions[i] = fileVersion(v)
	}
	return out, nil
}

func cleanPath(p string) (string, error) {
	comps, err := vault.CleanPath(p)
	return vault.JoinPath(comps), err
}

func catResult(p string, data []byte) messages.CatResult {
	out := messages.CatResult{Path: p, Size: int64(len(data))}
	if utf8.Valid(data) {
		s := string(data)
		out.Content = &s
	} else {
		s := base64.StdEncoding.EncodeToString(data)
		out.ContentBase64 = &s
	}
	return out
}

func (h *Handler) historyCat(ctx context.Context, req messages.Request, a messages.HistoryVersionArgs) (messages.HistoryCatResult, error) {
	data, v, err := h.vault(req).ReadVersion(ctx, a.Path, a.Version)
	if err != nil {
		return messages.HistoryCatResult{}, err
	}
	p, _ := cleanPath(a.Path)
	return messages.HistoryCatResult{CatResult: catResult(p, data), Version: v.Version}, nil
}

func (h *Handler) historyCheckout(ctx context.Context, req messages.Request, a messages.HistoryVersionArgs) (messages.HistoryWriteResult, error) {
	if a.Version <= 0 {
		return messages.HistoryWriteResult{}, messages.Errorf(messages.CodeInvalidArgument, "checkout needs a version (-v N)")
	}
	w, v, err := h.vault(req).Checkout(ctx, a.Path, a.Version, meta(ctx, req))
	if err != nil {
		return messages.HistoryWriteResult{}, err
	}
	return messages.HistoryWriteResult{Path: w.Path, Size: w.Size, Version: v.Version}, nil
}

func (h *Handler) historyRevert(ctx context.Context, req messages.Request, a messages.HistoryVersionArgs) (messages.HistoryWriteResult, error) {
	w, v, err := h.vault(req).Revert(ctx, a.Path, meta(ctx, req))
	if err != nil {
		return messages.HistoryWriteResult{}, err
	}
	return messages.HistoryWriteResult{Path: w.Path, Size: w.Size, Version: v.Version}, nil
}

func (h *Handler) historyDiff(ctx context.Context, req messages.Request, a messages.HistoryDiffArgs) (messages.HistoryDiffResult, error) {
	p2, v1 := a.Path2, a.V1
	if p2 == "" {
		p2 = a.Path
		if a.V1 == 0 && a.V2 == 0 {
			v1 = -1 // the version before the latest
		}
	}
	var out messages.HistoryDiffResult
	err := h.vault(req).View(ctx, func(tx *vault.Tx) error {
		d1, l1, err := side(tx, a.Path, v1)
		if err != nil {
			return err
		}
		d2, l2, err := side(tx, p2, a.V2)
		if err != nil {
			return err
		}
		out.From, out.To = l1, l2
		out.Equal = string(d1) == string(d2)
		if textdiff.Binary(d1) || textdiff.Binary(d2) {
			out.Binary = true
			return nil
		}
		out.Diff, err = textdiff.Unified(l1, l2, d1, d2)
		if errors.Is(err, textdiff.ErrTooLarge) {
			return messages.Errorf(messages.CodeInvalidArgument, "diff %s %s: %v", l1, l2, err)
		}
		return err
	})
	return out, err
}

// side reads one side of a diff: the current file (n 0), version n, or
// with n -1 the version before the latest; with a label for the header.
func side(tx *vault.Tx, p string, n int64) ([]byte, string, error) {
	if n == 0 {
		data, e, err := tx.ReadFile(p)
		return data, e.Path, err
	}
	if n == -1 {
		vs, err := tx.Versions(p, 2)
		if err != nil {
			return nil, "", err
		}
		if len(vs) < 2 {
			return nil, "", messages.Errorf(messages.CodeNotFound, "%s has no earlier version to diff against (give --v1 N or a second path)", p)
		}
		n = vs[0].Version
	}
	data, v, err := tx.ReadVersion(p, n)
	if err != nil {
		return nil, "", err
	}
	c, _ := cleanPath(p)
	return data, c + "@v" + strconv.FormatInt(v.Version, 10), nil
}

func (h *Handler) historyPrune(ctx context.Context, req messages.Request, a messages.HistoryPruneArgs) (messages.HistoryPruneResult, error) {
	age, err := duration("older_than", a.OlderThan)
	if err != nil {
		return messages.HistoryPruneResult{}, err
	}
	r, err := h.vault(req).Prune(ctx, a.Keep, age, a.DryRun, meta(ctx, req))
	if err != nil {
		return messages.HistoryPruneResult{}, err
	}
	return messages.HistoryPruneResult{Versions: r.Versions, Paths: r.Paths, DryRun: r.DryRun}, nil
}

func duration(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, messages.Errorf(messages.CodeInvalidArgument, "%s %q: want a duration like 72h or 30m", name, s)
	}
	return d, nil
}

func historySettings(hs vault.HistorySettings) messages.HistoryResult {
	return messages.HistoryResult{History: messages.HistorySettings{Keep: hs.Keep, MaxAge: hs.MaxAge.String(), Coalesce: hs.Coalesce.String()}}
}

func (h *Handler) historyGet(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	hs, err := h.vault(req).History(ctx)
	if err != nil {
		return nil, err
	}
	return historySettings(hs), nil
}

func (h *Handler) historySet(ctx context.Context, req messages.Request, a messages.HistorySetArgs) (any, error) {
	age, err := duration("max_age", a.MaxAge)
	if err != nil {
		return nil, err
	}
	co, err := duration("coalesce", a.Coalesce)
	if err != nil {
		return nil, err
	}
	hs, err := h.vault(req).SetHistory(ctx, vault.HistorySettings{Keep: a.Keep, MaxAge: age, Coalesce: co}, meta(ctx, req))
	if err != nil {
		return nil, err
	}
	return historySettings(hs), nil
}
