package tree

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"github.com/avfs/avfs/vault"
)

// TestFileDataModel drives the write buffer with random writes, cuts and
// extensions over committed content and compares every read with a plain
// byte slice, and what a commit would store with the same slice.
func TestFileDataModel(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		committed := pattern(r.IntN(3000))
		d := newFileData(&Entry{size: int64(len(committed))})
		model := slices.Clone(committed)
		fetch := func(buf []byte, off int64) (int, error) {
			if off+int64(len(buf)) > d.base {
				t.Fatalf("seed %d: fetch [%d,%d) past base %d", seed, off, off+int64(len(buf)), d.base)
			}
			return copy(buf, committed[off:]), nil
		}
		for step := range 60 {
			switch r.IntN(6) {
			case 0:
				n := int64(r.IntN(4000))
				d.truncate(n)
				if n <= int64(len(model)) {
					model = model[:n]
				} else {
					model = append(model, make([]byte, n-int64(len(model)))...)
				}
			default:
				off := int64(r.IntN(4000))
				data := bytes.Repeat([]byte{byte(step + 1)}, r.IntN(700))
				if r.IntN(3) == 0 && len(d.exts) > 0 {
					off = d.exts[len(d.exts)-1].end() // sequential
				}
				d.write(off, data, int64(r.IntN(8000)))
				if len(data) > 0 {
					if end := off + int64(len(data)); end > int64(len(model)) {
						model = append(model, make([]byte, end-int64(len(model)))...)
					}
					copy(model[off:], data)
				}
			}
			if d.size != int64(len(model)) {
				t.Fatalf("seed %d step %d: size %d, want %d", seed, step, d.size, len(model))
			}
			checkExtents(t, d)
			off := int64(r.IntN(len(model) + 10))
			buf := bytes.Repeat([]byte{0xee}, r.IntN(5000)+1)
			n, err := d.read(buf, off, fetch)
			if err != nil {
				t.Fatal(err)
			}
			want := model[min(off, int64(len(model))):]
			want = want[:min(len(want), len(buf))]
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("seed %d step %d: read at %d: got %d bytes %v..., want %d bytes %v...", seed, step, off, n, buf[:min(n, 8)], len(want), want[:min(len(want), 8)])
			}
		}
		// Replaying the buffer onto the committed content, as apply
		// does through a vault transaction, yields the model.
		got := slices.Clone(committed)
		got = got[:d.base]
		for _, x := range d.exts {
			if x.end() > int64(len(got)) {
				got = append(got, make([]byte, x.end()-int64(len(got)))...)
			}
			copy(got[x.off:], x.data)
		}
		if int64(len(got)) < d.size {
			got = append(got, make([]byte, d.size-int64(len(got)))...)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("seed %d: replayed content differs from the model at %d", seed, firstDiff(got, model))
		}
	}
}

func checkExtents(t *testing.T, d *fileData) {
	t.Helper()
	var total int64
	for i, x := range d.exts {
		total += int64(len(x.data))
		if len(x.data) == 0 || x.off < 0 || x.end() > d.size {
			t.Fatalf("extent %d [%d,%d) out of [0,%d)", i, x.off, x.end(), d.size)
		}
		if i > 0 && d.exts[i-1].end() >= x.off {
			t.Fatalf("extents %d and %d overlap or touch: %d >= %d", i-1, i, d.exts[i-1].end(), x.off)
		}
	}
	if total != d.dirtyBytes {
		t.Fatalf("dirtyBytes %d, extents hold %d", d.dirtyBytes, total)
	}
	if d.base > d.size || d.base > d.vsize {
		t.Fatalf("base %d past size %d or committed size %d", d.base, d.size, d.vsize)
	}
}

func TestErrno(t *testing.T) {
	long := "/" + string(bytes.Repeat([]byte("n"), vault.MaxNameLen+1))
	_, longErr := vault.CleanPath(long)
	_, badErr := vault.CleanPath("/a/../b")
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{&vault.PathError{Op: "stat", Path: "/x", Err: vault.ErrNotFound}, syscall.ENOENT},
		{vault.ErrExists, syscall.EEXIST},
		{vault.ErrNotDir, syscall.ENOTDIR},
		{vault.ErrIsDir, syscall.EISDIR},
		{vault.ErrNotEmpty, syscall.ENOTEMPTY},
		{badErr, syscall.EINVAL},
		{longErr, syscall.ENAMETOOLONG},
		{vault.ErrInvalidArgument, syscall.EINVAL},
		{&vault.PathError{Op: "write", Path: "/f", Err: &vault.QuotaError{Limit: "max_file_size_mb"}}, syscall.EFBIG},
		{&vault.PathError{Op: "write", Path: "/f", Err: &vault.QuotaError{Limit: "max_files"}}, syscall.EDQUOT},
		{&vault.QuotaError{Limit: "max_size_mb"}, syscall.EDQUOT},
		{vault.ErrQuota, syscall.EDQUOT},
		{vault.ErrReadOnly, syscall.EROFS},
		{vault.ErrConflict, syscall.EBUSY},
		{vault.ErrVaultNotFound, syscall.ESTALE},
		{syscall.ENOSPC, syscall.ENOSPC},
		{bytes.ErrTooLarge, syscall.EIO},
	} {
		if got := Errno(c.err); got != c.want {
			t.Errorf("Errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A sequential write grows its buffer by doubling, below the limit and
// past it (an unlinked file's buffer may pass it): a few allocations for
// thousands of writes, not one copy of the whole buffer per write.
func TestSequentialWritesGrowByDoubling(t *testing.T) {
	chunk := make([]byte, 4096)
	for _, limit := range []int64{1 << 20, 64 << 20} {
		allocs := testing.AllocsPerRun(1, func() {
			d := newFileData(&Entry{})
			for i := range 4096 { // 16 MiB
				d.write(int64(i)*int64(len(chunk)), chunk, limit)
			}
			if d.size != 16<<20 || len(d.exts) != 1 {
				t.Fatalf("size %d in %d extents after 16 MiB of sequential writes", d.size, len(d.exts))
			}
		})
		if allocs > 40 {
			t.Errorf("limit %d: %v allocations for 4,096 sequential writes", limit, allocs)
		}
	}
}
