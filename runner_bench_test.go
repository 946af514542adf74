package berth_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// The runner benchmarks measure tasks through a connected runner against
// anchors measured in the same run, alternating in every iteration, and
// report ratios with b.ReportMetric; nothing is asserted about time.
//
//	go test -run '^$' -bench 'Runner' -benchtime 20x .

// attached is a System with one leased target whose runner is attached.
type attached struct {
	sys *berth.System
	h   *lease.Handle
	att *controller.Attachment
	n   int
}

func attachTarget(b *testing.B, tg realTarget) *attached {
	b.Helper()
	bin, _ := testenv.RunnerBinarySum(b)
	ctx := context.Background()
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil), ssh.New(nil)}, RunnerBinary: bin})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sys.Close() })
	h, att, _ := attachRunner(b, ctx, sys, "bench", tg.driver, tg.config)
	return &attached{sys: sys, h: h, att: att}
}

// task runs `true` through the runner and returns the time from StartTask
// to its stored exit.
func (a *attached) task(b *testing.B) time.Duration {
	b.Helper()
	a.n++
	id := fmt.Sprintf("t%d", a.n)
	ctx := context.Background()
	t0 := time.Now()
	task, err := a.att.Start(ctx, realOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: id, Argv: []string{"true"}}})
	if err != nil {
		b.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	exited := time.Since(t0)
	if err != nil || exit.Code != 0 {
		b.Fatalf("task %s: %+v, %v", id, exit, err)
	}
	return exited
}

// BenchmarkRunnerTaskVsDockerExec: `true` through a connected runner in a
// busybox container (network none), from StartTask to its stored exit,
// against `docker exec CONTAINER true` (the docker CLI). x_docker_exec is
// docker exec's time over ours (goal >= 10).
func BenchmarkRunnerTaskVsDockerExec(b *testing.B) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		b.Skipf("docker CLI not installed: %v", err)
	}
	a := attachTarget(b, dockerTarget(b))
	container := a.h.SandboxID()
	if out, err := exec.Command(docker, "exec", container, "true").CombinedOutput(); err != nil {
		b.Fatalf("docker exec: %v: %s", err, out)
	}
	a.task(b) // warm
	var ours, theirs time.Duration
	for b.Loop() {
		ours += a.task(b)
		b.StopTimer()
		t0 := time.Now()
		if out, err := exec.Command(docker, "exec", container, "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v: %s", err, out)
		}
		theirs += time.Since(t0)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Microseconds())/n, "runner_us/task")
	b.ReportMetric(float64(theirs.Microseconds())/n, "docker_exec_us")
	b.ReportMetric(float64(theirs)/float64(ours), "x_docker_exec")
}

// BenchmarkRunner100TasksVsSSH: per iteration, 100 `true` tasks through
// a connected runner on one SSH lease, against 100 Execs through the SSH
// driver on the same lease (its pooled connection) and 100 runs of
// OpenSSH's client multiplexed over one ControlMaster connection to the
// same sshd. x_ssh_driver and x_controlmaster are their times over ours.
func BenchmarkRunner100TasksVsSSH(b *testing.B) {
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		b.Skipf("OpenSSH client not installed: %v", err)
	}
	tg := sshTarget(b)
	a := attachTarget(b, tg)
	srv := tg.sshd
	sock := filepath.Join(b.TempDir(), "cm")
	args := func(cmd string) []string {
		return []string{"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + srv.KnownHostsFile(), "-i", srv.ClientKeyFile(),
			"-o", "ControlMaster=auto", "-o", "ControlPath=" + sock, "-o", "ControlPersist=60",
			"-p", strconv.Itoa(srv.Port()), srv.User() + "@" + srv.Host(), cmd}
	}
	// The master runs in the background (-f -N); its output goes to
	// /dev/null so that nothing waits for it to close a pipe.
	master := exec.Command(sshBin, append([]string{"-M", "-f", "-N"}, args("")[:len(args(""))-1]...)...)
	if err := master.Run(); err != nil {
		b.Fatalf("ssh ControlMaster: %v", err)
	}
	if out, err := exec.Command(sshBin, args("true")...).CombinedOutput(); err != nil {
		b.Fatalf("ssh over the ControlMaster: %v: %s", err, out)
	}
	b.Cleanup(func() {
		_ = exec.Command(sshBin, append([]string{"-O", "exit"}, args("")[:len(args(""))-1]...)...).Run()
	})
	ctx := context.Background()
	a.task(b)
	if _, err := a.h.Exec(ctx, lease.Command{Argv: []string{"true"}}); err != nil {
		b.Fatal(err)
	}
	var ours, driver, cm time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range 100 {
			a.task(b)
		}
		ours += time.Since(t0)
		b.StopTimer()
		t0 = time.Now()
		for range 100 {
			res, err := a.h.Exec(ctx, lease.Command{Argv: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", res, err)
			}
		}
		driver += time.Since(t0)
		t0 = time.Now()
		for range 100 {
			if out, err := exec.Command(sshBin, args("true")...).CombinedOutput(); err != nil {
				b.Fatalf("ssh: %v: %s", err, out)
			}
		}
		cm += time.Since(t0)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Milliseconds())/n, "runner_ms/100")
	b.ReportMetric(float64(driver.Milliseconds())/n, "ssh_driver_ms/100")
	b.ReportMetric(float64(cm.Milliseconds())/n, "controlmaster_ms/100")
	b.ReportMetric(float64(driver)/float64(ours), "x_ssh_driver")
	b.ReportMetric(float64(cm)/float64(ours), "x_controlmaster")
}
