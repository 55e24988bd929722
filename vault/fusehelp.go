package vault

// Read helpers for the FUSE mount (package mount), which mirrors the tree
// in memory and learns about the entries it creates from the transaction
// that creates them rather than from a second path walk.

// NextIno is the inode number that the next entry created in this
// transaction gets: Mkdir (without parents), Symlink and a WriteFile that
// creates a file each take exactly one number, in order.
func (t *Tx) NextIno() uint64 { return uint64(t.v.nextIno) }
