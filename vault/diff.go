package vault

import (
	"bytes"
	"sort"
)

// Change is one entry of a ChangeSummary.
type Change struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// Changes says how one tree differs from another. Each list is sorted by
// path; a directory added or deleted is listed with everything below it.
type Changes struct {
	Added        []Change `json:"added"`
	Modified     []Change `json:"modified"`
	Deleted      []Change `json:"deleted"`
	BytesAdded   int64    `json:"bytes_added"`
	BytesRemoved int64    `json:"bytes_removed"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Modified)+len(c.Deleted) == 0 }

// diff compares two trees from metadata alone: subtrees that share a node
// are skipped without a look, and files compare by chunk hashes, so
// unchanged content is never read.
func (t *Tx) diff(from, to int64) (Changes, error) {
	ch := Changes{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}
	if err := t.diffDir("/", from, to, &ch); err != nil {
		return ch, err
	}
	for _, l := range [][]Change{ch.Added, ch.Modified, ch.Deleted} {
		sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	}
	return ch, nil
}

func (t *Tx) diffDir(base string, a, b int64, ch *Changes) error {
	if a == b {
		return nil
	}
	la, err := t.dirents(a)
	if err != nil {
		return err
	}
	lb, err := t.dirents(b)
	if err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		switch {
		case j == len(lb) || (i < len(la) && la[i].name < lb[j].name):
			if err := t.listTree(joinChild(base, la[i].name), la[i].child, &ch.Deleted, &ch.BytesRemoved); err != nil {
				return err
			}
			i++
		case i == len(la) || lb[j].name < la[i].name:
			if err := t.listTree(joinChild(base, lb[j].name), lb[j].child, &ch.Added, &ch.BytesAdded); err != nil {
				return err
			}
			j++
		default:
			if err := t.diffEntry(joinChild(base, la[i].name), la[i].child, lb[j].child, ch); err != nil {
				return err
			}
			i++
			j++
		}
	}
	return nil
}

func (t *Tx) diffEntry(p string, a, b int64, ch *Changes) error {
	if a == b {
		return nil
	}
	na, err := t.node(a)
	if err != nil {
		return err
	}
	nb, err := t.node(b)
	if err != nil {
		return err
	}
	switch {
	case na.kind != nb.kind:
		if err := t.listTree(p, a, &ch.Deleted, &ch.BytesRemoved); err != nil {
			return err
		}
		return t.listTree(p, b, &ch.Added, &ch.BytesAdded)
	case na.kind == KindDir:
		return t.diffDir(p, a, b, ch)
	case na.size != nb.size || na.mode != nb.mode || na.target != nb.target || !bytes.Equal(na.chunks, nb.chunks):
		ch.Modified = append(ch.Modified, Change{Path: p, Type: nb.kind.String(), Size: nb.size})
		if nb.kind == KindFile {
			if d := nb.size - na.size; d > 0 {
				ch.BytesAdded += d
			} else {
				ch.BytesRemoved -= d
			}
		}
	}
	return nil
}

// listTree appends the entry at p and everything below it to out.
func (t *Tx) listTree(p string, id int64, out *[]Change, total *int64) error {
	n, err := t.node(id)
	if err != nil {
		return err
	}
	*out = append(*out, Change{Path: p, Type: n.kind.String(), Size: n.size})
	if n.kind == KindFile {
		*total += n.size
	}
	if n.kind != KindDir {
		return nil
	}
	ds, err := t.dirents(id)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if err := t.listTree(joinChild(p, d.name), d.child, out, total); err != nil {
			return err
		}
	}
	return nil
}
