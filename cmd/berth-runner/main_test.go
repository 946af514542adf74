package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/runner"
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
