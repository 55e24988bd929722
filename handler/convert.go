package handler

import (
	"fmt"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// VaultInfo is a vault's Info in its wire form, for the layers that
// describe vaults outside a request (a worker's vault catalog).
func VaultInfo(in vault.Info) messages.VaultInfo { return vaultInfo(in) }

func vaultInfo(in vault.Info) messages.VaultInfo {
	out := messages.VaultInfo{
		Name: in.Name, Namespace: in.Namespace, CreatedAt: rfc3339(in.CreatedAt),
		Files: in.Files, Dirs: in.Dirs, Bytes: in.Bytes,
		Checkpoints: in.Checkpoints, Parent: in.Parent, Quota: quotaArgs(in.Quota), Worker: in.Worker,
	}
	if in.StoredKnown {
		sb := in.StoredBytes
		out.StoredBytes = &sb
	}
	if in.ExpiresAt != nil {
		at := rfc3339(*in.ExpiresAt)
		out.ExpiresAt = &at
	}
	return out
}

func quotaArgs(q vault.Quota) messages.QuotaArgs {
	return messages.QuotaArgs{MaxSizeMB: q.MaxSizeMB, MaxFiles: q.MaxFiles, MaxFileSizeMB: q.MaxFileSizeMB}
}

func quota(q messages.QuotaArgs) vault.Quota {
	return vault.Quota{MaxSizeMB: q.MaxSizeMB, MaxFiles: q.MaxFiles, MaxFileSizeMB: q.MaxFileSizeMB}
}

func entry(e vault.Entry) messages.Entry {
	return messages.Entry{
		Name: e.Name, Path: e.Path, Type: e.Kind.String(), Size: e.Size,
		Mode: fmt.Sprintf("%04o", vault.ModeBits(e.Mode)), Mtime: rfc3339(e.Mtime), Ino: e.Ino, Target: e.Target, Nlink: e.Nlink,
	}
}

func checkpoint(c vault.Checkpoint) messages.Checkpoint {
	return messages.Checkpoint{Name: c.Name, CreatedAt: rfc3339(c.CreatedAt), Files: c.Files, Bytes: c.Bytes, Message: c.Message, Auto: c.Auto}
}

// Changes converts a vault change summary to its wire form.
func Changes(c vault.Changes) messages.ChangeSummary {
	conv := func(l []vault.Change) []messages.Change {
		out := make([]messages.Change, len(l))
		for i, x := range l {
			out[i] = messages.Change{Path: x.Path, Type: x.Type, Size: x.Size}
		}
		return out
	}
	return messages.ChangeSummary{Added: conv(c.Added), Modified: conv(c.Modified), Deleted: conv(c.Deleted),
		BytesAdded: c.BytesAdded, BytesRemoved: c.BytesRemoved}
}

func auditEvent(e vault.Event) messages.AuditEvent {
	return messages.AuditEvent{ID: e.ID, Time: rfc3339(e.Time), Namespace: e.Namespace, Vault: e.Vault, Action: e.Action,
		Path: e.Path, Actor: e.Actor, RequestID: e.RequestID, TraceID: e.TraceID, Details: e.Details}
}
