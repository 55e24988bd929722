package vault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openClockStore(t testing.TB, d Defaults) (*Store, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "store.db"), Options{Now: c.now, Defaults: d})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s, c
}

func checkpointNames(t testing.TB, v *Vault) []string {
	t.Helper()
	cs, err := v.Checkpoints(context.Background())
	must(t, err)
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestAutoCheckpointRetention(t *testing.T) {
	ctx := context.Background()
	s, c := openClockStore(t, Defaults{AutoKeep: 3})
	_, err := s.Create(ctx, "default", "r", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "r")
	_, err = v.SaveCheckpoint(ctx, "named", "", false, Meta{})
	must(t, err)
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		c.add(time.Second)
		_, err := v.SaveCheckpoint(ctx, n, "", true, Meta{})
		must(t, err)
	}
	if got := checkpointNames(t, v); len(got) != 4 || got[0] != "named" || got[1] != "a3" || got[3] != "a5" {
		t.Fatalf("checkpoints with auto_keep 3: %v, want named a3 a4 a5", got)
	}
	// The vault's own setting overrides the store's; age prunes too, and
	// the checkpoint just saved always stays.
	keep, age := int64(10), 90*time.Second
	e, err := v.SetSettings(ctx, Settings{AutoKeep: &keep, AutoMaxAge: &age}, Meta{})
	must(t, err)
	if e.AutoKeep != 10 || e.AutoMaxAge != age || e.QuotaMode != QuotaLogical {
		t.Fatalf("effective settings %+v", e)
	}
	// A fork inherits the settings, not an expiry.
	_, err = s.ForkWith(ctx, "default", "r", "r2", ForkOptions{}, Meta{})
	must(t, err)
	if e2, err := s.Vault("default", "r2").Settings(ctx); err != nil || e2.AutoKeep != 10 || e2.AutoMaxAge != age || e2.ExpiresAt != nil {
		t.Fatalf("fork's settings %+v (%v), want its source's", e2, err)
	}
	c.add(time.Minute)
	_, err = v.SaveCheckpoint(ctx, "a6", "", true, Meta{})
	must(t, err)
	if got := checkpointNames(t, v); len(got) != 5 {
		t.Fatalf("after a minute: %v, want all four autos kept (younger than 90s) plus a6", got)
	}
	c.add(time.Hour)
	_, err = v.SaveCheckpoint(ctx, "a7", "", true, Meta{})
	must(t, err)
	if got := checkpointNames(t, v); len(got) != 2 || got[0] != "named" || got[1] != "a7" {
		t.Fatalf("after an hour: %v, want named a7 (the named one never goes)", got)
	}
	// Retention keeps restores working: the pruned checkpoints' content
	// is freed by GC, what the survivors hold is not.
	_, err = s.GC(ctx)
	must(t, err)
	_, err = v.RestoreCheckpoint(ctx, "named", Meta{})
	must(t, err)
	bad := int64(-1)
	if _, err := v.SetSettings(ctx, Settings{AutoKeep: &bad}, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("auto_keep -1: %v", err)
	}
}

func TestForkTTLSweep(t *testing.T) {
	ctx := context.Background()
	s, c := openClockStore(t, Defaults{})
	_, err := s.Create(ctx, "default", "base", Quota{}, Meta{})
	must(t, err)
	_, err = s.Vault("default", "base").WriteFile(ctx, "/a", []byte("x"), WriteOptions{}, Meta{})
	must(t, err)
	res, err := s.ForkWith(ctx, "default", "base", "tmp", ForkOptions{TTL: time.Hour}, Meta{})
	must(t, err)
	_, err = s.ForkWith(ctx, "default", "base", "keep", ForkOptions{}, Meta{})
	must(t, err)
	in, err := s.Vault("default", "tmp").Info(ctx)
	must(t, err)
	if in.ExpiresAt == nil || !in.ExpiresAt.Equal(c.now().Add(time.Hour)) || res.Info.Parent == nil {
		t.Fatalf("fork info %+v, want expiry an hour from now", in)
	}
	gone, err := s.SweepExpired(ctx, nil)
	must(t, err)
	if len(gone) != 0 {
		t.Fatalf("swept %v before the expiry", gone)
	}
	c.add(time.Hour)
	// Someone else's vault is not swept by this owner.
	gone, err = s.SweepExpired(ctx, func(e Expired) bool { return e.Worker == "other" })
	must(t, err)
	if len(gone) != 0 {
		t.Fatalf("swept %v that it does not own", gone)
	}
	gone, err = s.SweepExpired(ctx, nil)
	must(t, err)
	if len(gone) != 1 || gone[0] != "default/tmp" {
		t.Fatalf("swept %v, want default/tmp", gone)
	}
	if ok, _ := s.Vault("default", "tmp").Exists(ctx); ok {
		t.Fatal("expired fork still exists")
	}
	for _, n := range []string{"base", "keep"} {
		if ok, _ := s.Vault("default", n).Exists(ctx); !ok {
			t.Fatalf("%s was swept too", n)
		}
	}
	if _, err := s.ForkWith(ctx, "default", "base", "neg", ForkOptions{TTL: -time.Second}, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative ttl: %v", err)
	}
}

func TestUniqueQuotaCountsDistinctContent(t *testing.T) {
	ctx := context.Background()
	s, _ := openClockStore(t, Defaults{})
	one := int64(1)
	_, err := s.Create(ctx, "default", "q", Quota{MaxSizeMB: &one}, Meta{})
	must(t, err)
	v := s.Vault("default", "q")
	blob := noise(1, 600<<10)
	_, err = v.WriteFile(ctx, "/a.bin", blob, WriteOptions{}, Meta{})
	must(t, err)
	// Logical: a copy would make 1.2 MB.
	err = v.Copy(ctx, "/a.bin", "/b.bin", false, Meta{})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Mode != QuotaLogical || qe.Limit != "max_size_mb" {
		t.Fatalf("copy in logical mode: %v, want a logical max_size_mb error", err)
	}
	mode := QuotaUnique
	_, err = v.SetSettings(ctx, Settings{QuotaMode: mode}, Meta{})
	must(t, err)
	// Unique: the copy shares its chunks, and so does a write of the
	// same bytes; new content past the limit is refused.
	must(t, v.Copy(ctx, "/a.bin", "/b.bin", false, Meta{}))
	_, err = v.WriteFile(ctx, "/c.bin", blob, WriteOptions{}, Meta{})
	if err != nil {
		// A write is checked before its content is hashed: its logical
		// growth counts, so this one is refused; the copy above is what
		// unique mode lets through.
		if !errors.As(err, &qe) || qe.Mode != QuotaUnique {
			t.Fatalf("write in unique mode: %v", err)
		}
	}
	other := noise(2, 600<<10)
	_, err = v.WriteFile(ctx, "/d.bin", other, WriteOptions{}, Meta{})
	if !errors.As(err, &qe) || qe.Mode != QuotaUnique || qe.Current != int64(len(blob)) {
		t.Fatalf("new content past the unique limit: %v (%+v), want unique usage %d", err, qe, len(blob))
	}
	// Small writes after one exact count use the bound it left (no walk
	// each), and still stop at the limit: 600 KiB + 4 × 100 KiB fit.
	n := 0
	for ; n < 10; n++ {
		if _, err = v.WriteFile(ctx, fmt.Sprintf("/n%d", n), noise(uint64(10+n), 100<<10), WriteOptions{}, Meta{}); err != nil {
			break
		}
	}
	if n != 4 || !errors.As(err, &qe) || qe.Mode != QuotaUnique || qe.Current != int64(len(blob))+4*100<<10 {
		t.Fatalf("%d small writes fit, then %v: want 4, then a unique quota error at %d", n, err, len(blob)+4*100<<10)
	}
	for i := range n {
		must(t, v.Remove(ctx, fmt.Sprintf("/n%d", i), RemoveOptions{}, Meta{}))
	}
	// A rewrite that does not grow a file still brings new content: it
	// counts, so unique mode cannot be bypassed by copying, then
	// overwriting the copy.
	if _, err = v.WriteFile(ctx, "/b.bin", other, WriteOptions{}, Meta{}); !errors.As(err, &qe) || qe.Mode != QuotaUnique {
		t.Fatalf("same-size overwrite of the copy with new content: %v, want a unique quota error", err)
	}
	// A small write in place counts the chunk it touches.
	_, err = v.WriteAt(ctx, "/b.bin", 1000, []byte("y"), Meta{})
	must(t, err)
	in, err := v.Info(ctx)
	must(t, err)
	if in.Bytes != 2*int64(len(blob)) || in.StoredBytes != int64(len(blob))+ChunkSize {
		t.Fatalf("info %+v: want logical 2×, stored 1× the blob and the chunk rewritten", in)
	}
}

func TestExportCarriesHistoryAndSettings(t *testing.T) {
	ctx := context.Background()
	s, _ := openClockStore(t, Defaults{})
	_, err := s.Create(ctx, "default", "src", Quota{}, Meta{})
	must(t, err)
	src := s.Vault("default", "src")
	for _, c := range []string{"one", "two"} {
		_, err := src.WriteFile(ctx, "/f", []byte(c), WriteOptions{}, Meta{})
		must(t, err)
	}
	// A fork sees its source's history: the export holds all of it.
	_, err = s.ForkWith(ctx, "default", "src", "fk", ForkOptions{TTL: time.Hour}, Meta{})
	must(t, err)
	fk := s.Vault("default", "fk")
	_, err = fk.WriteFile(ctx, "/f", []byte("three"), WriteOptions{}, Meta{})
	must(t, err)
	keep := int64(7)
	_, err = fk.SetSettings(ctx, Settings{AutoKeep: &keep, QuotaMode: QuotaUnique, ExpiresAt: ptrTime(time.Now().Add(time.Hour))}, Meta{})
	must(t, err)
	_, err = fk.SetHistory(ctx, HistorySettings{Keep: 20}, Meta{})
	must(t, err)
	file := filepath.Join(t.TempDir(), "fk.avfs")
	_, err = s.Export(ctx, "default", "fk", file)
	must(t, err)

	s2, _ := openClockStore(t, Defaults{})
	_, err = s2.Import(ctx, file, "default", "moved", Meta{})
	must(t, err)
	m := s2.Vault("default", "moved")
	if got := versionsOf(t, m, "/f"); len(got) != 3 {
		t.Fatalf("imported log %v, want 3 versions", got)
	}
	if got := readVersion(t, m, "/f", 1); got != "one" {
		t.Fatalf("imported v1 %q", got)
	}
	e, err := m.Settings(ctx)
	must(t, err)
	if e.AutoKeep != 7 || e.QuotaMode != QuotaUnique || e.ExpiresAt != nil {
		t.Fatalf("imported settings %+v: want auto_keep 7, unique, and no expiry (an import is a new vault)", e)
	}
	hs, err := m.History(ctx)
	must(t, err)
	if hs.Keep != 20 {
		t.Fatalf("imported history settings %+v", hs)
	}
	// Receive (a handoff) keeps the expiry, and replaces the old copy's
	// history with the new one's.
	_, err = s2.Receive(ctx, file, "default", "moved", Meta{})
	must(t, err)
	if got := versionsOf(t, m, "/f"); len(got) != 3 {
		t.Fatalf("received log %v, want 3 versions (not 6)", got)
	}
	e, err = m.Settings(ctx)
	must(t, err)
	if e.ExpiresAt == nil {
		t.Fatal("received vault lost its expiry")
	}
	// GC keeps what the imported history references.
	_, err = s2.GC(ctx)
	must(t, err)
	if got := readVersion(t, m, "/f", 2); got != "two" {
		t.Fatalf("v2 after gc %q", got)
	}
	// A manifest lists the versions' chunks too, so a receiver fetches them.
	hs2, err := ManifestChunks(ctx, file)
	must(t, err)
	if len(hs2) != 3 {
		t.Fatalf("manifest chunks %d, want 3 (one per distinct content)", len(hs2))
	}
}

// noise is n bytes that no two chunks share.
func noise(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func ptrTime(t time.Time) *time.Time { return &t }

func TestStatsCompactAuditClear(t *testing.T) {
	ctx := context.Background()
	s, c := openClockStore(t, Defaults{})
	_, err := s.Create(ctx, "default", "m", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "m")
	big := noise(3, 4<<20)
	_, err = v.WriteFile(ctx, "/big", big, WriteOptions{}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/copy", big, WriteOptions{}, Meta{})
	must(t, err)
	vs, err := v.Stats(ctx)
	must(t, err)
	if vs.Files != 2 || vs.LogicalBytes != 8<<20 || vs.UniqueBytes != 4<<20 || vs.Versions != 2 || vs.AuditEvents == 0 {
		t.Fatalf("vault stats %+v", vs)
	}
	for _, p := range []string{"/big", "/copy"} {
		_, err = v.WriteFile(ctx, p, []byte("x"), WriteOptions{}, Meta{})
		must(t, err)
	}
	_, err = v.Prune(ctx, 1, 0, false, Meta{})
	must(t, err)
	ss, err := s.Stats(ctx)
	must(t, err)
	if ss.Vaults != 1 || ss.Chunks == 0 || ss.Orphans.Bytes != 4<<20 || ss.DBBytes == 0 {
		t.Fatalf("store stats %+v, want 4 MiB of orphans", ss)
	}
	_, err = s.GC(ctx)
	must(t, err)
	r, err := s.Compact(ctx)
	must(t, err)
	if r.FreedBytes < 4<<20 || r.AfterBytes >= r.BeforeBytes {
		t.Fatalf("compact %+v, want at least the 4 MiB gc freed back", r)
	}
	// Audit clear keeps the last minute and the newest event.
	n0 := vs.AuditEvents
	c.add(time.Hour)
	n, err := v.AuditClear(ctx, c.now(), true, Meta{})
	must(t, err)
	if n == 0 {
		t.Fatal("dry run found nothing to clear")
	}
	again, err := v.AuditClear(ctx, c.now(), false, Meta{})
	must(t, err)
	if again != n {
		t.Fatalf("cleared %d, dry run said %d", again, n)
	}
	evs, err := v.Audit(ctx, AuditFilter{})
	must(t, err)
	if len(evs) != 2 || evs[1].Action != "audit.clear" || n0 == 0 {
		t.Fatalf("after clear: %d events (%v), want the newest old one and audit.clear", len(evs), evs)
	}
}
