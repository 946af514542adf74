package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

func TestExec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	if _, err := sb.Exec(testCtx(t), drivers.Command{Argv: []string{"mkdir", "sub"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cmd  drivers.Command
		want drivers.Result
	}{
		{"stdout, stderr, exit status, env and stdin apart",
			drivers.Command{
				Argv:  []string{"sh", "-c", `printf '%s|' "$A"; cat; echo err >&2; exit 3`},
				Env:   map[string]string{"A": "it's $HOME `x`"},
				Stdin: strings.NewReader("in"),
			},
			drivers.Result{Stdout: []byte("it's $HOME `x`|in"), Stderr: []byte("err\n"), ExitCode: 3}},
		{"arguments are quoted", drivers.Command{Argv: []string{"printf", "%s,", "a b", "'", "$x", ""}},
			drivers.Result{Stdout: []byte("a b,',$x,,")}},
		{"default dir is the workspace", drivers.Command{Argv: []string{"pwd", "-P"}},
			drivers.Result{Stdout: []byte(sb.Cwd() + "\n")}},
		{"relative dir is under the workspace", drivers.Command{Argv: []string{"pwd", "-P"}, Dir: "sub"},
			drivers.Result{Stdout: []byte(sb.Cwd() + "/sub\n")}},
		{"absolute dir", drivers.Command{Argv: []string{"pwd"}, Dir: "/"},
			drivers.Result{Stdout: []byte("/\n")}},
		{"signal is reported", drivers.Command{Argv: []string{"sh", "-c", "kill -TERM $$"}},
			drivers.Result{ExitCode: -1, Signal: "TERM"}},
		{"output beyond the limit is truncated", drivers.Command{Argv: []string{"printf", "0123456789"}, OutputLimit: 4},
			drivers.Result{Stdout: []byte("0123"), Truncated: true}},
		{"missing program exits 127", drivers.Command{Argv: []string{"no-such-program-berth"}},
			drivers.Result{ExitCode: 127}},
		{"missing dir exits 125", drivers.Command{Argv: []string{"true"}, Dir: "no-such-dir"},
			drivers.Result{ExitCode: 125}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := sb.Exec(testCtx(t), tc.cmd)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			got := *res
			got.Duration = 0
			if tc.want.ExitCode >= 125 {
				if len(got.Stderr) == 0 {
					t.Error("no message on stderr")
				}
				got.Stderr = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("invalid env name is refused", func(t *testing.T) {
		t.Parallel()
		_, err := sb.Exec(testCtx(t), drivers.Command{Argv: []string{"true"}, Env: map[string]string{"A;rm": "x"}})
		if err == nil {
			t.Fatal("no error")
		}
	})
}

func marker(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%d", 100000+int(b[0])<<16|int(b[1])<<8|int(b[2]))
}

// remoteProcs lists the processes on the server (sshd runs on this machine)
// whose command line contains pattern.
func remoteProcs(t *testing.T, pattern string) string {
	if _, err := exec.LookPath("pgrep"); err != nil {
		testenv.Missing(t, "procps (pgrep, pkill)", "apt-get install procps", err)
	}
	out, err := exec.Command("pgrep", "-af", pattern).Output()
	if err != nil && len(out) == 0 {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(l, "pgrep") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// waitProcs polls the process table until cond holds for the pattern's
// processes (a real external process: short intervals, bounded).
func waitProcs(t *testing.T, pattern string, cond func(string) bool) string {
	t.Helper()
	var ps string
	for i := 0; i < 200; i++ {
		ps = remoteProcs(t, pattern)
		if cond(ps) {
			return ps
		}
		time.Sleep(25 * time.Millisecond)
	}
	return ps
}

// treeCmd starts a process tree: a shell, a background sleep and a
// foreground sleep, all carrying the marker in their command lines.
func treeCmd(m string) drivers.Command {
	return drivers.Command{Argv: []string{"sh", "-c", "sleep 300." + m + " & sleep 301." + m + "; wait", "x" + m}}
}

// twoSleeps reports whether both sleeps of treeCmd run.
func twoSleeps(ps string) bool {
	n := 0
	for _, l := range strings.Split(ps, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "sleep" {
			n++
		}
	}
	return n == 2
}

// LEASE-7 / exec: a cancelled command leaves no process on the server.
func TestCancelledExecLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))

	t.Run("exec sleep 300", func(t *testing.T) {
		t.Parallel()
		m := marker(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sleep", "300." + m}})
			errc <- err
		}()
		if ps := waitProcs(t, m, func(s string) bool { return s != "" }); ps == "" {
			t.Fatal("sleep never started on the server")
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Exec error %v; want context.Canceled", err)
		}
		if ps := remoteProcs(t, m); ps != "" {
			t.Fatalf("processes left on the server after cancellation:\n%s", ps)
		}
	})
	t.Run("exec process tree", func(t *testing.T) {
		t.Parallel()
		m := marker(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := sb.Exec(ctx, treeCmd(m))
			errc <- err
		}()
		if ps := waitProcs(t, m, twoSleeps); !twoSleeps(ps) {
			t.Fatalf("tree never started:\n%s", ps)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Exec error %v; want context.Canceled", err)
		}
		if ps := remoteProcs(t, m); ps != "" {
			t.Fatalf("processes left on the server after cancellation:\n%s", ps)
		}
	})
	t.Run("streamed process tree", func(t *testing.T) {
		t.Parallel()
		cancelStreamedTree(t, sb)
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		m := marker(t)
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sleep", "300." + m}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v; want DeadlineExceeded", err)
		}
		if ps := remoteProcs(t, m); ps != "" {
			t.Fatalf("processes left on the server:\n%s", ps)
		}
	})
}

// 50 commands at once on one lease: more than the server's MaxSessions
// (10), so they queue on the connection's session slots.
func TestFiftyParallelExecsOnOneLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range 50 {
		wg.Go(func() {
			res, err := sb.Exec(testCtx(t), drivers.Command{Argv: []string{"sh", "-c", "echo $0; sleep 0.05", fmt.Sprint(i)}})
			switch {
			case err != nil:
				errs[i] = err
			case string(res.Stdout) != fmt.Sprintf("%d\n", i) || res.ExitCode != 0:
				errs[i] = fmt.Errorf("exec %d: stdout %q exit %d stderr %q", i, res.Stdout, res.ExitCode, res.Stderr)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Release(testCtx(t), drivers.Destroy); err != nil {
		t.Fatal(err)
	}
}

func TestStreamExec(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	sx, err := drivers.SandboxAs[drivers.StreamExecer](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("streams output and reads stdin until closed", func(t *testing.T) {
		t.Parallel()
		pr, pw := io.Pipe()
		var out, errb syncBuffer
		p, err := sx.Start(testCtx(t), drivers.Command{Argv: []string{"sh", "-c", "cat; echo done >&2"}, Stdin: pr}, &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write([]byte("hello\n"))
		for i := 0; i < 400 && out.String() != "hello\n"; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if out.String() != "hello\n" {
			t.Fatalf("stdout %q before stdin closed", out.String())
		}
		if err := p.CloseStdin(); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(context.Background())
		if err != nil || res.ExitCode != 0 || errb.String() != "done\n" {
			t.Fatalf("Wait: %v %+v stderr %q", err, res, errb.String())
		}
	})
	t.Run("signal reaches the whole group", func(t *testing.T) {
		t.Parallel()
		m := marker(t)
		p, err := sx.Start(testCtx(t), treeCmd(m), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ps := waitProcs(t, m, twoSleeps); !twoSleeps(ps) {
			t.Fatalf("tree never started:\n%s", ps)
		}
		if err := p.Signal(testCtx(t), "TERM"); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait(context.Background())
		if err != nil || res.Signal != "TERM" {
			t.Fatalf("Wait: %v %+v", err, res)
		}
		if ps := waitProcs(t, m, func(s string) bool { return s == "" }); ps != "" {
			t.Fatalf("left running after TERM to the group:\n%s", ps)
		}
	})
}

// LEASE-7: release ends the session with a confirmed receipt and kills what
// the lease still runs.
func TestReleaseKillsRunningCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	m := marker(t)
	p, err := sb.Start(testCtx(t), treeCmd(m), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps := waitProcs(t, m, twoSleeps); !twoSleeps(ps) {
		t.Fatalf("tree never started:\n%s", ps)
	}
	r, err := sb.Release(testCtx(t), drivers.Destroy)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Proves(sb.ID(), drivers.Destroy) || !strings.Contains(r.Evidence, "killed process groups") {
		t.Errorf("receipt %+v does not prove destroy", r)
	}
	if ps := remoteProcs(t, m); ps != "" {
		t.Fatalf("left running after release:\n%s", ps)
	}
	if res, _ := p.Wait(context.Background()); res == nil || res.Signal != "KILL" {
		t.Errorf("process result %+v; want killed", res)
	}
	if _, err := sb.Exec(testCtx(t), drivers.Command{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrReleased) {
		t.Errorf("Exec after release: %v; want ErrReleased", err)
	}
	r2, err := sb.Release(testCtx(t), drivers.Destroy)
	if err != nil || r2 != r {
		t.Errorf("second release: %+v %v; want the first receipt", r2, err)
	}
}

func TestAcquireWorkspace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := t.TempDir() + "/a/b"
	tests := []struct {
		name, workdir, workspace, want string
	}{
		{"tilde is the home", "~", "", e.srv.Home()},
		{"tilde path is created under the home", "~/ws/x", "", e.srv.Home() + "/ws/x"},
		{"relative is under the home", "rel", "", e.srv.Home() + "/rel"},
		{"absolute is created", abs, "", abs},
		{"workspace hint is under the workdir", "~/base", "hint", e.srv.Home() + "/base/hint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config(t, func(m map[string]any) { m[fieldWorkdir] = tc.workdir })
			var allocated string
			sbi, err := e.d.Acquire(testCtx(t), cfg, drivers.AcquireRequest{Workspace: tc.workspace, Allocated: func(_ context.Context, id string) error { allocated = id; return nil }})
			if err != nil {
				t.Fatal(err)
			}
			sb := sbi.(*sandbox)
			defer sb.Release(context.Background(), drivers.Destroy)
			if sb.Cwd() != tc.want {
				t.Errorf("cwd %q; want %q", sb.Cwd(), tc.want)
			}
			wantID := "ssh://" + e.srv.User() + "@" + e.srv.Addr() + tc.want
			if sb.ID() != wantID || allocated != wantID {
				t.Errorf("id %q allocated %q; want %q", sb.ID(), allocated, wantID)
			}
		})
	}
	t.Run("uncreatable workspace is an error", func(t *testing.T) {
		cfg := e.config(t, func(m map[string]any) { m[fieldWorkdir] = "/proc/berth-no" })
		if sb, err := e.d.Acquire(testCtx(t), cfg, drivers.AcquireRequest{}); err == nil {
			sb.Release(context.Background(), drivers.Destroy)
			t.Fatal("no error")
		}
	})
}

// CFG-3: the private key never appears in errors, logs or formatted values.
func TestPrivateKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keys := []string{e.srv.ClientKeyPEM(), e.srv.UnauthorizedKeyPEM()}
	var texts []string
	add := func(err error) {
		if err != nil {
			texts = append(texts, err.Error(), fmt.Sprintf("%+v %#v", err, err))
		}
	}
	ctx := testCtx(t)
	for _, key := range keys {
		corrupt := strings.Replace(key, "A", "*", 3)
		truncated := key[:len(key)/2]
		for _, raw := range []string{corrupt, truncated, strings.ReplaceAll(key, "-----", "")} {
			_, err := e.d.Schema().Normalize(map[string]any{fieldHost: "h", fieldUser: "u", fieldPrivateKey: raw})
			add(err)
			add(checkPrivateKey(raw))
		}
	}
	_, err := e.d.Acquire(ctx, e.config(t, func(m map[string]any) { m[fieldPrivateKey] = e.srv.UnauthorizedKeyPEM() }), drivers.AcquireRequest{})
	add(err)
	_, err = e.d.Acquire(ctx, e.config(t, func(m map[string]any) { m[fieldKnownHosts] = []any{} }), drivers.AcquireRequest{})
	add(err)
	_, err = e.d.Acquire(ctx, e.config(t, func(m map[string]any) { m[fieldPort] = closedPort(t) }), drivers.AcquireRequest{})
	add(err)
	cfg := e.config(t, nil)
	sb := e.acquire(t, cfg)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sb.Exec(cctx, drivers.Command{Argv: []string{"true"}})
	add(err)
	tg, err := parseTarget(e.d.Schema(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, fmt.Sprintf("%v %+v %#v", sb, sb, tg), fmt.Sprint(e.d.Schema().Redact(cfg)))
	sb.Release(ctx, drivers.Destroy)
	texts = append(texts, e.log.String())
	if len(texts) < 10 || !strings.Contains(e.log.String(), "ssh connected") {
		t.Fatalf("too little captured to check (%d texts, log %q)", len(texts), e.log.String())
	}
	all := strings.Join(texts, "\n")
	for _, key := range keys {
		for _, line := range strings.Split(key, "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(all, line) {
				t.Fatalf("key material %q appears in errors or logs", line)
			}
		}
		body := strings.Join(strings.Split(key, "\n")[1:], "")
		if len(body) > 40 && bytes.Contains([]byte(all), []byte(body[20:40])) {
			t.Fatalf("key material appears in errors or logs")
		}
		if strings.Contains(all, hex.EncodeToString([]byte(body))[:32]) {
			t.Fatalf("hex key material appears in errors or logs")
		}
	}
}

// cancelStreamedTree starts a process tree with streaming exec, cancels it
// once both of its sleeps run, and checks that Wait reports the
// cancellation and that nothing of the tree is left on the server.
func cancelStreamedTree(t *testing.T, sb *sandbox) {
	t.Helper()
	m := marker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := sb.Start(ctx, treeCmd(m), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps := waitProcs(t, m, twoSleeps); !twoSleeps(ps) {
		t.Fatalf("tree never started:\n%s", ps)
	}
	cancel()
	if _, err := p.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait error %v; want context.Canceled", err)
	}
	if ps := remoteProcs(t, m); ps != "" {
		t.Fatalf("processes left on the server after cancellation:\n%s", ps)
	}
}
