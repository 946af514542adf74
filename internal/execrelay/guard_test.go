package execrelay

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func hdr(typ byte, flags uint16, id, length uint32) []byte {
	b := make([]byte, headerSize)
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint32(b[8:], length)
	return b
}

// The guard follows frames across reads of any size: well-formed frames
// pass whole, whatever the split; the first bad header is caught however
// it is split.
func TestGuardFollowsFramesAcrossReads(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte{0}, 1000) // zeros: a header of version 0 if misread
	var good []byte
	good = append(good, hdr(1, flagSYN, 1, 0)...)
	good = append(good, hdr(typeData, 0, 1, uint32(len(payload)))...)
	good = append(good, payload...)
	good = append(good, hdr(typePing, flagSYN, 0, 7)...)
	good = append(good, hdr(typePing, 2, 0, 7)...) // an ACK: not counted
	good = append(good, hdr(typeGoAway, 0, 0, 0)...)
	for _, r := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r },
		iotest.OneByteReader,
		iotest.HalfReader,
	} {
		g := &guard{r: r(bytes.NewReader(good)), maxData: 4096, pingBurst: 1, pingEvery: time.Hour}
		got, err := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, good) {
			t.Errorf("well-formed frames: read %d of %d bytes, %v", len(got), len(good), err)
		}
	}
	bad := append(append([]byte{}, good...), hdr(typeData, 0, 1, 4097)...)
	for _, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		g := &guard{r: r(bytes.NewReader(bad)), maxData: 4096, pingBurst: 1, pingEvery: time.Hour}
		_, err := io.ReadAll(g)
		if err == nil || !strings.Contains(err.Error(), "4097") {
			t.Errorf("a data frame over the limit: %v", err)
		}
		if _, err2 := g.Read(make([]byte, 1)); err2 == nil {
			t.Error("the guard reads on after a violation")
		}
	}
	// A second ping within the hour is one too many for a burst of one.
	twoPings := append(hdr(typePing, flagSYN, 0, 1), hdr(typePing, flagSYN, 0, 2)...)
	g := &guard{r: bytes.NewReader(twoPings), maxData: 4096, pingBurst: 1, pingEvery: time.Hour}
	if _, err := io.ReadAll(g); err == nil || !strings.Contains(err.Error(), "pings") {
		t.Errorf("two pings with a burst of one: %v", err)
	}
}
