package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
)

// Files (tar streams both ways, a directory's listing), on both sides.

// filesOf returns the drivers.Files of handle h.
func (s *server) filesOf(h uint64) (drivers.Files, error) {
	sb, err := s.sandbox(h)
	if err != nil {
		return nil, err
	}
	f, ok := sb.(drivers.Files)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: capability files: %w", sb.ID(), drivers.ErrUnsupported)
	}
	return f, nil
}

func (s *server) PutArchive(stream pluginpb.Driver_PutArchiveServer) error {
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	start := in.GetStart()
	if start == nil {
		return errors.New("put archive: the first message is not start")
	}
	f, err := s.filesOf(start.GetHandle())
	if err != nil {
		return stream.SendAndClose(&pluginpb.ErrorReply{Error: errorToWire(err)})
	}
	pr, pw := io.Pipe()
	result := make(chan error, 1)
	go func() {
		err := f.PutArchive(stream.Context(), start.GetDir(), pr)
		_ = pr.CloseWithError(errors.New("put archive: the driver stopped reading"))
		result <- err
	}()
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			_ = pw.Close()
			break
		}
		if err != nil {
			_ = pw.CloseWithError(err)
			<-result
			return err
		}
		if _, err := pw.Write(in.GetData()); err != nil {
			break // the driver returned: its result says why
		}
	}
	return stream.SendAndClose(&pluginpb.ErrorReply{Error: errorToWire(<-result)})
}

func (s *server) GetArchive(r *pluginpb.GetArchiveRequest, stream pluginpb.Driver_GetArchiveServer) error {
	f, err := s.filesOf(r.GetHandle())
	if err == nil {
		err = f.GetArchive(stream.Context(), r.GetPath(), writerFunc(func(p []byte) (int, error) {
			for rest := p; len(rest) > 0; {
				n := min(len(rest), streamChunk)
				if err := stream.Send(&pluginpb.GetArchiveOut{Msg: &pluginpb.GetArchiveOut_Data{Data: rest[:n]}}); err != nil {
					return 0, err
				}
				rest = rest[n:]
			}
			return len(p), nil
		}))
	}
	if err != nil {
		return stream.Send(&pluginpb.GetArchiveOut{Msg: &pluginpb.GetArchiveOut_Error{Error: errorToWire(err)}})
	}
	return nil
}

func (s *server) ReadDir(ctx context.Context, r *pluginpb.ReadDirRequest) (*pluginpb.ReadDirReply, error) {
	f, err := s.filesOf(r.GetHandle())
	if err != nil {
		return &pluginpb.ReadDirReply{Error: errorToWire(err)}, nil
	}
	infos, err := f.ReadDir(ctx, r.GetDir())
	if err != nil {
		return &pluginpb.ReadDirReply{Error: errorToWire(err)}, nil
	}
	out := &pluginpb.ReadDirReply{}
	for _, in := range infos {
		out.Entries = append(out.Entries, &pluginpb.FileInfo{Name: in.Name, Mode: uint32(in.Mode), Size: in.Size, LinkTarget: in.LinkTarget})
	}
	return out, nil
}

// files gives the sandbox of a plugin that declares files its
// drivers.Files.
type files struct{ s *sandbox }

// PutArchive streams r to the plugin, which extracts it under dir.
func (x files) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	s := x.s
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rpc.PutArchive(sctx)
	if err != nil {
		return s.c.callErr(ctx, "put archive", err)
	}
	if err := st.Send(&pluginpb.PutArchiveIn{Msg: &pluginpb.PutArchiveIn_Start{Start: &pluginpb.PutArchiveStart{Handle: handle, Dir: dir}}}); err != nil && err != io.EOF {
		return s.c.callErr(ctx, "put archive", err)
	}
	buf := make([]byte, streamChunk)
	var rerr error
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := st.Send(&pluginpb.PutArchiveIn{Msg: &pluginpb.PutArchiveIn_Data{Data: append([]byte(nil), buf[:n]...)}}); serr != nil {
				break // the plugin answered early: CloseAndRecv has its answer
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	if rerr != nil {
		cancel()
		return fmt.Errorf("sandbox %q: put archive: read the archive: %w", s.id, rerr)
	}
	rep, err := st.CloseAndRecv()
	if err != nil {
		return s.c.callErr(ctx, "put archive", err)
	}
	return errorFromWire(s.c.name(), rep.GetError())
}

// GetArchive writes the tar stream of path the plugin sends to w.
func (x files) GetArchive(ctx context.Context, path string, w io.Writer) error {
	s := x.s
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rpc.GetArchive(sctx, &pluginpb.GetArchiveRequest{Handle: handle, Path: path})
	if err != nil {
		return s.c.callErr(ctx, "get archive", err)
	}
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return s.c.callErr(ctx, "get archive", err)
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.GetArchiveOut_Data:
			if _, err := w.Write(m.Data); err != nil {
				return fmt.Errorf("sandbox %q: get archive: write: %w", s.id, err)
			}
		case *pluginpb.GetArchiveOut_Error:
			return errorFromWire(s.c.name(), m.Error)
		}
	}
}

// ReadDir lists dir through the plugin.
func (x files) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	s := x.s
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	r, err := rpc.ReadDir(ctx, &pluginpb.ReadDirRequest{Handle: handle, Dir: dir})
	if err != nil {
		return nil, s.c.callErr(ctx, "read dir", err)
	}
	if err := errorFromWire(s.c.name(), r.GetError()); err != nil {
		return nil, err
	}
	out := make([]drivers.FileInfo, 0, len(r.GetEntries()))
	for _, e := range r.GetEntries() {
		out = append(out, drivers.FileInfo{Name: e.GetName(), Mode: fs.FileMode(e.GetMode()), Size: e.GetSize(), LinkTarget: e.GetLinkTarget()})
	}
	return out, nil
}
