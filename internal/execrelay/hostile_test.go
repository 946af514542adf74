package execrelay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/berthdev/berth/internal/execrelay"
)

// frame encodes a yamux frame header (spec.md): version, type, flags,
// stream id, length.
func frame(version, typ byte, flags uint16, id, length uint32) []byte {
	b := make([]byte, 12)
	b[0], b[1] = version, typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint32(b[8:], length)
	return b
}

const (
	typeData, typeWindowUpdate, typePing = 0, 1, 2
	flagSYN                              = 1
)

// hostileFirst returns a StartFunc whose first relay is hostile: it
// greets, then runs hostile with the exec's stdin and stdout, then waits
// for its exec to end; the relays after it are real (r). ended is closed
// when the hostile one has returned.
func hostileFirst(r *relays, hostile func(stdin io.Reader, stdout io.Writer)) (start execrelay.StartFunc, ended chan struct{}) {
	var calls atomic.Int32
	ended = make(chan struct{})
	return func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
		if calls.Add(1) > 1 {
			return r.start(ctx, stdin, stdout, stderr)
		}
		defer close(ended)
		if _, err := io.WriteString(stdout, "berth-execrelay/1\n"); err != nil {
			return err
		}
		hostile(stdin, stdout)
		// Like a relay process: it ends when the host ends its stdin.
		io.Copy(io.Discard, stdin)
		return errors.New("exit status 0")
	}, ended
}

// writes returns a hostile relay that writes the frames b.
func writes(b ...[]byte) func(io.Reader, io.Writer) {
	return func(_ io.Reader, stdout io.Writer) { stdout.Write(bytes.Join(b, nil)) }
}

// A relay that sends what a relay must not ends, with the reason in the
// host's log, and only it: the listener starts a real relay again, which
// carries connections; another listener's relay and connection are
// untouched; the host process lives.
func TestHostileFramesEndOnlyThatRelay(t *testing.T) {
	t.Parallel()
	other := newRelays(t)
	listen(t, other.start, nil)
	otherConn, err := net.Dial("unix", other.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer otherConn.Close()

	pings := make([][]byte, 1000)
	for i := range pings {
		pings[i] = frame(0, typePing, flagSYN, 0, uint32(i))
	}
	window := bytes.Repeat([]byte{'x'}, 256<<10)
	for _, tc := range []struct {
		name, want string
		hostile    func(io.Reader, io.Writer)
	}{
		{"bytes that are no frames", "version 72", writes([]byte("HTTP/1.1 200 OK\r\n\r\n"))},
		{"an unknown frame type", "unknown type 9", writes(frame(0, 9, 0, 1, 0))},
		{"a data frame larger than any window", "data frame of 1073741824 bytes", writes(frame(0, typeData, flagSYN, 1, 1<<30), []byte("x"))},
		{"a ping flood", "pings faster", writes(pings...)},
		{"a stream opened twice", "duplicate stream", writes(frame(0, typeWindowUpdate, flagSYN, 1, 0), frame(0, typeWindowUpdate, flagSYN, 1, 0))},
		{"more data than the window", "receive window exceeded", writes(frame(0, typeData, flagSYN, 1, 256<<10), window, frame(0, typeData, 0, 1, 1), []byte("x"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelays(t)
			log, logs := logBuffer()
			start, ended := hostileFirst(r, tc.hostile)
			ln := execrelay.Listen(context.Background(), start, &execrelay.Options{MinBackoff: 10 * time.Millisecond, Logger: log})
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					// A connection of the hostile relay is not read: a
					// read would give its stream window back, and the
					// frame past the window would then be within it.
					go func() { defer c.Close(); <-ended; io.Copy(c, c) }()
				}
			}()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatalf("the hostile relay's exec was not ended; log:\n%s", logs.String())
			}
			// The hostile relay was up; wait for the next one.
			for deadline := time.Now().Add(10 * time.Second); r.count() == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no real relay started after the hostile one; log:\n%s", logs.String())
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := ln.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("the host's log does not say %q:\n%s", tc.want, logs.String())
			}
			if err := echo(r.socket, 64<<10); err != nil {
				t.Errorf("a connection through the real relay started next: %v", err)
			}
		})
	}
	otherConn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := otherConn.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(otherConn, buf); err != nil || string(buf) != "still here" {
		t.Errorf("the other relay's connection: %q, %v", buf, err)
	}
	if n := other.count(); n != 1 {
		t.Errorf("the other listener started %d relays, want 1", n)
	}
}

// A relay that opens many streams and fills them makes the host hold at
// most MaxConns of them (plus as many in yamux's backlog), each at most
// one window: the rest are reset, while the host accepts none.
func TestHostHoldsABoundedNumberOfStreams(t *testing.T) {
	t.Parallel()
	const maxConns, opened = 4, 100
	streams := make(chan []*yamux.Stream, 1)
	start := func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
		if _, err := io.WriteString(stdout, "berth-execrelay/1\n"); err != nil {
			return err
		}
		sess, err := yamux.Client(&rw{stdin, stdout}, quietConfig())
		if err != nil {
			return err
		}
		defer sess.Close()
		data := bytes.Repeat([]byte{'x'}, 256<<10)
		var wg sync.WaitGroup
		var all []*yamux.Stream
		for range opened {
			st, err := sess.OpenStream()
			if err != nil {
				return err
			}
			all = append(all, st)
			wg.Add(1)
			go func() {
				defer wg.Done()
				st.SetWriteDeadline(time.Now().Add(3 * time.Second))
				st.Write(data) // a whole window each, or until reset
			}()
		}
		wg.Wait()
		streams <- all
		select {
		case <-sess.CloseChan(): // the host ended the relay's stdin
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ln := execrelay.Listen(context.Background(), start, &execrelay.Options{MaxConns: maxConns})
	defer ln.Close()
	var all []*yamux.Stream
	select {
	case all = <-streams:
	case <-time.After(20 * time.Second):
		t.Fatal("the hostile relay's writes did not end")
	}
	// The host holds one stream for Accept and yamux's backlog (MaxConns)
	// more, each with a window of data; the rest were reset, and what the
	// relay sent on them dropped.
	got := make(chan net.Conn)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			got <- c
		}
	}()
	held := 0
	for quiet := time.NewTimer(300 * time.Millisecond); ; {
		select {
		case c := <-got:
			n, err := io.Copy(io.Discard, io.LimitReader(c, 256<<10))
			if n != 256<<10 {
				t.Errorf("a held stream read %d bytes, %v; want its window", n, err)
			}
			c.Close()
			held++
			quiet.Reset(300 * time.Millisecond)
			continue
		case <-quiet.C:
		}
		break
	}
	// A stream the host closed holds its slot until the relay finishes it
	// too (or StreamCloseTimeout): the host held MaxConns, and one more
	// waits in the backlog.
	if held != maxConns {
		t.Errorf("the host held %d streams, want %d", held, maxConns)
	}
	// Every other stream was reset.
	var reset, closed, waiting int
	for _, st := range all {
		st.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := st.Read(make([]byte, 1))
		switch {
		case errors.Is(err, io.EOF):
			closed++
		case errors.Is(err, yamux.ErrConnectionReset):
			reset++
		case errors.Is(err, yamux.ErrTimeout):
			waiting++
		default:
			t.Errorf("a stream's read: %v, want EOF, a reset or a timeout", err)
		}
	}
	if closed != held || waiting != 1 || reset != opened-held-1 {
		t.Errorf("%d streams closed, %d waiting, %d reset; want %d closed (those held), 1 waiting and the %d others reset", closed, waiting, reset, held, opened-held-1)
	}
}

// quietConfig is yamux's default configuration without its log.
func quietConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	return c
}

type rw struct {
	io.Reader
	io.Writer
}

func (rw) Close() error { return nil }
