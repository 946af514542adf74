package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/internal/testenv"
)

// PRP-2: the ticket file is read and removed; one readable by others is
// refused (and removed all the same); the env variable is unset once read.
func TestTakeTicket(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "ticket")
	if err := os.WriteFile(good, []byte("prpt1_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := takeTicket(good)
	if err != nil || got != "prpt1_x" {
		t.Errorf("takeTicket = %q, %v", got, err)
	}
	if _, err := os.Stat(good); !os.IsNotExist(err) {
		t.Errorf("the ticket file is still there: %v", err)
	}

	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("prpt1_y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := takeTicket(loose); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Errorf("a 0644 ticket file: %v, want a refusal naming 0600", err)
	}
	if _, err := os.Stat(loose); !os.IsNotExist(err) {
		t.Errorf("the refused ticket file is still there: %v", err)
	}

	t.Setenv(runner.TicketEnv, "prpt1_z")
	got, err = takeTicket("")
	if err != nil || got != "prpt1_z" {
		t.Errorf("takeTicket from the env = %q, %v", got, err)
	}
	if _, ok := os.LookupEnv(runner.TicketEnv); ok {
		t.Error("the ticket variable is still set")
	}
}

func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(nil, &stderr); code != 2 || !strings.Contains(stderr.String(), "--controller") {
		t.Errorf("run without flags = %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"--controller", "http://127.0.0.1:1/prp/", "--state-dir", t.TempDir()}, &stderr); code != 1 || !strings.Contains(stderr.String(), "no ticket") {
		t.Errorf("run without ticket or credentials = %d, %q", code, stderr.String())
	}
}

func TestRelayUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"--socket"}, {"--socket", "/tmp/x.sock", "extra"}} {
		var stderr bytes.Buffer
		if code := relay(args, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "socket") {
			t.Errorf("relay %q = %d, %q; want 2 and the usage", args, code, stderr.String())
		}
	}
}

// The relay mode of the built binary: it greets, and ends with status 0
// when its standard input ends, removing its socket; a path that is not a
// socket is refused (status 1) and left alone.
func TestRelayModeEndsWithItsStandardInput(t *testing.T) {
	bin := testenv.RunnerBinary(t)
	dir, err := os.MkdirTemp("", "relay-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "run", "prp.sock")
	// A stale socket is replaced.
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "relay", "--socket", sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("relay with an empty stdin: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "berth-execrelay/1\n") {
		t.Errorf("the relay wrote %q, want its greeting first", stdout.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after the relay ended: %v", err)
	}

	if err := os.WriteFile(sock, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(bin, "relay", "--socket", sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &stdout, &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "not a socket") {
		t.Errorf("relay on a regular file: %v, %q; want status 1 naming it", err, stderr.String())
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "keep" {
		t.Errorf("the regular file at the socket's path: %q, %v; want it untouched", b, err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

// SIGTERM ends the relay with status 0 and removes its socket, while the
// host sends nothing and its standard input stays open.
func TestRelayModeEndsOnSIGTERM(t *testing.T) {
	bin := testenv.RunnerBinary(t)
	dir, err := os.MkdirTemp("", "relay-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "prp.sock")
	cmd := exec.Command(bin, "relay", "--socket", sock)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	greeting := make([]byte, len("berth-execrelay/1\n"))
	if _, err := io.ReadFull(stdout, greeting); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the relay after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("the relay did not end within 5s of SIGTERM")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there: %v", err)
	}
}
