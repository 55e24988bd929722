package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
)

// WriteFrom writes what r yields to the file at p, as WriteFile writes
// data, storing it chunk by chunk as it reads: memory stays at a chunk
// or two whatever the size (a fleet worker streams large content from
// the object store this way). The quota is checked once the size is
// known; a refused or failed write stores nothing.
func (t *Tx) WriteFrom(p string, r io.Reader, o WriteOptions) (WriteResult, error) {
	// An append keeps the whole chunks of the old content and reads its
	// last, partial chunk in front of r, so that every new chunk but the
	// last is whole.
	var keep []byte
	var base int64
	if o.Append {
		if _, chain, _, err := t.fileChain("write", p); err == nil {
			n := chain[len(chain)-1]
			full := n.size / ChunkSize
			if keep, err = t.hashes(n, 0, full); err != nil {
				return WriteResult{}, err
			}
			keep = append([]byte(nil), keep...)
			tail := make([]byte, n.size-full*ChunkSize)
			if _, err := t.readAt(n, full*ChunkSize, tail); err != nil {
				return WriteResult{}, err
			}
			base = full * ChunkSize
			r = io.MultiReader(bytes.NewReader(tail), r)
		}
	}
	list := keep
	size := base
	buf := make([]byte, ChunkSize)
	defer t.smallCache(p)()
	for {
		if err := t.ctx.Err(); err != nil {
			return WriteResult{}, err
		}
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			h, perr := t.putChunk(buf[:k])
			if perr != nil {
				return WriteResult{}, perr
			}
			list = append(list, h[:]...)
			size += int64(k)
			// Stop as soon as the file outgrows its limit, not after
			// storing all of it (the full check follows at the end).
			if qerr := t.checkQuota(0, 0, 0, size); qerr != nil {
				return WriteResult{}, pathErr("write", p, qerr)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return WriteResult{}, fmt.Errorf("write %s: read content: %w", p, err)
		}
	}
	return t.putFile(p, o, nil, func(int64) int64 { return size }, func(n *node, _ bool) error {
		n.chunks, n.size, n.lazy = list, size, false
		return nil
	})
}

// WriteFrom writes the content open returns to file p (see Tx.WriteFrom).
// open is called inside the write transaction, after the request log:
// a repeated request returns its first result without reading anything.
func (v *Vault) WriteFrom(ctx context.Context, p string, open func() (io.ReadCloser, error), o WriteOptions, meta Meta) (WriteResult, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "file.write", true, func(t *Tx) (WriteResult, error) {
		rc, err := open()
		if err != nil {
			return WriteResult{}, err
		}
		defer rc.Close()
		return t.WriteFrom(p, rc, o)
	})
	return r, err
}

// ReadTo copies the content of file p to w from one snapshot of the
// vault, a chunk at a time, and describes the file. The snapshot is a
// read transaction held while w takes the content.
func (v *Vault) ReadTo(ctx context.Context, p string, w io.Writer) (Entry, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Entry, error) {
		comps, chain, _, err := t.fileChain("read", p)
		if err != nil {
			return Entry{}, err
		}
		n := chain[len(chain)-1]
		defer t.smallCache(p)()
		buf := make([]byte, 16*ChunkSize)
		for off := int64(0); off < n.size; {
			k, err := t.readAt(n, off, buf)
			if err != nil {
				return Entry{}, err
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return Entry{}, err
			}
			off += int64(k)
		}
		return n.entry(nameOf(comps), JoinPath(comps)), nil
	})
}

// streamCacheKiB is a connection's page cache while it streams a
// file's content in or out. The store's usual cache (32 MiB per
// connection) fills with the content's overflow pages, which a stream
// touches once: a 1 GiB write or read grew the process by the whole
// cache. What a stream does reuse, the interior pages of the chunks
// table and of its hash index, fits in far less; dirty pages beyond it
// spill to the WAL, uncommitted, so a write stays one transaction.
const streamCacheKiB = 2048

// smallCache shrinks the transaction's connection's page cache to
// streamCacheKiB and returns what restores it. A cache it cannot read
// or set leaves the transaction as it is: the cache is about memory,
// never about what is stored.
func (t *Tx) smallCache(p string) func() {
	var was int64
	if err := t.row(`PRAGMA cache_size`).Scan(&was); err != nil {
		return func() {}
	}
	if _, err := t.execText(fmt.Sprintf(`PRAGMA cache_size=-%d`, streamCacheKiB)); err != nil {
		return func() {}
	}
	return func() {
		// Not t.ctx: a cancelled request must not leave the connection
		// with the small cache.
		ctx, q := context.WithoutCancel(t.ctx), fmt.Sprintf(`PRAGMA cache_size=%d`, was)
		var err error
		if t.conn != nil {
			_, err = t.conn.ExecContext(ctx, q)
		} else {
			_, err = t.tx.ExecContext(ctx, q)
		}
		if err != nil {
			slog.Warn("restore the page cache size after a stream", "path", p, "err", err)
		}
	}
}
