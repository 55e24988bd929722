package vault

import (
	"fmt"
	"time"
)

// Changes answered before they are committed. A caller that mirrors the
// tree in memory (mount/tree) answers a create, a chmod or a rename at
// once and commits it later, in a transaction shared with others: it
// reserves the inode numbers it hands out (ReserveInos, CreateWithIno),
// records the time it answered (AtTime) and creates as the process that
// asked (AsOwner), so that the vault ends up with what the caller was
// shown.

// NextIno is the inode number that the next entry created in this
// transaction gets: Mkdir (without parents), Symlink and a WriteFile that
// creates a file each take exactly one number, in order.
func (t *Tx) NextIno() uint64 { return uint64(t.v.nextIno) }

// ReserveInos takes n inode numbers out of the vault's sequence without
// creating anything, and returns the first of them: no later create gets
// any of first … first+n-1 unless it asks for it with CreateWithIno. A
// caller reserves numbers so that it can answer a create at once and
// commit it later. Numbers reserved and never used are simply skipped.
func (t *Tx) ReserveInos(n int) uint64 {
	first := t.v.nextIno
	t.v.nextIno += int64(max(n, 0))
	return uint64(first)
}

// CreateWithIno runs create, which must create exactly one entry (a
// WriteFile that creates a file, Mkdir without parents, or Symlink), and
// gives that entry inode number ino, which must come from ReserveInos and
// not have been used. It fails with ErrInvalidArgument when ino was never
// handed out (creating nothing) or create did not create exactly one
// entry; either error, like create's own, must fail the transaction.
func (t *Tx) CreateWithIno(ino uint64, create func() error) error {
	next := t.v.nextIno
	if ino < 2 || ino >= uint64(next) {
		return fmt.Errorf("create with inode %d: %w", ino, ErrInvalidArgument)
	}
	t.v.nextIno = int64(ino)
	err := create()
	took := t.v.nextIno - int64(ino)
	t.v.nextIno = next
	if err != nil {
		return err
	}
	if took != 1 {
		return fmt.Errorf("create with inode %d: %d entries created: %w", ino, took, ErrInvalidArgument)
	}
	return nil
}

// AtTime runs fn as if the transaction had started at at: what fn
// creates or changes gets at as its modification and change time. A
// caller that answers a change before it commits it shows the time it
// answered; with AtTime the vault records that same time.
func (t *Tx) AtTime(at time.Time, fn func() error) error {
	saved := t.now
	t.now = at.UnixNano()
	defer func() { t.now = saved }()
	return fn()
}

// AtTimes is AtTime, except that the content fn writes or cuts records
// mtime, not at, as the file's modification time (at stays its change
// time), and a file fn creates gets mtime as both its times (its
// directory gets at). A caller that commits a file's writes after later
// changes to it (a link, a chmod) records when the last write was made,
// as the kernel was shown, and the later change time.
func (t *Tx) AtTimes(at, mtime time.Time, fn func() error) error {
	saved := t.modified
	t.modified = mtime.UnixNano()
	defer func() { t.modified = saved }()
	return t.AtTime(at, fn)
}

// AsOwner runs fn with uid and gid as the owner of every entry fn creates
// (in a setgid directory the directory's group, see Inherit). A file
// system creates entries as the calling process.
func (t *Tx) AsOwner(uid, gid uint32, fn func() error) error {
	saved, had := t.owner, t.hasOwner
	t.owner, t.hasOwner = [2]int64{int64(uid), int64(gid)}, true
	defer func() { t.owner, t.hasOwner = saved, had }()
	return fn()
}
