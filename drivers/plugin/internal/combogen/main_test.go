package main

import (
	"bytes"
	"os"
	"testing"
)

// drivers/plugin's combos_gen.go is what this generator writes.
func TestGeneratedFileIsCurrent(t *testing.T) {
	got, err := os.ReadFile("../../combos_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Generate()) {
		t.Error("drivers/plugin/combos_gen.go is not what internal/combogen writes: run go generate in drivers/plugin and commit the result")
	}
}
