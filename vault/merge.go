package vault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// Merge: a fork's changes brought back into another vault (its source,
// usually), three-way against the fork point: the tree the fork started
// from, which Fork keeps as the fork's hidden checkpoint forkPoint.
//
// The three trees are compared by node id and metadata (kind, mode,
// size, target, chunk list), so unchanged subtrees are skipped without a
// look and content is read only for a text file both sides changed. An
// entry changed on one side takes that side; changed the same way on
// both, it is kept; changed differently on both, a text file is merged
// line by line (MergeOptions.Text) and anything else is a conflict. The
// whole merge is one transaction on the target: while a conflict remains
// unresolved (MergeOptions.Strategy) nothing is applied.

// forkPoint names the hidden checkpoint of a fork that holds the tree it
// was forked from.
const forkPoint = ".fork-point"

// Strategies for MergeOptions.Strategy: how conflicts are resolved.
const (
	StrategyNone   = ""
	StrategyOurs   = "ours"
	StrategyTheirs = "theirs"
)

// Conflict kinds (MergeConflict.Kind).
const (
	ConflictContent      = "content"       // a text file changed on both sides in overlapping lines
	ConflictBinary       = "binary"        // a binary (or too large) file changed differently on both sides
	ConflictAddAdd       = "add/add"       // both sides added different entries of one kind at one path
	ConflictModifyDelete = "modify/delete" // ours changed what theirs deleted
	ConflictDeleteModify = "delete/modify" // ours deleted what theirs changed
	ConflictType         = "type"          // both sides changed the entry, to different kinds
	ConflictMode         = "mode"          // both sides changed the mode bits, differently
	ConflictSymlink      = "symlink"       // both sides changed a symlink's target (or a device number), differently
)

// MaxTextMerge is the largest file merged line by line; a larger one
// changed on both sides is a binary conflict.
const MaxTextMerge = 8 << 20

// TextMerger merges three versions of a text file line by line (base is
// the fork point's, empty for a file both sides added). favor is
// StrategyNone, StrategyOurs or StrategyTheirs, for conflicting hunks. It
// returns the merged text and how many hunks conflict (unresolved ones
// only), or an error when the content cannot be merged as text (binary,
// too large): the file is then a binary conflict.
type TextMerger func(base, ours, theirs []byte, favor string) (merged []byte, conflicts int, err error)

// MergeOptions tune Merge.
type MergeOptions struct {
	// Paths limits the merge to entries matching one of these globs
	// (path.Match): a pattern with a '/' matches the whole path from the
	// root ("/src/*.go"), one without matches the entry's name at any
	// depth ("*.go"); an entry below a matching directory matches too.
	// Empty: everything.
	Paths []string
	// DryRun computes the merge and its changes, then rolls them back.
	DryRun bool
	// Strategy resolves conflicts: StrategyOurs keeps the target's side,
	// StrategyTheirs takes the fork's (for a text file, only the
	// conflicting hunks; the rest is merged).
	Strategy string
	// Text merges text files changed on both sides; nil makes every such
	// file a conflict.
	Text TextMerger
	// Checkpoint names the checkpoint taken before the merge changes
	// anything ("" = "merge-<fork>-<time>"); none is taken when nothing
	// changes, nor in a dry run.
	Checkpoint string
}

// MergeConflict is one entry both sides changed in ways Merge cannot
// combine. Hashes name content as Version.Hash does (the SHA-256 of the
// file's chunk list; of its target for a symlink), "" for an entry that
// is absent or holds no content; types are Kind names, "" when absent.
type MergeConflict struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Base       string `json:"base"`
	Ours       string `json:"ours"`
	Theirs     string `json:"theirs"`
	BaseType   string `json:"base_type"`
	OursType   string `json:"ours_type"`
	TheirsType string `json:"theirs_type"`
	// Hunks is the number of conflicting hunks of a text file.
	Hunks int `json:"hunks,omitempty"`
	// Resolved is the side a strategy resolved it with, "" if none.
	Resolved string `json:"resolved,omitempty"`
}

// MergeResult is what Merge returns.
type MergeResult struct {
	Into      string    `json:"into"`
	Fork      string    `json:"fork"`
	ForkPoint time.Time `json:"fork_point"`
	DryRun    bool      `json:"dry_run"`
	Strategy  string    `json:"strategy"`
	// Applied says the merge changed the target (false in a dry run,
	// when a conflict remains, and when there was nothing to change).
	Applied bool `json:"applied"`
	// Checkpoint is the checkpoint taken just before the merge changed
	// the target: restoring it undoes the merge. "" when none was taken.
	Checkpoint string `json:"checkpoint"`
	// Changes is what the merge changed in the target (in a dry run,
	// what it would change; with conflicts, what the rest would change).
	Changes Changes `json:"changes"`
	// Merged lists the text files merged line by line.
	Merged    []string        `json:"merged"`
	Conflicts []MergeConflict `json:"conflicts"`
}

// Unresolved counts the conflicts no strategy resolved.
func (r MergeResult) Unresolved() int {
	n := 0
	for _, c := range r.Conflicts {
		if c.Resolved == "" {
			n++
		}
	}
	return n
}

// MergeConflictError is Merge's error when conflicts remain: nothing was
// applied. It matches ErrMergeConflict.
type MergeConflictError struct{ Result MergeResult }

func (e *MergeConflictError) Error() string {
	return fmt.Sprintf("merge of %q into %q: %d conflicts, nothing applied (see conflicts; --strategy ours|theirs resolves them)", e.Result.Fork, e.Result.Into, e.Result.Unresolved())
}

// Is makes errors.Is(err, ErrMergeConflict) true.
func (e *MergeConflictError) Is(target error) bool { return target == ErrMergeConflict }

// ErrMergeConflict: a merge found conflicts and applied nothing.
var ErrMergeConflict = errors.New("merge conflict")

// Merge brings the changes vault fork made since its fork point into
// this vault, in one transaction (see the comment at the top of
// merge.go). With conflicts left it applies nothing and fails with a
// *MergeConflictError that carries the result.
func (v *Vault) Merge(ctx context.Context, fork string, o MergeOptions, meta Meta) (MergeResult, error) {
	switch o.Strategy {
	case StrategyNone, StrategyOurs, StrategyTheirs:
	default:
		return MergeResult{}, fmt.Errorf("merge strategy %q: want %q or %q: %w", o.Strategy, StrategyOurs, StrategyTheirs, ErrInvalidArgument)
	}
	if err := ValidVaultName(fork); err != nil {
		return MergeResult{}, err
	}
	if fork == v.name {
		return MergeResult{}, fmt.Errorf("merge %q into itself: %w", fork, ErrInvalidArgument)
	}
	for _, g := range o.Paths {
		if _, err := path.Match(strings.TrimPrefix(g, "/"), ""); err != nil || g == "" {
			return MergeResult{}, fmt.Errorf("merge path glob %q: %w", g, ErrInvalidArgument)
		}
	}
	if o.Checkpoint != "" {
		if err := ValidCheckpointName(o.Checkpoint); err != nil {
			return MergeResult{}, err
		}
	}
	var out MergeResult
	_, _, err := write(ctx, v.s, v.namespace, v.name, meta, "vault.merge", true, func(t *Tx) (MergeResult, error) {
		r, err := t.merge(fork, o)
		out = r
		if err == nil && o.DryRun {
			err = errDryRun
		}
		return r, err
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	return out, err
}

// mergeOp is one change to the target, at path.
type mergeOp struct {
	path string
	del  bool
	src  *node // the fork's entry to take (its subtree, for a directory)
	// data is the merged content of a text file (with hasData).
	data    []byte
	hasData bool
	// mode is the mode bits the entry ends with (a text merge, or a
	// mode-only change when src is nil and hasData false).
	mode uint32
}

type merger struct {
	t         *Tx
	o         MergeOptions
	ops       []mergeOp
	conflicts []MergeConflict
	merged    []string
}

func (t *Tx) merge(fork string, o MergeOptions) (MergeResult, error) {
	res := MergeResult{Into: t.v.name, Fork: fork, DryRun: o.DryRun, Strategy: o.Strategy,
		Changes: Changes{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}, Merged: []string{}, Conflicts: []MergeConflict{}}
	var forkID, forkRoot, pointRoot, pointAt int64
	if err := t.row(`SELECT id, root FROM vaults WHERE namespace=? AND name=?`, t.v.namespace, fork).Scan(&forkID, &forkRoot); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return res, fmt.Errorf("vault %q: %w", fork, ErrVaultNotFound)
		}
		return res, mapSQLErr(err)
	}
	if err := t.row(`SELECT root, created_at FROM checkpoints WHERE vault=? AND name=?`, forkID, forkPoint).Scan(&pointRoot, &pointAt); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return res, fmt.Errorf("vault %q records no fork point (not a fork, or forked before avfs kept fork points): %w", fork, ErrInvalidArgument)
		}
		return res, mapSQLErr(err)
	}
	res.ForkPoint = time.Unix(0, pointAt).UTC()
	m := &merger{t: t, o: o}
	var roots [3]*node
	for i, id := range []int64{pointRoot, t.v.root, forkRoot} {
		n, err := t.node(id)
		if err != nil {
			return res, err
		}
		roots[i] = n
	}
	if err := m.entry("/", roots[0], roots[1], roots[2]); err != nil {
		return res, err
	}
	res.Conflicts, res.Merged = append(res.Conflicts, m.conflicts...), append(res.Merged, m.merged...)
	unresolved := res.Unresolved() > 0
	if unresolved && !o.DryRun {
		return res, &MergeConflictError{Result: res}
	}
	if len(m.ops) == 0 {
		return res, nil
	}
	// The tree before the merge must stay as it is for the change
	// summary: the checkpoint freezes it, and a dry run, which takes
	// none and rolls back, moves to a new epoch for the same end.
	before := t.v.root
	if o.DryRun {
		t.v.epoch++
	} else {
		name := o.Checkpoint
		if name == "" {
			name = fmt.Sprintf("merge-%s-%s", fork, time.Unix(0, t.now).UTC().Format("20060102T150405.000000000Z"))
			name = name[:min(len(name), 128)]
		}
		if _, err := t.SaveCheckpoint(name, "before merge of "+fork, true); err != nil {
			return res, err
		}
		res.Checkpoint = name
	}
	for _, op := range m.ops {
		if err := m.apply(op); err != nil {
			return res, err
		}
	}
	ch, err := t.diff(before, t.v.root)
	if err != nil {
		return res, err
	}
	// A change summary compares directories by their entries: a mode
	// changed on a directory is listed here.
	for _, op := range m.ops {
		if op.src != nil || op.hasData || op.del {
			continue
		}
		if e, err := t.Stat(op.path); err == nil && e.Kind == KindDir {
			ch.Modified = append(ch.Modified, Change{Path: e.Path, Type: e.Kind.String()})
		}
	}
	sort.Slice(ch.Modified, func(i, j int) bool { return ch.Modified[i].Path < ch.Modified[j].Path })
	res.Changes = ch
	res.Applied = !o.DryRun
	t.audit("vault.merge", "/", map[string]any{"fork": fork, "checkpoint": res.Checkpoint, "strategy": o.Strategy,
		"added": len(ch.Added), "modified": len(ch.Modified), "deleted": len(ch.Deleted), "merged": len(m.merged), "conflicts": len(m.conflicts)})
	return res, nil
}

// selected reports whether p is inside the merge's paths.
func (m *merger) selected(p string) bool {
	if len(m.o.Paths) == 0 {
		return true
	}
	for q := p; ; q = path.Dir(q) {
		for _, g := range m.o.Paths {
			if strings.Contains(g, "/") {
				if ok, _ := path.Match("/"+strings.TrimPrefix(g, "/"), q); ok {
					return true
				}
			} else if ok, _ := path.Match(g, path.Base(q)); ok && q != "/" {
				return true
			}
		}
		if q == "/" {
			return false
		}
	}
}

func isDir(n *node) bool { return n != nil && n.kind == KindDir }

// sameContent reports whether two non-directory entries hold the same
// thing: kind, size, target, device and chunk list (not the mode).
func sameContent(x, y *node) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.kind == y.kind && x.size == y.size && x.target == y.target && x.rdev == y.rdev && bytes.Equal(x.chunks, y.chunks)
}

// same reports whether two entries are equal: absent both, or the same
// kind, content and mode; directories compare their whole trees.
func (m *merger) same(x, y *node) (bool, error) {
	switch {
	case x == nil || y == nil:
		return x == y, nil
	case x.id == y.id:
		return true, nil
	case x.kind != y.kind || x.mode != y.mode:
		return false, nil
	case x.kind != KindDir:
		return sameContent(x, y), nil
	}
	xs, ys, err := m.t.listings(x.id, y.id)
	if err != nil || len(xs) != len(ys) {
		return false, err
	}
	for i := range xs {
		if xs[i].name != ys[i].name {
			return false, nil
		}
		if xs[i].child == ys[i].child {
			continue
		}
		a, err := m.t.node(xs[i].child)
		if err != nil {
			return false, err
		}
		b, err := m.t.node(ys[i].child)
		if err != nil {
			return false, err
		}
		if ok, err := m.same(a, b); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// recurse merges the children of o, a and b, whichever are directories.
func (m *merger) recurse(p string, o, a, b *node) error {
	dirID := func(n *node) int64 {
		if isDir(n) {
			return n.id
		}
		return 0 // no directory has id 0: an empty listing
	}
	// Listings packed two at a time (diff.go): a fraction of the cost of
	// reading them row by row.
	pair := func(x, y int64) ([]dirent, []dirent, error) {
		if x == y { // listings answers one directory once
			l, _, err := m.t.listings(x, 0)
			return l, l, err
		}
		return m.t.listings(x, y)
	}
	lo, la, err := pair(dirID(o), dirID(a))
	if err != nil {
		return err
	}
	lb, _, err := pair(dirID(b), 0)
	if err != nil {
		return err
	}
	lists := [3]map[string]int64{}
	names := map[string]struct{}{}
	for i, l := range [][]dirent{lo, la, lb} {
		lists[i] = make(map[string]int64, len(l))
		for _, d := range l {
			lists[i][d.name] = d.child
			names[d.name] = struct{}{}
		}
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	for _, name := range sorted {
		// Skip, without loading a node, what entry would skip first:
		// theirs the same node as ours or as the fork point's, or absent
		// from both theirs and the fork point.
		io, okO := lists[0][name]
		ia, okA := lists[1][name]
		ib, okB := lists[2][name]
		if okA && okB && ia == ib || okO && okB && io == ib || !okO && !okB {
			continue
		}
		var ns [3]*node
		for i := range lists {
			id, ok := lists[i][name]
			if !ok {
				continue
			}
			n, err := m.t.node(id)
			if err != nil {
				return err
			}
			ns[i] = n
		}
		if err := m.entry(joinChild(p, name), ns[0], ns[1], ns[2]); err != nil {
			return err
		}
	}
	return nil
}

// entry merges the entry at p: o at the fork point, a in the target
// (ours), b in the fork (theirs); nil where absent.
func (m *merger) entry(p string, o, a, b *node) error {
	if a != nil && b != nil && a.id == b.id || o != nil && b != nil && o.id == b.id || o == nil && b == nil {
		return nil // the same node, or theirs untouched
	}
	if isDir(a) && isDir(b) {
		if m.selected(p) && p != "/" {
			var om *uint32
			if isDir(o) {
				om = &o.mode
			}
			if mode, ok := mergeMode(om, a.mode, b.mode); !ok {
				m.conflict(p, ConflictMode, o, a, b, 0)
				if m.o.Strategy == StrategyTheirs {
					m.ops = append(m.ops, mergeOp{path: p, mode: b.mode})
				}
			} else if mode != a.mode {
				m.ops = append(m.ops, mergeOp{path: p, mode: mode})
			}
		}
		return m.recurse(p, o, a, b)
	}
	if !m.selected(p) {
		// Outside the paths: only what lies below may be merged.
		if isDir(o) || isDir(a) || isDir(b) {
			return m.recurse(p, o, a, b)
		}
		return nil
	}
	if ok, err := m.same(a, b); err != nil || ok {
		return err
	}
	if ok, err := m.same(o, b); err != nil || ok {
		return err
	}
	if ok, err := m.same(o, a); err != nil {
		return err
	} else if ok {
		m.take(p, b)
		return nil
	}
	// Both sides changed it, differently. A directory one side deleted
	// and the other changed is merged entry by entry, as if deleted
	// entries were: what the other side left alone stays deleted.
	if (o == nil || isDir(o)) && (a == nil || isDir(a)) && (b == nil || isDir(b)) {
		return m.recurse(p, o, a, b)
	}
	switch {
	case a == nil:
		return m.resolve(p, ConflictDeleteModify, o, a, b, 0)
	case b == nil:
		return m.resolve(p, ConflictModifyDelete, o, a, b, 0)
	case a.kind != b.kind:
		return m.resolve(p, ConflictType, o, a, b, 0)
	}
	// One kind, not a directory.
	var base *node
	if o != nil && o.kind == a.kind {
		base = o
	}
	var om *uint32
	if base != nil {
		om = &base.mode
	}
	mode, modeOK := mergeMode(om, a.mode, b.mode)
	if !modeOK {
		m.conflict(p, ConflictMode, o, a, b, 0)
		if m.o.Strategy == StrategyTheirs {
			mode = b.mode
		}
	}
	switch {
	case sameContent(a, b) || base != nil && sameContent(base, b):
		// Ours' content, with the merged mode.
		if mode != a.mode {
			m.ops = append(m.ops, mergeOp{path: p, mode: mode})
		}
		return nil
	case base != nil && sameContent(base, a):
		// Theirs' content, with the merged mode.
		m.ops = append(m.ops, mergeOp{path: p, src: withMode(b, mode)})
		return nil
	}
	// Both sides changed the content, differently.
	kind := ConflictBinary
	switch {
	case base == nil:
		kind = ConflictAddAdd
	case a.kind != KindFile:
		kind = ConflictSymlink
	}
	whole := func() error { // the conflict resolved (or not) with one side's content
		m.conflict(p, kind, o, a, b, 0)
		switch {
		case m.o.Strategy == StrategyTheirs:
			m.ops = append(m.ops, mergeOp{path: p, src: withMode(b, mode)})
		case mode != a.mode:
			m.ops = append(m.ops, mergeOp{path: p, mode: mode})
		}
		return nil
	}
	if a.kind != KindFile || m.o.Text == nil || a.size > MaxTextMerge || b.size > MaxTextMerge || base != nil && base.size > MaxTextMerge {
		return whole()
	}
	var texts [3][]byte
	for i, n := range []*node{base, a, b} {
		if n == nil {
			continue
		}
		data, err := m.t.content(n)
		if err != nil {
			return err
		}
		texts[i] = data
	}
	merged, hunks, err := m.o.Text(texts[0], texts[1], texts[2], m.o.Strategy)
	if err != nil {
		return whole()
	}
	if m.o.Strategy != StrategyNone {
		hunks = textConflicts(m.o.Text, texts)
	}
	if hunks > 0 {
		if kind == ConflictBinary {
			kind = ConflictContent
		}
		m.conflict(p, kind, o, a, b, hunks)
		if m.o.Strategy == StrategyNone {
			return nil
		}
	}
	if bytes.Equal(merged, texts[1]) {
		// Ours holds theirs' changes already (a merge made before).
		if mode != a.mode {
			m.ops = append(m.ops, mergeOp{path: p, mode: mode})
		}
		return nil
	}
	m.merged = append(m.merged, p)
	m.ops = append(m.ops, mergeOp{path: p, data: merged, hasData: true, mode: mode})
	return nil
}

// textConflicts counts the conflicting hunks of a text merge when no
// strategy resolves them.
func textConflicts(f TextMerger, texts [3][]byte) int {
	_, n, err := f(texts[0], texts[1], texts[2], StrategyNone)
	if err != nil {
		return 0
	}
	return n
}

// withMode is a copy of n with mode bits mode.
func withMode(n *node, mode uint32) *node {
	c := *n
	c.mode = mode
	return &c
}

// mergeMode merges mode bits three-way; ok is false when both sides
// changed them differently. o is nil when there is no base.
func mergeMode(o *uint32, a, b uint32) (mode uint32, ok bool) {
	switch {
	case a == b:
		return a, true
	case o != nil && *o == a:
		return b, true
	case o != nil && *o == b:
		return a, true
	}
	return a, false
}

// take makes the target's entry at p theirs (b; nil deletes it).
func (m *merger) take(p string, b *node) {
	if b == nil {
		m.ops = append(m.ops, mergeOp{path: p, del: true})
		return
	}
	m.ops = append(m.ops, mergeOp{path: p, src: b, mode: b.mode})
}

// resolve records a conflict on the entry at p and, with a strategy,
// resolves it with the whole entry of that side.
func (m *merger) resolve(p, kind string, o, a, b *node, hunks int) error {
	m.conflict(p, kind, o, a, b, hunks)
	if m.o.Strategy == StrategyTheirs {
		m.take(p, b)
	}
	return nil
}

func (m *merger) conflict(p, kind string, o, a, b *node, hunks int) {
	m.conflicts = append(m.conflicts, MergeConflict{Path: p, Kind: kind,
		Base: contentHash(o), Ours: contentHash(a), Theirs: contentHash(b),
		BaseType: kindName(o), OursType: kindName(a), TheirsType: kindName(b),
		Hunks: hunks, Resolved: m.o.Strategy})
}

// contentHash names an entry's content as Version.Hash does: the SHA-256
// of a file's chunk list, of a symlink's target; "" otherwise.
func contentHash(n *node) string {
	var h [32]byte
	switch {
	case n == nil:
		return ""
	case n.kind == KindFile:
		h = sha256.Sum256(n.chunks)
	case n.kind == KindSymlink:
		h = sha256.Sum256([]byte(n.target))
	default:
		return ""
	}
	return hex.EncodeToString(h[:])
}

func kindName(n *node) string {
	if n == nil {
		return ""
	}
	return n.kind.String()
}

// apply makes one change to the target.
func (m *merger) apply(op mergeOp) error {
	t := m.t
	const opName = "merge"
	switch {
	case op.del:
		return t.Remove(op.path, RemoveOptions{Recursive: true})
	case op.hasData:
		if _, err := t.WriteFile(op.path, op.data, WriteOptions{}); err != nil {
			return err
		}
		return m.setMode(op.path, op.mode)
	case op.src == nil:
		return m.setMode(op.path, op.mode)
	}
	comps, err := CleanPath(op.path)
	if err != nil {
		return err
	}
	_, parent, existing, err := t.entryOf(opName, op.path)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		// A parent is missing: the paths limited the merge to entries
		// inside a directory ours lacks.
		all, err := t.walkPrefix(comps[:len(comps)-1])
		if err != nil {
			return err
		}
		if parent, err = t.mkdirAll(opName, op.path, comps[:len(comps)-1], 0o755, 0, 0, all); err != nil {
			return err
		}
	}
	src := op.src
	if existing != nil && existing.kind == KindFile && src.kind == KindFile {
		// A file changed in place keeps its inode number.
		chain := append(parent, existing)
		if err := t.changeFile(opName, op.path, chain, comps, src.size, src.size, func(n *node) error {
			n.chunks, n.size, n.lazy, n.mode = src.chunks, src.size, false, src.mode
			return nil
		}); err != nil {
			return err
		}
		t.audit("file.write", op.path, map[string]any{"size": src.size, "merge": true})
		return nil
	}
	if existing != nil {
		if err := t.Remove(op.path, RemoveOptions{Recursive: true}); err != nil {
			return err
		}
		// The walk again: the removal may have copied the parents.
		if comps, parent, _, err = t.entryOf(opName, op.path); err != nil {
			return err
		}
	}
	if err := m.copyIn(op.path, src, parent, comps[:len(comps)-1], comps[len(comps)-1]); err != nil {
		return err
	}
	t.audit("merge.take", op.path, map[string]any{"type": src.kind.String()})
	return nil
}

func (m *merger) setMode(p string, mode uint32) error {
	st, err := m.t.Stat(p)
	if err != nil {
		return err
	}
	if ModeBits(st.Mode) == mode {
		return nil
	}
	fm := FileMode(mode)
	_, err = m.t.SetAttrs(p, Attrs{Mode: &fm})
	return err
}

// copyIn copies the fork's subtree at n into the target as entry name
// of the directory at the end of parent: new nodes with new inode numbers
// (the fork numbered its new entries from the same counter as the
// target), content shared by hash, labels kept, a version recorded for
// each file.
func (m *merger) copyIn(p string, n *node, parent []*node, pcomps []string, name string) error {
	return m.t.copyTree("merge", p, n, parent, pcomps, name, func(p string, src, c *node) error {
		if err := m.t.copyMeta(c.id, src.id); err != nil {
			return err
		}
		if c.kind == KindFile {
			return m.t.recordVersion(p, c.id, nil)
		}
		return nil
	})
}
