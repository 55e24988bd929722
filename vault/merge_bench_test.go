package vault

import (
	"context"
	"testing"
	"time"
)

// BenchmarkMerge merges a fork of an N-file vault back into its source,
// 10 files changed in the fork and 10 others in the source since the fork
// (a dry run per iteration: the same work, rolled back, so every
// iteration merges the same changes). The target: a merge costs what
// changed, not what the vault holds.
func BenchmarkMerge(b *testing.B) {
	for _, sh := range countShapes {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			into := f.fork(b, "merge-into")
			fork := f.name("merge-fork")
			if _, err := f.s.Fork(ctx, "default", into.Name(), fork, "", Meta{}); err != nil {
				b.Fatal(err)
			}
			change10(b, f.s.Vault("default", fork), sh, 1)
			buf := make([]byte, sh.size)
			if err := into.Update(ctx, Meta{}, func(tx *Tx) error {
				for k := range 10 {
					i := k*(sh.files/10) + 53
					benchContent(buf, i, 2)
					if _, err := tx.WriteFile(benchPath(i), buf, WriteOptions{}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			var lat latencies
			for b.Loop() {
				t := time.Now()
				r, err := into.Merge(ctx, fork, MergeOptions{DryRun: true}, Meta{})
				lat.since(t)
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Changes.Modified) != 10 || len(r.Conflicts) != 0 {
					b.Fatalf("merge: %d modified, %d conflicts; want 10, 0", len(r.Changes.Modified), len(r.Conflicts))
				}
			}
			lat.reportMS(b)
		})
	}
}
