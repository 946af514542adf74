package driverkit

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// doneProcess is a process that already ended with status 0.
type doneProcess struct{}

func (doneProcess) Wait(context.Context) (*drivers.Result, error) { return &drivers.Result{}, nil }
func (doneProcess) Signal(context.Context, string) error          { return nil }
func (doneProcess) CloseStdin() error                             { return nil }

// A directory the task filled past the listing's bound is refused, not
// read into the host's memory whole.
func TestReadDirBoundsTheListing(t *testing.T) {
	t.Parallel()
	entry := strings.Repeat("n", 200) + "\x0081a4 1\x00\x00"
	f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: func(_ context.Context, _ drivers.Command, stdout, _ io.Writer) (drivers.Process, error) {
		for written := 0; written <= maxListing; written += len(entry) {
			if _, err := io.WriteString(stdout, entry); err != nil {
				return nil, err
			}
		}
		return doneProcess{}, nil
	}}
	_, err := f.ReadDir(context.Background(), ".")
	if errcode.Code(err) != errcode.Invalid || !strings.Contains(errcode.MessageOf(err), "more than 16 MiB") {
		t.Fatalf("ReadDir of a listing past the bound: %v, want an invalid error saying so", err)
	}
}

// tarOf is a tar stream of the named files (each holding its name
// repeated to size bytes), with its end-of-archive marker.
func tarOf(t *testing.T, files map[string]int) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := bytes.Repeat([]byte(name), files[name]/len(name)+1)[:files[name]]
		if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writingStart is a Start whose command writes out to stdout and exits 0,
// as a transport that lost the output's tail reports it.
func writingStart(out []byte) func(context.Context, drivers.Command, io.Writer, io.Writer) (drivers.Process, error) {
	return func(_ context.Context, _ drivers.Command, stdout, _ io.Writer) (drivers.Process, error) {
		_, _ = stdout.Write(out)
		return doneProcess{}, nil
	}
}

// A tar stream that ends at an entry's boundary without its end-of-archive
// marker, or in the middle of an entry, with the command's status a
// success, is an error wrapping drivers.ErrTransient; the whole stream is
// not.
func TestGetArchiveNeedsTheEndOfArchive(t *testing.T) {
	t.Parallel()
	whole := tarOf(t, map[string]int{"a": 1000, "b": 3000})
	// a: a header and 2 blocks; b: a header and 6; then two zero blocks.
	boundary := len(whole) - 1024
	if boundary != 512*10 {
		t.Fatalf("the archive is %d bytes, want 10 blocks and the marker", len(whole))
	}
	var rebased bytes.Buffer
	if err := RebaseTar(bytes.NewReader(whole), &rebased, "./"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		out  []byte
		ok   bool
	}{
		{"whole", whole, true},
		{"padded past the marker", append(slices.Clone(whole), make([]byte, 9216)...), true},
		{"cut at an entry's boundary", whole[:boundary], false},
		{"cut after the first entry", whole[:512*3], false},
		{"cut after one zero block", whole[:boundary+512], false},
		{"cut in an entry's data", whole[:512*3+512+100], false},
		{"cut in a header", whole[:512*3+200], false},
		{"nothing", nil, false},
	} {
		f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: writingStart(tc.out)}
		var got bytes.Buffer
		err := f.GetArchive(context.Background(), "d", &got)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: GetArchive = %v, want nil", tc.name, err)
		case tc.ok && !bytes.Equal(got.Bytes(), rebased.Bytes()):
			t.Errorf("%s: GetArchive wrote %d bytes, want the %d of the archive rebased", tc.name, got.Len(), rebased.Len())
		case !tc.ok && !errors.Is(err, drivers.ErrTransient):
			t.Errorf("%s: GetArchive = %v, want an error wrapping ErrTransient", tc.name, err)
		case !tc.ok && !strings.Contains(errcode.MessageOf(err), "cut short"):
			t.Errorf("%s: GetArchive's message %q does not say the stream was cut short", tc.name, errcode.MessageOf(err))
		}
	}
}

// An archive to put that ends before its end-of-archive marker is
// refused as invalid, one whose Read fails is that error; what the
// command reads stops at the marker.
func TestPutArchiveNeedsTheEndOfArchive(t *testing.T) {
	t.Parallel()
	whole := tarOf(t, map[string]int{"a": 1000, "b": 3000})
	boundary := len(whole) - 1024
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"whole", whole, true},
		{"padded past the marker", append(slices.Clone(whole), make([]byte, 9216)...), true},
		{"cut at an entry's boundary", whole[:boundary], false},
		{"cut in an entry's data", whole[:512*3+512+100], false},
		{"no tar", []byte(strings.Repeat("not a tar stream\n", 100)), false},
	} {
		var sent bytes.Buffer
		f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: func(_ context.Context, cmd drivers.Command, _, _ io.Writer) (drivers.Process, error) {
			_, err := io.Copy(&sent, cmd.Stdin)
			if err != nil {
				return nil, err
			}
			return doneProcess{}, nil
		}}
		err := f.PutArchive(context.Background(), "d", bytes.NewReader(tc.in))
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: PutArchive = %v, want nil", tc.name, err)
		case tc.ok && !bytes.Equal(sent.Bytes(), whole):
			t.Errorf("%s: the command read %d bytes, want the archive's %d", tc.name, sent.Len(), len(whole))
		case !tc.ok && errcode.Code(err) != errcode.Invalid:
			t.Errorf("%s: PutArchive = %v, want an invalid argument", tc.name, err)
		}
	}
	broken := errors.New("the source broke")
	f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: func(_ context.Context, cmd drivers.Command, _, _ io.Writer) (drivers.Process, error) {
		_, _ = io.Copy(io.Discard, cmd.Stdin)
		return doneProcess{}, nil
	}}
	err := f.PutArchive(context.Background(), "d", io.MultiReader(bytes.NewReader(whole[:boundary]), iotest.ErrReader(broken)))
	if !errors.Is(err, broken) || errcode.Code(err) == errcode.Invalid {
		t.Errorf("PutArchive of a source that fails: %v, want its error, not an invalid argument", err)
	}
}

// A listing without its end record is an error wrapping ErrTransient.
func TestReadDirNeedsTheEndRecord(t *testing.T) {
	t.Parallel()
	entries := "a\x0081a4 3\x00\x00l\x00a1ff 1\x00a\x00"
	for _, tc := range []struct {
		out  string
		want []string
	}{
		{entries + "\x00\x00\x00", []string{"a", "l"}},
		{"\x00\x00\x00", []string{}},
		{entries, nil},
		{entries[:5], nil},
		{"", nil},
	} {
		f := ExecFiles{Sandbox: "sandbox s", Workdir: "/w", Start: writingStart([]byte(tc.out))}
		list, err := f.ReadDir(context.Background(), "d")
		if tc.want == nil {
			if !errors.Is(err, drivers.ErrTransient) {
				t.Errorf("ReadDir of %q = %v, %v, want an error wrapping ErrTransient", tc.out, list, err)
			}
			continue
		}
		var names []string
		for _, fi := range list {
			names = append(names, fi.Name)
		}
		if err != nil || !slices.Equal(names, tc.want) && len(names)+len(tc.want) > 0 {
			t.Errorf("ReadDir of %q = %q, %v, want %q", tc.out, names, err, tc.want)
		}
	}
}
