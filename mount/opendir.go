package mount

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// noOpendir serves directories without OPENDIR and RELEASEDIR: it answers
// the first OPENDIR with ENOSYS, after which the kernel opens directories
// on its own (FUSE_NO_OPENDIR_SUPPORT) and, by default for such opens,
// keeps their listings cached (FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR, as the
// mount's own OPENDIR answered). git status and find open every directory
// they scan: this saves them two round trips per directory, about half
// of what they cost.
//
// READDIR and READDIRPLUS then arrive without a handle (fh 0). Each is
// served through a handle opened for it alone and released at once: the
// listing is a snapshot of the entry cache, read from the requested
// offset, so no state survives between requests. go-fuse's own handling
// of fh 0 would answer an empty listing.
type noOpendir struct {
	fuse.RawFileSystem
}

func (n noOpendir) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (n noOpendir) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return n.withHandle(cancel, in, out, n.RawFileSystem.ReadDir)
}

func (n noOpendir) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return n.withHandle(cancel, in, out, n.RawFileSystem.ReadDirPlus)
}

// withHandle runs read with a handle of its own when the kernel sent
// none.
func (n noOpendir) withHandle(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList,
	read func(<-chan struct{}, *fuse.ReadIn, *fuse.DirEntryList) fuse.Status) fuse.Status {
	if in.Fh != 0 {
		return read(cancel, in, out)
	}
	var opened fuse.OpenOut
	if st := n.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: in.InHeader, Flags: in.Flags}, &opened); !st.Ok() {
		return st
	}
	r := *in
	r.Fh = opened.Fh
	st := read(cancel, &r, out)
	n.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: opened.Fh, Flags: in.Flags})
	return st
}
