package vault

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestReserveInosAndCreateWithIno(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "v", Quota{})
	var first uint64
	if err := v.Update(ctx, Meta{}, func(tx *Tx) error {
		first = tx.ReserveInos(10)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A create that asks for nothing skips the reserved numbers.
	mustWrite(t, v, "/plain", []byte("p"))
	st, err := v.Stat(ctx, "/plain")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ino != first+10 {
		t.Fatalf("ino of a plain create: got %d, want %d (after the 10 reserved from %d)", st.Ino, first+10, first)
	}

	// Reserved numbers are used in any order, by any kind of entry.
	if err := v.Update(ctx, Meta{}, func(tx *Tx) error {
		if err := tx.CreateWithIno(first+3, func() error { return tx.Mkdir("/d", 0o755, false) }); err != nil {
			return err
		}
		if err := tx.CreateWithIno(first+1, func() error {
			_, err := tx.WriteFile("/d/f", []byte("data"), WriteOptions{Exclusive: true})
			return err
		}); err != nil {
			return err
		}
		return tx.CreateWithIno(first, func() error { return tx.Symlink("d/f", "/l") })
	}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint64{"/d": first + 3, "/d/f": first + 1, "/l": first} {
		st, err := v.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ino != want {
			t.Fatalf("ino of %s: got %d, want %d", p, st.Ino, want)
		}
	}
	mustRead(t, v, "/d/f", []byte("data"))
	mustWrite(t, v, "/plain2", nil)
	if st, _ := v.Stat(ctx, "/plain2"); st.Ino != first+11 {
		t.Fatalf("ino after reserved creates: got %d, want %d", st.Ino, first+11)
	}

	// A number never handed out, or a create that makes two entries,
	// is refused.
	err = v.Update(ctx, Meta{}, func(tx *Tx) error {
		return tx.CreateWithIno(first+100, func() error { return tx.Mkdir("/x", 0, false) })
	})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unreserved ino: got %v, want ErrInvalidArgument", err)
	}
	err = v.Update(ctx, Meta{}, func(tx *Tx) error {
		return tx.CreateWithIno(first+5, func() error { return tx.Mkdir("/a/b", 0, true) })
	})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("two entries: got %v, want ErrInvalidArgument", err)
	}
	if _, err := v.Stat(ctx, "/a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("/a after the refused create: got %v, want not found", err)
	}
}

func TestAtTime(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "v", Quota{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	var txTime time.Time
	if err := v.Update(ctx, Meta{}, func(tx *Tx) error {
		txTime = tx.Time()
		if err := tx.AtTime(at, func() error { return tx.Mkdir("/d", 0o755, false) }); err != nil {
			return err
		}
		if !tx.Time().Equal(txTime) {
			t.Fatalf("Time after AtTime: got %v, want %v", tx.Time(), txTime)
		}
		_, err := tx.WriteFile("/f", []byte("x"), WriteOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]time.Time{"/d": at, "/f": txTime} {
		st, err := v.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mtime.Equal(want) || !st.Ctime.Equal(want) {
			t.Fatalf("%s: mtime %v ctime %v, want %v", p, st.Mtime, st.Ctime, want)
		}
	}
}
