package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// The output socket: how a streaming exec's output leaves the plugin's
// process out of its path.
//
// A streaming exec's output crossing the plugin would cross one process
// more than a compiled driver's: the plugin reads the provider's stream
// and writes it on, the host reads it again. On two busy cores that
// fifth process of the Docker engine's pipeline (the engine, its shim, the
// workload, the plugin, the host) cost a fifth or more of the stream's
// throughput (issue 54, docs/benchmarks.md), whether it wrote to gRPC or
// to a pipe of its own. So a driver whose output comes on a connection of
// this machine (the Docker driver's attach socket) hands that connection
// to the host: the plugin sends a duplicate of its descriptor on the
// output socket, an SCM_RIGHTS message on a unix socket pair whose other
// end the host made when it started the process and gave it as an
// inherited descriptor (BERTH_PLUGIN_OUTPUT_FD), and the Start stream says
// which (OutputConn). The host reads the connection itself, as the
// compiled driver would, and answers output_ended when it has delivered
// every byte; the driver then waits for the exit as usual. The socket
// pair reaches nothing but the host's process: only the process the host
// started holds its end, and what it sends is a descriptor it already
// had, whose bytes it could have sent itself.

// outFDEnv names the descriptor of the output socket in a plugin's
// environment.
const outFDEnv = "BERTH_PLUGIN_OUTPUT_FD"

// outSocket is the host's end of one plugin process's output socket: the
// connections the plugin hands over, by id, until a Start stream claims
// them. It closes itself, and every connection not claimed, when the
// process's end closes (the process exited).
type outSocket struct {
	conn *net.UnixConn

	mu      sync.Mutex
	files   map[uint64]*os.File      // received, not claimed yet
	waiters map[uint64]chan *os.File // claimed, not received yet
	closed  bool
}

// newOutSocket makes the socket pair of a plugin process to be started:
// child is the end the process inherits (the caller closes it once the
// process started, or failed to).
func newOutSocket() (*outSocket, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("output socket: %w", err)
	}
	hf := os.NewFile(uintptr(fds[0]), "plugin output socket")
	child := os.NewFile(uintptr(fds[1]), "plugin output socket")
	c, err := net.FileConn(hf)
	_ = hf.Close()
	if err != nil {
		_ = child.Close()
		return nil, nil, fmt.Errorf("output socket: %w", err)
	}
	o := &outSocket{conn: c.(*net.UnixConn), files: map[uint64]*os.File{}, waiters: map[uint64]chan *os.File{}}
	go o.receive()
	return o, child, nil
}

// receive takes the descriptors the plugin sends until its end closes.
// A packet that is not an id with one descriptor of a socket is dropped,
// its descriptors closed.
func (o *outSocket) receive() {
	defer o.shut()
	buf := make([]byte, 16)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := o.conn.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) { // the process's end closed
			return
		}
		var fds []int
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if rights, err := syscall.ParseUnixRights(&m); err == nil {
					fds = append(fds, rights...)
				}
			}
		}
		if n != 8 || len(fds) != 1 {
			for _, fd := range fds {
				_ = syscall.Close(fd)
			}
			continue
		}
		// A socket, made non-blocking, so that the host's reads wait in
		// the runtime's poller and closing the file ends a read that
		// waits (a descriptor the poller cannot wait on would hold a
		// cancelled stream's Wait).
		var st syscall.Stat_t
		if syscall.Fstat(fds[0], &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || syscall.SetNonblock(fds[0], true) != nil {
			_ = syscall.Close(fds[0])
			continue
		}
		o.put(binary.BigEndian.Uint64(buf[:8]), os.NewFile(uintptr(fds[0]), "plugin output connection"))
	}
}

// put hands f to the claim of id waiting for it, else keeps it for one.
func (o *outSocket) put(id uint64, f *os.File) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.waiters[id]; ok {
		delete(o.waiters, id)
		w <- f
		return
	}
	if _, dup := o.files[id]; dup || o.closed {
		_ = f.Close()
		return
	}
	o.files[id] = f
}

// errOutSocketClosed is claim's error once the process's end closed.
var errOutSocketClosed = errors.New("the plugin's output socket closed (the plugin exited)")

// claim returns the connection of id, waiting for it until ctx ends or
// the process's end closes.
func (o *outSocket) claim(ctx context.Context, id uint64) (*os.File, error) {
	o.mu.Lock()
	if f, ok := o.files[id]; ok {
		delete(o.files, id)
		o.mu.Unlock()
		return f, nil
	}
	if o.closed {
		o.mu.Unlock()
		return nil, errOutSocketClosed
	}
	if _, ok := o.waiters[id]; ok {
		o.mu.Unlock()
		return nil, fmt.Errorf("output connection %d claimed twice", id)
	}
	w := make(chan *os.File, 1)
	o.waiters[id] = w
	o.mu.Unlock()
	select {
	case f, ok := <-w:
		if !ok {
			return nil, errOutSocketClosed
		}
		return f, nil
	case <-ctx.Done():
		o.mu.Lock()
		delete(o.waiters, id)
		o.mu.Unlock()
		select {
		case f, ok := <-w: // put before the delete
			if ok {
				_ = f.Close()
			}
		default:
		}
		return nil, ctx.Err()
	}
}

// shut closes the socket, the connections not claimed and the waiting
// claims.
func (o *outSocket) shut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	_ = o.conn.Close()
	for id, f := range o.files {
		_ = f.Close()
		delete(o.files, id)
	}
	for id, w := range o.waiters {
		close(w)
		delete(o.waiters, id)
	}
}

// outSender is the plugin's end of its output socket.
type outSender struct {
	mu   sync.Mutex
	conn *net.UnixConn
	next uint64
}

// outSenderFromEnv returns the output socket the host gave the process,
// or nil when it gave none (an older host, or the descriptor named is not
// a unix packet socket). The variable is removed from the environment
// and the inherited descriptor closed (the connection keeps a duplicate
// that is closed on exec), so that no process the driver starts inherits
// either.
func outSenderFromEnv() *outSender {
	v, ok := os.LookupEnv(outFDEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(outFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	if t, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || t != syscall.SOCK_SEQPACKET {
		return nil
	}
	f := os.NewFile(uintptr(fd), "output socket")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil
	}
	return &outSender{conn: uc}
}

// send sends a duplicate of f's descriptor to the host and returns its id.
func (o *outSender) send(f *os.File) (uint64, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	id := o.next
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	var werr error
	if err := rc.Control(func(fd uintptr) { // not f.Fd(), which would make the connection blocking
		_, _, werr = o.conn.WriteMsgUnix(b[:], syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, werr
	}
	return id, nil
}
