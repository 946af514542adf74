package kubecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one program the cluster started.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done is closed
}

// startProcess starts bin with args, its output appended to the log file
// of name. It is killed with the test binary (Pdeathsig), in its own
// process group.
func (c *Cluster) startProcess(name, bin string, args ...string) error {
	logf, err := os.OpenFile(c.dir.log(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = c.dir.base
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// exited returns an error naming the first process that has exited, with
// the end of its log; nil while all run.
func (c *Cluster) exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); the end of its log:\n%s", p.name, p.err, c.logTail(p.name, 40))
		default:
		}
	}
	return nil
}

// logTail returns the last n lines of a component's log.
func (c *Cluster) logTail(name string, n int) string {
	b, _ := os.ReadFile(c.dir.log(name))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stopProcess ends p: SIGTERM, then SIGKILL after grace.
func stopProcess(p *process, grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// killMentioning SIGKILLs every process whose command line mentions dir
// (the containerd shims of the cluster's containerd name its socket, and
// every component started names a file there) and waits until none is
// left. It returns how many it killed.
func killMentioning(dir string) (int, error) {
	killed := 0
	for attempt := 0; attempt < 50; attempt++ {
		pids := pidsMentioning(dir)
		if len(pids) == 0 {
			return killed, nil
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil && attempt == 0 {
				killed++
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return killed, fmt.Errorf("processes mentioning %s survive SIGKILL: %v", dir, pidsMentioning(dir))
}

func pidsMentioning(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		// A zombie has an empty command line; one left here is a live one.
		pids = append(pids, pid)
	}
	return pids
}

// killCgroup SIGKILLs every process in the cluster's cgroups (the pods'
// containers) until none is left.
func killCgroup() error {
	for attempt := 0; attempt < 50; attempt++ {
		pids := cgroupPIDs()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("processes in the cgroups %s survive SIGKILL: %v", cgroupParent, cgroupPIDs())
}

// cgroupPIDs lists the processes in cgroupParent's tree of the pids
// hierarchy (or the unified one, on cgroup v2).
func cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, root := range cgroupDirs() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// run runs a short command and returns its combined output.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || len(out) > 0 {
			return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return out, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}
