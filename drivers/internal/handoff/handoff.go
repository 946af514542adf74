// Package handoff lets a driver hand the connection a streaming exec's
// output arrives on to the writer it would copy the output into, instead
// of copying it: the plugin layer (drivers/plugin) passes the connection
// on to its host, so that a plugin's process is not a stage the output
// crosses. A driver offers it only when its stdout writer implements
// Taker; every other writer gets the output copied as before.
package handoff

import "os"

// DockerMultiplexed is the format of the Docker engine's attach stream
// without a terminal: frames of an 8-byte header (the stream, 1 stdout or
// 2 stderr, at byte 0; the payload's length, big-endian, at bytes 4 to 7)
// and the payload.
const DockerMultiplexed = "docker-multiplexed"

// Output is a connection handed over: the process's stdout and stderr,
// in Format, to its end.
type Output struct {
	// File is a duplicate of the connection's descriptor: the taker reads
	// it and closes it. The driver reads nothing from its own descriptor
	// and closes it unless it writes the command's stdin to it (one left
	// open would wake the driver's poller at each piece of output).
	File *os.File
	// Buffered are the bytes the driver read from the connection before
	// it handed it over: they come before File's.
	Buffered []byte
	// Format is the framing of the stream (DockerMultiplexed).
	Format string
}

// Taker is implemented by a stdout writer that can read a streaming
// exec's output itself.
type Taker interface {
	// TakeOutput takes o: it closes o.File in every case. It returns
	// false when it declines, before it read anything (the driver then
	// copies the output as usual); else a channel that yields once when
	// the taker stopped reading: nil or io.EOF when every byte was
	// delivered, else why not. The taker stops when the stream ends or
	// its caller's context ends (the driver's Start's): a driver that
	// cancels the process waits for the channel after ending the
	// process.
	TakeOutput(o Output) (done <-chan error, ok bool)
}
