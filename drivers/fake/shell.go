package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
)

// The fake's sh understands a small, documented subset of POSIX sh:
//
//   - commands separated by newlines or ";", chained with "&&" and "||";
//   - pipelines "a | b", run one command after the other, each reading the
//     previous one's whole output (no streaming between them);
//   - words with 'single quotes', "double quotes" (in which $VAR, ${VAR}
//     and \" \\ \$ are expanded) and backslash escapes;
//   - $NAME, ${NAME} and $? expansion and $(...) command substitution
//     (no field splitting, no globbing);
//   - NAME=value assignments, alone or before a command;
//   - redirections of fd 1 and 2 to /dev/null or to each other:
//     ">/dev/null", "2>/dev/null", "2>&1", "1>&2", ">&2";
//   - the shell built-ins exit [N], cd DIR and export NAME=value;
//   - "#" comments.
//
// Background jobs, subshells, backquotes, control flow
// and redirections to files are not supported: they fail with exit status 2
// and a message on stderr that says so.

type tokKind int

const (
	tWord tokKind = iota
	tOp
	tRedir
)

type wpart struct {
	text   string
	isVar  bool // text is a variable name
	isSubs bool // text is a script whose output replaces it: $(...)
}

type token struct {
	kind   tokKind
	op     string  // tOp: ";", "&&", "||", "|", "&"
	parts  []wpart // tWord
	quoted bool    // tWord: some part was quoted
	fd     int     // tRedir: 1 or 2
	target string  // tRedir: "null", "&1" or "&2"
}

// literal returns the unexpanded text of an unquoted word without variables.
func (t token) literal() (string, bool) {
	if t.quoted {
		return "", false
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.isVar || p.isSubs {
			return "", false
		}
		b.WriteString(p.text)
	}
	return b.String(), true
}

type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

func isNameByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

// tokenize splits a script into words, operators and redirections.
func tokenize(s string) ([]token, error) {
	var toks []token
	var cur token
	started := false
	lit := func(text string) {
		if n := len(cur.parts); n > 0 && !cur.parts[n-1].isVar && !cur.parts[n-1].isSubs {
			cur.parts[n-1].text += text
		} else {
			cur.parts = append(cur.parts, wpart{text: text})
		}
		started = true
	}
	flush := func() {
		if started {
			cur.kind = tWord
			toks = append(toks, cur)
		}
		cur, started = token{}, false
	}
	// readVar reads a variable reference at s[i] == '$' and returns the index after it.
	readVar := func(i int) (int, error) {
		j := i + 1
		switch {
		case j < len(s) && s[j] == '{':
			end := strings.IndexByte(s[j:], '}')
			if end < 0 {
				return 0, &syntaxError{"unterminated ${"}
			}
			cur.parts = append(cur.parts, wpart{text: s[j+1 : j+end], isVar: true})
			started = true
			return j + end + 1, nil
		case j < len(s) && s[j] == '(':
			end, err := matchParen(s, j)
			if err != nil {
				return 0, err
			}
			cur.parts = append(cur.parts, wpart{text: s[j+1 : end], isSubs: true})
			started = true
			return end + 1, nil
		case j < len(s) && (s[j] == '?' || s[j] == '$' || (s[j] >= '0' && s[j] <= '9')):
			cur.parts = append(cur.parts, wpart{text: s[j : j+1], isVar: true})
			started = true
			return j + 1, nil
		case j < len(s) && isNameByte(s[j], true):
			k := j
			for k < len(s) && isNameByte(s[k], false) {
				k++
			}
			cur.parts = append(cur.parts, wpart{text: s[j:k], isVar: true})
			started = true
			return k, nil
		}
		lit("$")
		return j, nil
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
			i++
		case c == '\n' || c == ';':
			flush()
			toks = append(toks, token{kind: tOp, op: string(c)})
			i++
		case c == '&' || c == '|':
			flush()
			op := string(c)
			if i+1 < len(s) && s[i+1] == c {
				op += string(c)
				i++
			}
			toks = append(toks, token{kind: tOp, op: op})
			i++
		case c == '#' && !started:
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, &syntaxError{"unterminated single quote"}
			}
			lit(s[i+1 : i+1+end])
			cur.quoted = true
			i += end + 2
		case c == '"':
			cur.quoted = true
			started = true
			i++
			for {
				if i >= len(s) {
					return nil, &syntaxError{"unterminated double quote"}
				}
				if s[i] == '"' {
					i++
					break
				}
				switch {
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0:
					if s[i+1] != '\n' {
						lit(s[i+1 : i+2])
					}
					i += 2
				case s[i] == '$':
					j, err := readVar(i)
					if err != nil {
						return nil, err
					}
					i = j
				case s[i] == '`':
					return nil, &syntaxError{"command substitution `...` is not supported by the fake shell"}
				default:
					lit(s[i : i+1])
					i++
				}
			}
		case c == '\\':
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					lit(s[i+1 : i+2])
				}
				i += 2
			} else {
				i++
			}
		case c == '$':
			j, err := readVar(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '`':
			return nil, &syntaxError{"command substitution `...` is not supported by the fake shell"}
		case c == '(' || c == ')':
			return nil, &syntaxError{"subshells are not supported by the fake shell"}
		case c == '<':
			return nil, &syntaxError{"input redirection is not supported by the fake shell"}
		case c == '>':
			fd := 1
			if l, ok := cur.literal(); ok && started && (l == "1" || l == "2") {
				fd, _ = strconv.Atoi(l)
				cur, started = token{}, false
			} else {
				flush()
			}
			i++
			if i < len(s) && s[i] == '>' {
				i++
			}
			r := token{kind: tRedir, fd: fd}
			if i < len(s) && s[i] == '&' {
				i++
				if i < len(s) && (s[i] == '1' || s[i] == '2') {
					r.target = "&" + s[i:i+1]
					i++
				} else {
					return nil, &syntaxError{"only >&1 and >&2 are supported by the fake shell"}
				}
			} else {
				for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
					i++
				}
				j := i
				for j < len(s) && strings.IndexByte(" \t\n;&|<>", s[j]) < 0 {
					j++
				}
				if s[i:j] != "/dev/null" {
					return nil, &syntaxError{fmt.Sprintf("redirection to %q is not supported by the fake shell (only /dev/null)", s[i:j])}
				}
				r.target = "null"
				i = j
			}
			toks = append(toks, r)
		default:
			lit(s[i : i+1])
			i++
		}
	}
	flush()
	return toks, nil
}

// simple is one command: its words and redirections.
type simple struct {
	words  []token
	redirs []token
}

func (c simple) empty() bool { return len(c.words) == 0 && len(c.redirs) == 0 }

// pipeline is commands joined by "|".
type pipeline []simple

// andOr is a chain of pipelines joined by && and ||; ops[i] joins cmds[i]
// and cmds[i+1].
type andOr struct {
	cmds []pipeline
	ops  []string
}

func parse(toks []token) ([]andOr, error) {
	var lists []andOr
	var cur andOr
	var pipe pipeline
	var cmd simple
	pendingOp := func() bool { return len(cur.ops) > 0 && len(cur.ops) >= len(cur.cmds) }
	endList := func() error {
		if cmd.empty() {
			if len(pipe) > 0 {
				return &syntaxError{"missing command after |"}
			}
			if pendingOp() {
				return &syntaxError{"missing command after " + cur.ops[len(cur.ops)-1]}
			}
		} else {
			cur.cmds = append(cur.cmds, append(pipe, cmd))
			pipe, cmd = nil, simple{}
		}
		if len(cur.cmds) > 0 {
			lists = append(lists, cur)
		}
		cur = andOr{}
		return nil
	}
	for _, t := range toks {
		switch t.kind {
		case tWord:
			cmd.words = append(cmd.words, t)
		case tRedir:
			cmd.redirs = append(cmd.redirs, t)
		case tOp:
			switch t.op {
			case "\n":
				if cmd.empty() && (len(pipe) > 0 || pendingOp()) {
					continue // a line may end after |, && or ||
				}
				if err := endList(); err != nil {
					return nil, err
				}
			case ";":
				if err := endList(); err != nil {
					return nil, err
				}
			case "|":
				if cmd.empty() {
					return nil, &syntaxError{"missing command before |"}
				}
				pipe, cmd = append(pipe, cmd), simple{}
			case "&&", "||":
				if cmd.empty() {
					return nil, &syntaxError{"missing command before " + t.op}
				}
				cur.cmds = append(cur.cmds, append(pipe, cmd))
				pipe, cmd = nil, simple{}
				cur.ops = append(cur.ops, t.op)
			default:
				return nil, &syntaxError{"background jobs (&) are not supported by the fake shell"}
			}
		}
	}
	if err := endList(); err != nil {
		return nil, err
	}
	return lists, nil
}

// runPipeline runs the commands of p one after another, each in a subshell
// reading the previous one's whole output; the status is the last one's.
func (sh *shell) runPipeline(ctx context.Context, p pipeline, stdout, stderr io.Writer) (int, error) {
	if len(p) == 1 {
		return sh.runSimple(ctx, p[0], stdout, stderr)
	}
	in, code := sh.stdin, 0
	for i, c := range p {
		sub := sh.child()
		sub.stdin = in
		var buf bytes.Buffer
		out := io.Writer(&buf)
		if i == len(p)-1 {
			out = stdout
		}
		var err error
		code, err = sub.runSimple(ctx, c, out, stderr)
		if ee := (*exitError)(nil); errors.As(err, &ee) {
			code, err = ee.code, nil
		}
		if err != nil {
			return code, err
		}
		in = bytes.NewReader(buf.Bytes())
	}
	return code, nil
}

// exitError ends a script with a status (the exit built-in).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// matchParen returns the index of the ")" closing the "(" at s[open],
// skipping quoted text.
func matchParen(s string, open int) (int, error) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return 0, &syntaxError{"unterminated single quote"}
			}
			i += end + 1
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, &syntaxError{"unterminated $("}
}

// expand returns the value of word t. Command substitutions run in a
// subshell; their stderr goes to stderr and trailing newlines are dropped.
func (sh *shell) expand(ctx context.Context, t token, stderr io.Writer) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.isSubs {
			var out bytes.Buffer
			code, err := sh.child().runScript(ctx, p.text, &out, stderr)
			if err != nil {
				return "", err
			}
			sh.last = code
			b.WriteString(strings.TrimRight(out.String(), "\n"))
			continue
		}
		if !p.isVar {
			b.WriteString(p.text)
			continue
		}
		switch p.text {
		case "?":
			b.WriteString(strconv.Itoa(sh.last))
		case "$":
			b.WriteString("1")
		case "0":
			b.WriteString("sh")
		default:
			b.WriteString(sh.vars[p.text])
		}
	}
	return b.String(), nil
}

func isAssignment(t token) (name, valuePrefix string, ok bool) {
	if len(t.parts) == 0 || t.parts[0].isVar || t.parts[0].isSubs {
		return "", "", false
	}
	n, v, found := strings.Cut(t.parts[0].text, "=")
	if !found || n == "" {
		return "", "", false
	}
	for i := 0; i < len(n); i++ {
		if !isNameByte(n[i], i == 0) {
			return "", "", false
		}
	}
	return n, v, true
}

// runScript runs script and returns its exit status. A syntax error is
// reported on stderr with status 2.
func (sh *shell) runScript(ctx context.Context, script string, stdout, stderr io.Writer) (int, error) {
	toks, err := tokenize(script)
	var lists []andOr
	if err == nil {
		lists, err = parse(toks)
	}
	if se := (*syntaxError)(nil); errors.As(err, &se) {
		fmt.Fprintf(stderr, "sh: %s\n", se.msg)
		return 2, nil
	}
	for _, l := range lists {
		code, err := sh.runPipeline(ctx, l.cmds[0], stdout, stderr)
		for i, op := range l.ops {
			if err != nil {
				break
			}
			if (op == "&&") == (code == 0) {
				code, err = sh.runPipeline(ctx, l.cmds[i+1], stdout, stderr)
			}
		}
		if ee := (*exitError)(nil); errors.As(err, &ee) {
			sh.last = ee.code
			return ee.code, nil
		}
		if err != nil {
			return code, err
		}
		sh.last = code
		if ctx.Err() != nil {
			return code, ctx.Err()
		}
	}
	return sh.last, nil
}

func (sh *shell) runSimple(ctx context.Context, c simple, stdout, stderr io.Writer) (int, error) {
	fds := [3]io.Writer{nil, stdout, stderr}
	for _, r := range c.redirs {
		switch r.target {
		case "null":
			fds[r.fd] = io.Discard
		case "&1":
			fds[r.fd] = fds[1]
		case "&2":
			fds[r.fd] = fds[2]
		}
	}
	assign := map[string]string{}
	i := 0
	for ; i < len(c.words); i++ {
		n, _, ok := isAssignment(c.words[i])
		if !ok {
			break
		}
		w, err := sh.expand(ctx, c.words[i], fds[2])
		if err != nil {
			return -1, err
		}
		_, v, _ := strings.Cut(w, "=")
		assign[n] = v
	}
	if i == len(c.words) {
		maps.Copy(sh.vars, assign)
		return 0, nil
	}
	argv := make([]string, 0, len(c.words)-i)
	for _, w := range c.words[i:] {
		a, err := sh.expand(ctx, w, fds[2])
		if err != nil {
			return -1, err
		}
		argv = append(argv, a)
	}
	switch argv[0] {
	case "exit":
		code := sh.last
		if len(argv) > 1 {
			n, err := strconv.Atoi(argv[1])
			if err != nil {
				fmt.Fprintf(fds[2], "sh: exit: Illegal number: %s\n", argv[1])
				return 2, nil
			}
			code = n & 0xff
		}
		return code, &exitError{code}
	case "cd":
		if len(argv) > 1 {
			sh.dir = joinDir(sh.dir, argv[1])
		} else {
			sh.dir = sh.vars["HOME"]
		}
		return 0, nil
	case "export":
		for _, a := range argv[1:] {
			if n, v, ok := strings.Cut(a, "="); ok {
				sh.vars[n] = v
			}
		}
		return 0, nil
	}
	sub := sh
	if len(assign) > 0 {
		sub = sh.child()
		maps.Copy(sub.vars, assign)
	}
	return sub.runArgv(ctx, argv, fds[1], fds[2])
}

func joinDir(dir, to string) string {
	if strings.HasPrefix(to, "/") {
		return to
	}
	if dir == "/" {
		return "/" + to
	}
	return dir + "/" + to
}
