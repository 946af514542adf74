package fake_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/qualify"
)

type out struct {
	Stdout, Stderr string
	Exit           int
}

func run(t *testing.T, sb drivers.Sandbox, cmd drivers.Command) out {
	t.Helper()
	res, err := sb.Exec(context.Background(), cmd)
	if err != nil {
		t.Fatalf("Exec %q: %v", cmd.Argv, err)
	}
	return out{string(res.Stdout), string(res.Stderr), res.ExitCode}
}

func newSandbox(t *testing.T, opts *fake.Options) (*fake.Driver, drivers.Sandbox) {
	t.Helper()
	d := fake.New(opts)
	sb, err := d.Acquire(context.Background(), config.Config{}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return d, sb
}

func sh(script string, args ...string) []string { return append([]string{"sh", "-c", script}, args...) }

// The built-in commands, directly and through sh -c of one command.
func TestBuiltins(t *testing.T) {
	t.Parallel()
	musl := "alpine-box"
	noHandler := func(what, key string) string {
		return "fake: no handler for " + what + ": register one in Options.Handlers[" + strconv.Quote(key) + "]\n"
	}
	for _, tc := range []struct {
		name string
		plat string
		argv []string
		want out
	}{
		{"uname", "debian-12", []string{"uname"}, out{"Linux\n", "", 0}},
		{"uname -m", "debian-12", []string{"uname", "-m"}, out{"x86_64\n", "", 0}},
		{"uname -r", "debian-12", []string{"uname", "-r"}, out{"6.1.0-18-amd64\n", "", 0}},
		{"uname -sm", musl, []string{"uname", "-sm"}, out{"Linux x86_64\n", "", 0}},
		{"uname -s -n", musl, []string{"uname", "-s", "-n"}, out{"Linux box\n", "", 0}},
		{"uname -a", musl, []string{"uname", "-a"}, out{"Linux box 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC fake x86_64 GNU/Linux\n", "", 0}},
		{"uname -x", musl, []string{"uname", "-x"}, out{"", "uname: invalid option \"-x\"\n", 1}},
		{"no os-release", "busybox", []string{"cat", "/etc/os-release"}, out{"", "cat: /etc/os-release: No such file or directory\n", 1}},
		{"os-release", musl, []string{"cat", "/etc/os-release"}, out{"PRETTY_NAME=\"Alpine Linux v3.19\"\nNAME=\"Alpine\"\nVERSION_ID=\"3.19.1\"\nID=alpine\n", "", 0}},
		{"hostname file", musl, []string{"cat", "/etc/hostname"}, out{"box\n", "", 0}},
		{"echo -n", musl, []string{"echo", "-n", "a", "b"}, out{"a b", "", 0}},
		{"pwd default", musl, []string{"pwd"}, out{"/root\n", "", 0}},
		{"true", musl, []string{"true"}, out{"", "", 0}},
		{"false", musl, []string{"/bin/false"}, out{"", "", 1}},
		{"sleep 0", musl, []string{"sleep", "0"}, out{"", "", 0}},
		{"sleep x", musl, []string{"sleep", "x"}, out{"", "sleep: invalid time interval \"x\"\n", 1}},
		{"sleep empty", musl, []string{"sleep", ""}, out{"", "sleep: invalid time interval \"\"\n", 1}},
		{"exit via sh", musl, sh("exit 300"), out{"", "", 44}},
		{"exit", musl, sh("exit"), out{"", "", 0}},
		{"sh -c quoting", musl, sh(`echo 'single $HOME' "double $HOME" esc\ aped "\"q\"" ${USER}x`), out{"single $HOME double /root esc aped \"q\" rootx\n", "", 0}},
		{"sh -c positional", musl, sh(`echo "$0:$1:$2"`, "name", "one two"), out{"name:one two:\n", "", 0}},
		{"sh -c $0 default", musl, sh(`echo $0 $`), out{"sh $\n", "", 0}},
		{"sh -c escapes and braces", musl, sh(`echo \$HOME '$HOME' "\$HOME" ${HOME}/x "$USER"y $@ $UNSET.`), out{"$HOME $HOME $HOME /root/x rooty $@ .\n", "", 0}},
		{"sh -c nested", musl, sh(`sh -c 'exit 4'`), out{"", "", 4}},
		{"sh -c empty", musl, sh(""), out{"", "", 0}},
		{"unknown", musl, []string{"/usr/bin/make", "x"}, out{"", noHandler(`"/usr/bin/make"`, "make"), 127}},
		{"unknown via sh", musl, sh("make test"), out{"", noHandler(`"make"`, "make"), 127}},
		{"sh without -c", musl, []string{"sh", "script.sh"}, out{"", noHandler(`"sh script.sh"`, "sh"), 127}},
		{"list", musl, sh("echo a; echo b"), out{"", noHandler(`sh -c "echo a; echo b" (';': only one simple command is built in)`, "echo a; echo b"), 127}},
		{"pipeline", musl, sh("echo a | cat"), out{"", noHandler(`sh -c "echo a | cat" ('|': only one simple command is built in)`, "echo a | cat"), 127}},
		{"substitution", musl, sh("echo $(uname)"), out{"", noHandler(`sh -c "echo $(uname)" (command substitution is not built in)`, "echo $(uname)"), 127}},
		{"open quote", musl, sh("echo 'a"), out{"", noHandler(`sh -c "echo 'a" (unterminated quote)`, "echo 'a"), 127}},
	} {
		_, sb := newSandbox(t, &fake.Options{Platform: tc.plat})
		if diff := cmp.Diff(tc.want, run(t, sb, drivers.Command{Argv: tc.argv})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestEnvAndStdin(t *testing.T) {
	t.Parallel()
	_, sb := newSandbox(t, &fake.Options{Platform: "zero-h"})
	got := run(t, sb, drivers.Command{Argv: []string{"env"}, Env: map[string]string{"A": "1", "HOME": "/home/x"}})
	want := "A=1\nHOME=/home/x\nHOSTNAME=h\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nUSER=root\n"
	if got.Stdout != want {
		t.Errorf("env:\n%s\nwant:\n%s", got.Stdout, want)
	}
	got = run(t, sb, drivers.Command{Argv: sh(`echo "$A"`), Env: map[string]string{"A": "x y"}})
	if got.Stdout != "x y\n" {
		t.Errorf("sh -c with env: %+v", got)
	}
	got = run(t, sb, drivers.Command{Argv: []string{"cat", "-", "/etc/hostname"}, Stdin: strings.NewReader("in\n")})
	if got.Stdout != "in\nh\n" {
		t.Errorf("cat - /etc/hostname: %+v", got)
	}
}

// The detection script is recognised by identity and answered as the fake's
// platform says; the golden files are what the fake's shell interpreter
// printed for it before the fake ran argv only.
func TestDetectionScript(t *testing.T) {
	t.Parallel()
	musl := "alpine-box"
	for name, p := range map[string]string{"debian": "debian-12", "alpine": musl, "busybox": "busybox", "zero": "zero"} {
		_, sb := newSandbox(t, &fake.Options{Platform: p})
		want, err := os.ReadFile("testdata/detect-" + name + ".golden")
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, sb, drivers.Command{Argv: qualify.DetectArgv(), Dir: "/w"})
		if diff := cmp.Diff(out{string(want), "", 0}, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
		det, err := qualify.ParseDetection(got.Stdout)
		if name != "zero" && (err != nil || det.Platform.OS != "linux") {
			t.Errorf("%s: ParseDetection = %+v, %v", name, det, err)
		}
	}
	// A handler registered for the script replaces the built-in answer.
	_, sb := newSandbox(t, &fake.Options{Handlers: map[string]fake.HandlerFunc{
		qualify.DetectScript: func(_ context.Context, inv fake.Invocation) (int, error) {
			inv.Stdout.Write([]byte("garbage\n"))
			return 0, nil
		},
	}})
	if got := run(t, sb, drivers.Command{Argv: qualify.DetectArgv()}); got.Stdout != "garbage\n" {
		t.Errorf("detection with a handler: %+v", got)
	}
}

func TestHandlers(t *testing.T) {
	t.Parallel()
	var seen fake.Invocation
	_, sb := newSandbox(t, &fake.Options{Handlers: map[string]fake.HandlerFunc{
		"probe": func(ctx context.Context, inv fake.Invocation) (int, error) {
			seen = inv
			b := make([]byte, 3)
			n, _ := inv.Stdin.Read(b)
			inv.Stdout.Write([]byte("got " + string(b[:n]) + "\n"))
			return 9, nil
		},
		"uname": func(ctx context.Context, inv fake.Invocation) (int, error) { // overrides the built-in
			inv.Stdout.Write([]byte("Plan9\n"))
			return 0, nil
		},
		"echo a; echo b": func(ctx context.Context, inv fake.Invocation) (int, error) {
			inv.Stdout.Write([]byte("a\nb\n"))
			inv.Stderr.Write([]byte(strings.Join(inv.Argv, "|")))
			return 3, nil
		},
	}})
	got := run(t, sb, drivers.Command{Argv: []string{"/usr/bin/probe", "arg"}, Dir: "/w", Env: map[string]string{"K": "v"}, Stdin: strings.NewReader("abc")})
	if diff := cmp.Diff(out{"got abc\n", "", 9}, got); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if seen.Dir != "/w" || seen.Env["K"] != "v" || seen.SandboxID != sb.ID() || !cmp.Equal(seen.Argv, []string{"/usr/bin/probe", "arg"}) {
		t.Errorf("invocation = %+v", seen)
	}
	if got := run(t, sb, drivers.Command{Argv: sh("uname -s")}); got.Stdout != "Plan9\n" {
		t.Errorf("a handler from sh -c = %+v", got)
	}
	if diff := cmp.Diff(out{"a\nb\n", "sh|-c|echo a; echo b|x", 3}, run(t, sb, drivers.Command{Argv: sh("echo a; echo b", "x")})); diff != "" {
		t.Errorf("script handler (-want +got):\n%s", diff)
	}
}
