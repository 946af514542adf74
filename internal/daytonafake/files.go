package daytonafake

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// Routes of the toolbox's file system that drivers.Files uses: one file
// each way, as v0.190.0 serves them (apps/daemon/pkg/toolbox/server.go,
// the /files group; fs/upload_file.go, fs/download_file.go). They carry
// bytes only, no modes and no links, so the driver moves a tree as one
// archive and unpacks it with tar through process/execute.
const (
	RouteUploadFile   = "POST /toolbox/{sandboxId}/files/upload"
	RouteDownloadFile = "GET /toolbox/{sandboxId}/files/download"
)

// filePath resolves the path query of a file route: required (400 "path
// is required"); a relative path is the daemon's filepath.Abs, relative to
// its working directory, which the fake takes to be the sandbox's home.
func filePath(w http.ResponseWriter, r *http.Request, sb *sandbox) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, "path is required")
		return "", false
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(sb.home, p)
	}
	return filepath.Clean(p), true
}

// uploadFile is UploadFile of v0.190.0: the multipart field "file" saved
// at path with gin's SaveUploadedFile (the parent made with mode 0750,
// the file created or truncated, mode 0666 less the umask); every failure
// is 400.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.toolboxSandbox(w, r)
	s.mu.Unlock()
	if sb == nil {
		return
	}
	dst, ok := filePath(w, r, sb)
	if !ok {
		return
	}
	src, _, err := r.FormFile("file")
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	defer src.Close()
	if r.MultipartForm != nil {
		defer r.MultipartForm.RemoveAll()
	}
	err = os.MkdirAll(filepath.Dir(dst), 0o750)
	if err == nil {
		var out *os.File
		if out, err = os.Create(dst); err == nil {
			_, err = io.Copy(out, src)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// downloadFile is DownloadFile of v0.190.0: os.Stat of path (links
// followed): missing 404, no permission 403, another error 400; a
// directory 400 "path must be a file"; else the file's bytes as
// application/octet-stream.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.toolboxSandbox(w, r)
	s.mu.Unlock()
	if sb == nil {
		return
	}
	p, ok := filePath(w, r, sb)
	if !ok {
		return
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		toolboxError(w, r, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, os.ErrPermission):
		toolboxError(w, r, http.StatusForbidden, err.Error())
		return
	case err != nil:
		toolboxError(w, r, http.StatusBadRequest, err.Error())
		return
	case fi.IsDir():
		toolboxError(w, r, http.StatusBadRequest, "path must be a file")
		return
	}
	f, err := os.Open(p)
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Description", "File Transfer")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, filepath.Base(p)))
	w.Header().Set("Content-Transfer-Encoding", "binary")
	w.Header().Set("Content-Length", fmt.Sprint(fi.Size()))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}
