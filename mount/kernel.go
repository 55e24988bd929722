package mount

import (
	"strings"

	"github.com/avfs/avfs/mount/tree"
	"github.com/hanwen/go-fuse/v2/fs"
)

// kernel is the Mount as the tree's tree.Kernel: it turns the tree's
// notes into FUSE notifications.
type kernel Mount

var _ tree.Kernel = (*kernel)(nil)

// Changed tells the kernel in the background to drop inode ino's cached
// attributes and, for off >= 0, its cached content. It runs apart from
// the handler that asks for it: the kernel may need that very request to
// finish before it can process the notification.
func (k *kernel) Changed(ino uint64, off, n int64) {
	m := (*Mount)(k)
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.nodes[ino]
	if in == nil || m.closed {
		return
	}
	m.notifies.Add(1)
	go func() {
		defer m.notifies.Done()
		in.NotifyContent(off, n)
	}()
}

// Forget sends the notes of a catch-up to the kernel, for the nodes it
// holds.
func (k *kernel) Forget(notes []tree.Note) {
	m := (*Mount)(k)
	if m.rootNode == nil {
		return
	}
	root := m.rootNode.EmbeddedInode()
	for _, n := range notes {
		in := kernelNode(root, n.Path)
		switch {
		case in == nil:
		case n.Name != "":
			in.NotifyEntry(n.Name)
		case n.Data:
			in.NotifyContent(0, 0)
		default:
			in.NotifyContent(-1, 0)
		}
	}
}

// Reset drops the kernel's dentries, negative dentries, attributes and
// page caches for every node it knows.
func (k *kernel) Reset(negative map[uint64][]string) {
	m := (*Mount)(k)
	if m.rootNode == nil {
		return
	}
	seen := map[*fs.Inode]bool{}
	var walk func(d *fs.Inode)
	walk = func(d *fs.Inode) {
		if seen[d] {
			return
		}
		seen[d] = true
		d.NotifyContent(0, 0)
		for _, name := range negative[d.StableAttr().Ino] {
			d.NotifyEntry(name)
		}
		for name, c := range d.Children() {
			d.NotifyEntry(name)
			if c.IsDir() {
				walk(c)
			} else if !seen[c] {
				seen[c] = true
				c.NotifyContent(0, 0)
			}
		}
	}
	walk(m.rootNode.EmbeddedInode())
}

// kernelNode is the kernel's node for vault path p, or nil if the kernel
// holds none (then it has nothing cached to forget).
func kernelNode(root *fs.Inode, p string) *fs.Inode {
	in := root
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		if in = in.GetChild(name); in == nil {
			return nil
		}
	}
	return in
}

// track records in as the kernel's node of a regular file, for Changed.
func (m *Mount) track(in *fs.Inode) {
	m.mu.Lock()
	m.nodes[in.StableAttr().Ino] = in
	m.mu.Unlock()
}

// untrack forgets in, which the kernel forgot.
func (m *Mount) untrack(in *fs.Inode) {
	m.mu.Lock()
	if m.nodes[in.StableAttr().Ino] == in {
		delete(m.nodes, in.StableAttr().Ino)
	}
	m.mu.Unlock()
}
