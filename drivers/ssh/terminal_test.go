package ssh

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

func TestTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	term, err := drivers.SandboxAs[drivers.Terminal](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := term.OpenTerminal(testCtx(t), drivers.TerminalRequest{Argv: []string{"sh"}, Rows: 24, Cols: 80, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	var out syncBuffer
	go io.Copy(&out, ts)
	expect := func(s string) {
		t.Helper()
		for i := 0; i < 400 && !strings.Contains(out.String(), s); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if !strings.Contains(out.String(), s) {
			t.Fatalf("terminal output %q lacks %q", out.String(), s)
		}
	}
	io.WriteString(ts, "stty size; echo T=$TERM; tty\n")
	expect("24 80")
	expect("T=xterm-256color")
	expect("/dev/pts/")
	if strings.Contains(out.String(), pgidPrefix) {
		t.Errorf("marker leaked into the terminal: %q", out.String())
	}
	if err := ts.Resize(testCtx(t), 40, 100); err != nil {
		t.Fatal(err)
	}
	io.WriteString(ts, "stty size\n")
	expect("40 100")
	io.WriteString(ts, "exit 7\n")
	res, err := ts.Wait(testCtx(t))
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("Wait: %v %+v", err, res)
	}
}

func TestTerminalCloseKillsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	ts, err := sb.OpenTerminal(testCtx(t), drivers.TerminalRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, ts)
	m := marker(t)
	// A job-control shell puts the job in a group of its own: Close must
	// still end it (it is in the terminal's session).
	io.WriteString(ts, "set -m; sleep 300."+m+" &\n")
	if ps := waitProcs(t, m, func(s string) bool { return s != "" }); ps == "" {
		t.Fatal("sleep never started")
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if ps := waitProcs(t, m, func(s string) bool { return s == "" }); ps != "" {
		t.Fatalf("left running after Close:\n%s", ps)
	}
}
