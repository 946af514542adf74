package fake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/setupscript"
	"github.com/berthdev/berth/internal/wsscript"
)

// Invocation is one command run by a HandlerFunc.
type Invocation struct {
	Argv           []string
	Env            map[string]string // the whole environment of the command
	Dir            string            // the command's working directory; "/root" when it sets none
	SandboxID      string
	Stdin          io.Reader // never nil
	Stdout, Stderr io.Writer
	host           string
}

// HandlerFunc runs a command in Go and returns its exit status; an error
// fails the Exec itself (as a broken transport would). It honours ctx.
type HandlerFunc func(ctx context.Context, inv Invocation) (exitCode int, err error)

// defaultDir is the working directory of commands that set none.
const defaultDir = "/root"

// builtins are the commands the fake runs without a handler, by base name.
var builtins = map[string]func(d *Driver, ctx context.Context, inv Invocation, args []string) (int, error){
	"true":  func(*Driver, context.Context, Invocation, []string) (int, error) { return 0, nil },
	"false": func(*Driver, context.Context, Invocation, []string) (int, error) { return 1, nil },
	"exit": func(_ *Driver, _ context.Context, inv Invocation, args []string) (int, error) {
		if len(args) == 0 {
			return 0, nil
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintf(inv.Stderr, "exit: Illegal number: %s\n", args[0])
			return 2, nil
		}
		return n & 0xff, nil
	},
	"echo": echo,
	"pwd": func(d *Driver, ctx context.Context, inv Invocation, _ []string) (int, error) {
		return echo(d, ctx, inv, []string{inv.Dir})
	},
	"env": func(d *Driver, _ context.Context, inv Invocation, args []string) (int, error) {
		if len(args) > 0 {
			return notFound(inv, `"env" with arguments`, "env")
		}
		for _, k := range slices.Sorted(maps.Keys(inv.Env)) {
			fmt.Fprintf(inv.Stdout, "%s=%s\n", k, inv.Env[k])
		}
		return 0, nil
	},
	"uname": (*Driver).uname,
	"cat":   (*Driver).cat,
	"sleep": (*Driver).sleep,
	"ln":    (*Driver).ln,
}

func echo(_ *Driver, _ context.Context, inv Invocation, args []string) (int, error) {
	nl := "\n"
	if len(args) > 0 && args[0] == "-n" {
		nl, args = "", args[1:]
	}
	io.WriteString(inv.Stdout, strings.Join(args, " ")+nl)
	return 0, nil
}

// run runs inv.Argv: a handler, the detection script, a setup session's
// script, a built-in, or sh -c of one command. It fails only when ctx ended or a handler failed.
func (d *Driver) run(ctx context.Context, inv Invocation) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	argv, name := inv.Argv, path.Base(inv.Argv[0])
	script, isSh := "", name == "sh" && len(argv) > 2 && argv[1] == "-c"
	if isSh {
		script = argv[2]
	}
	for _, key := range []string{argv[0], name, script} {
		if h, ok := d.o.Handlers[key]; ok && (key != script || isSh) {
			inv.Argv = slices.Clone(argv)
			code, err := h(ctx, inv)
			if err != nil {
				return -1, fmt.Errorf("handler %q: %w", argv[0], err)
			}
			return code, ctx.Err()
		}
	}
	switch {
	case builtins[name] != nil:
		return builtins[name](d, ctx, inv, argv[1:])
	case !isSh && name == "sh":
		return notFound(inv, strconv.Quote(strings.Join(argv, " ")), "sh")
	case !isSh:
		return notFound(inv, strconv.Quote(argv[0]), name)
	case script == qualify.DetectScript:
		d.detect(inv)
		return 0, nil
	case script == setupscript.WriteFile:
		// A clean sandbox writes the file; the fake keeps no files.
		if _, err := io.Copy(io.Discard, inv.Stdin); err != nil {
			return -1, err
		}
		return 0, nil
	case script == setupscript.Clean, script == setupscript.Environ:
		return 0, nil // nothing of berth's to remove; process 1 has no environment
	case script == wsscript.Facts && len(argv) == 5:
		return d.wsFacts(inv, argv[4])
	case script == wsscript.Remove && len(argv) == 5:
		return d.wsRemove(inv, argv[4])
	}
	words, err := splitWords(script, inv.Env, argv[3:])
	if err != nil {
		return notFound(inv, "sh -c "+strconv.Quote(script)+" ("+err.Error()+")", script)
	}
	if len(words) == 0 {
		return 0, nil
	}
	inv.Argv = words
	return d.run(ctx, inv)
}

// notFound fails an unknown command: exit 127, naming the handler to add.
func notFound(inv Invocation, what, key string) (int, error) {
	fmt.Fprintf(inv.Stderr, "fake: no handler for %s: register one in Options.Handlers[%q]\n", what, key)
	return 127, nil
}

// splitWords splits script, one simple command, into its words (see the
// package documentation); args are $0 (default "sh"), $1, ...
func splitWords(script string, env map[string]string, args []string) ([]string, error) {
	args = append([]string{"sh"}, args...)[min(len(args), 1):]
	lookup := func(name string) string {
		switch k, err := strconv.Atoi(name); {
		case len(name) == 1 && err == nil && k < len(args):
			return args[k]
		case len(name) == 1 && err == nil:
			return ""
		case len(name) == 1 && strings.Contains("*#$@!?-", name):
			return "$" + name // not built in: kept
		}
		return env[name]
	}
	var words []string
	var cur, pending strings.Builder // pending: text still to expand
	flush := func() {
		cur.WriteString(os.Expand(pending.String(), lookup))
		pending.Reset()
	}
	inWord, dq := false, false
	for i := 0; i < len(script); i++ {
		switch c := script[i]; {
		case c == '`' || c == '$' && strings.HasPrefix(script[i+1:], "("):
			return nil, errors.New("command substitution is not built in")
		case c == '\'' && !dq:
			end := strings.IndexByte(script[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated quote")
			}
			flush()
			cur.WriteString(script[i+1 : i+1+end])
			i, inWord = i+end+1, true
		case c == '"':
			flush()
			dq, inWord = !dq, true
		case c == '\\' && i+1 < len(script) && (!dq || strings.IndexByte(`$"\`, script[i+1]) >= 0):
			flush()
			i, inWord = i+1, true
			cur.WriteByte(script[i])
		case dq || !strings.ContainsRune(" \t\n;&|<>()", rune(c)):
			pending.WriteByte(c)
			inWord = true
		case c != ' ' && c != '\t':
			return nil, fmt.Errorf("%q: only one simple command is built in", c)
		case inWord:
			flush()
			words, inWord = append(words, cur.String()), false
			cur.Reset()
		}
	}
	flush()
	if dq {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// sleep waits on the driver's clock: seconds, or with the unit s, m or h.
func (d *Driver) sleep(ctx context.Context, inv Invocation, args []string) (int, error) {
	a, unit := strings.Join(args, " "), time.Second
	if u, ok := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[a[max(len(a)-1, 0):]]; ok {
		a, unit = a[:len(a)-1], u
	}
	f, err := strconv.ParseFloat(a, 64)
	if len(args) != 1 || err != nil || f < 0 {
		fmt.Fprintf(inv.Stderr, "sleep: invalid time interval %q\n", strings.Join(args, " "))
		return 1, nil
	}
	select {
	case <-d.clock.After(time.Duration(f * float64(unit))):
		return 0, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// uname prints the fields of -s -n -r -v -m -o (or -a) in that order.
func (d *Driver) uname(_ context.Context, inv Invocation, args []string) (int, error) {
	flags := cmp.Or(strings.Join(args, ""), "-s")
	for _, a := range args {
		if len(a) < 2 || a[0] != '-' || strings.Trim(a[1:], "snrvmoa") != "" {
			fmt.Fprintf(inv.Stderr, "uname: invalid option %q\n", a)
			return 1, nil
		}
	}
	p := d.platform
	var out []string
	for i, v := range []string{p.unameS(), inv.host, p.kernel, "#1 SMP PREEMPT_DYNAMIC fake", p.machine, "GNU/Linux"} {
		if strings.ContainsAny(flags, "a"+"snrvmo"[i:i+1]) {
			out = append(out, v)
		}
	}
	fmt.Fprintln(inv.Stdout, strings.Join(out, " "))
	return 0, nil
}

// cat prints stdin ("-" or no argument), /etc/os-release and /etc/hostname.
func (d *Driver) cat(_ context.Context, inv Invocation, files []string) (int, error) {
	code, rel := 0, d.platform.osRelease()
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, f := range files {
		switch {
		case f == "-":
			if _, err := io.Copy(inv.Stdout, inv.Stdin); err != nil {
				return -1, err
			}
		case (f == "/etc/os-release" || f == "/usr/lib/os-release") && rel != "":
			io.WriteString(inv.Stdout, rel)
		case f == "/etc/hostname":
			fmt.Fprintln(inv.Stdout, inv.host)
		default:
			fmt.Fprintf(inv.Stderr, "cat: %s: No such file or directory\n", f)
			code = 1
		}
	}
	return code, nil
}

// detect prints what qualify.DetectScript prints on the platform;
// the loader, getconf and sw_vers sections stay empty.
func (d *Driver) detect(inv Invocation) {
	p := d.platform
	for _, s := range [][2]string{
		{"begin v1", ""}, {"uname-s", p.unameS() + "\n"}, {"uname-m", p.machine + "\n"}, {"uname-r", p.kernel + "\n"},
		{"ldd", p.lddVersion()}, {"getconf", ""}, {"ld-musl", ""}, {"ld-linux", ""}, {"os-release", p.osRelease()},
		{"sw_vers", ""}, {"hostname", inv.host + "\n"}, {"pwd", inv.Dir + "\n"}, {"end", ""},
	} {
		fmt.Fprintf(inv.Stdout, "@@berth-probe:%s@@\n%s", s[0], s[1])
	}
}

// platform is the operating system a fake sandbox reports through its
// built-in commands and the detection script (Options.Platform). The zero
// platform reports no kernel, machine, C library or /etc/os-release; every
// platform reports the sandbox's id as its host name unless hostname is set.
type platform struct {
	goos        string // the kernel name as Go spells it ("linux"); uname -s prints "Linux"
	machine     string // uname -m ("x86_64", "aarch64")
	kernel      string // uname -r ("6.1.0-18-amd64")
	libcFamily  string // "glibc", "musl" or "" (no C library: no ldd)
	libcVersion string // "2.36", "1.2.4"
	libcBuild   string // the glibc package version ldd shows ("2.36-9+deb12u4"); "": libcVersion
	// osReleaseID and osReleaseVersionID are ID and VERSION_ID of
	// /etc/os-release ("debian", "12"); no osReleaseID, no /etc/os-release.
	osReleaseID, osReleaseVersionID string
	prettyName                      string // PRETTY_NAME of /etc/os-release; "" derives it
	hostname                        string // what uname -n prints; "": the provider lease id
}

// platforms are the platforms Options.Platform names. Read-only (the
// package's own tests add theirs in an init).
var platforms = map[string]platform{
	// Debian 12 on x86_64, glibc 2.36: the default.
	platformDebian12: {goos: "linux", machine: "x86_64", kernel: "6.1.0-18-amd64", libcFamily: "glibc", libcVersion: "2.36",
		libcBuild: "2.36-9+deb12u4", osReleaseID: "debian", osReleaseVersionID: "12", prettyName: "Debian GNU/Linux 12 (bookworm)"},
	// Alpine 3.19 on x86_64 with musl 1.2.4.
	platformAlpine: {goos: "linux", machine: "x86_64", kernel: "6.1.0-18-amd64", libcFamily: "musl", libcVersion: "1.2.4",
		osReleaseID: "alpine", osReleaseVersionID: "3.19.1", prettyName: "Alpine Linux v3.19"},
	// A static busybox on x86_64: no C library, no /etc/os-release.
	platformBusybox: {goos: "linux", machine: "x86_64", kernel: "6.1.0-18-amd64"},
}

// The names of the platforms (Options.Platform).
const (
	platformDebian12 = "debian-12"
	platformAlpine   = "alpine"
	platformBusybox  = "busybox"
)

func (p platform) unameS() string { return title(cmp.Or(p.goos, "linux")) }

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// lddVersion returns what "ldd --version" prints (on stdout or stderr).
func (p platform) lddVersion() string {
	switch p.libcFamily {
	case "glibc":
		distro := "GNU libc"
		if p.osReleaseID != "" {
			distro = title(p.osReleaseID) + " GLIBC"
		}
		return fmt.Sprintf("ldd (%s %s) %s\nCopyright (C) 2022 Free Software Foundation, Inc.\n"+
			"This is free software; see the source for copying conditions.  There is NO\n"+
			"warranty; not even for MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.\n"+
			"Written by Roland McGrath and Ulrich Drepper.\n", distro, cmp.Or(p.libcBuild, p.libcVersion), p.libcVersion)
	case "musl":
		return fmt.Sprintf("musl libc (%s)\nVersion %s\nDynamic Program Path: /lib/ld-musl-%s.so.1\n"+
			"Usage: ldd [options] [--] pathname\n", p.machine, p.libcVersion, p.machine)
	}
	return "sh: ldd: not found\n"
}

// osRelease returns the content of /etc/os-release, "" when there is none.
func (p platform) osRelease() string {
	if p.osReleaseID == "" {
		return ""
	}
	s := fmt.Sprintf("PRETTY_NAME=%q\nNAME=%q\n", cmp.Or(p.prettyName, strings.TrimSpace(p.osReleaseID+" "+p.osReleaseVersionID)), title(p.osReleaseID))
	if p.osReleaseVersionID != "" {
		s += fmt.Sprintf("VERSION_ID=%q\n", p.osReleaseVersionID)
	}
	return s + "ID=" + p.osReleaseID + "\n"
}
