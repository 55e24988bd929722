package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/transfer"
	"github.com/avfs/avfs/messages"
)

// writeRandomFile writes size pseudo-random bytes to path and returns
// their SHA-256.
func writeRandomFile(t testing.TB, path string, size int64, seed uint64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	r := rand.New(rand.NewPCG(seed, seed+1))
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(int64(len(buf)), left)
		for i := 0; i+8 <= int(n); i += 8 {
			v := r.Uint64()
			for k := range 8 {
				buf[i+k] = byte(v >> (8 * k))
			}
		}
		if _, err := io.MultiWriter(f, h).Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
	return [32]byte(h.Sum(nil))
}

func fileSum(t testing.TB, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// catSum reads the JSON document `avfs cat` prints when its stdout is not
// a terminal, a file's content as base64, and returns the SHA-256 of the
// content, streaming (the document of a 200 MB file is 280 MB).
func catSum(t testing.TB, r io.Reader, path string, size int64) [32]byte {
	t.Helper()
	br := bufio.NewReaderSize(r, 1<<20)
	head := fmt.Sprintf(`{"path":%q,"size":%d,"content_base64":"`, path, size)
	got := make([]byte, len(head))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != head {
		t.Fatalf("cat printed %q, want it to start with %q (%v)", got, head, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, base64.NewDecoder(base64.StdEncoding, &untilQuote{r: br})); err != nil {
		t.Fatal(err)
	}
	if tail, _ := io.ReadAll(br); string(tail) != "}\n" {
		t.Fatalf("cat's document ends with %q", tail)
	}
	return [32]byte(h.Sum(nil))
}

// untilQuote reads r up to the next '"', which it consumes.
type untilQuote struct {
	r    *bufio.Reader
	pend []byte
	done bool
}

func (u *untilQuote) Read(p []byte) (int, error) {
	for len(u.pend) == 0 {
		if u.done {
			return 0, io.EOF
		}
		s, err := u.r.ReadSlice('"')
		switch {
		case err == nil:
			s, u.done = s[:len(s)-1], true
		case !errors.Is(err, bufio.ErrBufferFull):
			return 0, err
		}
		u.pend = s
	}
	n := copy(p, u.pend)
	u.pend = u.pend[n:]
	return n, nil
}

// cliProc runs the avfs binary against the fleet with stdin and stdout
// as given, and fails the test on a non-zero exit.
func (f *fleet) cliProc(stdin io.Reader, stdout io.Writer, args ...string) {
	f.t.Helper()
	cmd := exec.Command(binary(f.t), append([]string{"--nats", f.url}, args...)...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	defer func() { f.t.Logf("avfs %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)) }()
	if err := cmd.Run(); err != nil {
		f.t.Fatalf("avfs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
}

// transferObjects lists what is left in namespace ns's transfer bucket.
func transferObjects(t testing.TB, js jetstream.JetStream, ns string) []string {
	t.Helper()
	ctx := context.Background()
	obs, err := transfer.Bucket(ctx, js, ns)
	if errors.Is(err, transfer.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	return names
}

// TestLargeContentThroughFleet: a 200 MB file goes through the fleet
// with the CLI as a separate process (write from stdin, cat to stdout),
// a host tree holding a 20 MB file is imported, and a vault is exported
// to a file of the caller and imported back, all through the transfer
// bucket; nothing is left in it afterwards. What no message can carry is
// refused at once, and a host path of the worker is refused.
func TestLargeContentThroughFleet(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	sum := writeRandomFile(t, big, 200<<20, 1)

	f.cliProc(nil, io.Discard, "vault", "create", "large")
	in, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	f.cliProc(in, &out, "--vault", "large", "--json", "write", "/big.bin")
	in.Close()
	var wr messages.WriteResult
	if err := json.Unmarshal(out.Bytes(), &wr); err != nil || wr.Size != 200<<20 {
		t.Fatalf("write answered %s (%v)", out.String(), err)
	}
	back := filepath.Join(dir, "back.bin")
	bf, err := os.Create(back)
	if err != nil {
		t.Fatal(err)
	}
	f.cliProc(nil, bf, "--vault", "large", "--json", "cat", "/big.bin")
	bf.Seek(0, io.SeekStart)
	if catSum(t, bf, "/big.bin", 200<<20) != sum {
		t.Fatal("cat of the 200 MB file differs from what was written")
	}
	bf.Close()

	// A host tree with a 20 MB file among small ones.
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	sum20 := writeRandomFile(t, filepath.Join(tree, "sub", "twenty.bin"), 20<<20, 2)
	os.WriteFile(filepath.Join(tree, "small.txt"), []byte("small\n"), 0o644)
	out.Reset()
	f.cliProc(nil, &out, "--vault", "large", "--json", "import", tree, "/tree")
	var br messages.BatchResult
	if err := json.Unmarshal(out.Bytes(), &br); err != nil || br.Files != 2 || br.Bytes != 20<<20+6 {
		t.Fatalf("import answered %s (%v)", out.String(), err)
	}
	out.Reset()
	f.cliProc(nil, &out, "--vault", "large", "cat", "/tree/sub/twenty.bin")
	if sha256.Sum256(out.Bytes()) != sum20 { // cat into a pipe writes the bytes
		t.Fatal("the imported 20 MB file differs")
	}

	// Export to a file of this machine, import it back as another vault.
	exp := filepath.Join(dir, "large.avfs")
	out.Reset()
	f.cliProc(nil, &out, "--json", "vault", "export", "large", exp)
	var tr messages.TransferResult
	if err := json.Unmarshal(out.Bytes(), &tr); err != nil || tr.File != exp || tr.Object != nil {
		t.Fatalf("export answered %s (%v)", out.String(), err)
	}
	f.cliProc(nil, io.Discard, "vault", "import", exp, "copy")
	out.Reset()
	f.cliProc(nil, &out, "--vault", "copy", "--json", "cat", "/tree/sub/twenty.bin")
	if catSum(t, &out, "/tree/sub/twenty.bin", 20<<20) != sum20 {
		t.Fatal("the file differs in the imported copy")
	}

	js, _ := jetstream.New(f.conn())
	if left := transferObjects(t, js, "default"); len(left) != 0 {
		t.Fatalf("transfers left objects behind: %v", left)
	}

	// Inline content no message can carry: refused at once, for good.
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var e *messages.Error
	err = c.Call(ctx, "default", "large", messages.OpWrite, messages.WriteArgs{Path: "/inline", Content: make([]byte, 10<<20)}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("a 10 MB inline write: want INVALID_ARGUMENT, got %v", err)
	}
	// A reply too large: a plain cat of the big file.
	err = c.Call(ctx, "default", "large", messages.OpCat, messages.CatArgs{Path: "/big.bin"}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument || e.Details["max_reply"] == nil {
		t.Fatalf("cat of 200 MB without object: want INVALID_ARGUMENT with max_reply, got %v", err)
	}
	// The old wire form, a path on the worker's machine.
	target := filepath.Join(t.TempDir(), "on-the-worker.avfs")
	err = c.Call(ctx, "default", "large", messages.OpVaultExport, messages.VaultTransferArgs{File: target}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("export to a host path: want INVALID_ARGUMENT, got %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the worker wrote %s: %v", target, err)
	}
	err = c.Call(ctx, "default", "other", messages.OpVaultImport, messages.VaultTransferArgs{File: exp}, nil)
	if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("import from a host path: want INVALID_ARGUMENT, got %v", err)
	}
}

// An export through a fleet into a directory that holds an earlier
// export replaces the symlinks the vault's content put there instead of
// writing through them, as the in-process export does.
func TestExportThroughFleetFollowsNoSymlink(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The symlinks come in with an import of a host tree that has them.
	src := t.TempDir()
	if err := errors.Join(os.Symlink(victim, filepath.Join(src, "x")), os.Symlink(outside, filepath.Join(src, "d"))); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	f.cliProc(nil, io.Discard, "vault", "create", "v")
	f.cliProc(nil, io.Discard, "--vault", "v", "import", src, "/")
	f.cliProc(nil, io.Discard, "--vault", "v", "export", "/", out)
	f.cliProc(nil, io.Discard, "--vault", "v", "rm", "/x")
	f.cliProc(nil, io.Discard, "--vault", "v", "rm", "/d")
	f.cliProc(strings.NewReader("vault's\n"), io.Discard, "--vault", "v", "write", "/x")
	f.cliProc(strings.NewReader("vault's\n"), io.Discard, "--vault", "v", "write", "-p", "/d/planted")
	f.cliProc(nil, io.Discard, "--vault", "v", "export", "/", out)
	if b, _ := os.ReadFile(victim); string(b) != "host's\n" {
		t.Fatalf("export wrote through the symlink /x: the host file holds %q", b)
	}
	if _, err := os.Lstat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("export wrote through the symlink /d into %s: %v", outside, err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "d", "planted")); err != nil || string(b) != "vault's\n" {
		t.Fatalf("d/planted after the second export: %q %v", b, err)
	}
	// A refused export (its source is not there) makes nothing.
	missing := filepath.Join(t.TempDir(), "out")
	if res, code := f.avfsCLI("--vault", "v", "export", "/nope", missing); code == 0 {
		t.Fatalf("export of /nope succeeded: %s", res)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused export made %s: %v", missing, err)
	}
}
