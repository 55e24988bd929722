package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Checkpoint describes a named, immutable state of a vault.
type Checkpoint struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Files     int64     `json:"files"`
	Dirs      int64     `json:"dirs"`
	Bytes     int64     `json:"bytes"`
	Message   string    `json:"message"`
	Auto      bool      `json:"auto"`
	// Trace is the serialized span context of the save (Meta.Trace).
	Trace string `json:"trace,omitempty"`

	root    int64
	nextIno int64
}

const checkpointCols = `name, created_at, files, dirs, bytes, message, auto, trace, root, next_ino`

func scanCheckpoint(sc interface{ Scan(...any) error }) (Checkpoint, error) {
	var c Checkpoint
	var at int64
	err := sc.Scan(&c.Name, &at, &c.Files, &c.Dirs, &c.Bytes, &c.Message, &c.Auto, &c.Trace, &c.root, &c.nextIno)
	c.CreatedAt = time.Unix(0, at).UTC()
	return c, err
}

func (t *Tx) checkpoint(name string) (Checkpoint, error) {
	c, err := scanCheckpoint(t.row(`SELECT `+checkpointCols+` FROM checkpoints WHERE vault=? AND name=?`, t.v.id, name))
	if errors.Is(err, sql.ErrNoRows) {
		return c, fmt.Errorf("checkpoint %q: %w", name, ErrCheckpointMissing)
	}
	return c, mapSQLErr(err)
}

// userCheckpoint is checkpoint for a name a user gave: the hidden ones
// (a fork's fork point, a run's snapshot), whose names ValidCheckpointName
// refuses, do not exist for restore or delete, or a user could drop the
// fork point a merge needs.
func (t *Tx) userCheckpoint(name string) (Checkpoint, error) {
	if strings.HasPrefix(name, ".") {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", name, ErrCheckpointMissing)
	}
	return t.checkpoint(name)
}

// SaveCheckpoint records the current tree under name. It copies nothing:
// it freezes the current nodes by moving the vault to a new epoch.
func (t *Tx) SaveCheckpoint(name, message string, auto bool) (Checkpoint, error) {
	if err := ValidCheckpointName(name); err != nil {
		return Checkpoint{}, err
	}
	if _, err := t.checkpoint(name); err == nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", name, ErrCheckpointExists)
	} else if !errors.Is(err, ErrCheckpointMissing) {
		return Checkpoint{}, err
	}
	c := Checkpoint{Name: name, CreatedAt: time.Unix(0, t.now).UTC(), Files: t.v.files, Dirs: t.v.dirs, Bytes: t.v.bytes,
		Message: message, Auto: auto, Trace: t.meta.Trace, root: t.v.root, nextIno: t.v.nextIno}
	if _, err := t.exec(`INSERT INTO checkpoints(vault, name, root, created_at, message, auto, files, dirs, bytes, next_ino, trace) VALUES(?,?,?,?,?,?,?,?,?,?,?)`,
		t.v.id, name, c.root, t.now, message, auto, c.Files, c.Dirs, c.Bytes, c.nextIno, c.Trace); err != nil {
		return Checkpoint{}, fmt.Errorf("save checkpoint %q: %w", name, err)
	}
	t.v.epoch++
	t.audit("checkpoint.save", "/", map[string]any{"checkpoint": name, "auto": auto})
	if auto {
		// Retention runs in the transaction that adds one, so auto
		// checkpoints never pile up past it.
		if _, err := t.pruneAuto(name); err != nil {
			return Checkpoint{}, err
		}
	}
	return c, nil
}

// RestoreResult is what Restore returns.
type RestoreResult struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	// Changes is what the restore undid: the difference from the
	// checkpoint to the tree as it was just before the restore.
	Changes Changes `json:"changes"`
}

// RestoreCheckpoint makes the checkpoint's tree the current one. Nodes that
// only the discarded tree used are deleted at once; content chunks are left
// to GC.
func (t *Tx) RestoreCheckpoint(name string) (RestoreResult, error) {
	c, err := t.userCheckpoint(name)
	if err != nil {
		return RestoreResult{}, err
	}
	ch, err := t.diff(c.root, t.v.root)
	if err != nil {
		return RestoreResult{}, err
	}
	// Nodes of the current epoch belong to the live tree alone: every
	// checkpoint and fork bumps the epoch before it shares anything.
	t.wc = nil
	if _, err := t.exec(`DELETE FROM dirents WHERE dir IN (SELECT id FROM nodes WHERE vault=? AND epoch=?)`, t.v.id, t.v.epoch); err != nil {
		return RestoreResult{}, err
	}
	if _, err := t.exec(`DELETE FROM nodes WHERE vault=? AND epoch=?`, t.v.id, t.v.epoch); err != nil {
		return RestoreResult{}, err
	}
	t.v.root, t.v.files, t.v.dirs, t.v.bytes = c.root, c.Files, c.Dirs, c.Bytes
	t.v.nextIno = max(t.v.nextIno, c.nextIno)
	t.v.epoch++
	t.audit("checkpoint.restore", "/", map[string]any{"checkpoint": name, "added": len(ch.Added), "modified": len(ch.Modified), "deleted": len(ch.Deleted)})
	return RestoreResult{Checkpoint: c, Changes: ch}, nil
}

// Checkpoints lists the vault's checkpoints, oldest first.
func (t *Tx) Checkpoints() ([]Checkpoint, error) {
	rows, err := t.query(`SELECT `+checkpointCols+` FROM checkpoints WHERE vault=? AND substr(name, 1, 1) != '.' ORDER BY created_at, name`, t.v.id)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	out := []Checkpoint{}
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteCheckpoint forgets a checkpoint. Its content is freed by the next
// GC unless the live tree, another checkpoint or a fork still uses it.
func (t *Tx) DeleteCheckpoint(name string) error {
	if _, err := t.userCheckpoint(name); err != nil {
		return err
	}
	if _, err := t.exec(`DELETE FROM checkpoints WHERE vault=? AND name=?`, t.v.id, name); err != nil {
		return err
	}
	t.audit("checkpoint.delete", "/", map[string]any{"checkpoint": name})
	return nil
}

// Diff compares two states of the vault: checkpoint names, or "" for the
// current tree.
func (t *Tx) Diff(from, to string) (Changes, error) {
	roots := [2]int64{}
	for i, name := range []string{from, to} {
		if name == "" {
			roots[i] = t.v.root
			continue
		}
		c, err := t.checkpoint(name)
		if err != nil {
			return Changes{}, err
		}
		roots[i] = c.root
	}
	return t.diff(roots[0], roots[1])
}

// SaveCheckpoint records the current tree under name.
func (v *Vault) SaveCheckpoint(ctx context.Context, name, message string, auto bool, meta Meta) (Checkpoint, error) {
	c, _, err := write(ctx, v.s, v.namespace, v.name, meta, "checkpoint.save", true, func(t *Tx) (Checkpoint, error) {
		return t.SaveCheckpoint(name, message, auto)
	})
	return c, err
}

// RestoreCheckpoint makes checkpoint name the current tree, atomically:
// concurrent readers see the old tree or the new one, never a mix.
func (v *Vault) RestoreCheckpoint(ctx context.Context, name string, meta Meta) (RestoreResult, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "checkpoint.restore", true, func(t *Tx) (RestoreResult, error) {
		return t.RestoreCheckpoint(name)
	})
	return r, err
}

// Checkpoints lists the vault's checkpoints, oldest first.
func (v *Vault) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]Checkpoint, error) { return t.Checkpoints() })
}

// Checkpoint describes one checkpoint.
func (v *Vault) Checkpoint(ctx context.Context, name string) (Checkpoint, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Checkpoint, error) { return t.checkpoint(name) })
}

// DeleteCheckpoint forgets a checkpoint and frees what only it used.
func (v *Vault) DeleteCheckpoint(ctx context.Context, name string, meta Meta) error {
	_, _, err := write(ctx, v.s, v.namespace, v.name, meta, "checkpoint.delete", true, func(t *Tx) (struct{}, error) {
		return struct{}{}, t.DeleteCheckpoint(name)
	})
	if err != nil {
		return err
	}
	_, err = v.s.GC(ctx)
	return err
}

// Diff compares checkpoint from with checkpoint to ("" = current tree).
func (v *Vault) Diff(ctx context.Context, from, to string) (Changes, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Changes, error) { return t.Diff(from, to) })
}
