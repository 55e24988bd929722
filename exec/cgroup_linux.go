package exec

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Limits cap a sandboxed command's resources. Zero fields are unlimited.
// They are enforced by a cgroup of the run's own, created under the
// worker's cgroup in the unified (v2) hierarchy when it has the controller,
// else in the controller's v1 hierarchy.
type Limits struct {
	MemoryBytes int64   // memory.max; the kernel's OOM killer ends the command beyond it
	Pids        int     // processes and threads; fork fails with EAGAIN beyond it
	CPUs        float64 // CPU time per wall second, e.g. 0.5 or 2
}

func (l Limits) zero() bool { return l.MemoryBytes == 0 && l.Pids == 0 && l.CPUs == 0 }

// initThreads is an upper bound on the threads of a sandbox init.
const initThreads = 16

// Limit names reported in Result.Limit.
const (
	LimitMemory = "memory"
	LimitPids   = "pids"
)

// cgroup is one run's cgroup, possibly spread over several v1 hierarchies.
type cgroup struct {
	dirs   []string // created, removed by remove
	procs  []string // cgroup.procs files the init joins
	events []cgEvent
}

// cgEvent is a counter that says a limit was hit: a file, a key in it,
// and the limit's name.
type cgEvent struct{ file, key, limit string }

// cgroupMount is where a hierarchy is mounted and where this process sits
// in it.
type cgroupMount struct{ dir, self string }

// hierarchies maps "" (the unified hierarchy) and v1 controller names to
// their mounts, from /proc/self/mountinfo and /proc/self/cgroup.
func hierarchies() (map[string]cgroupMount, error) {
	self := map[string]string{} // controller or "" -> path of this process
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			self[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			self[c] = parts[2]
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]cgroupMount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent dev root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 || pf[3] != "/" {
			continue
		}
		switch sf[0] {
		case "cgroup2":
			if p, ok := self[""]; ok {
				out[""] = cgroupMount{dir: pf[4], self: p}
			}
		case "cgroup":
			for _, opt := range strings.Split(sf[2], ",") {
				if p, ok := self[opt]; ok {
					out[opt] = cgroupMount{dir: pf[4], self: p}
				}
			}
		}
	}
	return out, sc.Err()
}

// v2Has reports whether the unified hierarchy can give a child of this
// process's cgroup the controller, enabling it if it can.
func v2Has(m cgroupMount, controller string) bool {
	dir := filepath.Join(m.dir, m.self)
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	if fieldsHas(string(b), controller) {
		return true
	}
	// Fails (EBUSY) when this cgroup has processes itself and is not the
	// root: the operator must delegate a cgroup then.
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+controller), 0) == nil
}

func fieldsHas(s, f string) bool {
	for _, x := range strings.Fields(s) {
		if x == f {
			return true
		}
	}
	return false
}

// newCgroup creates the run's cgroup with limits l applied.
func newCgroup(l Limits) (*cgroup, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	var id [6]byte
	rand.Read(id[:])
	name := "avfs-" + hex.EncodeToString(id[:])
	cg := &cgroup{}
	made := map[string]string{} // hierarchy mount dir -> run's cgroup dir
	mk := func(m cgroupMount) (string, error) {
		if d, ok := made[m.dir]; ok {
			return d, nil
		}
		d := filepath.Join(m.dir, m.self, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		made[m.dir] = d
		cg.dirs = append(cg.dirs, d)
		cg.procs = append(cg.procs, filepath.Join(d, "cgroup.procs"))
		return d, nil
	}
	type setting struct {
		controller string
		v2, v1     [][2]string // file, value
		event      cgEvent     // file relative to the dir
		eventV1    cgEvent
	}
	var want []setting
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		want = append(want, setting{controller: "memory",
			v2:    [][2]string{{"memory.max", v}, {"memory.swap.max", "0"}},
			v1:    [][2]string{{"memory.limit_in_bytes", v}},
			event: cgEvent{"memory.events", "oom_kill", LimitMemory}, eventV1: cgEvent{"memory.oom_control", "oom_kill", LimitMemory}})
	}
	if l.Pids > 0 {
		// The init's own threads are in the cgroup too; they must not
		// count against the command.
		v := strconv.Itoa(l.Pids + initThreads)
		want = append(want, setting{controller: "pids",
			v2:    [][2]string{{"pids.max", v}},
			v1:    [][2]string{{"pids.max", v}},
			event: cgEvent{"pids.events", "max", LimitPids}, eventV1: cgEvent{"pids.events", "max", LimitPids}})
	}
	if l.CPUs > 0 {
		const period = 100000
		quota := strconv.Itoa(int(l.CPUs * period))
		want = append(want, setting{controller: "cpu",
			v2: [][2]string{{"cpu.max", quota + " " + strconv.Itoa(period)}},
			v1: [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", quota}}})
	}
	for _, s := range want {
		files, ev := s.v2, s.event
		m, ok := hs[""]
		if !ok || !v2Has(m, s.controller) {
			if m, ok = hs[s.controller]; !ok {
				cg.remove()
				return nil, fmt.Errorf("%s limit: this machine has no cgroup %s controller available to avfs", s.controller, s.controller)
			}
			files, ev = s.v1, s.eventV1
		}
		d, err := mk(m)
		if err != nil {
			cg.remove()
			return nil, fmt.Errorf("%s limit: %w", s.controller, err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f[0]), []byte(f[1]), 0); err != nil && f[0] != "memory.swap.max" {
				cg.remove()
				return nil, fmt.Errorf("%s limit: %w", s.controller, err)
			}
		}
		if ev.file != "" {
			ev.file = filepath.Join(d, ev.file)
			cg.events = append(cg.events, ev)
		}
	}
	return cg, nil
}

// hit names the first limit whose counter is not zero, or "".
func (cg *cgroup) hit() string {
	for _, ev := range cg.events {
		b, err := os.ReadFile(ev.file)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			if k == ev.key && v != "0" {
				return ev.limit
			}
		}
	}
	return ""
}

// remove deletes the run's cgroups. The init has exited by then and the
// kernel has killed and reaped the rest of its PID namespace, but a v1
// hierarchy may take a moment to see the cgroup empty.
func (cg *cgroup) remove() {
	for _, d := range cg.dirs {
		for i := 0; ; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) || i == 50 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	cg.dirs = nil
}
