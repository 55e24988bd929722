package vault

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The crash test runs a writer in a child process (this test binary running
// TestCrashHelper), kills it with SIGKILL at a random acknowledged write, and
// checks that the store is sound and holds every acknowledged write.

const (
	crashDBEnv    = "AVFS_VAULT_CRASH_DB"
	crashStartEnv = "AVFS_VAULT_CRASH_START"
	crashVault    = "crash"
)

// crashContent is file n's content: mostly small, every 17th one spans two
// chunks so that a kill can land between a large file's chunk inserts.
func crashContent(n int) []byte {
	size := 1 + n%300
	if n%17 == 0 {
		size = ChunkSize + 1 + n%5000
	}
	return content(n, size)
}

func crashPath(n int) string { return fmt.Sprintf("/f-%d", n) }

// TestCrashHelper is the writer process of TestCrash; it does nothing
// unless started by it. It writes /f-N, N = start, start+1, ..., with
// single WriteFile calls and Update batches, and prints "ack N" once the
// call that wrote /f-N returned nil. It runs until it is killed.
func TestCrashHelper(t *testing.T) {
	db := os.Getenv(crashDBEnv)
	if db == "" {
		t.Skip("writer process of TestCrash")
	}
	start, err := strconv.Atoi(os.Getenv(crashStartEnv))
	if err != nil {
		t.Fatalf("%s: %v", crashStartEnv, err)
	}
	ctx := context.Background()
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Vault("default", crashVault)
	for n := start; n < start+1_000_000; {
		k := 1
		if n%3 == 0 {
			k = 2 + n%4
		}
		var err error
		if k == 1 {
			_, err = v.WriteFile(ctx, crashPath(n), crashContent(n), WriteOptions{}, Meta{})
		} else {
			err = v.Update(ctx, Meta{}, func(tx *Tx) error {
				for i := n; i < n+k; i++ {
					if _, err := tx.WriteFile(crashPath(i), crashContent(i), WriteOptions{}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err != nil {
			t.Fatalf("write /f-%d..%d: %v", n, n+k-1, err)
		}
		var acks strings.Builder
		for i := n; i < n+k; i++ {
			fmt.Fprintf(&acks, "ack %d\n", i)
		}
		if _, err := os.Stdout.WriteString(acks.String()); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	t.Fatal("writer was never killed")
}

func TestCrash(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "crash.db")
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "default", crashVault, Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	acked := map[int]bool{}
	next := 0
	for round := range 3 {
		killAt := 200 + rand.IntN(500)
		got := runCrashWriter(t, db, next, killAt, acked)
		t.Logf("round %d: killed after %d acks (asked for %d), %d acknowledged in all", round, got, killAt, len(acked))
		for n := range acked {
			next = max(next, n+1)
		}
		checkCrashStore(t, db, acked)
	}
}

// runCrashWriter starts the writer at file start, kills it after killAt
// acks, records every ack it read (including those printed between the
// kill and the writer's death) and returns how many it read.
func runCrashWriter(t testing.TB, db string, start, killAt int, acked map[int]bool) int {
	t.Helper()
	cmd := osexec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDBEnv+"="+db, crashStartEnv+"="+strconv.Itoa(start))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n, killed := 0, false
	var other []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		num, ok := strings.CutPrefix(line, "ack ")
		if !ok {
			other = append(other, line)
			continue
		}
		i, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("writer printed %q: %v", line, err)
		}
		acked[i] = true
		n++
		if n == killAt {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("writer exited after %d acks, before the kill at %d: %v\nstdout: %s\nstderr: %s", n, killAt, err, strings.Join(other, "\n"), stderr.String())
	}
	var ee *osexec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer exit: got %v, want killed by SIGKILL\nstderr: %s", err, stderr.String())
	}
	return n
}

// checkCrashStore opens the store after a crash and checks that it passes
// integrity_check, that every acknowledged file holds exactly its content,
// and that any other file (written but killed before its ack) is whole.
func checkCrashStore(t testing.TB, db string, acked map[int]bool) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("default", crashVault)
	es, err := v.ReadDir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	present := map[int]bool{}
	var total int64
	for _, e := range es {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name, "f-"))
		if err != nil || e.Kind != KindFile {
			t.Fatalf("unexpected entry %s (%s)", e.Path, e.Kind)
		}
		present[n] = true
		total += e.Size
	}
	for n := range acked {
		if !present[n] {
			t.Fatalf("acknowledged %s missing after kill", crashPath(n))
		}
	}
	for n := range present {
		got, _, err := v.ReadFile(ctx, crashPath(n))
		if err != nil {
			t.Fatalf("read %s: %v", crashPath(n), err)
		}
		if want := crashContent(n); !bytes.Equal(got, want) {
			t.Fatalf("%s after kill: got %d bytes, want %d bytes of its content (acknowledged: %v)", crashPath(n), len(got), len(want), acked[n])
		}
	}
	in, err := v.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Files != int64(len(present)) || in.Bytes != total {
		t.Fatalf("info after kill: got files=%d bytes=%d, want %d %d", in.Files, in.Bytes, len(present), total)
	}
}
