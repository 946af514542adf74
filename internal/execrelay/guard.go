package execrelay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// yamux's frame header (its spec.md): version, type, flags, stream id,
// length; a data frame's length bytes of payload follow it.
const (
	headerSize   = 12
	typeData     = 0
	typePing     = 2
	typeGoAway   = 3
	flagSYN      = 1
	protoVersion = 0
)

// guard checks the frames the relay sends before yamux reads them: yamux
// trusts its peer more than the host may trust a sandbox. A frame of an
// unknown version or type, a data frame larger than the largest window,
// or pings beyond pingBurst plus one per pingEvery (yamux answers each ping
// from a goroutine of its own) end the relay: Read returns an error, and
// the session with it.
type guard struct {
	r         io.Reader
	maxData   uint32
	pingBurst int
	pingEvery time.Duration

	hdr     [headerSize]byte
	hn      int    // header bytes seen
	payload uint32 // payload bytes of the current data frame still to come
	pings   float64
	last    time.Time

	mu  sync.Mutex
	err error // the violation, once seen
}

func (g *guard) Read(p []byte) (int, error) {
	if err := g.cause(); err != errEnded {
		return 0, err
	}
	n, err := g.r.Read(p)
	if verr := g.scan(p[:n]); verr != nil {
		g.mu.Lock()
		g.err = verr
		g.mu.Unlock()
		// Nothing of this read reaches yamux: the frame before the bad one
		// is lost with the session anyway.
		return 0, verr
	}
	return n, err
}

// errEnded is the cause of a session that ended without a violation.
var errEnded = errors.New("the relay's stream ended")

// cause returns the violation seen, or errEnded.
func (g *guard) cause() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	return errEnded
}

// scan follows the frames in b, which continue those of earlier reads.
func (g *guard) scan(b []byte) error {
	for len(b) > 0 {
		if g.payload > 0 {
			k := min(uint32(len(b)), g.payload)
			g.payload -= k
			b = b[k:]
			continue
		}
		k := copy(g.hdr[g.hn:], b)
		g.hn += k
		b = b[k:]
		if g.hn < headerSize {
			return nil
		}
		g.hn = 0
		if err := g.check(); err != nil {
			return err
		}
	}
	return nil
}

// check checks the header in g.hdr.
func (g *guard) check() error {
	version, typ := g.hdr[0], g.hdr[1]
	flags := binary.BigEndian.Uint16(g.hdr[2:4])
	length := binary.BigEndian.Uint32(g.hdr[8:12])
	if version != protoVersion {
		return fmt.Errorf("protocol error: the relay sent a frame of version %d", version)
	}
	if typ > typeGoAway {
		return fmt.Errorf("protocol error: the relay sent a frame of unknown type %d", typ)
	}
	switch typ {
	case typeData:
		if length > g.maxData {
			return fmt.Errorf("protocol error: the relay sent a data frame of %d bytes (at most %d)", length, g.maxData)
		}
		g.payload = length
	case typePing:
		if flags&flagSYN == 0 {
			return nil
		}
		now := time.Now()
		if g.last.IsZero() {
			g.pings = float64(g.pingBurst)
		} else {
			g.pings = min(float64(g.pingBurst), g.pings+float64(now.Sub(g.last))/float64(g.pingEvery))
		}
		g.last = now
		if g.pings < 1 {
			return fmt.Errorf("protocol error: the relay sent pings faster than one per %v", g.pingEvery)
		}
		g.pings--
	}
	return nil
}
