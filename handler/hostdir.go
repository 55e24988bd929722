package handler

import (
	"context"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func (h *Handler) importDir(ctx context.Context, req messages.Request, a messages.HostDirArgs) (any, error) {
	return h.hostDir(req.Op, a, func(dst string) (vault.HostDirStats, error) {
		return h.vault(req).ImportDir(ctx, a.HostDir, dst, meta(ctx, req))
	})
}

func (h *Handler) exportDir(ctx context.Context, req messages.Request, a messages.HostDirArgs) (any, error) {
	return h.hostDir(req.Op, a, func(src string) (vault.HostDirStats, error) {
		return h.vault(req).ExportDir(ctx, src, a.HostDir)
	})
}

// hostDir serves an op that names a host directory: in-process only, as
// vault.import's file is (transferArgs).
func (h *Handler) hostDir(op messages.Op, a messages.HostDirArgs, fn func(vaultPath string) (vault.HostDirStats, error)) (messages.BatchResult, error) {
	if err := h.transferArgs(op, a.HostDir, ""); err != nil {
		return messages.BatchResult{}, err
	}
	if a.HostDir == "" {
		return messages.BatchResult{}, messages.Errorf(messages.CodeInvalidArgument, "needs a host directory")
	}
	if a.Path == "" {
		a.Path = "/"
	}
	start := time.Now()
	st, err := fn(a.Path)
	if err != nil {
		return messages.BatchResult{}, err
	}
	return messages.BatchResult{Files: st.Files, Dirs: st.Dirs, Bytes: st.Bytes, DurationMS: float64(time.Since(start).Microseconds()) / 1000}, nil
}
