package vault

import (
	"context"
	"io/fs"
	"time"
)

// The methods below each run one operation in its own transaction. With
// meta.RequestID set, a repeated call returns the first call's result.

// WriteFile writes data to file p.
func (v *Vault) WriteFile(ctx context.Context, p string, data []byte, o WriteOptions, meta Meta) (WriteResult, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "file.write", true, func(t *Tx) (WriteResult, error) {
		return t.WriteFile(p, data, o)
	})
	return r, err
}

// WriteAt writes data at off of existing file p.
func (v *Vault) WriteAt(ctx context.Context, p string, off int64, data []byte, meta Meta) (WriteResult, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "file.write_at", true, func(t *Tx) (WriteResult, error) {
		return t.WriteAt(p, off, data)
	})
	return r, err
}

// Truncate sets the size of file p.
func (v *Vault) Truncate(ctx context.Context, p string, size int64, meta Meta) error {
	return v.do(ctx, meta, "file.truncate", func(t *Tx) error { return t.Truncate(p, size) })
}

// Mkdir creates directory p.
func (v *Vault) Mkdir(ctx context.Context, p string, mode fs.FileMode, parents bool, meta Meta) error {
	return v.do(ctx, meta, "dir.create", func(t *Tx) error { return t.Mkdir(p, mode, parents) })
}

// Symlink creates symlink p pointing at target.
func (v *Vault) Symlink(ctx context.Context, target, p string, meta Meta) error {
	return v.do(ctx, meta, "symlink.create", func(t *Tx) error { return t.Symlink(target, p) })
}

// Remove deletes the entry at p.
func (v *Vault) Remove(ctx context.Context, p string, o RemoveOptions, meta Meta) error {
	return v.do(ctx, meta, "remove", func(t *Tx) error { return t.Remove(p, o) })
}

// Rename moves src to dst.
func (v *Vault) Rename(ctx context.Context, src, dst string, o RenameOptions, meta Meta) error {
	return v.do(ctx, meta, "rename", func(t *Tx) error { return t.Rename(src, dst, o) })
}

// Copy copies src to dst, sharing content.
func (v *Vault) Copy(ctx context.Context, src, dst string, recursive bool, meta Meta) error {
	return v.do(ctx, meta, "copy", func(t *Tx) error { return t.Copy(src, dst, recursive) })
}

// SetAttr changes the mode and/or mtime of p.
func (v *Vault) SetAttr(ctx context.Context, p string, mode *fs.FileMode, mtime *time.Time, meta Meta) (Entry, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "setattr", true, func(t *Tx) (Entry, error) {
		return t.SetAttr(p, mode, mtime)
	})
	return r, err
}

func (v *Vault) do(ctx context.Context, meta Meta, op string, fn func(t *Tx) error) error {
	_, _, err := write(ctx, v.s, v.namespace, v.name, meta, op, true, func(t *Tx) (struct{}, error) {
		return struct{}{}, fn(t)
	})
	return err
}

// ReadFile returns the content and entry of file p.
func (v *Vault) ReadFile(ctx context.Context, p string) ([]byte, Entry, error) {
	if data, e, ok, err := v.s.readFast(ctx, v.namespace, v.name, p); ok {
		return data, e, err
	}
	type fe struct {
		data []byte
		e    Entry
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (fe, error) {
		d, e, err := t.ReadFile(p)
		return fe{d, e}, err
	})
	return r.data, r.e, err
}

// ReadAt reads file p at off into buf.
func (v *Vault) ReadAt(ctx context.Context, p string, off int64, buf []byte) (int, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (int, error) { return t.ReadAt(p, off, buf) })
}

// Stat describes the entry at p.
func (v *Vault) Stat(ctx context.Context, p string) (Entry, error) {
	if e, ok, err := v.s.statFast(ctx, v.namespace, v.name, p); ok {
		return e, err
	}
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Entry, error) { return t.Stat(p) })
}

// ReadDir lists directory p.
func (v *Vault) ReadDir(ctx context.Context, p string) ([]Entry, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]Entry, error) { return t.ReadDir(p) })
}

// Seek finds the first offset at or after off of file p that holds data
// (or, with hole, that lies in a hole, the end of file counting as one),
// as lseek(2)'s SEEK_DATA and SEEK_HOLE do; ok is false when there is
// none (lseek's ENXIO).
func (v *Vault) Seek(ctx context.Context, p string, off int64, hole bool) (at int64, ok bool, err error) {
	type found struct {
		at int64
		ok bool
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (found, error) {
		_, chain, _, err := t.fileChain("seek", p)
		if err != nil {
			return found{}, err
		}
		n := chain[len(chain)-1]
		if err := t.loadChunks(n); err != nil {
			return found{}, err
		}
		at, ok := seekList(n.chunks, n.size, off, hole)
		return found{at, ok}, nil
	})
	return r.at, r.ok, err
}
