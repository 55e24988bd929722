package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

// TestChunkGCWithConcurrentPushes: a deleted vault's chunks are removed
// from the fleet's chunk bucket by a sweep that runs while other vaults
// are written, checkpointed (pushed) and forked across two workers with
// their own stores; afterwards every chunk that any head's manifest names
// is still in the bucket. Then the deleted vault's content is written
// again into a vault on the worker that had sent it: its sent marks must
// not make the push skip the chunks the sweep removed.
func TestChunkGCWithConcurrentPushes(t *testing.T) {
	f := startFleet(t)
	f.addWorker("ga")
	f.addWorker("gb")
	ctx := context.Background()
	c := f.client()
	js, _ := jetstream.New(f.conn())
	call := func(v string, op messages.Op, args, out any) {
		t.Helper()
		if err := c.Call(ctx, "default", v, op, args, out); err != nil {
			t.Fatalf("%s %s: %v", op, v, err)
		}
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}

	// "gone" holds content no other vault has; "back", its fork, lives on
	// the same worker and store.
	call("gone", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	call("gone", messages.OpVaultFork, messages.VaultForkArgs{Target: "back"}, nil)
	goneContent := random(200 << 10)
	call("gone", messages.OpWrite, messages.WriteArgs{Path: "/g.bin", Content: goneContent}, nil)
	call("gone", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "g1"}, nil)
	waitPushed(t, js, "default", "gone", "g1")
	before, _, err := worker.LiveChunks(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	call("gone", messages.OpVaultDelete, nil, nil)
	after, _, err := worker.LiveChunks(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var garbage []string
	for k := range before {
		if _, ok := after[k]; !ok {
			garbage = append(garbage, k)
		}
	}
	if len(garbage) < 3 {
		t.Fatalf("deleting gone freed %d chunks, want its 200 KiB file's", len(garbage))
	}

	// Pushes and forks keep running while the sweep does.
	for _, v := range []string{"k1", "k2", "k3"} {
		call(v, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	last := map[string]string{}
	var mu sync.Mutex
	for _, v := range []string{"k1", "k2", "k3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cp := fmt.Sprintf("c%d", i)
				if err := c.Call(ctx, "default", v, messages.OpWrite, messages.WriteArgs{Path: fmt.Sprintf("/f%d", i%4), Content: random(70 << 10)}, nil); err != nil {
					t.Errorf("write %s: %v", v, err)
					return
				}
				if err := c.Call(ctx, "default", v, messages.OpCheckpointSave, messages.CheckpointArgs{Name: cp}, nil); err != nil {
					t.Errorf("checkpoint %s: %v", v, err)
					return
				}
				if i%3 == 2 {
					fork := fmt.Sprintf("%s-fork%d", v, i)
					if err := c.Call(ctx, "default", v, messages.OpVaultFork, messages.VaultForkArgs{Target: fork, Placement: messages.PlacementSpread}, nil); err != nil {
						t.Errorf("fork %s: %v", v, err)
						return
					}
				}
				mu.Lock()
				last[v] = cp
				mu.Unlock()
			}
		}()
	}
	res, err := worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: 2 * time.Second, By: "test"})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep: %+v", res)
	if res.Deleted < len(garbage) || res.Generation != 1 {
		t.Fatalf("sweep deleted %d chunks (generation %d), want at least gone's %d", res.Deleted, res.Generation, len(garbage))
	}
	kv, err := js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range garbage {
		if _, err := kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("chunk %s of the deleted vault: %v, want it gone", k, err)
		}
	}
	for v, cp := range last {
		waitPushed(t, js, "default", v, cp)
	}
	checkHeadsWhole(t, js)

	// The content comes back on the store that sent it before.
	call("back", messages.OpWrite, messages.WriteArgs{Path: "/g.bin", Content: goneContent}, nil)
	call("back", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "b1"}, nil)
	waitPushed(t, js, "default", "back", "b1")
	checkHeadsWhole(t, js)

	// A second sweep now finds nothing more to delete from what is live.
	res, err = worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: time.Second, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation != 2 {
		t.Fatalf("second sweep: generation %d, want 2", res.Generation)
	}
	checkHeadsWhole(t, js)
}

// checkHeadsWhole fails unless every chunk that a live head's manifest
// names is in the chunk bucket: a worker on another machine could take
// over any vault.
func checkHeadsWhole(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	heads, _ := js.KeyValue(ctx, messages.BucketHeads)
	chunks, _ := js.KeyValue(ctx, messages.BucketChunks)
	obs, _ := js.ObjectStore(ctx, messages.BucketVaults)
	keys, err := heads.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := 0
	for k := range keys.Keys() {
		e, err := heads.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var hd messages.Head
		if err := json.Unmarshal(e.Value(), &hd); err != nil {
			t.Fatal(err)
		}
		if hd.Deleted {
			continue
		}
		file := filepath.Join(dir, k+".db")
		if err := obs.GetFile(ctx, hd.Object, file); err != nil {
			t.Fatalf("head %s: manifest %s: %v", k, hd.Object, err)
		}
		hs, err := vault.ManifestChunks(ctx, file)
		os.Remove(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if _, err := chunks.Get(ctx, h.String()); err != nil {
				t.Fatalf("head %s (%s by %s): chunk %s: %v", k, hd.Reason, hd.Worker, h, err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no live head names a chunk: nothing was checked")
	}
}

// TestChunkGCOneSweepAtATime: a sweep started while another is deleting
// is refused with CONFLICT and changes nothing; once the first ends, the
// next runs.
func TestChunkGCOneSweepAtATime(t *testing.T) {
	f := startFleet(t)
	js, _ := jetstream.New(f.conn())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, messages.BucketChunks)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: 3 * time.Second, By: "first"})
		done <- err
	}()
	poll.Until(t, 30*time.Second, "the first sweep announced", func() (bool, error) {
		e, err := kv.Get(ctx, messages.ChunkGCKey)
		if err != nil {
			return false, err
		}
		return strings.Contains(string(e.Value()), `"deleting":true`), fmt.Errorf("state %s", e.Value())
	})
	_, err = worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: time.Second, By: "second"})
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeConflict {
		t.Fatalf("a second sweep during the first: %v, want CONFLICT", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res, err := worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: time.Second, By: "third"})
	if err != nil || res.Generation != 2 {
		t.Fatalf("the sweep after: %+v, %v; want generation 2", res, err)
	}
}

// BenchmarkChunkGC measures a sweep's own cost (settle excluded): 40
// vaults of 16 files of 64 KiB each pushed by one worker, half of them
// deleted, then one sweep reads the 20 remaining manifests and the
// bucket's 640 chunk headers and deletes the 320 unreferenced chunks.
func BenchmarkChunkGC(b *testing.B) {
	f := startFleet(b)
	f.addWorker("bg")
	ctx := context.Background()
	c := f.client()
	js, _ := jetstream.New(f.conn())
	heads, _ := js.KeyValue(ctx, messages.BucketHeads)
	const vaults, files = 40, 16
	var sweep time.Duration
	var deleted int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for v := range vaults {
			name := fmt.Sprintf("b%d-%02d", i, v)
			if err := c.Call(ctx, "default", name, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
				b.Fatal(err)
			}
			for n := range files {
				data := make([]byte, 64<<10)
				rand.Read(data)
				if err := c.Call(ctx, "default", name, messages.OpWrite, messages.WriteArgs{Path: fmt.Sprintf("/f%d", n), Content: data}, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.Call(ctx, "default", name, messages.OpCheckpointSave, messages.CheckpointArgs{Name: "cp"}, nil); err != nil {
				b.Fatal(err)
			}
		}
		for v := range vaults {
			name := fmt.Sprintf("b%d-%02d", i, v)
			poll.Until(b, 60*time.Second, name+" pushed", func() (bool, error) {
				e, err := heads.Get(ctx, messages.VaultKey("default", name))
				if err != nil {
					return false, err
				}
				var hd messages.Head
				json.Unmarshal(e.Value(), &hd)
				return hd.Checkpoint == "cp", nil
			})
			if v%2 == 1 {
				if err := c.Call(ctx, "default", name, messages.OpVaultDelete, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		t0 := time.Now()
		res, err := worker.CollectChunks(ctx, js, worker.ChunkGCOptions{Settle: time.Millisecond, By: "bench"})
		sweep += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		deleted += res.Deleted
		if res.Deleted < vaults/2*files {
			b.Fatalf("sweep deleted %d chunks, want %d: %+v", res.Deleted, vaults/2*files, res)
		}
	}
	b.ReportMetric(sweep.Seconds()*1000/float64(b.N), "sweep-ms")
	b.ReportMetric(float64(deleted)/float64(b.N), "deleted/op")
}

// TestPeriodicChunkGC: workers with fleet.gc_interval set sweep the chunk
// bucket on their own. A deleted vault's chunks go without anyone running
// `avfs fleet gc`, every live head stays whole, and of two workers one
// look per interval sweeps (the claim on the GC state): the marks
// generation grows by one per sweep that found garbage, never by two for
// the same garbage.
func TestPeriodicChunkGC(t *testing.T) {
	f := startFleet(t)
	const every = 2 * time.Second
	for _, id := range []string{"pa", "pb"} {
		st, err := vault.Open(context.Background(), filepath.Join(t.TempDir(), "store.db"), vault.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		serveStore(t, f.conn(), id, t.TempDir(), st, nil, nil, func(o *worker.ServeOptions) {
			o.GCInterval, o.GCSettle = every, time.Second
		})
	}
	f.waitMembers("pa", "pb")
	ctx := context.Background()
	c := f.client()
	js, _ := jetstream.New(f.conn())
	call, must := vaultCaller(t, c, "pgone", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	content := make([]byte, 300<<10)
	rand.Read(content)
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/g.bin", Content: content}, nil))
	must(call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "g1"}, nil))
	waitPushed(t, js, "default", "pgone", "g1")
	keep, mustKeep := vaultCaller(t, c, "pkeep", 60*time.Second)
	mustKeep(keep(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	mustKeep(keep(messages.OpWrite, messages.WriteArgs{Path: "/k.txt", Content: []byte("kept")}, nil))
	mustKeep(keep(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "k1"}, nil))
	waitPushed(t, js, "default", "pkeep", "k1")
	before, _, err := worker.LiveChunks(ctx, js)
	must(err)
	must(call(messages.OpVaultDelete, nil, nil))
	after, _, err := worker.LiveChunks(ctx, js)
	must(err)
	var garbage []string
	for k := range before {
		if _, ok := after[k]; !ok {
			garbage = append(garbage, k)
		}
	}
	if len(garbage) < 3 {
		t.Fatalf("deleting pgone freed %d chunks, want its 300 KiB file's", len(garbage))
	}
	kv, err := js.KeyValue(ctx, messages.BucketChunks)
	must(err)
	poll.Until(t, 90*time.Second, "the deleted vault's chunks swept by the workers", func() (bool, error) {
		for _, k := range garbage {
			if _, err := kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return false, fmt.Errorf("chunk %s: %v", k, err)
			}
		}
		return true, nil
	})
	checkHeadsWhole(t, js)
	// A later look finds no garbage and leaves the generation alone.
	gen := func() (g gcGen) {
		e, err := kv.Get(ctx, messages.ChunkGCKey)
		must(err)
		must(json.Unmarshal(e.Value(), &g))
		return g
	}
	first := gen()
	if first.Gen != 1 {
		t.Fatalf("GC state after the deleted vault's sweep: %+v, want generation 1", first)
	}
	poll.Until(t, 60*time.Second, "a periodic look after the sweep", func() (bool, error) {
		g := gen()
		return g.Checked.After(first.Since), fmt.Errorf("state %+v", g)
	})
	if g := gen(); g.Gen != 1 || g.Deleting {
		t.Fatalf("GC state after looks with no garbage: %+v, want generation 1, not deleting", g)
	}
	var cat messages.CatResult
	mustKeep(keep(messages.OpCat, messages.PathArgs{Path: "/k.txt"}, &cat))
}

// gcGen is the part of the GC state (messages.ChunkGCKey) tests read.
type gcGen struct {
	Gen      uint64    `json:"gen"`
	Deleting bool      `json:"deleting"`
	Since    time.Time `json:"since"`
	Checked  time.Time `json:"checked"`
}
