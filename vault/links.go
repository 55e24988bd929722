package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Hard links (docs/decisions.md). The copy-on-write tree gives each node
// one parent: a write copies the node and re-points the one dirent on its
// path. So an inode with several names lives in a hidden directory of
// the vault's root (linksName), under its inode number, and each of its
// names is a stub node (kindLink) whose target is that number. Writes,
// attribute changes and reads through any name go to the hidden entry,
// so one copy serves every name; checkpoints, forks, export, import and
// GC carry the hidden directory like any subtree, and a fork's write
// copies the hidden entry into the fork only. A stub has the inode's
// number, so listings show it without a second lookup; the other
// attributes come from the hidden entry. The hidden entry's nlink is its
// number of names; the last unlink removes it.
//
// Usage counters count names (a stub is one file) and each inode's bytes
// once; the hidden directory counts neither as a directory nor as a
// subdirectory of the root.

// kindLink is a stub: one name of a multiply-linked inode. It never
// leaves the package: every Entry shows the inode's kind.
const kindLink Kind = 8

// linksName is the root's entry for the hidden directory. It is longer
// than MaxNameLen, so no vault path can name it, and leaving out entries
// of that name anywhere leaves out exactly the hidden directory.
var linksName = ".avfs-hard-links" + strings.Repeat("~", MaxNameLen+1-len(".avfs-hard-links"))

// MaxLinks is the most names one inode may have (ext4's limit); one more
// link fails with ErrTooManyLinks.
const MaxLinks = 65000

// linksOf returns the id of tree root's hidden directory, 0 if it has
// none.
func (t *Tx) linksOf(root int64) (int64, error) {
	var id int64
	err := t.row(`SELECT child FROM dirents WHERE dir=? AND name=?`, root, linksName).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load hard links: %w", mapSQLErr(err))
	}
	return id, nil
}

// stubTarget returns the node id of the inode stub target names in the
// hidden directory links.
func (t *Tx) stubTarget(links int64, target string) (int64, error) {
	var id int64
	if err := t.row(`SELECT child FROM dirents WHERE dir=? AND name=?`, links, target).Scan(&id); err != nil {
		return 0, fmt.Errorf("hard link to inode %s: %w", target, mapSQLErr(err))
	}
	return id, nil
}

// inodeOf returns the chain root, hidden directory, inode of stub s, and
// its components: the chain a change of the inode makes writable. The
// root and the directory are partial, the inode loaded as a walk loads it.
func (t *Tx) inodeOf(op, p string, s *node) ([]*node, []string, error) {
	comps := []string{linksName, s.target}
	chain, err := t.walkPrefix(comps)
	if err != nil {
		return nil, nil, err
	}
	if len(chain) != 3 || chain[2].kind == kindLink || chain[2].kind == KindDir {
		return nil, nil, pathErr(op, p, fmt.Errorf("hard link to missing inode %s: %w", s.target, ErrNotFound))
	}
	return chain, comps, nil
}

// deref returns the chain that ends at the inode chain's last entry
// names: the chain itself, or for a stub the hidden entry's (inodeOf).
func (t *Tx) deref(op, p string, chain []*node, comps []string) ([]*node, []string, error) {
	s := chain[len(chain)-1]
	if s.kind != kindLink {
		return chain, comps, nil
	}
	ichain, icomps, err := t.inodeOf(op, p, s)
	if err == nil {
		// Where a name is, for the unlink that leaves it the last one;
		// when it is the last already, the next write moves it back.
		t.s.hints.note(t.v.id, s.target, JoinPath(comps), ichain[2].nlink == 1)
	}
	return ichain, icomps, err
}

// resolveInode is resolve, with a final stub replaced by its inode: comps
// are p's, chain and icomps the inode's (see deref).
func (t *Tx) resolveInode(op, p string) (comps []string, chain []*node, icomps []string, err error) {
	comps, chain, err = t.resolve(op, p)
	if err != nil {
		return nil, nil, nil, err
	}
	chain, icomps, err = t.deref(op, p, chain, comps)
	return comps, chain, icomps, err
}

// inodeNode loads the full node of the inode stub s names, in the tree
// whose hidden directory is links (0: the current tree's).
func (t *Tx) inodeNode(links int64, s *node) (*node, error) {
	if links == 0 {
		var err error
		if links, err = t.linksOf(t.v.root); err != nil {
			return nil, err
		}
	}
	id, err := t.stubTarget(links, s.target)
	if err != nil {
		return nil, err
	}
	return t.node(id)
}

// asInode gives stub entry e the attributes of its inode n, keeping its
// name and path.
func asInode(e Entry, n *node) Entry {
	return n.entry(e.Name, e.Path)
}

// Link makes newPath another name of the entry at oldPath, as link(2):
// both names then stand for one inode (one number, one content, one set
// of attributes), whose link count counts them. oldPath must not be a
// directory (ErrPermission); newPath must not exist (ErrExists).
func (t *Tx) Link(oldPath, newPath string) error {
	const op = "link"
	ocomps, ochain, err := t.resolve(op, oldPath)
	if err != nil {
		return err
	}
	oclean := JoinPath(ocomps)
	n := ochain[len(ochain)-1]
	if n.kind == KindDir {
		return pathErr(op, oclean, fmt.Errorf("cannot hard-link a directory: %w", ErrPermission))
	}
	ncomps, _, existing, err := t.entryOf(op, newPath)
	if err != nil {
		return err
	}
	nclean := JoinPath(ncomps)
	if existing != nil {
		return pathErr(op, nclean, ErrExists)
	}
	if err := t.checkQuota(0, 1, 0, 0); err != nil {
		return pathErr(op, nclean, err)
	}
	stub := &node{kind: kindLink, ino: n.ino, target: strconv.FormatInt(n.ino, 10), uid: NoOwner, gid: NoOwner, nlink: 1}
	if n.kind != kindLink {
		if err := t.hideInode(op, oclean, n, ocomps, stub); err != nil {
			return err
		}
	}
	ichain, icomps, err := t.inodeOf(op, oclean, stub)
	if err != nil {
		return err
	}
	if ichain[2].nlink >= MaxLinks {
		return pathErr(op, oclean, ErrTooManyLinks)
	}
	if err := t.makeWritable(ichain, icomps); err != nil {
		return err
	}
	if err := t.addLinks(ichain[2], 1); err != nil {
		return err
	}
	// The new name: its parent is walked again, as makeWritable may
	// have copied its ancestors.
	parent, err := t.walk(op, nclean, ncomps[:len(ncomps)-1])
	if err != nil {
		return err
	}
	if err := t.makeWritable(parent, ncomps[:len(ncomps)-1]); err != nil {
		return err
	}
	dir := parent[len(parent)-1]
	if _, err := t.insertNode(stub); err != nil {
		return err
	}
	if err := t.link(dir.id, ncomps[len(ncomps)-1], stub.id); err != nil {
		return err
	}
	if err := t.touchDir(dir); err != nil {
		return err
	}
	t.v.files++
	t.s.hints.note(t.v.id, stub.target, oclean, false)
	t.s.hints.note(t.v.id, stub.target, nclean, false)
	t.audit("link", oclean, map[string]any{"to": nclean})
	return nil
}

// addLinks changes the link count of inode n, which is writable, by k,
// and sets its change time.
func (t *Tx) addLinks(n *node, k int64) error {
	n.nlink += k
	n.ctime = t.now
	if _, err := t.exec(`UPDATE nodes SET nlink=?, ctime=? WHERE id=?`, n.nlink, n.ctime, n.id); err != nil {
		return fmt.Errorf("update node: %w", err)
	}
	return nil
}

// hideInode moves n, the entry at comps (not a stub), into the hidden
// directory under its inode number, and puts a copy of stub in its place.
func (t *Tx) hideInode(op, p string, n *node, comps []string, stub *node) error {
	all, err := t.walkPrefix([]string{linksName})
	if err != nil {
		return err
	}
	if err := t.makeWritable(all, []string{linksName}); err != nil {
		return err
	}
	var links *node
	if len(all) == 2 {
		links = all[1]
	} else {
		// The first hard link of the tree: make the hidden directory.
		links = &node{kind: KindDir, mode: 0o700, uid: NoOwner, gid: NoOwner, nlink: 2, mtime: t.now, ctime: t.now}
		if _, err := t.insertNode(links); err != nil {
			return err
		}
		if err := t.link(all[0].id, linksName, links.id); err != nil {
			return err
		}
	}
	if err := t.link(links.id, stub.target, n.id); err != nil {
		return err
	}
	parent, err := t.walk(op, p, comps[:len(comps)-1])
	if err != nil {
		return err
	}
	if err := t.makeWritable(parent, comps[:len(comps)-1]); err != nil {
		return err
	}
	s := *stub
	if _, err := t.insertNode(&s); err != nil {
		return err
	}
	return t.link(parent[len(parent)-1].id, comps[len(comps)-1], s.id)
}

// unref drops one name of the inode stub s names: the inode's link count
// goes down, and the last name takes the inode with it.
func (t *Tx) unref(s *node) error {
	ichain, icomps, err := t.inodeOf("unlink", "", s)
	if err != nil {
		return err
	}
	if ichain[2].nlink > 1 {
		if err := t.makeWritable(ichain, icomps); err != nil {
			return err
		}
		if ichain[2].nlink == 2 {
			// One name left: moved back at the end of the transaction
			// if the hints know where it is (relink.go).
			t.s.hints.due(t.v.id, s.target)
		}
		return t.addLinks(ichain[2], -1)
	}
	t.s.hints.forget(t.v.id, s.target)
	if err := t.makeWritable(ichain[:2], icomps[:1]); err != nil {
		return err
	}
	if err := t.unlink(ichain[1].id, s.target); err != nil {
		return err
	}
	in, err := t.node(ichain[2].id)
	if err != nil {
		return err
	}
	if err := t.drop(in); err != nil {
		return err
	}
	t.v.files++ // drop counted the inode as a name; its stub was the name
	return nil
}

// Link makes newPath another name of the entry at oldPath (Tx.Link).
func (v *Vault) Link(ctx context.Context, oldPath, newPath string, meta Meta) error {
	return v.do(ctx, meta, "link", func(t *Tx) error { return t.Link(oldPath, newPath) })
}
