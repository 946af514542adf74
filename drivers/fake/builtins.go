package fake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Invocation is one command run by a HandlerFunc.
type Invocation struct {
	Argv      []string
	Env       map[string]string // the whole environment of the command
	Dir       string
	Stdin     io.Reader // never nil
	Stdout    io.Writer
	Stderr    io.Writer
	SandboxID string
}

// HandlerFunc runs a command in Go. It returns the exit status; a non-nil
// error fails the Exec itself (as a broken transport would), wrapped with
// the sandbox id. It must honour ctx.
type HandlerFunc func(ctx context.Context, inv Invocation) (exitCode int, err error)

// shell is the state of one command line: environment, directory, stdin.
type shell struct {
	d     *Driver
	id    string
	host  string
	plat  Platform
	vars  map[string]string
	dir   string
	stdin io.Reader
	last  int
	term  *termSession
}

// DefaultDir is the working directory of commands that set none.
const DefaultDir = "/root"

func (d *Driver) newShell(id, host string, cmdEnv map[string]string, dir string, stdin io.Reader) *shell {
	vars := map[string]string{
		"PATH":     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":     "/root",
		"HOSTNAME": host,
		"USER":     "root",
	}
	maps.Copy(vars, cmdEnv)
	if dir == "" {
		dir = DefaultDir
	}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return &shell{d: d, id: id, host: host, plat: d.platform, vars: vars, dir: dir, stdin: stdin}
}

func (sh *shell) child() *shell {
	c := *sh
	c.vars = maps.Clone(sh.vars)
	return &c
}

// builtinNames are the commands the fake knows besides handlers; ldd only
// when the platform has a C library.
var builtinNames = []string{
	"cat", "command", "echo", "env", "false", "head", "hostname", "id", "printf",
	"pwd", "sh", "sleep", "stty", "true", "uname", "whoami",
}

func (sh *shell) known(name string) bool {
	if _, ok := sh.handler(name); ok {
		return true
	}
	if name == "ldd" {
		_, _, _, ok := sh.plat.lddVersion()
		return ok
	}
	return slices.Contains(builtinNames, name) || name == "exit" || name == "cd" || name == "export"
}

func (sh *shell) handler(argv0 string) (HandlerFunc, bool) {
	if h, ok := sh.d.handlers[argv0]; ok {
		return h, true
	}
	h, ok := sh.d.handlers[path.Base(argv0)]
	return h, ok
}

// runArgv runs one program. The error is non-nil only when ctx ended or a
// handler failed.
func (sh *shell) runArgv(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	if h, ok := sh.handler(argv[0]); ok {
		code, err := h(ctx, Invocation{
			Argv: slices.Clone(argv), Env: maps.Clone(sh.vars), Dir: sh.dir,
			Stdin: sh.stdin, Stdout: stdout, Stderr: stderr, SandboxID: sh.id,
		})
		if err != nil {
			return -1, fmt.Errorf("handler %q: %w", argv[0], err)
		}
		return code, ctx.Err()
	}
	name, args := path.Base(argv[0]), argv[1:]
	switch name {
	case "true":
		return 0, nil
	case "false":
		return 1, nil
	case "echo":
		nl := true
		if len(args) > 0 && args[0] == "-n" {
			nl, args = false, args[1:]
		}
		out := strings.Join(args, " ")
		if nl {
			out += "\n"
		}
		io.WriteString(stdout, out)
		return 0, nil
	case "printf":
		if len(args) == 0 {
			fmt.Fprintln(stderr, "printf: usage: printf FORMAT [ARGUMENT]...")
			return 2, nil
		}
		io.WriteString(stdout, printf(args[0], args[1:]))
		return 0, nil
	case "sleep":
		return sh.sleep(ctx, args, stderr)
	case "uname":
		return sh.uname(args, stdout, stderr)
	case "ldd":
		out, fd, code, ok := sh.plat.lddVersion()
		if !ok {
			break
		}
		if len(args) != 1 || args[0] != "--version" {
			fmt.Fprintln(stderr, "ldd: missing file arguments")
			return 1, nil
		}
		if fd == 1 {
			io.WriteString(stdout, out)
		} else {
			io.WriteString(stderr, out)
		}
		return code, nil
	case "cat":
		return sh.cat(ctx, args, stdout, stderr)
	case "head":
		return sh.head(ctx, args, stdout, stderr)
	case "hostname":
		fmt.Fprintln(stdout, sh.host)
		return 0, nil
	case "pwd":
		fmt.Fprintln(stdout, sh.dir)
		return 0, nil
	case "whoami":
		fmt.Fprintln(stdout, "root")
		return 0, nil
	case "id":
		if len(args) == 1 && args[0] == "-u" {
			fmt.Fprintln(stdout, "0")
		} else {
			fmt.Fprintln(stdout, "uid=0(root) gid=0(root) groups=0(root)")
		}
		return 0, nil
	case "env":
		if len(args) > 0 {
			fmt.Fprintln(stderr, "env: arguments are not supported by the fake")
			return 2, nil
		}
		for _, k := range slices.Sorted(maps.Keys(sh.vars)) {
			fmt.Fprintf(stdout, "%s=%s\n", k, sh.vars[k])
		}
		return 0, nil
	case "command":
		if len(args) != 2 || args[0] != "-v" {
			fmt.Fprintln(stderr, "command: only command -v NAME is supported by the fake")
			return 2, nil
		}
		if !sh.known(args[1]) {
			return 1, nil
		}
		switch args[1] {
		case "exit", "cd", "export":
			fmt.Fprintln(stdout, args[1])
		default:
			fmt.Fprintln(stdout, "/usr/bin/"+path.Base(args[1]))
		}
		return 0, nil
	case "stty":
		if sh.term == nil {
			fmt.Fprintln(stderr, "stty: standard input: Not a tty")
			return 1, nil
		}
		if len(args) == 1 && args[0] == "size" {
			r, c := sh.term.size()
			fmt.Fprintf(stdout, "%d %d\n", r, c)
			return 0, nil
		}
		return 0, nil
	case "sh":
		sub := sh.child()
		if len(args) >= 2 && args[0] == "-c" {
			return sub.runScript(ctx, args[1], stdout, stderr)
		}
		if len(args) > 0 {
			fmt.Fprintln(stderr, "sh: only sh -c SCRIPT and sh reading stdin are supported by the fake")
			return 2, nil
		}
		script, err := readAll(ctx, sh.stdin)
		if err != nil {
			return -1, err
		}
		return sub.runScript(ctx, string(script), stdout, stderr)
	}
	fmt.Fprintf(stderr, "sh: %s: not found\n", argv[0])
	return 127, nil
}

func (sh *shell) sleep(ctx context.Context, args []string, stderr io.Writer) (int, error) {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "sleep: missing operand")
		return 1, nil
	}
	a := args[0]
	unit := time.Second
	switch {
	case strings.HasSuffix(a, "s"):
		a = strings.TrimSuffix(a, "s")
	case strings.HasSuffix(a, "m"):
		a, unit = strings.TrimSuffix(a, "m"), time.Minute
	case strings.HasSuffix(a, "h"):
		a, unit = strings.TrimSuffix(a, "h"), time.Hour
	}
	f, err := strconv.ParseFloat(a, 64)
	if err != nil || f < 0 {
		fmt.Fprintf(stderr, "sleep: invalid time interval %q\n", args[0])
		return 1, nil
	}
	select {
	case <-sh.d.clk.After(time.Duration(f * float64(unit))):
		return 0, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (sh *shell) uname(args []string, stdout, stderr io.Writer) (int, error) {
	var want [6]bool // s n r v m o
	if len(args) == 0 {
		want[0] = true
	}
	for _, a := range args {
		if len(a) < 2 || a[0] != '-' {
			fmt.Fprintf(stderr, "uname: extra operand %q\n", a)
			return 1, nil
		}
		for _, c := range a[1:] {
			i := strings.IndexRune("snrvmo", c)
			switch {
			case c == 'a':
				want = [6]bool{true, true, true, true, true, true}
			case i >= 0:
				want[i] = true
			default:
				fmt.Fprintf(stderr, "uname: invalid option -- '%c'\n", c)
				return 1, nil
			}
		}
	}
	vals := [6]string{sh.plat.unameS(), sh.host, sh.plat.Kernel, "#1 SMP PREEMPT_DYNAMIC fake", sh.plat.Machine, "GNU/Linux"}
	var out []string
	for i, w := range want {
		if w {
			out = append(out, vals[i])
		}
	}
	fmt.Fprintln(stdout, strings.Join(out, " "))
	return 0, nil
}

func (sh *shell) cat(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		args = []string{"-"}
	}
	code := 0
	for _, f := range args {
		switch f {
		case "-":
			b, err := readAll(ctx, sh.stdin)
			if err != nil {
				return -1, err
			}
			stdout.Write(b)
		case "/etc/os-release", "/usr/lib/os-release":
			if s, ok := sh.plat.osRelease(); ok {
				io.WriteString(stdout, s)
				continue
			}
			fmt.Fprintf(stderr, "cat: %s: No such file or directory\n", f)
			code = 1
		case "/etc/hostname":
			fmt.Fprintln(stdout, sh.host)
		default:
			fmt.Fprintf(stderr, "cat: %s: No such file or directory\n", f)
			code = 1
		}
	}
	return code, nil
}

// head implements head [-n N | -N | -c N] reading stdin.
func (sh *shell) head(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	lines, bytesN := 10, -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		switch {
		case (a == "-n" || a == "-c") && i+1 < len(args):
			i++
			var n int
			n, err = strconv.Atoi(args[i])
			if a == "-n" {
				lines = n
			} else {
				bytesN = n
			}
		case len(a) > 1 && a[0] == '-':
			lines, err = strconv.Atoi(a[1:])
		default:
			fmt.Fprintln(stderr, "head: only stdin is supported by the fake")
			return 2, nil
		}
		if err != nil {
			fmt.Fprintf(stderr, "head: invalid number %q\n", a)
			return 1, nil
		}
	}
	b, err := readAll(ctx, sh.stdin)
	if err != nil {
		return -1, err
	}
	if bytesN >= 0 {
		stdout.Write(b[:min(bytesN, len(b))])
		return 0, nil
	}
	for i := 0; i < len(b) && lines > 0; i++ {
		if b[i] == '\n' {
			lines--
			if lines == 0 {
				b = b[:i+1]
			}
		}
	}
	stdout.Write(b)
	return 0, nil
}

// readAll reads r to its end, or until ctx ends.
func readAll(ctx context.Context, r io.Reader) ([]byte, error) {
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- res{b, err}
	}()
	select {
	case v := <-ch:
		return v.b, v.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// printf implements %s, %d, %% and the escapes \n, \t, \\ of printf(1).
func printf(format string, args []string) string {
	var b strings.Builder
	next := func() string {
		if len(args) == 0 {
			return ""
		}
		a := args[0]
		args = args[1:]
		return a
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		switch {
		case c == '\\' && i+1 < len(format):
			i++
			switch format[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '\\':
				b.WriteByte('\\')
			default:
				b.WriteByte('\\')
				b.WriteByte(format[i])
			}
		case c == '%' && i+1 < len(format):
			i++
			switch format[i] {
			case 's':
				b.WriteString(next())
			case 'd':
				n, _ := strconv.Atoi(next())
				b.WriteString(strconv.Itoa(n))
			case '%':
				b.WriteByte('%')
			default:
				b.WriteByte('%')
				b.WriteByte(format[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
