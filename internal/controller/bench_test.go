package controller_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
)

// The benchmarks measure the runner protocol against an anchor measured in
// the same run, alternating the two in every iteration, and report ratios
// with b.ReportMetric; no time is asserted. The runner is the real binary
// (cmd/berth-runner) as a child process, on loopback.
//
//	go test -run '^$' -bench . -benchtime 5x ./internal/controller/ -args -bench.stream-bytes=1073741824
//	go test -run '^$' -bench StopProof -benchtime 200x ./internal/controller/

var streamBytes = flag.Int64("bench.stream-bytes", 64<<20, "bytes the stream throughput benchmark's task writes to stdout per iteration (1073741824: the issue's 1 GiB)")

// BenchmarkStreamThroughput: a task writes -bench.stream-bytes of zeros to
// stdout through the runner, and the controller stores them (default
// fileSink, durable before the ack); the anchor is OpenSSH's client running
// `head -c N /dev/zero` on a real sshd on loopback, its stdout discarded.
// x_openssh is our throughput over OpenSSH's (goal >= 1.0). A second
// anchor is the disk: writing N bytes to a file next to the sink's and one
// fsync (x_disk: our throughput over that floor, which bounds ours, since
// the controller acks only what it synced).
func BenchmarkStreamThroughput(b *testing.B) {
	if _, err := exec.LookPath("ssh"); err != nil {
		b.Skipf("OpenSSH client not installed: %v", err)
	}
	n := *streamBytes
	sshd := testenv.SSHD(b)
	sshArgs := []string{"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + sshd.KnownHostsFile(),
		"-i", sshd.ClientKeyFile(), "-p", strconv.Itoa(sshd.Port()), sshd.User() + "@127.0.0.1",
		"head -c " + strconv.FormatInt(n, 10) + " /dev/zero"}
	store := controller.NewMemoryStore()
	dataDir := b.TempDir()
	s := newServer(b, serverOptions{Options: controller.Options{Store: store, DataDir: dataDir}})
	startChild(b, s, b.TempDir(), "")
	session := waitSession(b, s)
	ctx := context.Background()

	var ours, theirs, disk time.Duration
	iter := 0
	b.SetBytes(n)
	for b.Loop() {
		iter++
		after, err := store.LastEventSeq(ctx, session)
		if err != nil {
			b.Fatal(err)
		}
		task, id := fmt.Sprintf("zeros-%d", iter), fmt.Sprintf("c%d", iter)
		start := time.Now()
		if _, err := s.c.StartTask(ctx, operator, session, id, prp.TaskStart{TaskID: task, Argv: []string{"head", "-c", strconv.FormatInt(n, 10), "/dev/zero"}}); err != nil {
			b.Fatal(err)
		}
		// At least 1 MB/s, whatever the load.
		if res := waitFor(b, s, session, id, 2*time.Minute+time.Duration(n/1e6)*time.Second); res.Exit == nil || res.Exit.Code != 0 {
			b.Fatalf("result = %+v, want exit 0", res)
		}
		ours += time.Since(start)

		b.StopTimer()
		if got := storedBytes(b, store, session, after, task); got != n {
			b.Fatalf("task %s: %d bytes stored, want %d", task, got, n)
		}
		cmd := exec.Command("ssh", sshArgs...)
		counter := &countWriter{}
		cmd.Stdout = counter
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start = time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("ssh: %v: %s", err, stderr.String())
		}
		theirs += time.Since(start)
		if counter.n != n {
			b.Fatalf("ssh wrote %d bytes, want %d", counter.n, n)
		}
		disk += diskFloor(b, dataDir, n)
		b.StartTimer()
	}
	b.ReportMetric(float64(theirs)/float64(ours), "x_openssh")
	b.ReportMetric(float64(n)*float64(iter)/theirs.Seconds()/1e6, "openssh_MB/s")
	b.ReportMetric(float64(disk)/float64(ours), "x_disk")
	b.ReportMetric(float64(n)*float64(iter)/disk.Seconds()/1e6, "disk_MB/s")
}

// diskFloor measures the least that storing n bytes durably in dir costs:
// writing them to one new file in 1 MiB writes, then one fsync. The
// controller's fileSink does at least that (PRP-5: durable before the ack).
func diskFloor(b *testing.B, dir string, n int64) time.Duration {
	b.Helper()
	f, err := os.CreateTemp(dir, "floor-*")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// countWriter counts and discards what it is given.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// storedBytes sums the stored stdout bytes of task in session's events
// after seq after.
func storedBytes(b *testing.B, store controller.Store, session string, after uint64, task string) int64 {
	b.Helper()
	evs, err := store.EventsAfter(context.Background(), session, after, 0)
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, e := range evs {
		if o := e.Event.Output; o != nil && e.Event.TaskID == task && o.Stream == prp.Stdout && e.Ref != nil {
			sum += e.Ref.Length
		}
	}
	return sum
}

// treeScript makes a 50-process tree in one process group: sh and 49
// sleeps.
const treeScript = `for i in $(seq 49); do sleep 1000 & done; wait`

// BenchmarkStopProof: task.stop of a 50-process tree until the runner's
// verified proof is stored (group gone and no tagged process in /proc),
// against the floor measured in the same run: `kill -TERM -PGID` of the
// same tree started by the benchmark and waiting (polling /proc every
// millisecond) until every one of its 50 processes has exited. Reports the
// p50 and p99 of both and their ratios (goal p99 ratio <= 2).
func BenchmarkStopProof(b *testing.B) {
	// The floor's trees are orphaned when their shell dies; as a child
	// subreaper this process reaps them (killTreeFloor) instead of leaving
	// 49 zombies per iteration to an init that may reap them late, which
	// would grow the /proc that every stop proof scans.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		b.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	s := newServer(b, serverOptions{})
	startChild(b, s, b.TempDir(), "")
	session := waitSession(b, s)
	ctx := context.Background()

	var ours, floor []time.Duration
	iter := 0
	for b.Loop() {
		b.StopTimer()
		iter++
		task := fmt.Sprintf("tree-%d", iter)
		if _, err := s.c.StartTask(ctx, operator, session, "start-"+task, prp.TaskStart{TaskID: task, Argv: []string{"sh", "-c", treeScript}}); err != nil {
			b.Fatal(err)
		}
		for len(tagged(task)) < 50 {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := s.c.StopTask(ctx, operator, session, "stop-"+task, task, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		res := wait(b, s, session, "stop-"+task)
		ours = append(ours, time.Since(start))
		b.StopTimer()
		if p := res.Proof; p == nil || !p.Complete || len(p.Survivors) != 0 || len(p.Failed) != 0 {
			b.Fatalf("stop of %s: result %+v, want a complete proof without survivors", task, res)
		}
		floor = append(floor, killTreeFloor(b))
		b.StartTimer()
	}
	b.StopTimer()
	op50, op99 := percentile(ours, 50), percentile(ours, 99)
	fp50, fp99 := percentile(floor, 50), percentile(floor, 99)
	b.ReportMetric(float64(op50)/float64(fp50), "p50_x_floor")
	b.ReportMetric(float64(op99)/float64(fp99), "p99_x_floor")
	b.ReportMetric(float64(op50)/1e6, "p50_ms")
	b.ReportMetric(float64(op99)/1e6, "p99_ms")
	b.ReportMetric(float64(fp50)/1e6, "floor_p50_ms")
	b.ReportMetric(float64(fp99)/1e6, "floor_p99_ms")
}

// killTreeFloor starts treeScript in its own process group, waits until
// its 50 processes run, then measures kill -TERM -PGID until every one of
// them has exited (gone from /proc or a zombie).
func killTreeFloor(b *testing.B) time.Duration {
	b.Helper()
	cmd := exec.Command("sh", "-c", treeScript)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pgid := cmd.Process.Pid
	var pids []int
	for {
		pids = group(pgid)
		if len(pids) >= 50 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	for len(pids) > 0 {
		pids = slices.DeleteFunc(pids, func(pid int) bool { return !alive(pid) })
		if len(pids) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	d := time.Since(start)
	cmd.Wait()
	// Reap the group's orphans (this process is their subreaper).
	for {
		if _, err := unix.Wait4(-pgid, nil, 0, nil); err != nil && err != unix.EINTR {
			break
		}
	}
	return d
}

// group returns the live processes of process group pgid.
func group(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := stat(pid); ok && st[0] != "Z" && st[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, ok := stat(pid)
	return ok && st[0] != "Z"
}

// stat returns the fields of /proc/pid/stat after the command name
// (state, ppid, pgrp, ...).
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, false
	}
	f := strings.Fields(string(b[i+2:]))
	return f, len(f) >= 3
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}
