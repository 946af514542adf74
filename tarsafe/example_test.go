package tarsafe_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

// A host packs its project (credentials left out) and unpacks what a
// sandbox sends back, refusing an entry that would leave the destination.
func Example() {
	src, _ := os.MkdirTemp("", "project")
	defer os.RemoveAll(src)
	_ = os.WriteFile(filepath.Join(src, "main.c"), []byte("int main(void) { return 0; }\n"), 0o644)
	_ = os.WriteFile(filepath.Join(src, ".env"), []byte("TOKEN=secret\n"), 0o600)

	root, _ := os.OpenRoot(src)
	defer root.Close()
	var archive bytes.Buffer
	_ = tarsafe.Create(&archive, root, tarsafe.Options{}) // .env is left out
	tr := tar.NewReader(&archive)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		fmt.Println("packed", h.Name)
	}

	// What a task could send back: a name that climbs out.
	var hostile bytes.Buffer
	tw := tar.NewWriter(&hostile)
	_ = tw.WriteHeader(&tar.Header{Name: "../../.bashrc", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	_, _ = tw.Write([]byte("x\n"))
	_ = tw.Close()
	dst, _ := os.MkdirTemp("", "out")
	defer os.RemoveAll(dst)
	out, _ := os.OpenRoot(dst)
	defer out.Close()
	err := tarsafe.Extract(&hostile, out, tarsafe.Options{})
	fmt.Println(errcode.ReasonOf(err))
	fmt.Println(errcode.MessageOf(err))
	// Output:
	// packed main.c
	// unsafe_archive
	// The archive entry "../../.bashrc" has a ".." element in its name: the archive was refused.
}
