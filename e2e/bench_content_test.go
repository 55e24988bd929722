package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procKB reads a "Vm…:  N kB" line of /proc/<pid>/status.
func procKB(b testing.TB, pid int, field string) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkFleetFile1GiB writes a 1 GiB file through the fleet with the
// CLI (`avfs write` from stdin) and reads it back (`avfs cat`, JSON
// through a pipe), against `avfs serve`, each a real process, and reports
// how much each process's peak RSS grew: the CLI's over a CLI that sends
// one small request, the server's (NATS, dispatcher and worker) over its
// RSS before the transfer.
func BenchmarkFleetFile1GiB(b *testing.B) {
	home := b.TempDir()
	serve := exec.Command(binary(b), "serve", "--home", home, "--json", "--id", "main")
	stdout, err := serve.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { serve.Process.Signal(syscall.SIGTERM); serve.Wait(); detachMountsUnder(home) })
	var started struct {
		URL string `json:"url"`
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || json.Unmarshal([]byte(line), &started) != nil {
		b.Fatalf("avfs serve printed %q (%v)", line, err)
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeRandomFile(b, src, 1<<30, 3)
	run := func(stdin, stdout string, args ...string) (maxrssKB int64, d time.Duration) {
		b.Helper()
		cmd := exec.Command(binary(b), append([]string{"--nats", started.URL, "--vault", "big"}, args...)...)
		if stdin != "" {
			f, err := os.Open(stdin)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			cmd.Stdin = f
		}
		if stdout != "" {
			f, err := os.Create(stdout)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			cmd.Stdout = f
		}
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("avfs %v: %v", args, err)
		}
		return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, time.Since(start)
	}
	run("", "", "vault", "create", "big")
	small, _ := run("", "", "vault", "info", "big")
	pid := serve.Process.Pid
	for i := 0; i < b.N; i++ {
		os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) // reset the peak
		base := procKB(b, pid, "VmRSS")
		wc, wd := run(src, "", "write", "/big.bin")
		wsrv := procKB(b, pid, "VmHWM") - base
		os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
		base = procKB(b, pid, "VmRSS")
		cc, cd := run("", filepath.Join(dir, "cat.json"), "cat", "/big.bin")
		csrv := procKB(b, pid, "VmHWM") - base
		os.Remove(filepath.Join(dir, "cat.json"))
		b.ReportMetric(float64(wc-small)/1024, "write-client-MB")
		b.ReportMetric(float64(wsrv)/1024, "write-server-MB")
		b.ReportMetric(float64(cc-small)/1024, "cat-client-MB")
		b.ReportMetric(float64(csrv)/1024, "cat-server-MB")
		b.ReportMetric(1024/wd.Seconds(), "write-MB/s")
		b.ReportMetric(1024/cd.Seconds(), "cat-MB/s")
	}
}
