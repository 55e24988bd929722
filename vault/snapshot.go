package vault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Snapshots are hidden checkpoints: a "before" state that exec compares
// the tree against, kept as a checkpoint row so that GC cannot free its
// nodes while a command runs. Their names start with '.', which
// ValidCheckpointName rejects, so they never collide with, or show among, the
// checkpoints users name.

// Snapshot freezes the current tree and returns the snapshot's name, for
// Diff and DropSnapshot.
func (v *Vault) Snapshot(ctx context.Context) (string, error) {
	var b [6]byte
	rand.Read(b[:])
	name := ".snap-" + hex.EncodeToString(b[:])
	_, _, err := write(ctx, v.s, v.namespace, v.name, Meta{}, "snapshot", true, func(t *Tx) (struct{}, error) {
		_, err := t.exec(`INSERT INTO checkpoints(vault, name, root, created_at, files, dirs, bytes, next_ino) VALUES(?,?,?,?,?,?,?,?)`,
			t.v.id, name, t.v.root, t.now, t.v.files, t.v.dirs, t.v.bytes, t.v.nextIno)
		if err != nil {
			return struct{}{}, fmt.Errorf("snapshot: %w", err)
		}
		t.v.epoch++
		return struct{}{}, nil
	})
	return name, err
}

// DropSnapshot forgets a snapshot. What only it referenced is freed by
// the next GC.
func (v *Vault) DropSnapshot(ctx context.Context, name string) error {
	_, _, err := write(ctx, v.s, v.namespace, v.name, Meta{}, "snapshot.drop", true, func(t *Tx) (struct{}, error) {
		_, err := t.exec(`DELETE FROM checkpoints WHERE vault=? AND name=?`, t.v.id, name)
		return struct{}{}, err
	})
	return err
}

// Record writes an audit event for something that happened outside a
// vault transaction (a command run, a policy decision).
func (v *Vault) Record(ctx context.Context, action, p string, details map[string]any, meta Meta) error {
	// The request id goes into the event only, not the request log: the
	// caller logs its own result under that id.
	_, _, err := write(ctx, v.s, v.namespace, v.name, Meta{Actor: meta.Actor, TraceID: meta.TraceID}, "audit", true, func(t *Tx) (struct{}, error) {
		t.meta.RequestID = meta.RequestID
		t.audit(action, p, details)
		return struct{}{}, nil
	})
	return err
}
