package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/avfs/avfs/internal/textdiff"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func (h *Handler) vaultMerge(ctx context.Context, req messages.Request, a messages.VaultMergeArgs) (messages.MergeResult, error) {
	return h.MergeAs(ctx, req, a, "")
}

// MergeAs serves vault.merge with local, this store's copy of the fork
// under another name ("" = the fork's own): a fleet worker merges a fork
// another worker owns from a copy it pulled. Results name the fork.
func (h *Handler) MergeAs(ctx context.Context, req messages.Request, a messages.VaultMergeArgs, local string) (messages.MergeResult, error) {
	if a.Fork == "" {
		return messages.MergeResult{}, messages.Errorf(messages.CodeInvalidArgument, "merge needs the fork to merge from")
	}
	if local == "" {
		local = a.Fork
	}
	res, err := h.vault(req).Merge(ctx, local, vault.MergeOptions{Paths: a.Paths, DryRun: a.DryRun, Strategy: a.Strategy, Text: textdiff.MergeText}, meta(ctx, req))
	var ce *vault.MergeConflictError
	if errors.As(err, &ce) {
		r := mergeResult(ce.Result)
		r.Fork = a.Fork
		return messages.MergeResult{}, &messages.Error{Code: messages.CodeMergeConflict, Message: strings.Replace(err.Error(), fmt.Sprintf("%q", local), fmt.Sprintf("%q", a.Fork), 1),
			Details: map[string]any{"into": r.Into, "fork": r.Fork, "fork_point": r.ForkPoint, "conflicts": r.Conflicts}}
	}
	if err != nil {
		return messages.MergeResult{}, err
	}
	r := mergeResult(res)
	r.Fork = a.Fork
	return r, nil
}

func mergeResult(r vault.MergeResult) messages.MergeResult {
	out := messages.MergeResult{Into: r.Into, Fork: r.Fork, ForkPoint: rfc3339(r.ForkPoint), DryRun: r.DryRun, Strategy: r.Strategy,
		Applied: r.Applied, Checkpoint: r.Checkpoint, Changes: Changes(r.Changes), Merged: r.Merged, Conflicts: make([]messages.MergeConflict, len(r.Conflicts))}
	if out.Merged == nil {
		out.Merged = []string{}
	}
	for i, c := range r.Conflicts {
		out.Conflicts[i] = messages.MergeConflict{Path: c.Path, Kind: c.Kind, Base: c.Base, Ours: c.Ours, Theirs: c.Theirs,
			BaseType: c.BaseType, OursType: c.OursType, TheirsType: c.TheirsType, Hunks: c.Hunks, Resolved: c.Resolved}
	}
	return out
}
