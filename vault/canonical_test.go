package vault

import (
	"context"
	"fmt"
	"testing"
)

// TestUnchangedContentIsNoChange: bytes that come out as they were, after
// a file grew past a short last chunk or zeros were written into a hole,
// are no change in a change summary (found by TestModel: the grown
// file's old last chunk stayed short, and the write stored it padded).
func TestUnchangedContentIsNoChange(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	for i, n := range []int{ChunkSize, ChunkSize + 2, ChunkSize - 16, 100} {
		p, cp := fmt.Sprintf("/f%d", i), fmt.Sprintf("c%d", i)
		mustWrite(t, v, p, content(3, n))
		if _, err := v.WriteAt(ctx, p, 250<<10, nil, Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.SaveCheckpoint(ctx, cp, "", false, Meta{}); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{int64(n), 2*ChunkSize - 26, 3 * ChunkSize} {
			if _, err := v.WriteAt(ctx, p, off, make([]byte, 14), Meta{}); err != nil {
				t.Fatal(err)
			}
		}
		ch, err := v.Diff(ctx, cp, "")
		if err != nil {
			t.Fatal(err)
		}
		if !ch.Empty() {
			t.Errorf("size %d: zeros written over zeros: %+v", n, ch)
		}
		want := append(content(3, n), make([]byte, 250<<10-n)...)
		mustRead(t, v, p, want)
	}
}
