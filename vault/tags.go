package vault

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Tags and key/value metadata on paths. They belong to the node, like its
// mode: a frozen node's rows are copied with it (insertCopy), so forks,
// checkpoints and restores keep the metadata of the tree they hold, a
// rename carries it along, and export copies it with the nodes. Keys are
// "t:NAME" for a tag (value NULL) and "m:KEY" for metadata.
const metaSchema = `
CREATE TABLE IF NOT EXISTS node_meta(
	node INTEGER NOT NULL,
	key TEXT NOT NULL,
	value TEXT,
	PRIMARY KEY(node, key)
) WITHOUT ROWID;
-- Node ids can be reused (the highest, once deleted): whatever deletes a
-- node deletes its metadata too.
CREATE TRIGGER IF NOT EXISTS node_meta_gone AFTER DELETE ON nodes BEGIN DELETE FROM node_meta WHERE node = old.id; END;
`

// Limits on tag names, metadata keys and values.
const (
	MaxMetaKeyLen   = 128
	MaxMetaValueLen = 4096
)

// Labels are a path's tags and metadata.
type Labels struct {
	Tags []string          `json:"tags"`
	Meta map[string]string `json:"meta"`
}

func validLabel(what, s string, max int) error {
	if s == "" || len(s) > max || strings.ContainsAny(s, "=\x00") {
		return fmt.Errorf("%s %q: want 1-%d bytes without '=' or NUL: %w", what, s, max, ErrInvalidArgument)
	}
	return nil
}

// copyMeta gives node to the metadata of node from (a copy-on-write copy).
func (t *Tx) copyMeta(to, from int64) error {
	if _, err := t.exec(`INSERT INTO node_meta(node, key, value) SELECT ?, key, value FROM node_meta WHERE node=?`, to, from); err != nil {
		return fmt.Errorf("copy metadata: %w", err)
	}
	return nil
}

// labelled resolves p and makes its chain writable, so that the node's
// metadata can change without touching a checkpoint's or fork's.
func (t *Tx) labelled(op, p string) (string, *node, error) {
	comps, chain, icomps, err := t.resolveInode(op, p)
	if err != nil {
		return "", nil, err
	}
	if err := t.makeWritable(chain, icomps); err != nil {
		return "", nil, err
	}
	return JoinPath(comps), chain[len(chain)-1], nil
}

// Label changes p's labels: adds tags, removes untags, sets set and
// deletes unset (metadata keys). It returns the labels after.
func (t *Tx) Label(p string, tags, untags []string, set map[string]string, unset []string) (Labels, error) {
	const op = "label"
	for _, s := range append(append([]string{}, tags...), untags...) {
		if err := validLabel("tag", s, MaxMetaKeyLen); err != nil {
			return Labels{}, err
		}
	}
	for _, k := range unset {
		if err := validLabel("metadata key", k, MaxMetaKeyLen); err != nil {
			return Labels{}, err
		}
	}
	for k, v := range set {
		if err := validLabel("metadata key", k, MaxMetaKeyLen); err != nil {
			return Labels{}, err
		}
		if len(v) > MaxMetaValueLen {
			return Labels{}, fmt.Errorf("metadata value of %q: %d bytes, at most %d: %w", k, len(v), MaxMetaValueLen, ErrInvalidArgument)
		}
	}
	clean, n, err := t.labelled(op, p)
	if err != nil {
		return Labels{}, err
	}
	for _, s := range tags {
		if _, err := t.exec(`INSERT INTO node_meta(node, key, value) VALUES(?, ?, NULL) ON CONFLICT(node, key) DO NOTHING`, n.id, "t:"+s); err != nil {
			return Labels{}, err
		}
	}
	for _, s := range untags {
		if _, err := t.exec(`DELETE FROM node_meta WHERE node=? AND key=?`, n.id, "t:"+s); err != nil {
			return Labels{}, err
		}
	}
	for k, v := range set {
		if _, err := t.exec(`INSERT INTO node_meta(node, key, value) VALUES(?, ?, ?) ON CONFLICT(node, key) DO UPDATE SET value=excluded.value`, n.id, "m:"+k, v); err != nil {
			return Labels{}, err
		}
	}
	for _, k := range unset {
		if _, err := t.exec(`DELETE FROM node_meta WHERE node=? AND key=?`, n.id, "m:"+k); err != nil {
			return Labels{}, err
		}
	}
	t.audit("label", clean, map[string]any{"tags": tags, "untags": untags, "set": set, "unset": unset})
	return t.labels(n.id)
}

// labels reads node id's labels.
func (t *Tx) labels(id int64) (Labels, error) {
	l := Labels{Tags: []string{}, Meta: map[string]string{}}
	rows, err := t.query(`SELECT key, coalesce(value, '') FROM node_meta WHERE node=? ORDER BY key`, id)
	if err != nil {
		return l, mapSQLErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return l, err
		}
		switch {
		case strings.HasPrefix(k, "t:"):
			l.Tags = append(l.Tags, k[2:])
		case strings.HasPrefix(k, "m:"):
			l.Meta[k[2:]] = v
		}
	}
	sort.Strings(l.Tags)
	return l, rows.Err()
}

// Labels returns p's tags and metadata.
func (t *Tx) Labels(p string) (string, Labels, error) {
	comps, chain, _, err := t.resolveInode("labels", p)
	if err != nil {
		return "", Labels{}, err
	}
	l, err := t.labels(chain[len(chain)-1].id)
	return JoinPath(comps), l, err
}

// hasLabels reports whether node id has every tag and every key=value.
func (t *Tx) hasLabels(id int64, tags []string, meta map[string]string) (bool, error) {
	if len(tags) == 0 && len(meta) == 0 {
		return true, nil
	}
	l, err := t.labels(id)
	if err != nil {
		return false, err
	}
	for _, want := range tags {
		i := sort.SearchStrings(l.Tags, want)
		if i == len(l.Tags) || l.Tags[i] != want {
			return false, nil
		}
	}
	for k, v := range meta {
		if got, ok := l.Meta[k]; !ok || got != v {
			return false, nil
		}
	}
	return true, nil
}

// Label changes p's tags and metadata (see Tx.Label).
func (v *Vault) Label(ctx context.Context, p string, tags, untags []string, set map[string]string, unset []string, meta Meta) (Labels, error) {
	l, _, err := write(ctx, v.s, v.namespace, v.name, meta, "label", true, func(t *Tx) (Labels, error) {
		return t.Label(p, tags, untags, set, unset)
	})
	return l, err
}

// Labels returns p's clean path, tags and metadata.
func (v *Vault) Labels(ctx context.Context, p string) (string, Labels, error) {
	type res struct {
		p string
		l Labels
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (res, error) {
		clean, l, err := t.Labels(p)
		return res{clean, l}, err
	})
	return r.p, r.l, err
}
