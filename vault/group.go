package vault

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
)

// Group commit. A commit costs more than most write transactions' own
// statements (the WAL frames of every page it touched, the vault row's
// and the request log's pages among them), and the writer connection
// serves one writer at a time. So a writer that finds other writers
// queued behind it (wwait) does not commit: it releases its savepoint,
// leaves the transaction open, and waits; the next writer adds its
// changes under a savepoint of its own, and so on, until one finds
// nobody queued (or the group full) and commits for all. Each writer
// returns only once the transaction holding its changes is committed
// (or with the error that kept it from being committed): nothing is
// acknowledged before it is stored.
//
//   - A writer whose own changes fail rolls back to its savepoint; the
//     others' stay. The first writer has no savepoint: it is alone in the
//     transaction until it lets the next one in.
//   - Everything else that takes the writer lock (lockWriter) commits an
//     open group first, so a group never outlives its queue.
//   - The vault rows cached for writers (vrows, uniq) are updated as each
//     writer's part ends, for the writers after it in the group; a group
//     that fails to commit empties them.

// maxGroup bounds the writers of one group: the first one's reply waits
// for all of them.
const maxGroup = 16

// loneGroups is how many groups of one writer in a row end the yield
// before a commit (leave): the traffic is one writer at a time then, and
// nobody would join.
const loneGroups = 8

// group is one write transaction shared by several writers.
type group struct {
	members int
	done    chan struct{} // closed once the group ended
	err     error         // why it was not committed; set before done closes
}

// member is one writer's part in a group.
type member struct {
	g    *group
	conn *sql.Conn
	sp   bool // under a savepoint: it joined a group others are in
}

const (
	sqlSavepoint  = `SAVEPOINT member`
	sqlRelease    = `RELEASE member`
	sqlRollbackTo = `ROLLBACK TO member`
)

// queueWriter takes the writer lock, counted in wwait while it waits.
func (s *Store) queueWriter() {
	s.wwait.Add(1)
	s.wmu.Lock()
	s.wwait.Add(-1)
}

// lockWriter takes the writer lock for work that is not a group's
// writer: an open group is committed first.
func (s *Store) lockWriter() {
	s.queueWriter()
	if s.grp != nil {
		s.endGroup()
	}
}

// writerExec runs q, one of the fixed statements above, on the writer
// connection; it is not cancelled with a writer's ctx (others' changes
// depend on it). s.wmu is held.
func (s *Store) writerExec(ctx context.Context, q string) error {
	ctx = context.WithoutCancel(ctx)
	st, err := s.writerStmt(ctx, q)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	return mapSQLErr(err)
}

// join makes the caller a member of the open group, or begins one.
// s.wmu is held (queueWriter).
func (s *Store) join(ctx context.Context) (member, error) {
	if g := s.grp; g != nil {
		if err := s.writerExec(ctx, sqlSavepoint); err != nil {
			s.failGroup(err)
			return member{}, err
		}
		g.members++
		return member{g: g, conn: s.wconn, sp: true}, nil
	}
	conn, err := s.begin(ctx)
	if err != nil {
		return member{}, err
	}
	s.grp = &group{members: 1, done: make(chan struct{})}
	return member{g: s.grp, conn: conn}, nil
}

// A Batch lets a series of writes that nobody waits on one by one (a
// takeover replaying a vault's change log) share transactions: a write
// made with WithBatch returns once its changes are in the open group,
// which stays open for the next write, up to maxBatch writes; Commit
// commits it and reports whether every write of the batch was committed.
// Nothing is acknowledged before Commit returns: the caller records
// what it applied only then. A read made with the batch's ctx commits
// first, so it sees the batch's writes. Any other writer (lockWriter, or a write
// without the batch that finds nobody queued) may commit the group
// earlier; Commit still reports its outcome.
type Batch struct {
	groups []*group // the groups the batch's writes left open, in order
}

// maxBatch bounds the writes one batched group takes before it commits
// as any other group does.
const maxBatch = 256

type batchKey struct{}

// WithBatch returns ctx whose writes join b.
func WithBatch(ctx context.Context, b *Batch) context.Context {
	return context.WithValue(ctx, batchKey{}, b)
}

// Commit commits the group b's writes left open and returns the first
// error that kept one of them from being committed.
func (s *Store) Commit(b *Batch) error {
	if len(b.groups) == 0 {
		return nil
	}
	s.queueWriter()
	if s.grp != nil && s.grp == b.groups[len(b.groups)-1] {
		s.endGroup()
	}
	s.wmu.Unlock()
	s.notifyAudit()
	var err error
	for _, g := range b.groups {
		<-g.done
		if err == nil && g.err != nil {
			err = fmt.Errorf("batched writes: commit: %w", g.err)
		}
	}
	b.groups = b.groups[:0]
	return err
}

// commitBatchOf commits the writes ctx's batch left open, if any, before
// a read on another connection: the batch's later writes may depend on
// what its earlier ones wrote (a replayed copy reads its source).
func (s *Store) commitBatchOf(ctx context.Context) error {
	if b, _ := ctx.Value(batchKey{}).(*Batch); b != nil && len(b.groups) > 0 {
		return s.Commit(b)
	}
	return nil
}

// leave ends m's part, keeping its changes or not, and unlocks s.wmu.
// Then the group is committed, unless a writer is queued to join it: then
// leave waits for whoever commits it. A batch's write (b not nil) leaves
// the group open (Batch). It returns, when keep, the error that kept m's
// changes from being committed.
func (s *Store) leave(m member, keep bool, b *Batch) error {
	g := m.g
	switch {
	case m.sp && keep:
		if err := s.writerExec(context.Background(), sqlRelease); err != nil {
			s.failGroup(err)
		}
	case m.sp:
		err := s.writerExec(context.Background(), sqlRollbackTo)
		if err == nil {
			err = s.writerExec(context.Background(), sqlRelease)
		}
		if err != nil {
			s.failGroup(err) // the transaction is gone with the others' changes
		}
	case !keep:
		// Alone in the transaction: it ends with nothing kept.
		s.rollback(m.conn)
		s.grp = nil
		close(g.done)
	}
	if s.grp == g {
		if keep && b != nil && g.members < maxBatch {
			if n := len(b.groups); n == 0 || b.groups[n-1] != g {
				b.groups = append(b.groups, g)
			}
			s.wmu.Unlock()
			return nil
		}
		if s.wwait.Load() == 0 && g.members < maxGroup && s.lone < loneGroups {
			// Nobody queued yet, but writers have been arriving together
			// lately: let the goroutines ready to run have the processor
			// once before committing. A request that was about to write
			// then queues on wmu (wwait) and joins this group instead of
			// paying a commit of its own (decisions §39: with 16 callers,
			// a third fewer WAL writes per request). A writer alone for
			// loneGroups commits in a row does not wait for this.
			runtime.Gosched()
		}
		if s.wwait.Load() > 0 && g.members < maxGroup {
			s.wmu.Unlock()
			if !keep {
				return nil
			}
			<-g.done
			return g.err
		}
		s.endGroup()
	}
	s.wmu.Unlock()
	if !keep {
		return nil
	}
	<-g.done
	return g.err
}

// endGroup commits the open group. s.wmu is held.
func (s *Store) endGroup() {
	g := s.grp
	if g.members > 1 {
		s.lone = 0
	} else if s.lone < loneGroups {
		s.lone++
	}
	if err := s.writerExec(context.Background(), sqlCommit); err != nil {
		s.failGroup(err)
		return
	}
	s.grp = nil
	close(g.done)
}

// failGroup ends the open group without keeping anything: err is what
// its members hear. s.wmu is held.
func (s *Store) failGroup(err error) {
	g := s.grp
	if g == nil {
		return
	}
	if s.wconn != nil {
		s.rollback(s.wconn)
	}
	s.vrows = nil
	clear(s.uniq)
	g.err = err
	s.grp = nil
	close(g.done)
}
