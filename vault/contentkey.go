package vault

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// ContentKey names the bytes of file p: two files with the same key, in
// any vault of the store, hold the same bytes. It is the SHA-256 of the
// file's size and chunk list (content hashes and hole runs), so it reads
// no content; the same bytes may have more than one key (a hole written
// as zeros). A cache of file content kept outside the store (the mount's
// backing files) is keyed by it. The entry is p's, as Stat reports it.
func (t *Tx) ContentKey(p string) (string, Entry, error) {
	comps, chain, _, err := t.fileChain("read", p)
	if err != nil {
		return "", Entry{}, err
	}
	n := chain[len(chain)-1]
	if err := t.loadChunks(n); err != nil {
		return "", Entry{}, err
	}
	h := sha256.New()
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(n.size))
	h.Write(size[:])
	h.Write(n.chunks)
	return hex.EncodeToString(h.Sum(nil)), n.entry(nameOf(comps), JoinPath(comps)), nil
}

// ContentKey is Tx.ContentKey in a read transaction of its own.
func (v *Vault) ContentKey(ctx context.Context, p string) (key string, e Entry, err error) {
	err = v.View(ctx, func(tx *Tx) error {
		key, e, err = tx.ContentKey(p)
		return err
	})
	return key, e, err
}
