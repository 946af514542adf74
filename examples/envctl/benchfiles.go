package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/tarsafe"
)

// The files rows: a tree of many small files (benchScale.treeFiles files,
// treeBytes in all, 100 per directory) put into a sandbox through its
// drivers.Files, from tarsafe.Create of the host's directory as a host
// program would, against the usual tool for the same copy, alternated
// round by round, after a round that warms every side; each side's value
// is the median of benchScale.fileRounds rounds, in MB/s of file content.

// benchTree writes the tree into a new directory and returns it.
func (b *bench) benchTree(t *benchTB) string {
	dir := t.TempDir()
	n, total := b.scale.treeFiles, b.scale.treeBytes
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, total/int64(n)+1)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatalf("tree: %v", err)
			}
		}
		size := total / int64(n)
		if int64(i) < total%int64(n) {
			size++
		}
		_, _ = rng.Read(buf[:size])
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.dat", i)), buf[:size], 0o644); err != nil {
			t.Fatalf("tree: %v", err)
		}
	}
	return dir
}

// treeName names the tree in a row: "100 MiB in 10000 files".
func (s benchScale) treeName() string {
	return fmt.Sprintf("%s in %d files", sizeName(s.treeBytes), s.treeFiles)
}

// putTree packs src with tarsafe.Create (default excludes: the tree has
// none of them) and puts it under dir through f.
func putTree(t *benchTB, f drivers.Files, src, dir string) time.Duration {
	root, err := os.OpenRoot(src)
	if err != nil {
		t.Fatalf("tree: %v", err)
	}
	defer root.Close()
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.Create(pw, root, tarsafe.Options{})) }()
	err = f.PutArchive(t.ctx, dir, pr)
	pr.CloseWithError(io.ErrClosedPipe) // ends Create if the put stopped early
	if err != nil {
		live(t)
		t.Fatalf("put archive into %s: %v", dir, err)
	}
	return time.Since(start)
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// mbps is the tree's content in MB per second of d.
func (b *bench) mbps(d time.Duration) float64 { return float64(b.scale.treeBytes) / d.Seconds() / 1e6 }

// sandboxExec runs a shell script in sb (setup and cleanup, never timed).
func sandboxExec(t *benchTB, sb drivers.Sandbox, script string) string {
	res, err := sb.Exec(t.ctx, drivers.Command{Argv: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		live(t)
		t.Fatalf("exec %q in %s: %v %+v", script, sb.ID(), err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// countFiles checks that dir in sb holds the tree's files (a put that
// lost files would measure too fast).
func (b *bench) countFiles(t *benchTB, sb drivers.Sandbox, dir string) {
	if got := sandboxExec(t, sb, "find "+dir+" -type f | wc -l"); got != strconv.Itoa(b.scale.treeFiles) {
		t.Fatalf("%s holds %s files after the put, want %d", dir, got, b.scale.treeFiles)
	}
}

// filesDockerRow: the tree put into a Docker sandbox (writable root, the
// Engine's archive API) vs `docker cp TREE/. CONTAINER:DIR` into the same
// container.
func (b *bench) filesDockerRow(t *benchTB) []benchRow {
	ctx := t.ctx
	cliBin := lookPath(t, "docker", "the docker CLI")
	img, run := dockerImage(t)
	d := docker.New(nil)
	t.Cleanup(func() { _ = d.Close() })
	cfg, err := d.Schema().Normalize(map[string]any{"image": img.Ref, "workdir": "/bench", "labels": map[string]any{benchLabel: run}})
	if err != nil {
		t.Fatalf("docker config: %v", err)
	}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench-files"})
	if err != nil {
		t.Fatalf("docker acquire: %v", err)
	}
	t.Cleanup(func() { _, _ = sb.Release(ctx, drivers.Destroy) })
	f, ok := sb.(drivers.Files)
	if !ok {
		t.Fatalf("the docker sandbox does not implement drivers.Files")
	}
	src := b.benchTree(t)
	var ours, theirs []time.Duration
	for i := range b.scale.fileRounds + 1 { // round 0 warms both sides
		live(t)
		sandboxExec(t, sb, "rm -rf /bench/b /bench/a && mkdir /bench/b /bench/a")
		o := putTree(t, f, src, "b")
		a := timed(t, exec.CommandContext(ctx, cliBin, "cp", src+"/.", sb.ID()+":/bench/a"))
		b.countFiles(t, sb, "/bench/b")
		b.countFiles(t, sb, "/bench/a")
		if i > 0 {
			ours, theirs = append(ours, o), append(theirs, a)
		}
	}
	return []benchRow{row(t, "files put "+b.scale.treeName()+" (docker, archive API)", "docker cp", "MB/s", b.mbps(median(ours)), b.mbps(median(theirs)))}
}

// filesSSHRows: the tree put through the SSH driver (tar over the
// session) vs the host's `tar c` piped into `tar x` through one
// x/crypto/ssh session on a connection made beforehand, as the lease's
// is; and vs OpenSSH's `tar c | ssh host tar x` (its connection in the
// time), all against the bench's sshd.
func (b *bench) filesSSHRows(t *benchTB) []benchRow {
	ctx := t.ctx
	sshBin := lookPath(t, "ssh", "OpenSSH's client (ssh)")
	tarBin := lookPath(t, "tar", "tar")
	tg := newSSHTarget(t)
	d := ssh.New(nil)
	cfg, err := d.Schema().Normalize(tg.raw)
	if err != nil {
		t.Fatalf("ssh config: %v", err)
	}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("ssh acquire: %v", err)
	}
	t.Cleanup(func() { _, _ = sb.Release(ctx, drivers.Destroy) })
	f, ok := sb.(drivers.Files)
	if !ok {
		t.Fatalf("the ssh sandbox does not implement drivers.Files")
	}
	wd := sandboxExec(t, sb, "pwd -P")

	signer, err := xssh.ParsePrivateKey([]byte(tg.srv.ClientKeyPEM()))
	if err != nil {
		t.Fatalf("client key: %v", err)
	}
	conn, err := xssh.Dial("tcp", net.JoinHostPort(tg.srv.Host(), strconv.Itoa(tg.srv.Port())), &xssh.ClientConfig{
		User: tg.srv.User(), Auth: []xssh.AuthMethod{xssh.PublicKeys(signer)}, HostKeyCallback: xssh.FixedHostKey(tg.srv.HostKey()), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("x/crypto/ssh dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	src := b.benchTree(t)
	// session: tar c | (one x/crypto/ssh session) tar x.
	session := func(dir string) time.Duration {
		start := time.Now()
		s, err := conn.NewSession()
		if err != nil {
			t.Fatalf("x/crypto/ssh session: %v", err)
		}
		defer s.Close()
		tc := exec.CommandContext(ctx, tarBin, "-c", "-f", "-", "-C", src, ".")
		out, err := tc.StdoutPipe()
		if err != nil {
			t.Fatalf("tar c: %v", err)
		}
		var tcErr strings.Builder
		tc.Stderr = &tcErr
		if err := tc.Start(); err != nil {
			t.Fatalf("tar c: %v", err)
		}
		s.Stdin = out
		var remote strings.Builder
		s.Stderr = &remote
		rerr := s.Run("tar -x -f - -C " + dir)
		werr := tc.Wait()
		if rerr != nil || werr != nil {
			live(t)
			t.Fatalf("tar c | x/crypto/ssh tar x: %v, %v: %s%s", werr, rerr, tcErr.String(), remote.String())
		}
		return time.Since(start)
	}
	openssh := func(dir string) time.Duration {
		pipeline := fmt.Sprintf("%s -c -f - -C %s . | %s", tarBin, shellQuote(src), strings.Join(quoteAll(append([]string{sshBin}, tg.args("tar -x -f - -C "+dir)...)), " "))
		return timed(t, exec.CommandContext(ctx, "sh", "-c", "set -e; "+pipeline))
	}
	var ours, viaSession, viaOpenSSH []time.Duration
	for i := range b.scale.fileRounds + 1 { // round 0 warms every side
		live(t)
		sandboxExec(t, sb, "rm -rf b s o && mkdir b s o")
		o := putTree(t, f, src, "b")
		s := session(path.Join(wd, "s"))
		x := openssh(path.Join(wd, "o"))
		for _, dir := range []string{"b", "s", "o"} {
			b.countFiles(t, sb, dir)
		}
		if i > 0 {
			ours, viaSession, viaOpenSSH = append(ours, o), append(viaSession, s), append(viaOpenSSH, x)
		}
	}
	w := "files put " + b.scale.treeName() + " (ssh, tar over the session)"
	m := b.mbps(median(ours))
	return []benchRow{
		row(t, w, "tar c | x/crypto/ssh session tar x", "MB/s", m, b.mbps(median(viaSession))),
		row(t, w, "tar c | ssh host tar x (OpenSSH)", "MB/s", m, b.mbps(median(viaOpenSSH))),
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return q
}
