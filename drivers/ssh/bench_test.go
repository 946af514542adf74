package ssh

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// The benchmarks compare the driver with OpenSSH's ssh client against the
// same sshd in the same run, alternating the two in every iteration, and
// report ratios (b.ReportMetric); no absolute time is asserted.
//
//	go test -run '^$' -bench . -benchtime 5x ./drivers/ssh/

// sshArgs is OpenSSH's client command line for the test server.
func sshArgs(e *env, extra ...string) []string {
	args := []string{"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + e.srv.KnownHostsFile(),
		"-i", e.srv.ClientKeyFile(), "-p", strconv.Itoa(e.srv.Port())}
	args = append(args, extra...)
	return append(args, e.srv.User()+"@127.0.0.1")
}

func runSSH(b *testing.B, args []string, cmd string) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := exec.Command("ssh", append(args, cmd)...).CombinedOutput()
	if err != nil {
		b.Fatalf("ssh: %v: %s", err, out)
	}
	return time.Since(start)
}

func requireSSHClient(b *testing.B) {
	if _, err := exec.LookPath("ssh"); err != nil {
		b.Skipf("OpenSSH client not installed: %v", err)
	}
}

// (a) A probe-like lease: connect, verify the host key, authenticate,
// create and resolve the workspace, run one platform command, release —
// against one `ssh ... 'uname -sm'`. Goal: x_openssh <= 1.0.
func BenchmarkProbeVsOpenSSH(b *testing.B) {
	requireSSHClient(b)
	e := newEnv(b)
	cfg := e.config(b, nil)
	args := sshArgs(e)
	ctx := context.Background()
	var ours, theirs time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		sb, err := e.d.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"uname", "-sm"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("uname: %v %+v", err, res)
		}
		if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		b.StopTimer()
		theirs += runSSH(b, args, "uname -sm")
		b.StartTimer()
		n++
	}
	b.ReportMetric(float64(ours)/float64(theirs), "x_openssh")
	b.ReportMetric(float64(theirs)/float64(n)/1e6, "openssh_ms/op")
}

// (b) 100 sequential execs on one lease, against 100 separate ssh runs
// (goal x_ssh <= 0.1, i.e. at least 10x faster) and against 100 ssh runs
// multiplexed over one ControlMaster connection (goal x_controlmaster <=
// 1.3).
func BenchmarkHundredExecs(b *testing.B) {
	requireSSHClient(b)
	e := newEnv(b)
	ctx := context.Background()
	sb := e.acquire(b, e.config(b, nil))
	args := sshArgs(e)

	// ControlPath must be short (a unix socket path).
	ctlDir, err := os.MkdirTemp("", "bsc")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(ctlDir)
	ctlPath := filepath.Join(ctlDir, "c")
	master := exec.Command("ssh", sshArgs(e, "-o", "ControlMaster=yes", "-o", "ControlPath="+ctlPath, "-N")...)
	if err := master.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = master.Process.Kill(); _ = master.Wait() }()
	for i := 0; ; i++ {
		if exec.Command("ssh", append(sshArgs(e, "-o", "ControlPath="+ctlPath), "-O", "check")...).Run() == nil {
			break
		}
		if i > 500 {
			b.Fatal("ControlMaster did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	muxArgs := sshArgs(e, "-o", "ControlMaster=no", "-o", "ControlPath="+ctlPath)

	const execs = 100
	var ours, separate, mux time.Duration
	for b.Loop() {
		start := time.Now()
		for range execs {
			res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"uname"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %v %+v", err, res)
			}
		}
		ours += time.Since(start)
		b.StopTimer()
		for range execs {
			separate += runSSH(b, args, "uname")
		}
		for range execs {
			mux += runSSH(b, muxArgs, "uname")
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(ours)/float64(separate), "x_ssh")
	b.ReportMetric(float64(ours)/float64(mux), "x_controlmaster")
}
