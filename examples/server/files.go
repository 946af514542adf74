package main

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// The bounds of the files routes: an upload's body, and what a download
// sends before it is cut off (the sandbox's files are the task's to grow;
// tarsafe.Extract's default bounds are 1 GiB of content and 100,000
// entries, whose headers fit in the margin).
const (
	maxFilesUpload   = 1 << 30
	maxFilesDownload = 1<<30 + 128<<20
)

// tarType is the media type of the files routes' archives.
const tarType = "application/x-tar"

// filesList is what GET …/leases/{id}/files answers for a directory.
type filesList struct {
	Path    string             `json:"path"`
	Entries []drivers.FileInfo `json:"entries"`
}

// filesPut is what PUT (or POST) …/leases/{id}/files answers.
type filesPut struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// leaseFiles returns the files of the path's lease for the caller
// (lease.Manager.Files: the holder's company's agents and the operators
// read and write, a board member of the company lists only), or with
// ?workspace=ID those of that workspace of the lease (paths relative to
// its directory), and the path asked for ("." by default).
func (s *server) leaseFiles(r *http.Request) (drivers.Files, string, error) {
	if _, err := s.companyLease(r); err != nil {
		return nil, "", err
	}
	var f drivers.Files
	var err error
	if ws := r.URL.Query().Get("workspace"); ws != "" {
		f, err = s.workspaceFiles(r, ws)
	} else {
		f, err = s.sys.Leases().Files(r.Context(), principalOf(r), r.PathValue("id"))
	}
	if err != nil {
		return nil, "", err
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	return f, p, nil
}

// wantsArchive reports whether a GET asks for a tar: ?archive=1 or an
// Accept of application/x-tar.
func wantsArchive(r *http.Request) bool {
	if a := r.URL.Query().Get("archive"); a == "1" || a == "true" {
		return true
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == tarType {
			return true
		}
	}
	return false
}

// getFiles is GET …/leases/{id}/files?path=P: the directory P as JSON, or
// with ?archive=1 (or Accept: application/x-tar) P as a tar stream.
func (s *server) getFiles(w http.ResponseWriter, r *http.Request) {
	f, p, err := s.leaseFiles(r)
	if err == nil && !wantsArchive(r) {
		var list []drivers.FileInfo
		if list, err = f.ReadDir(r.Context(), p); err == nil {
			if list == nil {
				list = []drivers.FileInfo{}
			}
			s.writeJSON(w, r, http.StatusOK, filesList{Path: p, Entries: list})
			return
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The first byte sends the headers: an error before it is the API's
	// error shape, one after it cuts the response off, so that a client
	// never takes a truncated archive for a whole one.
	tw := &tarWriter{w: w, limit: maxFilesDownload}
	err = f.GetArchive(r.Context(), p, tw)
	s.audit(r, "lease.files.get", "", err, "lease", r.PathValue("id"), "path", p)
	switch {
	case err != nil && tw.n == 0:
		s.writeError(w, r, err)
	case err != nil:
		s.log.Warn("files: archive cut off", "lease", r.PathValue("id"), "error", err.Error())
		panic(http.ErrAbortHandler)
	case tw.n == 0:
		tw.start()
	}
}

// tarWriter sends the headers of a tar response at its first write and
// refuses to write past limit bytes.
// typ and name, when set, are the response's media type and file name
// instead of a tar's.
type tarWriter struct {
	w         http.ResponseWriter
	n         int64
	limit     int64
	started   bool
	typ, name string
}

func (t *tarWriter) start() {
	if !t.started {
		t.started = true
		h := t.w.Header()
		typ, name := tarType, "files.tar"
		if t.typ != "" {
			typ, name = t.typ, t.name
		}
		h.Set("Content-Type", typ)
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
		t.w.WriteHeader(http.StatusOK)
	}
}

func (t *tarWriter) Write(p []byte) (int, error) {
	if t.n+int64(len(p)) > t.limit {
		return 0, &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large",
			Message: fmt.Sprintf("The archive goes past %d bytes, the server's limit: ask for a smaller path.", t.limit),
			Err:     fmt.Errorf("files: archive past %d bytes: %w", t.limit, errcode.ErrInvalid)}
	}
	t.start()
	n, err := t.w.Write(p)
	t.n += int64(n)
	return n, err
}

// putFiles is PUT or POST …/leases/{id}/files?path=P with a tar body
// (Content-Type application/x-tar, at most maxFilesUpload bytes): its
// entries are unpacked under the directory P of the lease's working
// directory, by the driver, inside the sandbox, following no link.
func (s *server) putFiles(w http.ResponseWriter, r *http.Request) {
	f, p, err := s.leaseFiles(r)
	if err == nil {
		if mt, _, merr := mime.ParseMediaType(r.Header.Get("Content-Type")); merr != nil || mt != tarType {
			err = invalid("Content-Type", "want %s (a tar stream), got %q", tarType, r.Header.Get("Content-Type"))
		}
	}
	var n int64
	if err == nil {
		body := &countReader{r: http.MaxBytesReader(w, r.Body, maxFilesUpload)}
		err = f.PutArchive(r.Context(), p, body)
		n = body.n
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			err = &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large", Field: "body",
				Message: fmt.Sprintf("The upload goes past %d bytes, the server's limit: upload fewer files at a time.", int64(maxFilesUpload)),
				Err:     fmt.Errorf("files: upload past %d bytes: %w: %w", int64(maxFilesUpload), err, errcode.ErrInvalid)}
		}
	}
	s.audit(r, "lease.files.put", "", err, "lease", r.PathValue("id"), "path", p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, filesPut{Path: p, Bytes: n})
}

// countReader counts what is read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
