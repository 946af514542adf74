package fake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
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
	sb, err := d.Acquire(context.Background(), drivers.Config{}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return d, sb
}

func TestShellSubset(t *testing.T) {
	t.Parallel()
	_, sb := newSandbox(t, nil)
	for _, tc := range []struct {
		script string
		want   out
	}{
		{"echo a; echo b", out{"a\nb\n", "", 0}},
		{"echo a\necho b", out{"a\nb\n", "", 0}},
		{"true && echo yes || echo no", out{"yes\n", "", 0}},
		{"false && echo yes || echo no", out{"no\n", "", 0}},
		{"false || false", out{"", "", 1}},
		{"echo 'single $HOME' \"double $HOME\" esc\\ aped", out{"single $HOME double /root esc aped\n", "", 0}},
		{`X=1; Y="$X two"; echo "${X}-$Y"`, out{"1-1 two\n", "", 0}},
		{"V=temp env >/dev/null; echo \"[$V]\"", out{"[]\n", "", 0}},
		{"echo to-err 1>&2", out{"", "to-err\n", 0}},
		{"echo to-err >&2", out{"", "to-err\n", 0}},
		{"nosuch 2>/dev/null; echo $?", out{"127\n", "", 0}},
		{"nosuch 2>&1", out{"sh: nosuch: not found\n", "", 127}},
		{"echo gone >/dev/null", out{"", "", 0}},
		{"echo a >/dev/null 2>&1; echo b 1>&2 2>/dev/null", out{"", "b\n", 0}}, // left to right
		{"exit 7; echo never", out{"", "", 7}},
		{"cd /tmp; pwd", out{"/tmp\n", "", 0}},
		{"# a comment\necho after # trailing", out{"after\n", "", 0}},
		{"printf '%s=%d\\n' a 5", out{"a=5\n", "", 0}},
		{"command -v echo; command -v nosuch || echo missing", out{"/usr/bin/echo\nmissing\n", "", 0}},
		{"sh -c 'exit 4'; echo $?", out{"4\n", "", 0}},
		{"echo a | cat", out{"a\n", "", 0}},
		{"ldd --version 2>&1 | head -n 1", out{"ldd (Debian GLIBC 2.36-9+deb12u4) 2.36\n", "", 0}},
		{"printf 'a\\nb\\nc\\n' | head -2 | cat", out{"a\nb\n", "", 0}},
		{"echo abc | head -c 2", out{"ab", "", 0}},
		{"exit 3 | true; echo still", out{"still\n", "", 0}}, // pipeline parts are subshells
		{"true | false", out{"", "", 1}},
		{"echo a |\necho b &&\necho c", out{"b\nc\n", "", 0}},
		{"echo a |", out{"", "sh: missing command after |\n", 2}},
		{"| echo a", out{"", "sh: missing command before |\n", 2}},
		{"sleep 1 &", out{"", "sh: background jobs (&) are not supported by the fake shell\n", 2}},
		{`echo "os=$(uname -s) m=$(uname -m)"; X=$(echo 'a)b'); echo $X`, out{"os=Linux m=x86_64\na)b\n", "", 0}},
		{`echo "[$(false)]" $?`, out{"[] 1\n", "", 0}},
		{"echo $(echo (", out{"", "sh: unterminated $(\n", 2}},
		{"echo `hostname`", out{"", "sh: command substitution `...` is not supported by the fake shell\n", 2}},
		{"echo x > file", out{"", "sh: redirection to \"file\" is not supported by the fake shell (only /dev/null)\n", 2}},
		{"echo 'open", out{"", "sh: unterminated single quote\n", 2}},
		{"&& echo x", out{"", "sh: missing command before &&\n", 2}},
	} {
		got := run(t, sb, drivers.Command{Argv: []string{"sh", "-c", tc.script}})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("sh -c %q (-want +got):\n%s", tc.script, diff)
		}
	}
}

func TestBuiltinsReportPlatform(t *testing.T) {
	t.Parallel()
	musl := fake.PlatformAlpine()
	musl.Hostname = "box"
	for _, tc := range []struct {
		name string
		plat fake.Platform
		argv []string
		want out
	}{
		{"uname -s", fake.PlatformDebian12(), []string{"uname", "-s"}, out{"Linux\n", "", 0}},
		{"uname -m", fake.PlatformDebian12(), []string{"uname", "-m"}, out{"x86_64\n", "", 0}},
		{"uname -r", fake.PlatformDebian12(), []string{"uname", "-r"}, out{"6.1.0-18-amd64\n", "", 0}},
		{"uname -sm", musl, []string{"uname", "-sm"}, out{"Linux x86_64\n", "", 0}},
		{"uname -a", musl, []string{"uname", "-a"}, out{"Linux box 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC fake x86_64 GNU/Linux\n", "", 0}},
		{"glibc ldd first line", fake.PlatformDebian12(), []string{"sh", "-c", "ldd --version | head -n 1"}, out{"ldd (Debian GLIBC 2.36-9+deb12u4) 2.36\n", "", 0}},
		{"musl ldd", musl, []string{"ldd", "--version"}, out{"", "musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Path: /lib/ld-musl-x86_64.so.1\nUsage: ldd [options] [--] pathname\n", 1}},
		{"no ldd", fake.PlatformBusybox(), []string{"ldd", "--version"}, out{"", "sh: ldd: not found\n", 127}},
		{"no os-release", fake.PlatformBusybox(), []string{"cat", "/etc/os-release"}, out{"", "cat: /etc/os-release: No such file or directory\n", 1}},
		{"os-release", musl, []string{"cat", "/etc/os-release"}, out{"PRETTY_NAME=\"Alpine Linux v3.19\"\nNAME=\"Alpine\"\nVERSION_ID=\"3.19.1\"\nID=alpine\n", "", 0}},
		{"hostname", musl, []string{"hostname"}, out{"box\n", "", 0}},
		{"echo -n", musl, []string{"echo", "-n", "a", "b"}, out{"a b", "", 0}},
		{"pwd default", musl, []string{"pwd"}, out{"/root\n", "", 0}},
		{"exit via sh", musl, []string{"sh", "-c", "exit 300"}, out{"", "", 44}},
		{"true", musl, []string{"true"}, out{"", "", 0}},
		{"false", musl, []string{"/bin/false"}, out{"", "", 1}},
		{"unknown", musl, []string{"nosuch", "x"}, out{"", "sh: nosuch: not found\n", 127}},
	} {
		_, sb := newSandbox(t, &fake.Options{Platform: &tc.plat})
		if diff := cmp.Diff(tc.want, run(t, sb, drivers.Command{Argv: tc.argv})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	_, sb := newSandbox(t, nil)
	got := run(t, sb, drivers.Command{Argv: []string{"ldd", "--version"}})
	if first, _, _ := strings.Cut(got.Stdout, "\n"); first != "ldd (Debian GLIBC 2.36-9+deb12u4) 2.36" || got.Exit != 0 || got.Stderr != "" {
		t.Errorf("glibc ldd --version = %+v", got)
	}
}

func TestEnvBuiltin(t *testing.T) {
	t.Parallel()
	_, sb := newSandbox(t, &fake.Options{Platform: &fake.Platform{Hostname: "h"}})
	got := run(t, sb, drivers.Command{Argv: []string{"env"}, Env: map[string]string{"A": "1", "HOME": "/home/x"}})
	want := "A=1\nHOME=/home/x\nHOSTNAME=h\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nUSER=root\n"
	if got.Stdout != want {
		t.Errorf("env:\n%s\nwant:\n%s", got.Stdout, want)
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
	}})
	got := run(t, sb, drivers.Command{Argv: []string{"/usr/bin/probe", "arg"}, Dir: "/w", Env: map[string]string{"K": "v"}, Stdin: strings.NewReader("abc")})
	if diff := cmp.Diff(out{"got abc\n", "", 9}, got); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if seen.Dir != "/w" || seen.Env["K"] != "v" || seen.SandboxID != sb.ID() || !cmp.Equal(seen.Argv, []string{"/usr/bin/probe", "arg"}) {
		t.Errorf("invocation = %+v", seen)
	}
	if got := run(t, sb, drivers.Command{Argv: []string{"sh", "-c", "uname -s && probe"}}); got.Stdout != "Plan9\ngot \n" || got.Exit != 9 {
		t.Errorf("handlers from sh = %+v", got)
	}
}
